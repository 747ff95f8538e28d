#!/usr/bin/perl
# The audit's items 10 and 13 (docs/RELIABILITY.md): every body the gateway
# writes is valid JSON and valid UTF-8, whatever the client or the engine
# sent: long names cut in error messages, raw URI bytes, an engine's invalid
# UTF-8 in deltas, token bytes, errors, model names and Info, a fingerprint
# that tries to add a JSON field; the logprob text of a token with a partial
# character keeps its ASCII; /v1/completions with echo counts text_offset from
# the end of the prompt.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use Encode ();
use JSON::PP;
use LlmTest;
use FakeEngine;

my $STRICT = JSON::PP->new->utf8->allow_nonref;
my $t = LlmTest->new;
my $d = $t->dir;
my %fe;
$fe{badtext} = FakeEngine->start("$d/badtext.sock", mode => 'badtext',
                                 model => "bad \xff\xfe name");
$fe{baderror} = FakeEngine->start("$d/baderror.sock", mode => 'baderror');
my $sock = $t->start_engine('a');

$t->start_nginx(<<"EOF");
    upstream u_badtext { server unix:$d/badtext.sock; }
    upstream u_baderror { server unix:$d/baderror.sock; }
    upstream u_real { server unix:$sock; }
    llm_model badtext upstream=u_badtext;
    llm_model baderror upstream=u_baderror;
    llm_model tiny upstream=u_real;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
        location = /healthz { llm_health on; }
    }
EOF

# valid UTF-8 (strict: no surrogates, no overlongs) and valid JSON
sub valid {
    my ($bytes, $what) = @_;
    my $copy = $bytes;
    my $utf8 = eval { Encode::decode('UTF-8', $copy, Encode::FB_CROAK); 1 };
    ok($utf8, "$what: valid UTF-8") or diag(unpack('H*', substr($bytes, 0, 200)));
    my $j = eval { $STRICT->decode($bytes) };
    ok($j, "$what: valid JSON") or diag($@);
    return $j;
}

sub chat { { model => $_[0], messages => [ { role => 'user', content => 'hi' } ],
             %{ $_[1] // {} } } }

# a model name of 3000 "é" in the 404 message: cut, but never mid-character
my $r = $t->post('/v1/chat/completions', $STRICT->encode(chat("\x{e9}" x 3000)));
is($r->{status}, 404, 'long unknown model: 404');
valid($r->{content}, 'long unknown model');

# raw URI bytes
$r = $t->get('/v1/models/%FF%FEx%C3');
is($r->{status}, 404, 'model id of invalid UTF-8: 404');
valid($r->{content}, 'model id of invalid UTF-8');

# an engine's invalid UTF-8 and a fingerprint that tries to add a field
$r = $t->post('/v1/chat/completions', chat('badtext', {
    logprobs => JSON::PP::true }));
is($r->{status}, 200, 'engine with invalid UTF-8: 200');
my $j = valid($r->{content}, 'JSON answer with invalid UTF-8 from the engine');
ok(!exists $j->{injected}, 'the fingerprint did not add a field');
like($j->{system_fingerprint} // '', qr/injected/, 'the fingerprint is a string');
like($j->{choices}[0]{message}{content} // '', qr/^ok \x{fffd}/,
     'invalid bytes of a delta became U+FFFD');
is($j->{choices}[0]{logprobs}{content}[0]{token}, "a\x{fffd}",
   'a token with a partial character keeps its ASCII');

{
    my $s = $t->open_stream('/v1/chat/completions',
                            chat('badtext', { stream => JSON::PP::true }));
    my ($st, $h, $body) = $t->read_response($s, 30);
    is($st, 200, 'stream with invalid UTF-8: 200');
    my $bad = 0;
    for my $line (split /\n/, $body) {
        next unless $line =~ /^data: (.*)$/ && $1 ne '[DONE]';
        my $ev = eval { $STRICT->decode($1) };
        my $copy = $1;
        $bad++ unless $ev && eval { Encode::decode('UTF-8', $copy, Encode::FB_CROAK); 1 }
                      && !exists $ev->{injected};
    }
    is($bad, 0, 'stream: every chunk valid JSON and UTF-8, no injected field');
}

$r = $t->post('/v1/chat/completions', chat('baderror'));
is($r->{status}, 400, 'engine error with invalid UTF-8: 400');
valid($r->{content}, 'engine error with invalid UTF-8');

$r = $t->get('/healthz');
valid($r->{content}, 'health with an engine\'s invalid model name');

# echo + logprobs: the first generated token's offset is the prompt's end

my $prompt = 'Once upon a time';
$r = $t->post('/v1/completions', { model => 'tiny', prompt => $prompt,
    echo => JSON::PP::true, logprobs => 1, max_tokens => 3,
    temperature => 0 });
is($r->{status}, 200, 'completions with echo and logprobs: 200');
my $off = $r->{json}{choices}[0]{logprobs}{text_offset} // [];
ok(@$off, 'text_offset present');
cmp_ok($off->[-1], '>=', length $prompt,
       'text_offset counts the echoed prompt');

$t->stop_nginx;
$_->stop for values %fe;
$t->done;

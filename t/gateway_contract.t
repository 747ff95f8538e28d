#!/usr/bin/perl
# The contract the engine states in Info (proto/llm.proto, InfoResponse
# fields 17 and 18) and the gateway reads instead of copying it: a request
# over the engine's n limit is refused by the gateway itself (400
# invalid_request_error, param "n", the engine's message) without reaching
# the engine, and stream chunks carry the Info system_fingerprint from the
# first one on.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmEngine;

my $t = LlmTest->new;
my $sock = $t->start_engine('a');


$t->start_nginx(<<'EOF');
    log_format up '$status n=$arg_n upstream=$upstream_addr';
    upstream engines { server unix:%%SOCK_a%%; }
    llm_model tiny upstream=engines;
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log %%DIR%%/up.log up;
        location /v1/ { llm_api on; }
    }
EOF

my $info = LlmEngine::info($t, $sock);
my $max = $info->{limits}{max_choices};
ok($max && $max < 128, "the engine's n limit ($max) is under the API's 128");
ok(length($info->{system_fingerprint} // ''), 'the engine names its fingerprint');

# the gateway learns the limits from its Info probe (/v1/models waits for it)

is($t->get('/v1/models')->{status}, 200, 'models: the engines probed');

my $chat = { model => 'tiny', max_tokens => 2, temperature => 0,
             messages => [ { role => 'user', content => 'Hello' } ] };

my $r = $t->post('/v1/chat/completions?n=over', { %$chat, n => $max + 1 });
is($r->{status}, 400, 'n over the engine limit: 400');
my $e = $r->{json}{error} // {};
is($e->{type}, 'invalid_request_error', 'invalid_request_error');
is($e->{param}, 'n', 'param n');
is($e->{code}, 'invalid_value', 'code as the engine gives it');
is($e->{message}, "n must be between 1 and $max, got " . ($max + 1),
   "the engine's message");

$r = $t->post('/v1/chat/completions?n=at', { %$chat, n => $max });
is($r->{status}, 200, 'n at the engine limit: 200');

# a request's line is written when it is finalized, which may come just
# after the client has read the whole answer
my $log = '';
for (1 .. 50) {
    $log = LlmTest::_slurp($t->dir . '/up.log');
    last if $log =~ /^200 n=at /m;
    select(undef, undef, undef, 0.1);
}
like($log, qr/^400 n=over upstream=-$/m,
     'refused by the gateway: no engine was asked');
like($log, qr/^200 n=at upstream=unix:/m, 'the other one went to the engine');

# stream chunks: the Info fingerprint before Done names it

my $s = $t->open_stream('/v1/chat/completions',
                        { %$chat, stream => JSON::PP::true });
my ($st, $h, $body) = $t->read_response($s);
is($st, 200, 'stream: 200');
my @chunks = grep { ref } LlmTest::sse_events($body);
ok(@chunks > 1, 'stream: chunks');
is($chunks[0]{system_fingerprint}, $info->{system_fingerprint},
   'first chunk: the Info fingerprint');
my %fp = map { ($_->{system_fingerprint} // 'null') => 1 } @chunks;
is_deeply([keys %fp], [$info->{system_fingerprint}],
          'every chunk: the same fingerprint');

$t->done;

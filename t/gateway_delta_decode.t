#!/usr/bin/perl
# Delta events in every encoding the protocol allows, through the
# gateway's own Delta decoder and the generic protobuf-c one it falls back
# to: index, text, packed tokens (with a negative and a multi-byte token),
# a text field given twice (the last one counts), unpacked tokens and an
# unknown field (the generic decoder's cases), reasoning, an empty text,
# a text over 127 bytes (a two-byte length) and n = 2 with the choices'
# deltas interleaved.  The answer is the same JSON and stream as the
# script says, non-streamed and streamed; a Delta with a text of the
# wrong wire type or a length past its frame is an invalid answer (502),
# as before.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use JSON::PP;
use LlmTest;
use FakeEngine;

my $t = LlmTest->new;
my $d = $t->dir;

sub fb { FakeEngine::field_bytes(@_) }
sub fv { FakeEngine::field_varint(@_) }
sub delta { FakeEngine::frame(fb(3, $_[0])) }

my $long = 'x' x 150;

my %script = (
    mixed => [
        FakeEngine::ev_started(5),
        delta(fb(2, 'Hel')),
        delta(fv(1, 0) . fb(2, 'lo') . fb(3, FakeEngine::varint(5)
              . FakeEngine::varint(300) . FakeEngine::varint(2**64 - 1))),
        delta(fb(2, 'XX') . fb(2, ', ')),
        delta(fb(2, 'wor') . fv(3, 9)),
        delta(fb(2, 'ld') . fv(9, 1)),
        delta(fb(5, 'Thinking.') . fb(2, '!')),
        delta(fb(2, '')),
        delta(fb(2, $long)),
        FakeEngine::ev_done(1, 5, 8),
    ],
    two => [
        FakeEngine::ev_started(5),
        delta(fv(1, 1) . fb(2, 'B1')),
        delta(fb(2, 'A1')),
        delta(fv(1, 1) . fb(2, ' B2') . fb(3, FakeEngine::varint(4))),
        delta(fv(1, 0) . fb(2, ' A2')),
        FakeEngine::frame(fb(5, fb(1, fv(2, 1)) . fb(1, fv(1, 1) . fv(2, 1))
                                . fb(2, fv(1, 5) . fv(2, 4)) . fb(4, 'fake'))),
    ],
    wiretype => [
        FakeEngine::ev_started(5),
        delta(fv(2, 7)),
        FakeEngine::ev_done(1, 5, 1),
    ],
    cut => [
        FakeEngine::ev_started(5),
        FakeEngine::frame(FakeEngine::varint(0x1a) . FakeEngine::varint(9)
                          . fb(2, 'abc')),
        FakeEngine::ev_done(1, 5, 1),
    ],
);

my %fe;
for my $name (sort keys %script) {
    my $events = join '', @{ $script{$name} };
    $fe{$name} = FakeEngine->start("$d/$name.sock", serve => sub {
        my ($c) = @_;
        while (1) {
            my $h = FakeEngine::read_n($c, 4) // return;
            my $len = unpack('N', $h);
            my $req = $len ? FakeEngine::read_n($c, $len) // return : '';
            if (substr($req, 0, 1) eq "\x12") {
                syswrite($c, FakeEngine::ev_info($name));
                next;
            }
            next unless substr($req, 0, 1) eq "\x0a";
            syswrite($c, $events);
        }
    });
}

$t->start_nginx(join('', map { "    upstream u_$_ { server unix:$d/$_.sock; keepalive 2; }\n"
                               . "    llm_model $_ upstream=u_$_;\n" } sort keys %script)
                 . <<"EOF");
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
EOF

my @msg = (messages => [{ role => 'user', content => 'Hi' }]);

# the same request twice: the second one on the kept engine connection
for my $try (1, 2) {
    my $r = $t->post('/v1/chat/completions', { model => 'mixed', @msg });
    is($r->{status}, 200, "mixed encodings ($try): 200") or diag($r->{content});
    my $m = $r->{json}{choices}[0]{message} // {};
    is($m->{content}, "Hello, world!$long", "mixed encodings ($try): the text");
    is($m->{reasoning_content}, 'Thinking.', "mixed encodings ($try): the reasoning");
    is($r->{json}{usage}{completion_tokens}, 8, "mixed encodings ($try): usage");
}

my $s = $t->open_stream('/v1/chat/completions', { model => 'mixed', @msg,
                                                  stream => JSON::PP::true });
my ($status, $h, $body) = $t->read_response($s);
is($status, 200, 'mixed encodings streamed: 200');
my @ev = LlmTest::sse_events($body);
is($ev[-1], '[DONE]', 'mixed encodings streamed: ends with [DONE]');
my ($text, $reason) = ('', '');
for my $e (grep { ref } @ev) {
    my $dl = $e->{choices}[0]{delta} // {};
    $text .= $dl->{content} // '';
    $reason .= $dl->{reasoning_content} // '';
}
is($text, "Hello, world!$long", 'mixed encodings streamed: the text');
is($reason, 'Thinking.', 'mixed encodings streamed: the reasoning');

my $r = $t->post('/v1/chat/completions', { model => 'two', n => 2, @msg });
is($r->{status}, 200, 'n = 2, interleaved: 200') or diag($r->{content});
my @c = sort { $a->{index} <=> $b->{index} } @{ $r->{json}{choices} // [] };
is(scalar @c, 2, 'n = 2: two choices');
is($c[0]{message}{content}, 'A1 A2', 'n = 2: choice 0');
is($c[1]{message}{content}, 'B1 B2', 'n = 2: choice 1');

for my $bad (qw(wiretype cut)) {
    my $r = $t->post('/v1/chat/completions', { model => $bad, @msg });
    is($r->{status}, 502, "$bad: an invalid answer, 502") or diag($r->{content});
    is($r->{json}{error}{type} // '', 'server_error', "$bad: an OpenAI-shaped error")
        or diag($r->{content});
}
like($t->error_log, qr/undecodable frame/, 'the invalid Deltas are logged');

$fe{$_}->stop for keys %fe;
$t->done;

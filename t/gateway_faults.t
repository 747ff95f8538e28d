#!/usr/bin/perl
# Fault injection with the fake engine: frames split into single bytes,
# garbage and oversized frames, a mid-stream close and a mid-stream error
# (a final error event, no [DONE]), overloaded engines going to the next
# server, SSE heartbeats before the first token, tool-call deltas.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use FakeEngine;

my $t = LlmTest->new;
my $d = $t->dir;
my %fe;
for my $m (qw(ok split garbage huge close_mid error_mid overloaded tools
               partial_internal)) {
    $fe{$m} = FakeEngine->start("$d/fake-$m.sock", mode => $m);
}
$fe{slow} = FakeEngine->start("$d/fake-slow.sock", mode => 'slow', delay => 1.2);


$t->start_nginx(<<"EOF");
    upstream u_ok { server unix:$d/fake-ok.sock; }
    upstream u_split { server unix:$d/fake-split.sock; }
    upstream u_garbage { server unix:$d/fake-garbage.sock; }
    upstream u_huge { server unix:$d/fake-huge.sock; }
    upstream u_close { server unix:$d/fake-close_mid.sock; }
    upstream u_errmid { server unix:$d/fake-error_mid.sock; }
    upstream u_over { server unix:$d/fake-overloaded.sock; }
    upstream u_over_then_ok {
        server unix:$d/fake-overloaded.sock;
        server unix:$d/fake-ok.sock backup;
    }
    upstream u_slow { server unix:$d/fake-slow.sock; }
    upstream u_partial_then_ok {
        server unix:$d/fake-partial_internal.sock;
        server unix:$d/fake-ok.sock backup;
    }
    upstream u_slow_then_ok {
        server unix:$d/fake-slow.sock;
        server unix:$d/fake-ok.sock backup;
    }
    upstream u_tools { server unix:$d/fake-tools.sock; keepalive 2; }
    llm_model ok upstream=u_ok;
    llm_model split upstream=u_split;
    llm_model garbage upstream=u_garbage;
    llm_model huge upstream=u_huge;
    llm_model close upstream=u_close;
    llm_model errmid upstream=u_errmid;
    llm_model over upstream=u_over;
    llm_model over2 upstream=u_over_then_ok;
    llm_model slow upstream=u_slow;
    llm_model partial upstream=u_partial_then_ok;
    llm_model slow2 upstream=u_slow_then_ok;
    llm_model tools upstream=u_tools;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ {
            llm_api on;
            llm_max_frame 1m;
            llm_sse_heartbeat 300ms;
        }
        location /nohb/v1/ { llm_api on; }
        location /coalesce/v1/ { llm_api on; llm_sse_flush_interval 50ms; }
        location /impatient/v1/ { llm_api on; llm_read_timeout 400ms; }
    }
EOF

sub chat { { model => $_[0], messages => [ { role => 'user', content => 'hi' } ],
             %{ $_[1] // {} } } }

sub stream {
    my ($path, $model) = @_;
    my $s = $t->open_stream($path, chat($model, { stream => JSON::PP::true }));
    return $t->read_response($s);
}

# frames split into single bytes: the same answer as whole frames

my $r = $t->post('/v1/chat/completions', chat('ok'));
is($r->{json}{choices}[0]{message}{content}, 'Hello world', 'whole frames');
is($r->{json}{usage}{prompt_tokens}, 5, 'whole frames: usage');
$r = $t->post('/v1/chat/completions', chat('split'));
is($r->{status}, 200, 'split frames: 200');
is($r->{json}{choices}[0]{message}{content}, 'Hello world', 'split frames: text');
my ($st, $h, $body) = stream('/v1/chat/completions', 'split');
my @ev = LlmTest::sse_events($body);
is($ev[-1], '[DONE]', 'split frames, stream: [DONE]');
is(join('', map { ref && @{ $_->{choices} } ? $_->{choices}[0]{delta}{content} // '' : '' } @ev),
   'Hello world', 'split frames, stream: text');

# garbage and oversized frames before the first byte: 502 as OpenAI error

$r = $t->post('/v1/chat/completions', chat('garbage'));
is($r->{status}, 502, 'garbage frame: 502');
is($r->{json}{error}{type}, 'server_error', 'garbage frame: server_error');
$r = $t->post('/v1/chat/completions', chat('huge'));
is($r->{status}, 502, 'oversized frame: 502');
ok($r->{json}{error}, 'oversized frame: OpenAI body');

# mid-stream close and mid-stream error: a final error event, no [DONE]

for my $m (qw(close errmid)) {
    ($st, $h, $body) = stream('/v1/chat/completions', $m);
    is($st, 200, "$m: stream started");
    @ev = LlmTest::sse_events($body);
    ok(!grep({ $_ eq '[DONE]' } @ev), "$m: no [DONE]");
    ok(ref $ev[-1] && $ev[-1]{error}, "$m: ends with an error event");
    ok(ref $ev[0] && $ev[0]{choices}[0]{delta}{content} eq 'Hello',
       "$m: tokens before the error arrived");
}
is($ev[-1]{error}{message}, 'the engine broke', 'error event: engine message');

# non-stream mid-answer close: 502, never a truncated 200

$r = $t->post('/v1/chat/completions', chat('close'));
is($r->{status}, 502, 'close before Done, JSON: 502');

# overloaded: 503 when alone, the backup server answers otherwise

$r = $t->post('/v1/chat/completions', chat('over'));
is($r->{status}, 503, 'overloaded: 503');
is($r->{json}{error}{code}, 'engine_overloaded', 'overloaded: code');
is($r->{json}{error}{message}, 'queue is full', 'overloaded: engine message');
$r = $t->post('/v1/chat/completions', chat('over2'));
is($r->{status}, 200, 'overloaded: next server answered');
is($r->{json}{choices}[0]{message}{content}, 'Hello world', 'next server: text');

# an internal error after some tokens of a JSON answer: the error is the
# answer, never a second generation on the next server (the work is not
# idempotent and the first attempt is billed)

$r = $t->post('/v1/chat/completions', chat('partial'));
is($r->{status}, 500, 'internal error mid-answer: the error, no next server');
is($r->{json}{error}{message}, 'lost the expert cache',
   'internal error mid-answer: the engine\'s message');

# a timeout before the first byte: the next server, else 504

$r = $t->post('/impatient/v1/chat/completions', chat('slow2'));
is($r->{status}, 200, 'timeout before the first byte: next server answered');
$r = $t->post('/impatient/v1/chat/completions', chat('slow'));
is($r->{status}, 504, 'timeout, no server left: 504');
is($r->{json}{error}{code}, 'engine_timeout', 'timeout: OpenAI body');
($st, $h, $body) = stream('/impatient/v1/chat/completions', 'slow');
is($st, 504, 'timeout before the first token of a stream: 504, not SSE');

# heartbeat while waiting for the first token (and none without it)

my $t0 = time;
($st, $h, $body) = stream('/v1/chat/completions', 'slow');
like($body, qr/^: keep-alive\n\n/m, 'heartbeat before the first token');
my @hb = $body =~ /^: keep-alive$/mg;
ok(@hb >= 2, 'heartbeats repeat (' . scalar(@hb) . ')');
@ev = LlmTest::sse_events($body);
is($ev[-1], '[DONE]', 'heartbeat stream: [DONE]');
($st, $h, $body) = stream('/nohb/v1/chat/completions', 'slow');
unlike($body, qr/keep-alive/, 'no heartbeat unless configured');

# coalesced flushing still delivers every event

($st, $h, $body) = stream('/coalesce/v1/chat/completions', 'ok');
@ev = LlmTest::sse_events($body);
is($ev[-1], '[DONE]', 'flush interval: [DONE]');
is(scalar(grep { ref } @ev), 3, 'flush interval: every chunk');

# tool calls: JSON and stream deltas

$r = $t->post('/v1/chat/completions', chat('tools'));
my $c = $r->{json}{choices}[0];
is($c->{finish_reason}, 'tool_calls', 'tools: finish_reason');
ok(!defined $c->{message}{content}, 'tools: content null');
is_deeply($c->{message}{tool_calls},
          [ { id => 'call_1', type => 'function',
              function => { name => 'get_weather',
                            arguments => '{"city":"Paris"}' } } ],
          'tools: tool_calls');
($st, $h, $body) = stream('/v1/chat/completions', 'tools');
@ev = grep { ref } LlmTest::sse_events($body);
my $tc = $ev[0]{choices}[0]{delta}{tool_calls}[0];
is($tc->{id}, 'call_1', 'tools stream: id on the first delta');
is($tc->{function}{name}, 'get_weather', 'tools stream: name');
is($ev[1]{choices}[0]{delta}{tool_calls}[0]{function}{arguments}, '"Paris"}',
   'tools stream: argument fragment');
ok(!exists $ev[1]{choices}[0]{delta}{tool_calls}[0]{id},
   'tools stream: no id on later deltas');
is($ev[-1]{choices}[0]{finish_reason}, 'tool_calls', 'tools stream: finish');

# keepalive connections are reused after a clean end

for (1 .. 3) { $t->post('/v1/chat/completions', chat('tools')) }
$r = $t->post('/v1/chat/completions', chat('tools'));
is($r->{status}, 200, 'keepalive reuse');

$t->stop_nginx;
$_->stop for values %fe;
my $log = $t->error_log;
like($log, qr/undecodable frame|invalid frame/, 'error log names the bad frame');
like($log, qr/over llm_max_frame/, 'error log names the frame limit');
$t->done;

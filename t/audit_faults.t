#!/usr/bin/perl
# The gateway defects of the reliability audit (docs/RELIABILITY.md, "Faults
# and the audit's defects"), with the fake engine for the timing and the
# faults: each check failed before its fix.
#
#  1. llm_sse_flush_interval: a stream longer than the interval is not cut
#     off ("zero size buf in writer"), it ends with [DONE].
#  3. llm_read_timeout bounds the gap between engine frames, not the whole
#     JSON answer; after the first token nothing is generated again on
#     another engine (the error is the answer), and the log says "error".
# 13. llm_sse_heartbeat does not start the response at Queued: an engine
#     that dies while the request waits is still failed over.
#  4. "overloaded" is back-pressure: it does not count toward max_fails
#     (no "no live upstreams" 502 after a burst), "overloaded" alone in
#     llm_next_upstream decides failover, and the 503 has Retry-After.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use FakeEngine;

my $t = LlmTest->new;
my $d = $t->dir;
my %fe;
$fe{drip} = FakeEngine->start("$d/drip.sock", mode => 'drip', count => 150,
                              interval => 0.004);
$fe{slowdrip} = FakeEngine->start("$d/slowdrip.sock", mode => 'drip',
                                  count => 30, interval => 0.1);
$fe{stall} = FakeEngine->start("$d/stall.sock", mode => 'stall_after_token',
                               delay => 2, count_file => "$d/stall.count");
$fe{ok} = FakeEngine->start("$d/ok.sock", mode => 'ok',
                            count_file => "$d/ok.count");
$fe{over1} = FakeEngine->start("$d/over1.sock", mode => 'overloaded');
$fe{over2} = FakeEngine->start("$d/over2.sock", mode => 'overloaded');
$fe{qdie} = FakeEngine->start("$d/qdie.sock", mode => 'queued_die',
                              delay => 0.1);


$t->start_nginx(<<"EOF");
    log_format llm '\$status finish=\$llm_finish_reason '
                   'completion=\$llm_completion_tokens';
    access_log $d/llm.log llm;
    upstream u_drip { server unix:$d/drip.sock; }
    upstream u_slowdrip { server unix:$d/slowdrip.sock; }
    upstream u_stall_then_ok {
        server unix:$d/stall.sock;
        server unix:$d/ok.sock backup;
    }
    upstream u_over {
        server unix:$d/over1.sock max_fails=1 fail_timeout=30s;
        server unix:$d/over2.sock max_fails=1 fail_timeout=30s;
    }
    upstream u_over_then_ok {
        server unix:$d/over1.sock max_fails=1 fail_timeout=30s;
        server unix:$d/ok.sock backup;
    }
    upstream u_qdie_then_ok {
        server unix:$d/qdie.sock;
        server unix:$d/ok.sock backup;
    }
    llm_model qdie upstream=u_qdie_then_ok;
    llm_model drip upstream=u_drip;
    llm_model slowdrip upstream=u_slowdrip;
    llm_model stall upstream=u_stall_then_ok;
    llm_model over upstream=u_over;
    llm_model over_ok upstream=u_over_then_ok;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /coalesce/v1/ { llm_api on; llm_sse_flush_interval 50ms; }
        location /gap/v1/ { llm_api on; llm_read_timeout 1s; }
        location /ovl/v1/ {
            llm_api on;
            llm_next_upstream error timeout overloaded;
        }
        location /hb/v1/ { llm_api on; llm_sse_heartbeat 300ms; }
        location /v1/ { llm_api on; }
    }
EOF

sub chat { { model => $_[0], messages => [ { role => 'user', content => 'hi' } ],
             %{ $_[1] // {} } } }

# 1. coalesced flushing over a stream ten times longer than the interval

{
    my $s = $t->open_stream('/coalesce/v1/chat/completions',
                            chat('drip', { stream => JSON::PP::true }));
    my ($st, $h, $body) = $t->read_response($s, 30);
    my @ev = LlmTest::sse_events($body);
    is($st, 200, 'flush interval, long stream: 200');
    is($ev[-1], '[DONE]', 'flush interval, long stream: ends with [DONE]');
    my $text = join '', map { ref && @{ $_->{choices} }
                              ? $_->{choices}[0]{delta}{content} // '' : '' } @ev;
    is(scalar(() = $text =~ /t\d+ /g), 150, 'flush interval: all 150 deltas');
}

# 3. a 3-second JSON answer whose frames come every 100 ms, timeout 1 s

{
    my $r = $t->post('/gap/v1/chat/completions', chat('slowdrip'));
    is($r->{status}, 200, 'read timeout is per frame: 3 s answer, 1 s timeout');
    like($r->{json}{choices}[0]{message}{content} // '', qr/^t1 .* t30 $/,
         'read timeout: the whole answer');
}

# 3. a timeout after the first token: no second generation on the backup

{
    unlink "$d/ok.count";
    my $r = $t->post('/gap/v1/chat/completions', chat('stall'));
    is($r->{status}, 504, 'timeout after a token: 504');
    is($r->{json}{error}{code}, 'engine_timeout', 'timeout after a token: body');
    ok(!-e "$d/ok.count", 'timeout after a token: the backup never generated');
    # the log line is written as the request ends, just after the answer
    for (1 .. 50) { last if $t->slurp("$d/llm.log") =~ /^504 /m; sleep 0.1 }
    like($t->slurp("$d/llm.log"), qr/^504 finish=error/m,
         'timeout after a token: logged as an error, not cancelled');
}

# 4. a burst of overloaded answers does not mark the engines down

{
    my @st = map { $t->post('/v1/chat/completions', chat('over'))->{status} }
             1 .. 6;
    is_deeply(\@st, [ (503) x 6 ],
              'overloaded burst: 503 every time, never "no live upstreams" 502');
    my $r = $t->post('/v1/chat/completions', chat('over'));
    is($r->{headers}{'retry-after'}, '1', 'overloaded: Retry-After');
    is($r->{json}{error}{code}, 'engine_overloaded', 'overloaded: code');

    $r = $t->post('/ovl/v1/chat/completions', chat('over_ok'));
    is($r->{status}, 200,
       '"overloaded" without invalid_frame in llm_next_upstream fails over');
    $r = $t->post('/v1/chat/completions', chat('over_ok'));
    is($r->{status}, 200, 'the overloaded peer was not marked failed');
}

# 13. with heartbeats, an engine that dies while the request waits in its
# queue is failed over: the response starts at the first heartbeat, not
# at Queued

{
    my $s = $t->open_stream('/hb/v1/chat/completions',
                            chat('qdie', { stream => JSON::PP::true }));
    my ($st, $h, $body) = $t->read_response($s, 30);
    my @ev = LlmTest::sse_events($body);
    is($st, 200, 'heartbeat, engine dies while queued: 200');
    is($ev[-1], '[DONE]', 'heartbeat, engine dies while queued: failed over, [DONE]');
    ok(!grep({ ref && $_->{error} } @ev), 'heartbeat, engine dies while queued: no error event');
}

$t->stop_nginx;
$_->stop for values %fe;
unlike($t->error_log, qr/zero size buf/, 'no "zero size buf" in the error log');
$t->done;

#!/usr/bin/perl
# Cancel: a client that wants to stop a Generate and learn what it cost
# sends Request{cancel} and reads on to the terminal event,
# Error{ERROR_CANCELLED, usage}; the connection then serves the next
# request.  A Cancel on an idle connection gets no reply.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmEngine;
use LlmFrames;

my $t = LlmTest->new;
my $sock = $t->start_engine('a', model => LlmEngine::model($t));
my $total = LlmEngine::info($t, $sock)->{stats}{kv_blocks_total};

sub tokens_of { my $n = 0; $n += @{ $_->{tokens} } for grep { $_ && $_->{kind} eq 'delta' } @_; $n }

# cancel mid-stream, n = 2: usage counts every token of both choices,
# delivered or not
my $c = LlmFrames::open_conn($sock);
LlmFrames::put($c, LlmEngine::completion_body('cancel me', 1500,
                                              LlmEngine::pb_uint(15, 2)));
my @ev;
while (tokens_of(@ev) < 6) {
    my $e = LlmFrames::read_event($c, 10) or last;
    push @ev, $e;
}
ok(tokens_of(@ev) >= 6, 'the stream started');
LlmFrames::put($c, LlmFrames::cancel_body());
push @ev, LlmFrames::read_until_end($c, 10);
my $end = $ev[-1];
is($end && $end->{kind}, 'error', 'the Generate ends with an Error');
is($end->{code}, 'cancelled', 'code ERROR_CANCELLED');
is($end->{message}, 'cancelled by the client', 'message');
my $got = tokens_of(@ev);
my $billed = $end->{usage}{completion_tokens};
ok($billed >= $got, "usage counts every token delivered ($billed >= $got)");
ok($billed < 3000, "and generation stopped ($billed of 3000)");
ok($end->{usage}{prompt_tokens} > 0, 'usage has the prompt tokens');

# the same connection serves the next requests
LlmFrames::put($c, LlmFrames::info_body());
my $info = LlmFrames::read_event($c, 10);
is($info && $info->{kind}, 'info', 'keepalive: Info on the same connection');
LlmFrames::put($c, LlmEngine::completion_body('again', 5));
my @g = LlmFrames::read_until_end($c, 10);
is($g[-1] && $g[-1]{kind}, 'done', 'and a Generate after it');
is($g[-1]{usage}{completion_tokens}, 5, 'with its tokens');

# Cancel on an idle connection: ignored, no reply, the next one works
LlmFrames::put($c, LlmFrames::cancel_body());
LlmFrames::put($c, LlmFrames::info_body());
$info = LlmFrames::read_event($c, 10);
is($info && $info->{kind}, 'info', 'Cancel when idle: no reply of its own');
close $c;

my $st = LlmEngine::wait_stats($t, $sock, sub {
    $_[0]{requests_running} == 0 && $_[0]{connections_open} == 1 });
is($st->{requests_cancelled}, 1, 'stats count one cancellation');
is($st->{kv_blocks_free}, $total, 'its KV blocks are free again');
is($st->{completion_tokens_total}, $billed + 5,
   'the engine counted what it billed');

# cancel while queued: max-batch 1, the second request waits
my $one = $t->start_engine('one', model => LlmEngine::model($t),
                           args => ['--max-batch', '1']);
my $run = LlmFrames::open_conn($one);
LlmFrames::put($run, LlmEngine::completion_body('first', 400));
my $e = LlmFrames::read_event($run, 10);
is($e && $e->{kind}, 'started', 'the first one runs');
my $q = LlmFrames::open_conn($one);
LlmFrames::put($q, LlmEngine::completion_body('second', 50));
$e = LlmFrames::read_event($q, 10);
is($e && $e->{kind}, 'queued', 'the second one is queued');
LlmFrames::put($q, LlmFrames::cancel_body());
$e = LlmFrames::read_event($q, 10);
is($e && $e->{kind}, 'error', 'cancelled while queued: an Error');
is($e->{code}, 'cancelled', 'ERROR_CANCELLED');
is($e->{usage}{completion_tokens}, 0, 'no completion tokens');
LlmFrames::put($q, LlmFrames::info_body());
$e = LlmFrames::read_event($q, 10);
is($e && $e->{kind}, 'info', 'and the connection goes on');
is($e && LlmEngine::info($t, $one)->{stats}{requests_queued}, 0,
   'the queue is empty');
my @r = LlmFrames::read_until_end($run, 30);
is($r[-1] && $r[-1]{kind}, 'done', 'the running one finished');

# closing the connection mid-stream still counts what was generated
my $k = LlmFrames::open_conn($sock);
LlmFrames::put($k, LlmEngine::completion_body('closed', 1500));
my @kev;
while (tokens_of(@kev) < 3) {
    my $x = LlmFrames::read_event($k, 10) or last;
    push @kev, $x;
}
my $before = LlmEngine::info($t, $sock)->{stats}{completion_tokens_total};
close $k;
$st = LlmEngine::wait_stats($t, $sock, sub { $_[0]{requests_cancelled} == 2
                                             && $_[0]{requests_running} == 0 });
ok($st->{completion_tokens_total} >= $before,
   'closing cancels; generated tokens stay counted');
like($t->engine_log('a'), qr/cancelled by the client/,
     'the engine logs the cancellation');
$t->done;

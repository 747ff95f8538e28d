#!/usr/bin/perl
# A client that pipelines requests and never reads the replies: once its
# unsent output is over the write-buffer limit the engine stops reading
# from it, so the engine's memory stays bounded; when the client reads,
# every reply comes, in order.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(sleep time);
use LlmTest;
use LlmEngine;
use LlmFrames;

my $t = LlmTest->new;
my $sock = $t->start_engine('a', model => LlmEngine::model($t));
my $pid = $t->engine_pid('a');

# 200,000 Info requests (~50 MB of replies), a Detokenize every 1000th to
# check the order
my $N = 200_000;
my $info = LlmFrames::frame(LlmFrames::info_body());
my $detok = LlmFrames::frame(LlmEngine::pb_bytes(4, LlmEngine::pb_bytes(1,
                                                 LlmEngine::pb_varint(5))));
my $reqs = join '', map { $_ % 1000 == 999 ? $detok : $info } 0 .. $N - 1;

LlmEngine::info($t, $sock) for 1 .. 3;
my $rss0 = LlmFrames::rss_kb($pid);

my $c = LlmFrames::open_conn($sock);
my $writer = fork // die "fork: $!";
if ($writer == 0) {
    my $off = 0;
    while ($off < length $reqs) {
        my $n = syswrite($c, $reqs, 1 << 16, $off) // POSIX::_exit(1);
        $off += $n;
    }
    POSIX::_exit(0);
}
# the writer blocks once the engine stops reading; give it time to either
# finish (the engine read everything) or block
my $deadline = time + 5;
my ($finished, $wstatus) = (0);
while (time < $deadline) {
    if (waitpid($writer, WNOHANG) == $writer) {
        ($finished, $wstatus) = (1, $?);
        last;
    }
    sleep 0.1;
}
sleep 0.5;
my $rss1 = LlmFrames::rss_kb($pid);
my $grew = $rss1 - $rss0;
ok($grew < 8192, "engine RSS grew by $grew kB (< 8 MB) with the "
   . "replies unread");
ok(!$finished, 'the engine stopped reading the requests');

# another client is served meanwhile
my $other = LlmEngine::gen($t, $sock, { prompt => 'hello', max_tokens => 3 });
ok($other->{done}, 'another connection is served meanwhile');

# now read: every reply, in order
my ($n, $in_order, $buf) = (0, 1, '');
while ($n < $N) {
    my $r = sysread($c, $buf, 1 << 20, length $buf);
    last unless $r;
    my $pos = 0;
    while (length($buf) - $pos >= 4) {
        my $len = unpack 'N', substr($buf, $pos, 4);
        last if length($buf) - $pos < 4 + $len;
        my $tag = ord substr($buf, $pos + 4, 1);
        # InfoResponse is Event field 7 (tag 0x3a), Detokenize 9 (0x4a)
        $in_order = 0 if $tag != ($n % 1000 == 999 ? 0x4a : 0x3a);
        $n++;
        $pos += 4 + $len;
    }
    substr($buf, 0, $pos) = '';
}
is($n, $N, "all $N replies arrive once the client reads");
ok($in_order, 'in order');
if (!$finished) {
    waitpid($writer, 0);
    $wstatus = $?;
}
is($wstatus >> 8, 0, 'and the writer got every request out');
close $c;
my $st = LlmEngine::wait_stats($t, $sock, sub {
    $_[0]{connections_open} == 1 });
is($st->{connections_open}, 1, 'connection gone');
diag("engine RSS $rss0 kB before, $rss1 kB with $N requests pipelined");
$t->done;

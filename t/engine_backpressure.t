#!/usr/bin/perl
# A client that does not read: its stream pauses once its write buffer is
# full (it keeps its KV cache), the other streams go on, and when it reads
# again it gets every event.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use IO::Socket::UNIX;
use Time::HiRes qw(sleep);
use LlmTest;
use LlmEngine;

my $t = LlmTest->new;
my $sock = $t->start_engine('a', model => LlmEngine::model($t),
                            args => ['--write-buffer-kb', '16']);

# logprobs with 20 alternatives: a few hundred bytes per token
my $body = LlmEngine::completion_body('a slow reader', 1500,
    LlmEngine::pb_uint(13, 1) . LlmEngine::pb_uint(14, 20));
my $slow = IO::Socket::UNIX->new(Peer => $sock) or die "connect: $!";
setsockopt($slow, Socket::SOL_SOCKET(), Socket::SO_RCVBUF(), 4096);
print $slow pack('N', length $body) . $body;
$slow->flush;

my $st = LlmEngine::wait_stats($t, $sock,
                               sub { $_[0]{requests_running} == 1 });
sleep 1.5;
my $fast = LlmEngine::gen($t, $sock, { prompt => 'a fast one',
                                       max_tokens => 30,
                                       ignore_eos => JSON::PP::true });
is($fast->{done}{usage}{completion_tokens}, 30,
   'another stream finishes while one reader is stuck');
$st = LlmEngine::info($t, $sock)->{stats};
is($st->{requests_running}, 1, 'the slow stream is still there');
ok($st->{completion_tokens_total} < 1500,
   "and paused ($st->{completion_tokens_total} tokens so far)");

# now read everything
my ($tokens, $done, $buf) = (0, 0, '');
$slow->blocking(1);
while (!$done) {
    my $hdr;
    last unless read($slow, $hdr, 4) == 4;
    my $len = unpack 'N', $hdr;
    my $b = '';
    read($slow, $b, $len) == $len or last;
    # Event.delta is field 3, Event.done field 5 (first tag byte)
    my $tag = ord substr($b, 0, 1);
    $tokens++ if $tag == 0x1a;
    $done = 1 if $tag == 0x2a;
}
ok($done, 'the slow reader gets its Done');
ok($tokens >= 1500 && $tokens <= 1501, "and all its deltas ($tokens)");
$t->done;

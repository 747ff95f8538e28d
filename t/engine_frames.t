#!/usr/bin/perl
# Bad frames: oversized, undecodable, truncated, empty, a second request
# while one runs, split writes.  Each gets an Error (bad_frame or
# invalid_request); the engine survives and serves the next client.

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
                            args => ['--max-frame', '65536']);

sub raw {
    my ($hex, @flags) = @_;
    return LlmEngine::gen($t, $sock, undef, '--raw', $hex, '--timeout', 10,
                          @flags);
}

my $r = raw(LlmEngine::frame_hex('', 70000));
is($r->{error}{code}, 'bad_frame', 'oversized frame: bad_frame');
like($r->{error}{message}, qr/70000.*65536/, 'message gives both sizes');

$r = raw(LlmEngine::frame_hex("\xff\xff\xff\xff\x0f"));
is($r->{error}{code}, 'bad_frame', 'undecodable frame: bad_frame');

$r = raw(LlmEngine::frame_hex("\x0a\x05ab", 100), '--half-close');
is($r->{error}{code}, 'bad_frame', 'truncated frame: bad_frame');
like($r->{error}{message}, qr/truncated/, 'says truncated');

$r = raw(unpack('H*', "\x00\x00"), '--half-close');
is($r->{error}{code}, 'bad_frame', 'truncated header: bad_frame');

$r = raw(LlmEngine::frame_hex(''));
is($r->{error}{code}, 'invalid_request', 'empty request: invalid_request');

# two requests back to back on one connection
my $g = LlmEngine::completion_body('hello', 200);
$r = raw(LlmEngine::frame_hex($g) . LlmEngine::frame_hex($g));
is($r->{error}{code}, 'invalid_request', 'second request while running');
like($r->{error}{message}, qr/one request at a time/, 'says why');

# a valid request written one byte at a time
{
    my $c = IO::Socket::UNIX->new(Peer => $sock) or die "connect: $!";
    my $f = pack('N', length LlmEngine::info_body()) . LlmEngine::info_body();
    for my $b (split //, $f) { print $c $b; $c->flush; sleep 0.01 }
    my $hdr = '';
    read($c, $hdr, 4);
    my $len = unpack 'N', $hdr;
    my $body = '';
    read($c, $body, $len);
    ok($len > 20 && length $body == $len, 'byte-by-byte request answered');
    close $c;
}

# garbage from many connections at once, then a real request
my @h = map { LlmEngine::spawn($t, $sock, undef, '--raw',
                               unpack('H*', join '', map { chr rand 256 }
                                                     1 .. 50 + $_),
                               '--half-close', '--timeout', 10) } 1 .. 20;
LlmEngine::wait_clients($t, @h);
my $ok = LlmEngine::gen($t, $sock, { prompt => 'still there?',
                                     max_tokens => 3 });
ok($ok->{done}, 'the engine survives garbage and serves');
my $st = LlmEngine::wait_stats($t, $sock,
                               sub { $_[0]{connections_open} == 1 });
is($st->{connections_open}, 1, 'no connection left behind');
is($st->{kv_blocks_free}, $st->{kv_blocks_total}, 'no blocks leaked');

$t->done;

#!/usr/bin/perl
# Ping: while a Generate is on the connection the engine answers at once
# with Pong and the Generate goes on untouched; on an idle connection a
# Ping gets no reply.  (The gateway's llm_sse_heartbeat pings before the
# first token and starts the client's response at the first Pong.)

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmEngine;
use LlmFrames;

my $t = LlmTest->new;
my $sock = $t->start_engine('a', model => LlmEngine::model($t));

my $c = LlmFrames::open_conn($sock);
LlmFrames::put($c, LlmEngine::completion_body('ping me', 400));
LlmFrames::put($c, LlmFrames::ping_body());
my @ev = LlmFrames::read_until_end($c, 20);
my @pong = grep { $_->{kind} eq 'pong' } @ev;
is(scalar @pong, 1, 'Ping while a Generate runs: one Pong');
is($ev[-1] && $ev[-1]{kind}, 'done', 'the Generate ends as usual');
is($ev[-1]{usage}{completion_tokens}, 400, 'with all its tokens');

# idle: no reply; the next request is answered first
LlmFrames::put($c, LlmFrames::ping_body());
LlmFrames::put($c, LlmFrames::info_body());
my $e = LlmFrames::read_event($c, 10);
is($e && $e->{kind}, 'info', 'Ping when idle: no reply of its own');
close $c;

$t->done;

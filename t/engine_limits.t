#!/usr/bin/perl
# Admission limits: the context window (both numbers in the message) and
# the queue limit (overloaded at once, so the gateway can fall back).

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmEngine;

my $t = LlmTest->new;
my $sock = $t->start_engine('a', model => LlmEngine::model($t),
                            args => ['--ctx', '64']);

my $long = join ' ', ('lorem ipsum dolor') x 40;
my $r = LlmEngine::gen($t, $sock, { prompt => $long, max_tokens => 4 });
is($r->{error}{code}, 'context_length_exceeded', 'prompt over the window');
like($r->{error}{message}, qr/maximum context length is 64 tokens/,
     'names the window');
like($r->{error}{message}, qr/resulted in \d+ tokens/, 'names the prompt');

$r = LlmEngine::gen($t, $sock, { prompt => 'short', max_tokens => 100 });
is($r->{error}{code}, 'context_length_exceeded', 'max_tokens over');
like($r->{error}{message}, qr/64 tokens.*requested \d+ tokens \(\d+ in the messages, 100 in the completion\)/,
     'both numbers in the message');

$r = LlmEngine::gen($t, $sock, { prompt => 'short' });
ok($r->{done}, 'max_tokens 0 means up to the window');
is($r->{done}{usage}{prompt_tokens} + $r->{done}{usage}{completion_tokens}
   <= 64, 1, 'and stays inside it');

# queue: one running, one queued, the third is refused
my $q = $t->start_engine('q', model => LlmEngine::model($t),
                         args => ['--max-batch', '1', '--max-queue', '1']);
my %long = (messages => [{ role => 'user', content => 'talk' }],
            max_tokens => 1800, ignore_eos => JSON::PP::true);
my $a = LlmEngine::spawn($t, $q, \%long);
LlmEngine::wait_stats($t, $q, sub { $_[0]{requests_running} == 1 });
my $b = LlmEngine::spawn($t, $q, { %long, max_tokens => 4 });
LlmEngine::wait_stats($t, $q, sub { $_[0]{requests_queued} == 1 });
$r = LlmEngine::gen($t, $q, { %long, max_tokens => 4 });
is($r->{error}{code}, 'overloaded', 'beyond --max-queue: overloaded');
like($r->{error}{message}, qr/max-queue 1/, 'says which limit');
my ($ra, $rb) = LlmEngine::wait_clients($t, $a, $b);
ok($ra->{done}, 'the running request finished');
ok($rb->{done}, 'the queued one ran after it');
ok((grep { $_->{event} eq 'queued' } @{ $rb->{events} }),
   'the queued one saw a queued event');

$t->done;

#!/usr/bin/perl
# Closing the connection cancels: the sequence leaves the batch, its KV
# blocks are freed, the stats count it; the other streams go on.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmEngine;

my $t = LlmTest->new;
my $sock = $t->start_engine('a', model => LlmEngine::model($t));
my $total = LlmEngine::info($t, $sock)->{stats}{kv_blocks_total};

my %long = (messages => [{ role => 'user', content => 'go on forever' }],
            max_tokens => 1500, ignore_eos => JSON::PP::true);

# a neighbour that must finish untouched
my $other = LlmEngine::spawn($t, $sock, { %long, max_tokens => 64 });

my $r = LlmEngine::gen($t, $sock, \%long, '--disconnect-after', 3);
is($r->{rc}, 0, 'client left after 3 deltas');
ok(!$r->{done}, 'no done seen');

my $st = LlmEngine::wait_stats($t, $sock, sub {
    $_[0]{requests_cancelled} >= 1 && $_[0]{requests_running} == 0 });
is($st->{requests_cancelled}, 1, 'stats count the cancellation');
is($st->{requests_running}, 0, 'nothing running');
is($st->{kv_blocks_free}, $total, 'its KV blocks are free again');
ok($st->{completion_tokens_total} < 1500,
   "generation stopped ($st->{completion_tokens_total} tokens in all)");

my ($o) = LlmEngine::wait_clients($t, $other);
is($o->{done}{usage}{completion_tokens}, 64, 'the neighbour finished');

# cancel while queued: max-batch 1, the second request waits, then leaves
my $one = $t->start_engine('one', model => LlmEngine::model($t),
                           args => ['--max-batch', '1']);
my $run = LlmEngine::spawn($t, $one, { %long, max_tokens => 400 });
LlmEngine::wait_stats($t, $one, sub { $_[0]{requests_running} == 1 });
my $q = LlmEngine::gen($t, $one, \%long, '--disconnect-after', 0,
                       '--timeout', 1);
$st = LlmEngine::wait_stats($t, $one, sub {
    $_[0]{requests_cancelled} == 1 });
is($st->{requests_cancelled}, 1, 'a queued request is cancelled too');
is($st->{requests_queued}, 0, 'the queue is empty');
my ($rr) = LlmEngine::wait_clients($t, $run);
ok($rr->{done}, 'the running one finished');

# A client that goes away mid-request closes or resets the connection,
# depending on what it had not read yet; both are a cancellation.
like($t->engine_log('a'),
     qr/cancelled: (?:client closed|Connection reset by peer)/,
     'the engine logs the cancellation');
$t->done;

#!/usr/bin/perl
# llm-engine with --expert-cache-mb (streamed experts, docs/STREAMING.md): on
# a generated model whose experts are several times the cache, greedy
# completions equal those of the engine mapping the whole file; Info carries
# the cache's counters; a cache below one token's experts is refused at start
# with the minimum named.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmEngine;

my $t = LlmTest->new;

# 16 experts x 8 layers, Q4_0: ~40 KB a slot, ~5 MB of experts; 1 MiB of
# cache holds 24 slots, a fifth of them (and more than one layer's 16, so
# prefill batches fit)
my $model = $t->dir . '/stream.gguf';
system($t->bin('llm-mkmodel'), '-q', '--preset', 'tiny', '--experts', 16,
       '--experts-used', 2, '--layers', 8, '--type', 'Q4_0', '--seed', 7,
       '--threads', 1, '-o', $model) == 0 or BAIL_OUT('llm-mkmodel failed');

my $res = $t->start_engine('res', model => $model,
                           args => ['--expert-cache-mb', 0]);
my $str = $t->start_engine('str', model => $model,
                           args => ['--expert-cache-mb', 1]);
like($t->engine_log('str'), qr/expert cache: 1 MiB, \d+ slots/,
     'engine logs the cache it made');

for my $p ('Tell me a story about the sea',
           'List three colours and explain why',
           'Hello!') {
    my %req = (messages => [{ role => 'user', content => $p }],
               max_tokens => 24, ignore_eos => JSON::PP::true);
    my $a = LlmEngine::gen($t, $res, \%req);
    my $b = LlmEngine::gen($t, $str, \%req);
    is($b->{rc}, 0, "streamed engine completes '$p'");
    is(scalar @{ $b->{tokens} // [] }, 24, '  24 tokens');
    is_deeply($b->{tokens}, $a->{tokens}, '  same greedy tokens as mapped');
}

my $st = LlmEngine::info($t, $str)->{stats};
ok($st->{expert_cache_misses} > 24, 'misses counted (cache < experts)')
    or diag explain $st;
ok($st->{expert_cache_hits} > 0, 'hits counted');
ok($st->{expert_bytes_read} >= $st->{expert_cache_misses} * 30000,
   'bytes read cover every miss');
ok(defined $st->{expert_prefetch_accuracy}
   && $st->{expert_prefetch_accuracy} > 0
   && $st->{expert_prefetch_accuracy} <= 1, "prefetch accuracy in (0, 1]")
    or diag explain $st;
my $ms = LlmEngine::info($t, $res)->{stats};
ok(!$ms->{expert_cache_misses}, 'mapped engine reports no cache');

is($t->stop_engine('str'), 0, 'streamed engine drains cleanly');
my $log = $t->slurp($t->dir . '/engine-str.log');
like($log, qr/expert cache: \d+ hits, \d+ misses \(hit rate/,
     'counters logged at exit');

# the model has experts of ~40 KB: 0 slots in ... use a model with bigger
# experts so 1 MiB holds fewer than 2
my $big = $t->dir . '/big-experts.gguf';
system($t->bin('llm-mkmodel'), '-q', '--preset', 'tiny', '--embd', 512,
       '--ff-exp', 1024, '--experts', 4, '--layers', 1, '--type', 'F16',
       '--threads', 1, '-o', $big) == 0 or BAIL_OUT('llm-mkmodel failed');
my $out = `$LlmTest::BUILD/bin/llm-engine --model $big --socket ${\ $t->dir}/x.sock --expert-cache-mb 1 2>&1`;
isnt($? >> 8, 0, 'a cache below one token\'s experts: engine exits');
like($out, qr/expert cache too small: .* use --expert-cache-mb \d+ or more/,
     '  with the minimum named');

$t->done;

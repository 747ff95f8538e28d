#!/usr/bin/perl
# Long context through nginx and the real engine (issue 38):
#
# - --ctx: past the trained length only as far as the file's RoPE scaling
#   stretches it; beyond, or without scaling, the engine stops at start
#   naming both numbers.
# - the window is the engine's --ctx everywhere: /v1/models'
#   context_length, and context_length_exceeded's message.
# - admission under the KV budget: two requests that each fit but not
#   together both finish (the second waits, or is preempted and
#   recomputed), and the KV comes back; a long prompt repeated gets its
#   prefix from the cache (cached_tokens).
# - KV use in /healthz (each engine's "kv") and /metrics
#   (llm_kv_capacity_tokens, llm_kv_used_tokens, llm_kv_cached_tokens):
#   used while a request runs, 0 after, cached prefixes after.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmKeys;
use LlmEngine;

my $t = LlmTest->new;
my $dir = $t->dir;

# the tiny model (trained on 2048) with linear RoPE scaling x2: up to 4096
my $lin = "$dir/linear2.gguf";
system($t->bin('llm-mkmodel'), '--preset', 'tiny', '--type', 'Q8_0',
       '--seed', '1', '--rope-linear', '2', '-q', '-o', $lin) == 0
    or BAIL_OUT('llm-mkmodel failed');

sub engine_refuses {
    my ($model, $ctx) = @_;
    my $engine = $t->bin('llm-engine');
    my $out = `timeout 30 $engine --model $model --socket $dir/refused.sock --threads 1 --ctx $ctx 2>&1`;
    return ($? >> 8, $out);
}

my ($rc, $out) = engine_refuses($lin, 4097);
isnt($rc, 0, '--ctx 4097 on a file scaled to 4096: the engine stops');
like($out, qr/--ctx 4097: the model was trained on 2048 tokens and the file's RoPE scaling stretches that to 4096; use --ctx 4096 or less/,
     'naming the trained length and the scaled window') or diag $out;
($rc, $out) = engine_refuses($t->model, 2049);
isnt($rc, 0, '--ctx 2049 on a file trained on 2048 without scaling: stops');
like($out, qr/--ctx 2049: the model was trained on 2048 tokens and the file gives no RoPE scaling/,
     'naming the trained length') or diag $out;

# 4 MiB of f16 KV: 4096 tokens of the tiny model, a window of 3000
$t->start_engine('a', model => $lin,
                 args => ['--ctx', '3000', '--kv-mb', '4']);
$t->start_nginx(<<'EOF');
    llm_zone llm 1m;
    llm_info_cache 100ms;
    upstream e { server unix:%%SOCK_a%%; }
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_pass e; llm_api on; }
        location = /healthz { llm_pass e; llm_health on; }
        location = /metrics { llm_metrics; }
    }
EOF

my $h = $t->get('/healthz');
is($h->{status}, 200, '/healthz: 200');
my $be = $h->{json}{models}[0]{backends}[0];
is($be->{context_length}, 3000, '/healthz: the engine window 3000');
my $kv = $be->{kv};
ok($kv && $kv->{capacity_tokens} >= 3000,
   "/healthz: kv capacity $kv->{capacity_tokens} tokens") or diag explain $h->{json};
is($kv->{used_tokens}, 0, '/healthz: no KV used at rest');
ok($kv->{block_tokens} > 0, '/healthz: block_tokens');
my $cap = $kv->{capacity_tokens};

my $models = $t->get('/v1/models')->{json};
is($models->{data}[0]{context_length}, 3000,
   '/v1/models: context_length is --ctx');
my $model = $models->{data}[0]{id};

# n words: about 2.9 tokens each in the tiny vocabulary
sub words { my ($n, $seed) = @_; join ' ', map { "w" . (($_ * 7 + $seed) % 89) } 1 .. $n }

my $r = $t->post('/v1/completions', { model => $model,
    prompt => words(1100, 1), max_tokens => 4 });
is($r->{status}, 400, 'a prompt over the window: 400');
is($r->{json}{error}{code}, 'context_length_exceeded',
   'context_length_exceeded');
like($r->{json}{error}{message}, qr/maximum context length is 3000 tokens/,
     'the message names the engine window') or diag $r->{content};

# two requests of ~2500 tokens each (a ~1200-token prompt, 1300 more):
# either fits the 4096-token cache alone, not both; both finish
my $body = sub {
    my ($seed) = @_;
    return { model => $model, prompt => words(420, $seed), max_tokens => 1300,
             temperature => 0, ignore_eos => JSON::PP::true };
};
my @s = map { $t->open_stream('/v1/completions', $body->($_)) } (2, 3);

# KV in use while they run, in /healthz and /metrics
my ($used_h, $used_m, $m) = (0, 0);
for (1 .. 200) {
    my $hh = $t->get('/healthz')->{json};
    $used_h = $hh->{models}[0]{backends}[0]{kv}{used_tokens} // 0;
    $m = LlmKeys::metrics($t->get('/metrics')->{content});
    $used_m = LlmKeys::sample($m, 'llm_kv_used_tokens',
                              { engine => $be->{backend} });
    last if $used_h > 0 && $used_m > 0;
    select(undef, undef, undef, 0.05);
}
ok($used_h > 0 && $used_h <= $cap, "/healthz: $used_h KV tokens used while running");
ok($used_m > 0 && $used_m <= $cap, "/metrics: llm_kv_used_tokens $used_m while running");
is_deeply($m->{errors}, [], '/metrics: every line parses');
is($m->{types}{$_}, 'gauge', "$_ gauge")
    for qw(llm_kv_capacity_tokens llm_kv_used_tokens llm_kv_cached_tokens);
is(LlmKeys::sample($m, 'llm_kv_capacity_tokens', { engine => $be->{backend} }),
   $cap, '/metrics: llm_kv_capacity_tokens is the engine capacity');

my @done;
for my $s (@s) {
    my ($st, undef, $b) = $t->read_response($s, 120);
    my $j = eval { JSON::PP::decode_json($b) };
    push @done, $j;
    is($st, 200, 'a request that fits alone finishes: 200') or diag $b;
}
is($done[$_]{usage}{completion_tokens}, 1300, "request $_: all 1300 tokens")
    for 0, 1;
is($done[0]{choices}[0]{finish_reason}, 'length', 'finish_reason length');
my $st = LlmEngine::info($t, $t->engine_sock('a'))->{stats};
ok($st->{requests_preempted} >= 1,
   "they did not fit together: $st->{requests_preempted} preempted, "
   . "recomputed, no error");

# the KV comes back: nothing used, the prompts cached
my ($after, $cached_m);
for (1 .. 100) {
    select(undef, undef, undef, 0.15);
    $after = $t->get('/healthz')->{json}{models}[0]{backends}[0]{kv};
    last if $after->{used_tokens} == 0;
}
is($after->{used_tokens}, 0, '/healthz: KV used back to 0');
ok($after->{cached_tokens} > 0,
   "/healthz: $after->{cached_tokens} tokens of cached prefixes");
$m = LlmKeys::metrics($t->get('/metrics')->{content});
is(LlmKeys::sample($m, 'llm_kv_used_tokens', { engine => $be->{backend} }),
   0, '/metrics: llm_kv_used_tokens 0 after');
ok(LlmKeys::sample($m, 'llm_kv_cached_tokens', { engine => $be->{backend} }) > 0,
   '/metrics: llm_kv_cached_tokens after');

# the second prompt again: its head is still cached
$r = $t->post('/v1/completions', { %{ $body->(3) }, max_tokens => 2 });
is($r->{status}, 200, 'the prompt again: 200');
my $c = $r->{json}{usage}{prompt_tokens_details}{cached_tokens} // 0;
ok($c >= 1024, "cached_tokens $c of $r->{json}{usage}{prompt_tokens}")
    or diag $r->{content};

$t->done;

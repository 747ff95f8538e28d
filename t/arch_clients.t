#!/usr/bin/perl
# DeepSeek-V3.1 (deepseek2) and Qwen3.5 MoE (qwen35moe) end to end with
# the official openai client (tests/client/arch_clients.mjs) through
# nginx, on llm-mkmodel's tiny-deepseek2 and tiny-qwen35moe with the
# models' own templates: forced tool calls that validate (deepseek-v3's
# and qwen3-coder's families under the tool grammar), and the thinking
# the templates open streamed as reasoning_content; deepseek2's latent
# cache (MLA) through a prefix-cache hit and preemption, with the tokens
# of an uninterrupted run.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmClient;
use LlmEngine;
use LlmNpm;

LlmNpm::need('tests/client', 'openai', 'ajv');

my $t = LlmTest->new;
my $dir = $t->dir;
my %tmpl = (deepseek => 'engine/tests/data/templates/deepseek-ai-DeepSeek-V3.1.jinja',
            qwen => 'engine/tests/data/templates/Qwen3.5-4B.jinja');
my %preset = (deepseek => 'tiny-deepseek2', qwen => 'tiny-qwen35moe');

for my $k (sort keys %tmpl) {
    my $m = "$dir/$k.gguf";
    system($t->bin('llm-mkmodel'), '--preset', $preset{$k}, '--type', 'Q8_0',
           '--chat-template', $t->repo . "/$tmpl{$k}", '-q', '-o', $m) == 0
        or BAIL_OUT("llm-mkmodel $preset{$k}");
    $t->start_engine($k, model => $m, args => ['--name', $k]);
}
like($t->engine_log('deepseek'), qr/tool calls deepseek-v3, reasoning think/,
     "DeepSeek-V3.1's template: deepseek-v3 tool calls, think reasoning");
like($t->engine_log('qwen'), qr/tool calls qwen3-coder, reasoning think/,
     "Qwen3.5's template: qwen3-coder tool calls, think reasoning");

$t->start_nginx(<<"EOF");
    upstream deepseek { server unix:%%SOCK_deepseek%%; }
    upstream qwen { server unix:%%SOCK_qwen%%; }
    llm_model deepseek upstream=deepseek;
    llm_model qwen upstream=qwen;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
EOF

local $ENV{LLM_URL} = 'http://127.0.0.1:' . $t->port . '/v1';
my ($rc, $oks, $fails) = LlmClient::run_tap(
    $t->repo . '/tests/client/arch_clients.mjs',
    echo => qr/^(ok|not ok|#)/, diag => qr/^not ok /);
is($rc, 0, 'arch_clients.mjs exits 0');
is($fails, 0, 'every check of arch_clients.mjs passed');
is($oks, 10, 'arch_clients.mjs ran its 10 checks');

# deepseek2's latent cache (MLA): a prefix-cache hit and a preempted and
# recomputed stream give the tokens of an uninterrupted run

my $small = $t->start_engine('dssmall', model => "$dir/deepseek.gguf",
                             args => ['--kv-mb', '1', '--ctx', '256',
                                      '--max-batch', '12']);
sub chat1 {
    my ($q, %o) = @_;
    return { messages => [{ role => 'user', content => $q }],
             max_tokens => 16, temperature => 0,
             ignore_eos => JSON::PP::true, %o };
}
my $long = 'a shared system prompt ' x 12;
my $first = LlmEngine::gen($t, $small, chat1("$long one"));
my $again = LlmEngine::gen($t, $small, chat1("$long one"));
ok(($again->{cached_tokens} // $again->{started}{cached_tokens} // 0) > 0
   || LlmEngine::info($t, $small)->{stats}{cached_tokens_total} > 0,
   'deepseek2: the repeated prompt is served from the prefix cache');
is_deeply($again->{tokens}, $first->{tokens},
          'deepseek2: a prefix-cache hit gives the same tokens');

my ($res, $want) = LlmEngine::preempt_run($t, $small, 12);
is(scalar(grep { $_->{done} } @$res), 12, 'deepseek2: all 12 streams finished');
is_deeply([map { $_->{tokens} } @$res[0, 1]], $want,
          'deepseek2: preempted streams recompute to the same tokens');
my $st = LlmEngine::info($t, $small)->{stats};
ok($st->{requests_preempted} > 0,
   "deepseek2: preemption happened ($st->{requests_preempted})");
is($st->{kv_blocks_free}, $st->{kv_blocks_total}, 'deepseek2: blocks all back');

$t->done;

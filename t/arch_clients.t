#!/usr/bin/perl
# DeepSeek-V3.1 (deepseek2) and Qwen3.5 MoE (qwen35moe) end to end with
# the official openai client (tests/client/arch_clients.mjs) through
# nginx, on llm-mkmodel's tiny-deepseek2 and tiny-qwen35moe with the
# models' own templates: forced tool calls that validate (deepseek-v3's
# and qwen3-coder's families under the tool grammar), and the thinking
# the templates open streamed as reasoning_content.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmClient;
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

$t->done;

#!/usr/bin/perl
# Clients of /v1/responses from npm (tests/responses, pinned in its
# package-lock.json to lines that run on Debian 12's Node 20): the openai
# SDK 6 (responses.create, responses.stream, a tool round trip,
# responses.parse with zodTextFormat) and the Vercel AI SDK 5's default
# provider, @ai-sdk/openai 2 (generateText, streamText with a tool over
# two steps, generateObject), against nginx and the real engine: the tiny
# model and the demo model (trained to call lookup_order).

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmClient;
use LlmKeys;
use LlmNpm;

my $dir = LlmTest->repo . '/tests/responses';
LlmNpm::need('tests/responses', 'openai', 'ai', '@ai-sdk/openai', 'zod');

my $t = LlmTest->new;
$t->start_engine('a');
$t->start_engine('demo', model => "$LlmTest::REPO/models/demo/demo-q8_0.gguf");
my ($key, $line) = LlmKeys::new_key('sdk', tpm => 1000000);
LlmKeys::write_keys($t, $line);
$t->start_nginx(<<"EOF2");
    llm_zone llm 1m;
    llm_keys @{[ $t->dir ]}/keys;
    upstream engines { server unix:%%SOCK_a%%; keepalive 2; }
    llm_model tiny upstream=engines;
    upstream demo { server unix:%%SOCK_demo%%; keepalive 2; }
    llm_model demo upstream=demo;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
EOF2

local $ENV{LLM_URL} = 'http://127.0.0.1:' . $t->port . '/v1';
local $ENV{LLM_KEY} = $key;
my ($rc, $oks, $fails) = LlmClient::run_tap("$dir/sdk.mjs",
    echo => qr/^(#|not ok)/);
is($rc, 0, 'sdk.mjs exits 0');
is($fails, 0, 'no check failed');
is($oks, 25, 'every check ran');
$t->done;

#!/usr/bin/perl
# Forced tool calls end to end: the real engine on the random-weight tiny
# model (Hermes template), nginx with the module, and
# tests/client/tool_forced.mjs with the official openai client: 100 seeded
# requests with tool_choice "required" or a named function, parallel on
# and off, streamed and not; every answer ends with finish_reason
# tool_calls and every call names one of the tools and validates with ajv
# (an independent validator) against that tool's parameters; at most 2%
# may be cut short by max_tokens inside a string (a random model looping),
# their earlier calls still whole and valid.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmClient;
use LlmNpm;

my $client = LlmTest->repo . '/tests/client';
LlmNpm::need('tests/client', 'openai', 'ajv');

my $t = LlmTest->new;
my ($url, $key) = LlmClient::start_gateway($t,
    keys => [ [ 'tools', rpm => 100000, tpm => 100000000 ] ],
    engine => { threads => 2, args => ['--max-batch', '8'] },
    keepalive => 8);

local $ENV{LLM_URL} = $url;
local $ENV{LLM_KEY} = $key;
local $ENV{LLM_N} = $ENV{LLM_N} // 100;
my ($rc, $oks, $fails) = LlmClient::run_tap("$client/tool_forced.mjs",
    echo => qr/^#/, diag => qr/^(not )?ok 1 /);
is($rc, 0, 'tool_forced.mjs exits 0');
is($fails, 0, 'every call parsed, named a tool and validated');
is($oks, 1, 'the request loop ran');

unlike($t->engine_log('a'), qr/\b(ERROR|assert|Sanitizer)\b/,
       'engine log clean');
$t->done;

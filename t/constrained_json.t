#!/usr/bin/perl
# Constrained decoding end to end: the real engine on the random-weight
# tiny model (whose unconstrained output is garbage), nginx with the
# module, and tests/client/constrained.mjs driving the official openai
# client: 400 seeded response_format requests (json_object and json_schema
# with nested objects, arrays, enums, anyOf, nullable types, $ref) must all
# parse, validate with ajv and end with finish_reason stop (at most 5% may
# be cut short by max_tokens, a random model looping inside a string: those
# must be valid JSON prefixes); an unsupported
# schema keyword is a 400 with param response_format.

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
    keys => [ [ 'json', rpm => 100000, tpm => 100000000 ] ],
    engine => { threads => 2, args => ['--max-batch', '16'] },
    keepalive => 8);

local $ENV{LLM_URL} = $url;
local $ENV{LLM_KEY} = $key;
local $ENV{LLM_N} = $ENV{LLM_N} // 400;
my ($rc, $oks, $fails) = LlmClient::run_tap("$client/constrained.mjs",
    echo => qr/^(#|not ok)/, diag => qr/^ok \d+ - \d+ constrained/);
is($rc, 0, 'constrained.mjs exits 0');
is($fails, 0, 'no failed checks');
is($oks, 6, 'every check ran (4 on errors, 2 on the request loop)');

my $log = $t->engine_log('a');
unlike($log, qr/\b(ERROR|assert|Sanitizer)\b/, 'engine log clean');
$t->done;

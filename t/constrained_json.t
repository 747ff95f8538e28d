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
use LlmKeys;
use LlmNpm;

my $client = LlmTest->repo . '/tests/client';
LlmNpm::need('tests/client', 'openai', 'ajv');

my $t = LlmTest->new;
my ($key, $line) = LlmKeys::new_key('json', rpm => 100000, tpm => 100000000);
LlmKeys::write_keys($t, $line);
$t->start_engine('a', threads => 2, args => ['--max-batch', '16']);
my $user = $> == 0 ? 'user root;' : '';
$t->start_nginx(<<"EOF", main => $user);
    llm_zone llm 1m;
    llm_keys @{[ $t->dir ]}/keys;
    upstream engines { server unix:%%SOCK_a%%; keepalive 8; }
    llm_model tiny upstream=engines;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
EOF

local $ENV{LLM_URL} = 'http://127.0.0.1:' . $t->port . '/v1';
local $ENV{LLM_KEY} = $key;
local $ENV{LLM_N} = $ENV{LLM_N} // 400;
open my $fh, '-|', 'node', "$client/constrained.mjs"
    or die "node: $!";
my ($oks, $fails) = (0, 0);
while (my $l = <$fh>) {
    print "# $l" if $l =~ /^(#|not ok)/;
    $oks++ if $l =~ /^ok /;
    $fails++ if $l =~ /^not ok /;
    diag($l) if $l =~ /^ok \d+ - \d+ constrained/;
}
close $fh;
is($? >> 8, 0, 'constrained.mjs exits 0');
is($fails, 0, 'no failed checks');
is($oks, 6, 'every check ran (4 on errors, 2 on the request loop)');

my $log = $t->engine_log('a');
unlike($log, qr/\b(ERROR|assert|Sanitizer)\b/, 'engine log clean');
$t->done;

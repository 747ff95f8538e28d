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
use LlmKeys;
use LlmNpm;

my $client = LlmTest->repo . '/tests/client';
LlmNpm::need('tests/client', 'openai', 'ajv');

my $t = LlmTest->new;
my ($key, $line) = LlmKeys::new_key('tools', rpm => 100000,
                                    tpm => 100000000);
LlmKeys::write_keys($t, $line);
$t->start_engine('a', threads => 2, args => ['--max-batch', '8']);
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
local $ENV{LLM_N} = $ENV{LLM_N} // 100;
open my $fh, '-|', 'node', "$client/tool_forced.mjs" or die "node: $!";
my ($oks, $fails) = (0, 0);
while (my $l = <$fh>) {
    print "# $l" if $l =~ /^#/;
    $oks++ if $l =~ /^ok /;
    $fails++ if $l =~ /^not ok /;
    diag($l) if $l =~ /^(not )?ok 1 /;
}
close $fh;
is($? >> 8, 0, 'tool_forced.mjs exits 0');
is($fails, 0, 'every call parsed, named a tool and validated');
is($oks, 1, 'the request loop ran');

unlike($t->engine_log('a'), qr/\b(ERROR|assert|Sanitizer)\b/,
       'engine log clean');
$t->done;

#!/usr/bin/perl
# The official Anthropic SDK (@anthropic-ai/sdk 1.17.0, pinned in
# tests/anthropic/package-lock.json; it runs on Debian 12's Node 20)
# against /v1/messages with only baseURL and the key changed
# (tests/anthropic/messages.mjs): messages.create, messages.stream (text
# events, finalMessage), a tool use round trip, a streamed tool call
# assembled by the SDK, countTokens, and the gateway's errors as the SDK's
# BadRequestError, NotFoundError, AuthenticationError and RateLimitError.
# Skips when npm cannot reach its registry (t/lib/LlmNpm.pm).

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmClient;
use LlmNpm;

my $dir = LlmTest->repo . '/tests/anthropic';
LlmNpm::need('tests/anthropic', '@anthropic-ai/sdk');

my $t = LlmTest->new;
my ($url, $key, $limited) = LlmClient::start_gateway($t,
    keys => [ [ 'sdk', rpm => 1000 ], [ 'limited', rpm => 1 ] ]);

# the SDK adds /v1/messages to its baseURL
(local $ENV{LLM_BASE} = $url) =~ s{/v1$}{};
local $ENV{LLM_KEY} = $key;
local $ENV{LLM_LIMITED} = $limited;
my ($rc, $oks, $fails) = LlmClient::run_tap("$dir/messages.mjs",
    echo => qr/^(#|not ok)/);
is($rc, 0, 'messages.mjs exits 0');
is($fails, 0, 'no check failed');
is($oks, 16, 'every check ran');
$t->done;

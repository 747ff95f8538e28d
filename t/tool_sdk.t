#!/usr/bin/perl
# Tool calls with the official openai SDK through nginx and the engine
# (tests/client/tools.test.mjs): named and required calls, streamed and
# not, assembled by the SDK, arguments checked with ajv; then the
# follow-up request with the tool result: its prompt_tokens must be the
# token count of what llm-template renders for the same messages, and that
# rendering must hold the tool call and the tool result.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmClient;
use LlmNpm;

my $t = LlmTest->new;
my $client = $t->repo . '/tests/client';
LlmNpm::need('tests/client', 'openai', 'ajv');

my ($url, $key) = LlmClient::start_gateway($t,
    keys => [ [ 'tools', rpm => 1000 ] ]);

my $dir = $t->dir;
my $out = `cd '$client' && LLM_URL='$url' LLM_KEY='$key' LLM_DUMP='$dir' node --test tools.test.mjs 2>&1`;
my $rc = $? >> 8;
is($rc, 0, 'tools.test.mjs passes') or diag($out);
like($out, qr/# pass 6\b/, 'all six SDK tests ran') or diag($out);

# The follow-up's prompt is the template's rendering of its messages.
my $model = $t->model;
my $tpl = $t->bin('llm-template');
my $tok = $t->bin('llm-tokenize');
my $prompt = `'$tpl' -m '$model' --messages '$dir/followup.json' --add-generation-prompt 2>&1`;
is($? >> 8, 0, 'llm-template renders the follow-up') or diag($prompt);
like($prompt, qr/RESULT-7781: sunny, 24 degrees/, 'the tool result is in the prompt');
like($prompt, qr/<tool_call>\n\{"name": "get_weather", "arguments": \{"city"/,
     'the assistant tool call is in the prompt');
open(my $fh, '>', "$dir/prompt.txt") or die;
print $fh $prompt;
close $fh;
my $ids = `'$tok' -m '$model' --special --ids-only < '$dir/prompt.txt'`;
my $n = () = $ids =~ /\d+/g;
my $got = $t->slurp("$dir/followup.tokens");
chomp $got;
is($got, $n, "prompt_tokens ($got) is the rendered prompt's token count");

$t->stop_nginx;
unlike($t->error_log, qr/\[(alert|emerg)\]/, 'no alerts in error.log');
done_testing();

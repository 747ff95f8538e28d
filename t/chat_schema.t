#!/usr/bin/perl
# Every chat completion, stream chunk and legacy completion the gateway
# writes validates against the official OpenAI OpenAPI schemas
# (tests/schemas/openai-chat.json, copied from the spec by
# tools/ref/openapi_subset.py): CreateChatCompletionResponse,
# CreateChatCompletionStreamResponse, CreateCompletionResponse.  The
# requests cover what changes their shape: plain, n > 1, logprobs with
# top_logprobs, tool calls (the demo model calls lookup_order), a stop
# string, include_usage, reasoning_content (t/data/think.jinja), legacy
# completions with several prompts, echo and logprobs.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use JSON::PP;
use LlmTest;
use LlmSchema;

my $t = LlmTest->new;
my $think = $t->build . '/models/test-think.gguf';
unless (-f $think) {
    system('mkdir', '-p', $t->build . '/models') == 0 or die;
    system($t->bin('llm-mkmodel'), '--preset', 'tiny', '--type', 'Q8_0',
           '--chat-template', 't/data/think.jinja', '-q',
           '-o', "$think.tmp.$$") == 0 or die 'llm-mkmodel';
    rename "$think.tmp.$$", $think or die "rename: $!";
}
$t->start_engine('a');
$t->start_engine('demo', model => "$LlmTest::REPO/models/demo/demo-q8_0.gguf");
$t->start_engine('th', model => $think, args => ['--name', 'think']);
$t->start_nginx(<<'EOF2');
    upstream engines { server unix:%%SOCK_a%%; }
    llm_model tiny upstream=engines;
    upstream demo { server unix:%%SOCK_demo%%; }
    llm_model demo upstream=demo;
    upstream th { server unix:%%SOCK_th%%; }
    llm_model think upstream=th;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
EOF2

my $schema = LlmSchema->load($t->repo . '/tests/schemas/openai-chat.json');

sub valid {
    my ($name, $value, $what) = @_;
    my @err = $schema->validate($name, $value);
    ok(!@err, "$what: a valid $name") or diag join("\n", @err);
}

my $tools = [ { type => 'function', function => {
    name => 'lookup_order', description => 'Look up an order',
    parameters => { type => 'object', required => [ 'order_id' ],
                    properties => { order_id => { type => 'string' } } } } } ];
my $user = [ { role => 'user', content => 'Where is my order 1234?' } ];

my @chat = (
    [ 'plain', { model => 'tiny', max_tokens => 8, messages => $user } ],
    [ 'n 3 with logprobs', { model => 'tiny', max_tokens => 4, n => 3,
      logprobs => \1, top_logprobs => 2, messages => $user } ],
    [ 'a stop string', { model => 'tiny', max_tokens => 16, stop => [ 'e' ],
      messages => $user } ],
    [ 'tool calls', { model => 'demo', max_tokens => 60, temperature => 0,
      tools => $tools, messages => $user } ],
    [ 'a forced call', { model => 'demo', max_tokens => 60,
      tools => $tools, tool_choice => 'required', messages => $user } ],
    [ 'json_object', { model => 'tiny', max_tokens => 24,
      response_format => { type => 'json_object' }, messages => $user } ],
    [ 'reasoning_content', { model => 'think', max_tokens => 8,
      messages => $user } ],
);

for my $c (@chat) {
    my ($what, $req) = @$c;
    my $r = $t->post('/v1/chat/completions', $req);
    is($r->{status}, 200, "$what: 200") or diag $r->{content};
    valid('CreateChatCompletionResponse', $r->{json}, $what);

    my $s = $t->open_stream('/v1/chat/completions',
        { %$req, stream => \1, stream_options => { include_usage => \1 } });
    my ($st, $h, $body) = $t->read_response($s);
    is($st, 200, "$what, streamed: 200");
    my @ev = LlmTest::sse_events($body);
    is($ev[-1], '[DONE]', "$what, streamed: ends with [DONE]");
    my ($n, @bad) = (0);
    for my $e (grep { ref } @ev) {
        my @err = $schema->validate('CreateChatCompletionStreamResponse', $e);
        push @bad, @err;
        $n++;
    }
    ok($n > 1 && !@bad, "$what, streamed: $n chunks, each a valid "
       . 'CreateChatCompletionStreamResponse') or diag join("\n", @bad);
}

my @legacy = (
    [ 'one prompt', { model => 'tiny', max_tokens => 8, prompt => 'Once' } ],
    [ 'several prompts, n 2', { model => 'tiny', max_tokens => 4, n => 2,
      prompt => [ 'Once', 'Twice' ] } ],
    [ 'echo with logprobs', { model => 'tiny', max_tokens => 4, echo => \1,
      logprobs => 2, prompt => 'Once upon a time' } ],
);
# echo with logprobs: the prompt's first token has a null logprob and top,
# as OpenAI answers (nothing predicts it), which the spec's item types
# (number, object) do not describe; only that first one may be null
sub first_null_ok {
    my ($e) = @_;
    for my $ch (@{ $e->{choices} // [] }) {
        my $lp = $ch->{logprobs} or next;
        $lp->{token_logprobs}[0] //= 0 if @{ $lp->{token_logprobs} // [] };
        $lp->{top_logprobs}[0] //= {} if @{ $lp->{top_logprobs} // [] };
    }
    return $e;
}

for my $c (@legacy) {
    my ($what, $req) = @$c;
    my $r = $t->post('/v1/completions', $req);
    is($r->{status}, 200, "completions, $what: 200") or diag $r->{content};
    valid('CreateCompletionResponse', first_null_ok($r->{json}),
          "completions, $what");
    my $s = $t->open_stream('/v1/completions', { %$req, stream => \1 });
    my ($st, $h, $body) = $t->read_response($s);
    my ($n, @bad) = (0);
    for my $e (grep { ref } LlmTest::sse_events($body)) {
        # OpenAI's spec has no stream schema for completions: each chunk
        # is a CreateCompletionResponse, but for the finish_reason null
        # that OpenAI (and this gateway) send before a choice's end
        for my $ch (@{ $e->{choices} // [] }) {
            $ch->{finish_reason} //= 'stop';
        }
        push @bad, $schema->validate('CreateCompletionResponse',
                                     first_null_ok($e));
        $n++;
    }
    ok($n > 1 && !@bad, "completions, $what, streamed: $n chunks, each "
       . 'a valid CreateCompletionResponse') or diag join("\n", @bad);
}

$t->done;

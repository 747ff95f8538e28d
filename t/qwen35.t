#!/usr/bin/perl
# qwen35moe (Qwen3.5 MoE) served end to end: llm-mkmodel's tiny-qwen35moe
# (three gated delta net layers, a full attention layer with an output
# gate, a gated shared expert, an MTP block the engine skips) with
# Qwen3.5's own chat template behind nginx.  The delta net layers keep a
# state per sequence instead of K and V: the same greedy tokens and
# logprobs whether the prefill runs in one step or in steps of 64 tokens
# (the delta rule's chunk), with experts streamed from disk,
# for a request repeated (no prefix reuse: nothing cached, the state
# starts again), for requests batched together or one at a time, and for
# streams preempted and recomputed when the KV cache runs out.
# Logits against llama.cpp: engine/tests/test_reference.c.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use JSON::PP;
use Time::HiRes ();
use LlmTest;
use LlmEngine;

my $t = LlmTest->new;

my $m = $t->build . '/models/test-tiny-qwen35moe+qwen35.gguf';
unless (-f $m) {
    system('mkdir', '-p', $t->build . '/models') == 0 or die;
    system($t->bin('llm-mkmodel'), '--preset', 'tiny-qwen35moe', '--type',
           'Q8_0', '--chat-template',
           'engine/tests/data/templates/Qwen3.5-4B.jinja',
           '-q', '-o', "$m.tmp.$$") == 0 or die 'llm-mkmodel';
    rename "$m.tmp.$$", $m or die "rename: $!";
}

$t->start_engine('q', model => $m, args => ['--name', 'q35']);
$t->start_engine('qx', model => $m,
                 args => ['--name', 'q35', '--expert-cache-mb', 1]);
$t->start_engine('qc', model => $m,
                 args => ['--name', 'q35', '--step-tokens', 64,
                          '--max-batch', 8]);
# the recurrence only (no chunk of the delta rule), prefill in 16-token
# steps: what a sequence gets must not depend on its batch-mates, bit for
# bit, also when they cut its prefill at any token
$t->start_engine('qr', model => $m, env => { LLM_GDN_CHUNK => 1 },
                 args => ['--name', 'q35', '--step-tokens', 16,
                          '--max-batch', 8]);
my $log = $t->engine_log('q');
like($log, qr/\(qwen35moe, Q8_0\), 4 layers/,
     'qwen35moe: 4 layers run (the MTP block skipped)');
like($log, qr/recurrent layers: 3 of 4, a state of [\d.]+ MiB per sequence/,
     'the delta net layers: a state per sequence, whatever its length');
like($log, qr/reasoning think/, "Qwen3.5's template: think reasoning");
like($log, qr/tool calls qwen3-coder/,
     "Qwen3.5's template: its XML tool-call family");

$t->start_nginx(<<"EOF2");
    upstream q { server unix:%%SOCK_q%%; }
    upstream qx { server unix:%%SOCK_qx%%; }
    upstream qc { server unix:%%SOCK_qc%%; }
    upstream qr { server unix:%%SOCK_qr%%; }
    llm_model q35 upstream=q;
    llm_model q35-streamed upstream=qx;
    llm_model q35-chunked upstream=qc;
    llm_model q35-tokenwise upstream=qr;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
EOF2

sub lps { [ map { $_->{logprob} } @{ $_[0]{choices}[0]{logprobs}{content} // [] } ] }

my $long = join ' ', map { "word$_" } 1 .. 40;
my %req = (temperature => 0, max_tokens => 16, ignore_eos => JSON::PP::true,
           logprobs => JSON::PP::true,
           messages => [ { role => 'user', content => $long } ]);

my $r = $t->post('/v1/chat/completions', { %req, model => 'q35' });
is($r->{status}, 200, 'chat: 200');
my $msg = $r->{json}{choices}[0]{message};
my $answer = ($msg->{reasoning_content} // '') . ($msg->{content} // '');
ok(length $answer, 'chat: an answer (reasoning or content)');
is($r->{json}{usage}{completion_tokens}, 16, 'chat: 16 tokens');
is(scalar @{ lps($r->{json}) }, 16, 'chat: a logprob per token');
cmp_ok($r->{json}{usage}{prompt_tokens}, '>', 128,
       "a prompt of $r->{json}{usage}{prompt_tokens} tokens");

# prefill in 64-token steps, streamed experts: the same numbers (the
# delta net layers run whole 64-position chunks in matrix form and the
# rest token by token, so a prompt split at multiples of 64 gives the
# bits of one batch; elsewhere they move by f32 rounding, which
# test_reference's check_chunked bounds)
for my $v ('q35-chunked', 'q35-streamed') {
    my $x = $t->post('/v1/chat/completions', { %req, model => $v });
    is($x->{status}, 200, "$v: 200");
    is_deeply(lps($x->{json}), lps($r->{json}),
              "$v: the same tokens and logprobs");
}

# the same request again: no prefix reuse, the state starts over
my $again = $t->post('/v1/chat/completions', { %req, model => 'q35' });
is($again->{json}{usage}{prompt_tokens_details}{cached_tokens}, 0,
   'repeated: no cached prompt tokens (no prefix reuse with recurrent '
   . 'layers)');
is_deeply(lps($again->{json}), lps($r->{json}),
          'repeated: the same tokens and logprobs');

# streamed: the same text
my $s = $t->open_stream('/v1/chat/completions',
                        { %req, model => 'q35', stream => \1 });
my ($st, $h, $body) = $t->read_response($s);
is($st, 200, 'stream: 200');
my $text = join '', map { ($_->{choices}[0]{delta}{reasoning_content} // '')
                          . ($_->{choices}[0]{delta}{content} // '') }
                    grep { ref && @{ $_->{choices} } }
                    LlmTest::sse_events($body);
is($text, $answer, 'stream: the same text');

# four requests at once (continuous batching, a state slot each, chunked
# prefill beside decode) answer as each does alone; through the engine
# without the delta rule's chunks, since the step budget left by the
# others' decode cuts a prompt anywhere (test_reference's check_chunked
# holds the chunked form cut anywhere to f32 rounding)
my (@alone, @streams);
for my $i (0 .. 3) {
    my %q = (%req, model => 'q35-tokenwise', max_tokens => 8 + 2 * $i,
             messages => [ { role => 'user',
                             content => "question $i: " . ('x ' x (5 * $i))
                                        . $long } ]);
    my $a = $t->post('/v1/chat/completions', \%q);
    push @alone, lps($a->{json});
    push @streams, $t->open_stream('/v1/chat/completions',
                                   { %q, stream => \1 });
}
for my $i (0 .. 3) {
    my ($st2, $h2, $b2) = $t->read_response($streams[$i]);
    my @lp = map { map { $_->{logprob} }
                   @{ $_->{choices}[0]{logprobs}{content} // [] } }
             grep { ref && @{ $_->{choices} } } LlmTest::sse_events($b2);
    is($st2, 200, "batched $i: 200");
    is_deeply(\@lp, $alone[$i],
              "batched $i: the same logprobs as alone (" . scalar(@lp)
              . ' tokens)');
}

# a forced tool call comes back as an OpenAI tool call whose arguments fit
# the schema (the template's <tool_call> picks the engine's tool family)
my $tools = [ { type => 'function', function => {
    name => 'set_temp', description => 'Set the thermostat',
    parameters => { type => 'object', required => [ 'unit', 'eco' ],
                    properties => {
                        unit => { type => 'string', enum => [ 'c', 'f' ] },
                        eco => { type => 'boolean' } } } } } ];
my ($calls, $valid) = (0, 0);
for my $i (1 .. 3) {
    my $c = $t->post('/v1/chat/completions', {
        model => 'q35', max_tokens => 300, temperature => 0.8, seed => $i,
        tools => $tools, parallel_tool_calls => JSON::PP::false,
        reasoning_effort => 'none',
        tool_choice => { type => 'function',
                         function => { name => 'set_temp' } },
        messages => [ { role => 'user', content => "Make it warm $i" } ] });
    next unless $c->{status} == 200;
    my $tc = $c->{json}{choices}[0]{message}{tool_calls} // [];
    next unless @$tc;
    $calls++;
    my $a = eval { JSON::PP->new->decode($tc->[0]{function}{arguments}) };
    $valid++ if $a && $tc->[0]{function}{name} eq 'set_temp'
                && JSON::PP::is_bool($a->{eco})
                && defined $a->{unit} && $a->{unit} =~ /^[cf]$/
                && $c->{json}{choices}[0]{finish_reason} eq 'tool_calls';
}
is($calls, 3, "every forced request made a call ($calls of 3)");
is($valid, $calls, "every call's arguments fit the schema ($valid of $calls)");

# preemption: KV blocks and state slots for 12 long streams at once run
# out; a preempted stream recomputes from position 0 (its state with it)
# to the tokens it gets alone
my $small = $t->start_engine('small', model => $m,
                             args => ['--kv-mb', '1', '--ctx', '256',
                                      '--max-batch', '12']);
my ($res, $want) = LlmEngine::preempt_run($t, $small, 12);
is(scalar(grep { $_->{done} } @$res), 12, 'all 12 finished despite the KV');
is_deeply([map { $_->{tokens} } @$res[0, 1]], $want,
          'preempted streams recompute to the same tokens');
my $st2 = LlmEngine::info($t, $small)->{stats};
ok($st2->{requests_preempted} > 0,
   "preemption happened ($st2->{requests_preempted})");
is($st2->{kv_blocks_free}, $st2->{kv_blocks_total}, 'blocks all back');
is($st2->{cached_tokens_total} // 0, 0, 'nothing from the prefix cache');

$t->done;

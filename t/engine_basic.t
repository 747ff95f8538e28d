#!/usr/bin/perl
# llm-engine over its socket: Info, Tokenize/Detokenize, streaming chat
# and completions, max_tokens, stop strings across token boundaries,
# seeds, logprobs, n choices, echo, model names, invalid options,
# connection reuse, prefix reuse.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmEngine;

my $t = LlmTest->new;
my $sock = $t->start_engine('a', model => LlmEngine::model($t),
                            args => ['--alias', 'tiny-alias']);

my $info = LlmEngine::info($t, $sock);
ok($info, 'info answers');
is($info->{load_state}, 'ready', 'load_state ready');
ok($info->{context_length} > 0, 'context length reported');
like($info->{chat_template_source}, qr/^(gguf|chatml \(fallback\))$/,
     'chat template source');
is_deeply($info->{aliases}, ['tiny-alias'], 'aliases listed');
is($info->{stats}{kv_blocks_free}, $info->{stats}{kv_blocks_total},
   'all KV blocks free at start');
is($info->{system_fingerprint}, "fp_$info->{revision}",
   'system_fingerprint: the one Done carries');
is_deeply($info->{limits}, { max_choices => $info->{max_batch} < 16
                                            ? $info->{max_batch} : 16,
                             max_stop => 16, max_stop_bytes => 0,
                             max_top_logprobs => 20,
                             max_embed_inputs => 0 },
          'limits: the ones Generate enforces (no Embed: not --embeddings)');
my $model = $info->{model};
# the start-up log shows the file's type mix (llm_gguf_type_mix)
like($t->engine_log('a'), qr/\btypes: [A-Z][A-Z0-9_]* x \d+(, [A-Z][A-Z0-9_]* x \d+)*, F32 x \d+$/m,
     'start-up log: the type mix, most bytes first (norms in F32 last)');

# tokenize / detokenize
my $tk = LlmEngine::gen($t, $sock, undef, '--tokenize', 'Hello world, hi');
ok(@{ $tk->{events}[0]{tokens} // [] } > 0, 'tokenize gives ids');
my $ids = join ',', @{ $tk->{events}[0]{tokens} };
my $dt = LlmEngine::gen($t, $sock, undef, '--detokenize', $ids);
is($dt->{events}[0]{text}, 'Hello world, hi', 'detokenize round trip');
my $bad = LlmEngine::gen($t, $sock, undef, '--detokenize', '999999');
is($bad->{error}{code}, 'invalid_request', 'detokenize rejects bad ids');

# streaming chat, max_tokens
my %chat = (messages => [{ role => 'user', content => 'Tell me a story' }],
            max_tokens => 12, ignore_eos => JSON::PP::true);
my $r = LlmEngine::gen($t, $sock, \%chat);
is($r->{rc}, 0, 'chat exits 0');
is($r->{events}[0]{event}, 'started', 'first event is started');
ok($r->{started}{prompt_tokens} > 5, 'prompt tokens counted');
is(scalar @{ $r->{tokens} }, 12, '12 tokens streamed');
is(scalar(grep { $_->{event} eq 'delta' && @{ $_->{tokens} } }
          @{ $r->{events} }), 12, 'one delta per token');
is($r->{done}{choices}[0]{finish_reason}, 'length', 'finish length');
is($r->{done}{usage}{completion_tokens}, 12, 'usage completion tokens');
is($r->{done}{usage}{prompt_tokens}, $r->{started}{prompt_tokens},
   'usage prompt tokens match started');
is($r->{done}{model}, $model, 'done names the model');
like($r->{done}{system_fingerprint}, qr/^fp_[0-9a-f]+$/, 'fingerprint');
is($r->{events}[-1]{event}, 'done', 'done is last');

my $r2 = LlmEngine::gen($t, $sock, \%chat);
is_deeply($r2->{tokens}, $r->{tokens}, 'greedy is reproducible');

# stop strings, across a token boundary: the end of one delta's text and
# the start of the next
my @d = grep { $_->{event} eq 'delta' } @{ $r->{events} };
my ($stop, $before);
my $acc = '';
for my $i (0 .. $#d - 1) {
    $acc .= $d[$i]{text};
    my ($a, $b) = ($d[$i]{text}, $d[$i + 1]{text});
    next unless $i > 0 && $a =~ /([A-Za-z ]{2})$/ && $b =~ /^([A-Za-z])/;
    $stop = substr($a, -2) . substr($b, 0, 1);
    last;
}
SKIP: {
    skip 'no ASCII token boundary in the greedy text', 3 unless $stop;
    my $pos = index($r->{text}, $stop);
    my $rs = LlmEngine::gen($t, $sock, { %chat, stop => [$stop],
                                         max_tokens => 12 });
    is($rs->{text}, substr($r->{text}, 0, $pos),
       "text ends before the stop string '$stop'");
    unlike($rs->{text}, qr/\Q$stop\E/, 'stop string not emitted');
    is($rs->{done}{choices}[0]{finish_reason}, 'stop', 'finish stop');
    is($rs->{done}{choices}[0]{stop_sequence}, $stop,
       'Done names the stop string that ended the choice');
}
ok(!defined $r->{done}{choices}[0]{stop_sequence}
   || $r->{done}{choices}[0]{stop_sequence} eq '',
   'no stop_sequence when max_tokens ended the choice');

# count_only: the prompt's tokens with the template, nothing generated
my $cnt = LlmEngine::gen($t, $sock, { %chat, count_only => JSON::PP::true });
is(join(',', map { $_->{event} } @{ $cnt->{events} }), 'started,done',
   'count_only: Started then Done, no delta');
is($cnt->{done}{usage}{prompt_tokens}, $r->{started}{prompt_tokens},
   'count_only: the prompt tokens of the same chat generated');
ok(!$cnt->{done}{usage}{completion_tokens}, 'count_only: nothing generated');
is(scalar @{ $cnt->{done}{choices} // [] }, 0, 'count_only: no choices');
my $cnt2 = LlmEngine::gen($t, $sock, { %chat, count_only => JSON::PP::true,
    messages => [{ role => 'system', content => 'Be brief and kind.' },
                 @{ $chat{messages} }] });
ok($cnt2->{done}{usage}{prompt_tokens} > $cnt->{done}{usage}{prompt_tokens},
   'count_only: a system message adds tokens');

# seeds
my %samp = (%chat, temperature => 1.0, top_p => 0.95, max_tokens => 16);
my $s1 = LlmEngine::gen($t, $sock, { %samp, seed => 7 });
my $s2 = LlmEngine::gen($t, $sock, { %samp, seed => 7 });
my $s3 = LlmEngine::gen($t, $sock, { %samp, seed => 8 });
is_deeply($s1->{tokens}, $s2->{tokens}, 'same seed, same tokens');
isnt(join(',', @{ $s1->{tokens} }), join(',', @{ $s3->{tokens} }),
     'another seed, other tokens');

# logprobs
my $lp = LlmEngine::gen($t, $sock, { %chat, max_tokens => 4,
                                     logprobs => JSON::PP::true,
                                     top_logprobs => 3 });
my @ld = grep { $_->{event} eq 'delta' } @{ $lp->{events} };
is(scalar @{ $ld[0]{logprobs}[0]{top} }, 3, 'three top logprobs');
ok($ld[0]{logprobs}[0]{logprob} <= 0, 'logprob <= 0');
is($ld[0]{logprobs}[0]{top}[0]{token}, $ld[0]{tokens}[0],
   'greedy token is the top one');

# n choices
my $n2 = LlmEngine::gen($t, $sock, { %samp, n => 2, seed => 3,
                                     max_tokens => 6 });
is(scalar @{ $n2->{done}{choices} }, 2, 'two choices end');
is(scalar @{ $n2->{all_tokens}{1} // [] }, 6, 'choice 1 streamed');
is($n2->{done}{usage}{completion_tokens}, 12, 'usage counts both choices');

# completions, echo
my $c = LlmEngine::gen($t, $sock, { prompt => 'Once upon a time',
                                    max_tokens => 5, echo => JSON::PP::true,
                                    ignore_eos => JSON::PP::true });
like($c->{text}, qr/^Once upon a time/, 'echo puts the prompt first');
is(scalar @{ $c->{tokens} }, 5, 'completion tokens');

# model names
my $nf = LlmEngine::gen($t, $sock, { %chat, model => 'nope' });
is($nf->{error}{code}, 'model_not_found', 'unknown model');
is($nf->{rc}, 1, 'client exits 1 on error');
my $al = LlmEngine::gen($t, $sock, { %chat, model => 'tiny-alias',
                                     max_tokens => 2 });
ok($al->{done}, 'alias accepted');

# invalid options
my $iv = LlmEngine::gen($t, $sock, { %chat, top_logprobs => 21 });
is($iv->{error}{code}, 'invalid_request', 'top_logprobs 21 rejected');
is($iv->{error}{param}, 'top_logprobs', 'param named');
my $lb = LlmEngine::gen($t, $sock, { %chat, logit_bias => { 99999 => 1 } });
is($lb->{error}{param}, 'logit_bias', 'logit_bias out of vocabulary');

# logit_bias forces a token
my $fb = LlmEngine::gen($t, $sock, { %chat, max_tokens => 3,
                                     logit_bias => { 65 => 100 } });
is_deeply($fb->{tokens}, [65, 65, 65], 'logit_bias +100 forces the token');

# connection reuse
my $rp = LlmEngine::gen($t, $sock, { %chat, max_tokens => 3 }, '--repeat', 3);
is(scalar(grep { $_->{event} eq 'done' } @{ $rp->{events} }), 3,
   'three requests on one connection');

# prefix reuse: a long shared system prompt
my $sys = join ' ', map { "rule $_ is to be kind and brief" } 1 .. 12;
my %pc = (messages => [{ role => 'system', content => $sys },
                       { role => 'user', content => 'hi' }],
          max_tokens => 4, ignore_eos => JSON::PP::true);
my $p1 = LlmEngine::gen($t, $sock, \%pc);
my $p2 = LlmEngine::gen($t, $sock, \%pc);
my $p3 = LlmEngine::gen($t, $sock, { %pc, messages => [$pc{messages}[0],
                                     { role => 'user', content => 'ho' }] });
ok($p2->{started}{cached_tokens} > 32, 'second request reuses the prefix')
    or diag explain $p2->{started};
is($p2->{started}{cached_tokens} % $info->{stats}{kv_block_tokens}, 0,
   'cached tokens are whole blocks');
is($p2->{done}{usage}{cached_tokens}, $p2->{started}{cached_tokens},
   'usage reports cached tokens');
is_deeply($p2->{tokens}, $p1->{tokens}, 'same output with the cache');
ok($p3->{started}{cached_tokens} > 32, 'another question, same system prompt');

# tools and a tool round trip render through the model's template
my $tools = [{ type => 'function', function => {
    name => 'get_weather', description => 'Weather for a city',
    parameters => { type => 'object', properties => {
        city => { type => 'string' } }, required => ['city'] } } }];
my $tw = LlmEngine::gen($t, $sock, { %chat, max_tokens => 2, tools => $tools });
ok($tw->{done}, 'a request with tools renders');
ok($tw->{started}{prompt_tokens} > $r->{started}{prompt_tokens} + 10,
   'the tools are in the prompt');
my $rt = LlmEngine::gen($t, $sock, { max_tokens => 2, tools => $tools,
    messages => [
        { role => 'user', content => 'Weather in Paris?' },
        { role => 'assistant', content => undef, tool_calls => [{
            id => 'call_1', type => 'function', function => {
                name => 'get_weather', arguments => '{"city":"Paris"}' } }] },
        { role => 'tool', tool_call_id => 'call_1', content => '{"t":21}' },
    ] });
ok($rt->{done}, 'a tool call and its result render') or diag $rt->{out};
my $kw = LlmEngine::gen($t, $sock, { %chat, chat_template_kwargs => [1] });
is($kw->{error}{param}, 'chat_template_kwargs', 'bad template kwargs');
my $nm = LlmEngine::gen($t, $sock, { messages => [], max_tokens => 2 });
is($nm->{error}{code}, 'invalid_request', 'no messages');

# TCP
my $port = $t->free_port;
my $tsock = $t->start_engine('tcp', model => LlmEngine::model($t),
                             args => ['--listen', "127.0.0.1:$port"]);
my $tc = LlmEngine::parse(LlmEngine::_run(LlmEngine::client_bin($t),
    '--tcp', "127.0.0.1:$port", $LlmEngine::JSON->encode(
        { %chat, max_tokens => 3 })));
is(scalar @{ $tc->{tokens} }, 3, '--listen: served over TCP');
is_deeply($tc->{tokens}, [@{ $r->{tokens} }[0 .. 2]], 'same tokens over TCP');

my $st = LlmEngine::info($t, $sock)->{stats};
is($st->{requests_running}, 0, 'nothing running at the end');
is($st->{kv_blocks_free}, $st->{kv_blocks_total}, 'every block free again');

is($t->stop_engine('a'), 0, 'engine exits 0 on SIGTERM');
$t->done;

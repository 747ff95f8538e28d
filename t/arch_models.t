#!/usr/bin/perl
# The glm4moe and gpt-oss architectures served end to end: llm-mkmodel's
# tiny-glm4moe (a leading dense layer, a shared expert, a NextN block the
# engine skips) and tiny-gpt-oss (sinks, biases, a 64-token sliding window,
# YaRN) behind nginx: chat JSON and streamed, a prompt longer than the
# window, and the same greedy answers with the experts streamed from disk
# (--expert-cache-mb) as with the whole file mapped.  Their logits against
# llama.cpp are checked by engine/tests/test_reference.c.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use JSON::PP;
use LlmTest;

my $t = LlmTest->new;

my %model;
for my $p ('tiny-glm4moe', 'tiny-gpt-oss', 'tiny-gpt-oss+harmony') {
    my $m = $t->build . "/models/test-$p.gguf";
    my ($preset, $tmpl) = split /\+/, $p;
    unless (-f $m) {
        system('mkdir', '-p', $t->build . '/models') == 0 or die;
        system($t->bin('llm-mkmodel'), '--preset', $preset, '--type', 'Q8_0',
               ($tmpl ? ('--chat-template', 'engine/tests/data/templates/'
                                            . 'openai-gpt-oss-120b.jinja')
                      : ()),
               '-q', '-o', "$m.tmp.$$") == 0 or die 'llm-mkmodel';
        rename "$m.tmp.$$", $m or die "rename: $!";
    }
    $model{$p} = $m;
}

$t->start_engine('glm', model => $model{'tiny-glm4moe'},
                 args => ['--name', 'glm']);
$t->start_engine('glmx', model => $model{'tiny-glm4moe'},
                 args => ['--name', 'glm', '--expert-cache-mb', 1]);
$t->start_engine('oss', model => $model{'tiny-gpt-oss'},
                 args => ['--name', 'oss']);
$t->start_engine('ossx', model => $model{'tiny-gpt-oss'},
                 args => ['--name', 'oss', '--expert-cache-mb', 1]);
$t->start_engine('ossf', model => $model{'tiny-gpt-oss'},
                 args => ['--name', 'oss', '--swa-full']);
$t->start_engine('ossc', model => $model{'tiny-gpt-oss'},
                 args => ['--name', 'oss', '--step-tokens', 128]);
like($t->engine_log('oss'), qr/sliding-window layers: a ring of \d+ blocks/,
     'gpt-oss: the window layers keep a ring, not the whole sequence');
unlike($t->engine_log('ossf'), qr/a ring of/, '--swa-full: no ring');
my ($kv_ring) = $t->engine_log('oss') =~ /KV cache: .*?\(([\d.]+) MiB/;
my ($kv_full) = $t->engine_log('ossf') =~ /KV cache: .*?\(([\d.]+) MiB/;
cmp_ok($kv_ring, '<', $kv_full, "the block pool without the window layers "
       . "is smaller ($kv_ring vs $kv_full MiB)");
$t->start_engine('harmony', model => $model{'tiny-gpt-oss+harmony'},
                 args => ['--name', 'harmony']);
like($t->engine_log('harmony'), qr/reasoning harmony/,
     "gpt-oss's own template: the harmony format");
like($t->engine_log('glm'), qr/\(glm4moe, Q8_0\), 4 layers/,
     'glm4moe: 4 layers run (the NextN block skipped)');
like($t->engine_log('oss'), qr/\(gpt-oss, Q8_0\)/, 'gpt-oss loads');

$t->start_nginx(<<"EOF2");
    upstream glm { server unix:%%SOCK_glm%%; }
    upstream glmx { server unix:%%SOCK_glmx%%; }
    upstream oss { server unix:%%SOCK_oss%%; }
    upstream ossx { server unix:%%SOCK_ossx%%; }
    llm_model glm upstream=glm;
    llm_model glm-streamed upstream=glmx;
    llm_model oss upstream=oss;
    llm_model oss-streamed upstream=ossx;
    upstream ossf { server unix:%%SOCK_ossf%%; }
    upstream ossc { server unix:%%SOCK_ossc%%; }
    llm_model oss-full upstream=ossf;
    llm_model oss-chunked upstream=ossc;
    upstream harmony { server unix:%%SOCK_harmony%%; }
    llm_model harmony upstream=harmony;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
EOF2

# a prompt past gpt-oss's 64-token window
my $long = join ' ', map { "word$_" } 1 .. 80;

for my $m ('glm', 'oss') {
    my %req = (temperature => 0, max_tokens => 16,
               ignore_eos => JSON::PP::true, logprobs => JSON::PP::true,
               messages => [ { role => 'user', content => $long } ]);
    my $r = $t->post('/v1/chat/completions', { %req, model => $m });
    is($r->{status}, 200, "$m: 200");
    my $ch = $r->{json}{choices}[0];
    ok(length($ch->{message}{content} // ''), "$m: an answer");
    cmp_ok($r->{json}{usage}{prompt_tokens}, '>', 64,
           "$m: the prompt is longer than the window "
           . "($r->{json}{usage}{prompt_tokens} tokens)");
    is($r->{json}{usage}{completion_tokens}, 16, "$m: 16 tokens");
    is(scalar @{ $ch->{logprobs}{content} // [] }, 16,
       "$m: a logprob per token");

    my $x = $t->post('/v1/chat/completions', { %req, model => "$m-streamed" });
    is($x->{status}, 200, "$m streamed experts: 200");
    is_deeply([ map { $_->{logprob} } @{ $x->{json}{choices}[0]{logprobs}{content} } ],
              [ map { $_->{logprob} } @{ $ch->{logprobs}{content} } ],
              "$m: streamed experts give the same tokens and logprobs");

    if ($m eq 'oss') {
        # the rings give the numbers of the whole KV, prefilled in one
        # step or in 128-token chunks going around them
        for my $v ('oss-full', 'oss-chunked') {
            my $y = $t->post('/v1/chat/completions', { %req, model => $v });
            is_deeply([ map { $_->{logprob} }
                        @{ $y->{json}{choices}[0]{logprobs}{content} } ],
                      [ map { $_->{logprob} } @{ $ch->{logprobs}{content} } ],
                      "oss: $v gives the same tokens and logprobs");
        }
    }

    my $s = $t->open_stream('/v1/chat/completions',
                            { %req, model => $m, stream => \1 });
    my ($st, $h, $body) = $t->read_response($s);
    is($st, 200, "$m stream: 200");
    my $text = join '', map { $_->{choices}[0]{delta}{content} // '' }
                        grep { ref && @{ $_->{choices} } }
                        LlmTest::sse_events($body);
    is($text, $ch->{message}{content}, "$m stream: the same text");
}

# reasoning_effort reaches gpt-oss's template ("Reasoning: medium" unless
# told otherwise): low renders another prompt, medium the default one
my %pt;
for my $effort ('', 'low', 'medium') {
    my $r = $t->post('/v1/chat/completions', {
        model => 'harmony', max_tokens => 2, temperature => 0,
        ($effort ? (reasoning_effort => $effort) : ()),
        messages => [ { role => 'user', content => 'Hi' } ] });
    is($r->{status}, 200, "harmony, effort '$effort': 200");
    $pt{$effort} = $r->{json}{usage}{prompt_tokens};
}
is($pt{medium}, $pt{''}, 'reasoning_effort medium is the template\'s default');
isnt($pt{low}, $pt{medium}, "reasoning_effort low changes the prompt "
     . "($pt{low} vs $pt{medium} tokens)");
# the client's own chat_template_kwargs win
my $r = $t->post('/v1/chat/completions', {
    model => 'harmony', max_tokens => 2, temperature => 0,
    reasoning_effort => 'low',
    chat_template_kwargs => { reasoning_effort => 'medium' },
    messages => [ { role => 'user', content => 'Hi' } ] });
is($r->{json}{usage}{prompt_tokens}, $pt{medium},
   'chat_template_kwargs.reasoning_effort wins over reasoning_effort');

$t->done;

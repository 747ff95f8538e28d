#!/usr/bin/perl
# gpt-oss's harmony format and GLM-4.5's end to end with the official
# openai client (tests/client/chat_formats.mjs) through nginx, on
# llm-mkmodel models with the models' own templates (gpt-oss-120b's,
# GLM-4.6's: GLM-4.5's format):
#
#  - forced tool calls on random-weight tiny-gpt-oss and tiny-glm4moe
#    (GLM-4.6's and GLM-4.7's templates), streamed and not, parse and
#    validate against their schema (the harmony, glm4.5 and glm4.7 tool
#    grammars);
#  - reasoning_effort changes the rendered prompt as the template says:
#    each effort's prompt_tokens is the token count of llm-template's
#    rendering with that effort ("Reasoning: low" ... in gpt-oss's system
#    message; GLM's <think></think> for none), and with prefix caching
#    the prompt of another effort shares only the tokens before the
#    "Reasoning:" line with it, the same effort all of its blocks;
#  - streamed reasoning: models made with llm-mkmodel --script, whose
#    greedy decoding writes a known reply through the real forward pass
#    (harmony: an analysis message, then <|start|>assistant and a final
#    one; GLM: <think>...</think> and the answer), give the thinking as
#    reasoning_content deltas and only the final channel as content.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use JSON::PP;
use LlmTest;
use LlmClient;
use LlmNpm;

LlmNpm::need('tests/client', 'openai', 'ajv');

my $t = LlmTest->new;
my $dir = $t->dir;
my %tmpl = (oss => 'engine/tests/data/templates/openai-gpt-oss-120b.jinja',
            glm => 'engine/tests/data/templates/GLM-4.6.jinja',
            glm47 => 'engine/tests/data/templates/GLM-4.7-Flash.jinja');
my %preset = (oss => 'tiny-gpt-oss', glm => 'tiny-glm4moe',
              glm47 => 'tiny-glm4moe');
my $question = 'Why is the sky blue?';

sub mkmodel {
    my ($out, @args) = @_;
    my $cmd = join ' ', map { "'$_'" } $t->bin('llm-mkmodel'), @args, '-q',
                                        '-o', $out;
    system("$cmd > /dev/null") == 0 or die "llm-mkmodel @args";
    return $out;
}

# The token ids of text (special tokens parsed) in model m's vocabulary.
sub ids {
    my ($m, $text) = @_;
    my $f = "$dir/text.txt";
    open(my $fh, '>', $f) or die;
    print $fh $text;
    close $fh;
    my $out = `'${\ $t->bin('llm-tokenize')}' -m '$m' --special --ids-only < '$f'`;
    $? == 0 or die "llm-tokenize: $out";
    return $out =~ /(\d+)/g;
}

# The prompt llm-template renders for the question, with template vars.
sub render {
    my ($m, @vars) = @_;
    open(my $fh, '>', "$dir/msgs.json") or die;
    print $fh encode_json([ { role => 'user', content => $question } ]);
    close $fh;
    my $p = `'${\ $t->bin('llm-template')}' -m '$m' --messages '$dir/msgs.json' --add-generation-prompt @{[ map { "--var '$_'" } @vars ]}`;
    $? == 0 or die "llm-template: $p";
    return $p;
}

my %m;
for my $k ('oss', 'glm', 'glm47') {
    $m{$k} = mkmodel("$dir/$k.gguf", '--preset', $preset{$k}, '--type',
                     'Q8_0', '--chat-template', $tmpl{$k});
}

# the scripted replies: the last two prompt tokens, then the answer
my @p = ids($m{oss}, render($m{oss}));
my @oss = (@p[-2, -1], ids($m{oss}, '<|channel|>analysis<|message|>'),
           ids($m{oss}, 'Light scatters.'), ids($m{oss}, '<|end|><|start|>'),
           # "assistant" in other tokens than the prompt's, so that the
           # two <|channel|> that follow it have different contexts
           ids($m{oss}, 'ass'), ids($m{oss}, 'istant'),
           ids($m{oss}, '<|channel|>final<|message|>'),
           ids($m{oss}, 'It is Rayleigh.'), ids($m{oss}, '<|return|>'));
@p = ids($m{glm}, render($m{glm}));
my @glm = (@p[-2, -1], ids($m{glm}, '<think>'),
           ids($m{glm}, 'Light scatters.'), ids($m{glm}, '</think>'),
           ids($m{glm}, 'It is Rayleigh.'), ids($m{glm}, '<|endoftext|>'));
my %s;
$s{oss} = mkmodel("$dir/oss-script.gguf", '--preset', 'tiny-gpt-oss',
                  '--chat-template', $tmpl{oss}, '--script', join(',', @oss));
$s{glm} = mkmodel("$dir/glm-script.gguf", '--preset', 'tiny-glm4moe',
                  '--chat-template', $tmpl{glm}, '--script', join(',', @glm));

$t->start_engine('oss', model => $m{oss}, args => ['--name', 'oss']);
$t->start_engine('glm', model => $m{glm}, args => ['--name', 'glm']);
$t->start_engine('glm47', model => $m{glm47}, args => ['--name', 'glm47']);
$t->start_engine('ossc', model => $m{oss},
                 args => ['--name', 'oss-cache', '--swa-full']);
$t->start_engine('osss', model => $s{oss}, args => ['--name', 'oss-script']);
$t->start_engine('glms', model => $s{glm}, args => ['--name', 'glm-script']);
like($t->engine_log('oss'), qr/tool calls harmony, reasoning harmony/,
     "gpt-oss's template: harmony tool calls and reasoning");
like($t->engine_log('glm'), qr/tool calls glm4\.5, reasoning think/,
     "GLM's template: glm4.5 tool calls, think reasoning");
like($t->engine_log('glm47'), qr/tool calls glm4\.7, reasoning think/,
     "GLM-4.7's template: its compact glm4.7 tool calls");

$t->start_nginx(<<"EOF");
    upstream oss { server unix:%%SOCK_oss%%; }
    upstream glm { server unix:%%SOCK_glm%%; }
    upstream glm47 { server unix:%%SOCK_glm47%%; }
    llm_model glm47 upstream=glm47;
    upstream ossc { server unix:%%SOCK_ossc%%; }
    upstream osss { server unix:%%SOCK_osss%%; }
    upstream glms { server unix:%%SOCK_glms%%; }
    llm_model oss upstream=oss;
    llm_model glm upstream=glm;
    llm_model oss-cache upstream=ossc;
    llm_model oss-script upstream=osss;
    llm_model glm-script upstream=glms;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
EOF

local $ENV{LLM_URL} = 'http://127.0.0.1:' . $t->port . '/v1';
local $ENV{LLM_DUMP} = $dir;
my ($rc, $oks, $fails) = LlmClient::run_tap(
    $t->repo . '/tests/client/chat_formats.mjs',
    echo => qr/^(ok|not ok|#)/, diag => qr/^not ok /);
is($rc, 0, 'chat_formats.mjs exits 0');
is($fails, 0, 'every check of chat_formats.mjs passed');
is($oks, 16, 'chat_formats.mjs ran its 16 checks');

# reasoning_effort: the engine's prompt is the template's rendering
my $e = decode_json($t->slurp("$dir/efforts.json"));
my %n;
for my $effort ('low', 'medium', 'high') {
    my $p = render($m{oss}, "reasoning_effort=$effort");
    like($p, qr/\nReasoning: $effort\n/, "gpt-oss renders Reasoning: $effort");
    $n{$effort} = () = ids($m{oss}, $p);
    is($e->{"oss:$effort"}, $n{$effort}, "reasoning_effort $effort: "
       . "prompt_tokens is the rendering's token count ($n{$effort})");
}
is($e->{'oss:'}, $n{medium}, 'no reasoning_effort: the template\'s medium');
isnt($n{low}, $n{medium}, 'low and medium render prompts of other lengths '
     . '(the checks above can fail)');
my $none = render($m{glm}, 'reasoning_effort=none', 'enable_thinking=false');
like($none, qr/<\|assistant\|>\n<think><\/think>$/,
     "GLM renders <think></think> with enable_thinking false");
my $nn = () = ids($m{glm}, $none);
my $nd = () = ids($m{glm}, render($m{glm}));
is($e->{'glm:none'}, $nn, "glm, reasoning_effort none: prompt_tokens ($nn)");
is($e->{'glm:'}, $nd, "glm, no reasoning_effort: prompt_tokens ($nd)");

# the prefix cache: low after high reuses only what the two renderings
# share, before their "Reasoning:" lines
my @hi = ids($m{oss}, render($m{oss}, 'reasoning_effort=high'));
my @lo = ids($m{oss}, render($m{oss}, 'reasoning_effort=low'));
my $common = 0;
$common++ while $common < @hi && $hi[$common] == $lo[$common];
my ($same, $other, $again) = map { $e->{$_} } 'cache:1:high', 'cache:2:low',
                                              'cache:3:low';
cmp_ok($same, '>', $common, "high after high: $same cached tokens, more "
       . "than the $common the two efforts' prompts share");
cmp_ok($other, '<=', $common, "low after high: $other cached tokens, at "
       . "most the $common shared before the Reasoning line");
cmp_ok($again, '>', $common, "low after low: $again cached tokens");

unlike($t->engine_log($_), qr/\b(ERROR|assert|Sanitizer)\b/,
       "engine $_: log clean") for 'oss', 'glm', 'glm47', 'osss', 'glms';
$t->done;

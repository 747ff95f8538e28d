#!/usr/bin/perl
# llm-template renders exactly what jinja2 renders: from a .jinja file, from
# a GGUF's tokenizer.chat_template (with bos/eos token text from the
# vocabulary), the ChatML fallback for a GGUF without a template, and the
# template's raise_exception() as an error with exit status 1.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;

my $t = LlmTest->new;
my $bin = $t->bin('llm-template');
my $data = $t->repo . '/engine/tests/data/templates';
plan skip_all => "$bin not built" unless -x $bin;

sub slurp {
    my ($f) = @_;
    open(my $fh, '<:raw', $f) or die "$f: $!";
    local $/;
    return scalar <$fh>;
}

sub run {
    my (@args) = @_;
    my $dir = $t->dir;
    my $rc = system("'$bin' " . join(' ', map { "'$_'" } @args)
                    . " >$dir/out 2>$dir/err") >> 8;
    return ($rc, slurp("$dir/out"), slurp("$dir/err"));
}

# GGUF v3 with metadata only: chat template, a 3-token vocabulary, bos/eos.
sub gguf_str { pack('Q<', length($_[0])) . $_[0] }

sub write_gguf {
    my ($path, $template) = @_;
    my @kv;
    push @kv, gguf_str('general.architecture') . pack('L<', 8)
              . gguf_str('llama');
    push @kv, gguf_str('tokenizer.ggml.model') . pack('L<', 8)
              . gguf_str('gpt2');
    push @kv, gguf_str('tokenizer.ggml.tokens') . pack('L<L<Q<', 9, 8, 3)
              . join('', map { gguf_str($_) } ('<unk>', '<BOS>', '<EOS>'));
    push @kv, gguf_str('tokenizer.ggml.bos_token_id') . pack('L<L<', 4, 1);
    push @kv, gguf_str('tokenizer.ggml.eos_token_id') . pack('L<L<', 4, 2);
    push @kv, gguf_str('tokenizer.chat_template') . pack('L<', 8)
              . gguf_str($template) if defined $template;
    my $buf = 'GGUF' . pack('L<Q<Q<', 3, 0, scalar @kv) . join('', @kv);
    $buf .= "\0" x ((32 - length($buf) % 32) % 32);
    open(my $fh, '>:raw', $path) or die "$path: $!";
    print $fh $buf;
    close $fh;
}

# a .jinja file against the stored jinja2 output
my ($rc, $out, $err) = run('--template', "$data/Qwen-Qwen3-0.6B.jinja",
                           '--messages', "$data/convs/tools.json",
                           '--now', '1768473000');
is($rc, 0, 'Qwen3 template renders') or diag $err;
is($out, slurp("$data/expected/Qwen-Qwen3-0.6B__tools.out"),
   'byte-identical to jinja2');

($rc, $out, $err) = run('--template', "$data/openai-gpt-oss-120b.jinja",
                        '--messages', "$data/convs/system.json",
                        '--now', '1768473000');
is($out, slurp("$data/expected/openai-gpt-oss-120b__system.out"),
   'gpt-oss with strftime_now at a fixed instant');

# a GGUF carrying the template; bos_token comes from the vocabulary
my $dir = $t->dir;
write_gguf("$dir/t.gguf", "{{ bos_token }}{% for m in messages %}"
           . "[{{ m.role }}]{{ m.content }}{% endfor %}"
           . "{% if add_generation_prompt %}[assistant]{% endif %}"
           . "{{ eos_token }}");
open(my $fh, '>', "$dir/m.json") or die;
print $fh '[{"role": "user", "content": "hi"}]';
close $fh;
($rc, $out, $err) = run('-m', "$dir/t.gguf", '--messages', "$dir/m.json",
                        '--add-generation-prompt');
is($rc, 0, '-m reads tokenizer.chat_template') or diag $err;
is($out, '<BOS>[user]hi[assistant]<EOS>', 'bos/eos token text from GGUF');

# no template: ChatML, and it says so
write_gguf("$dir/none.gguf", undef);
($rc, $out, $err) = run('-m', "$dir/none.gguf", '--messages', "$dir/m.json");
is($rc, 0, 'GGUF without a template renders');
is($out, "<|im_start|>user\nhi<|im_end|>\n", 'ChatML fallback');
like($err, qr/ChatML/, 'fallback is reported');

# --var and an OpenAI request body as --messages
open($fh, '>', "$dir/req.json") or die;
print $fh '{"model": "x", "messages": [{"role": "user", "content": "q"}]}';
close $fh;
open($fh, '>', "$dir/v.jinja") or die;
print $fh "{{ messages[0].content }}/{{ flag }}/{{ n + 1 }}/{{ model }}";
close $fh;
($rc, $out, $err) = run('--template', "$dir/v.jinja", '--messages',
                        "$dir/req.json", '--var', 'flag=false',
                        '--var', 'n=41');
is($out, 'q/False/42/x', '--var values are JSON, request keys are variables')
    or diag $err;

# raise_exception: exit 1 with the template's message
($rc, $out, $err) = run('--template',
                        "$data/google-gemma-2-2b-it.jinja",
                        '--messages', "$data/convs/system.json");
is($rc, 1, 'raise_exception exits 1');
like($err, qr/System role not supported/, 'with the template message');

# an unsupported construct names itself and its line
open($fh, '>', "$dir/bad.jinja") or die;
print $fh "line 1\n{% generation %}x{% endgeneration %}";
close $fh;
($rc, $out, $err) = run('--template', "$dir/bad.jinja", '--messages',
                        "$dir/m.json");
is($rc, 1, 'unknown tag fails');
like($err, qr/unknown tag 'generation'.*line 2/, 'names tag and line');

($rc, $out) = run('--help');
is($rc, 0, '--help');
like($out, qr/usage: llm-template/, '--help prints usage');

done_testing;

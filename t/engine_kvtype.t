#!/usr/bin/perl
# --kv-type q8_0 and q4_0: the engine serves from a quantized KV cache
# (half and about a quarter of f16's bytes), reuses prefixes from it with
# the same output, says the type in its start-up log, and refuses an
# unknown type by name.  The kernels and the accuracy against an f32
# cache are engine/tests/test_attn.c's.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmEngine;

my $t = LlmTest->new;

my $sys = join ' ', map { "rule $_ is to be kind and brief" } 1 .. 12;
my %pc = (messages => [{ role => 'system', content => $sys },
                       { role => 'user', content => 'hi' }],
          max_tokens => 24, ignore_eos => JSON::PP::true);

my %mib;
for my $type (qw(f16 q8_0 q4_0)) {
    my $sock = $t->start_engine($type, model => LlmEngine::model($t),
                                args => ['--kv-type', $type,
                                         '--kv-mb', '64']);
    my $log = $t->engine_log($type);
    like($log, qr/KV cache: \d+ blocks of \d+ tokens \([\d.]+ MiB, $type\)/,
         "$type: the start-up log names the type");
    ($mib{$type}) = $log =~ /KV cache: (\d+) blocks of/;

    my $p1 = LlmEngine::gen($t, $sock, \%pc);
    my $p2 = LlmEngine::gen($t, $sock, \%pc);
    ok($p1->{done}, "$type: a chat completes") or diag $p1->{out};
    is($p1->{done}{usage}{completion_tokens}, 24, "$type: 24 tokens");
    ok($p2->{started}{cached_tokens} > 32, "$type: the prefix is reused")
        or diag explain $p2->{started};
    is_deeply($p2->{tokens}, $p1->{tokens},
              "$type: the same tokens from the cached prefix");
    $t->stop_engine($type);
}
# the same --kv-mb holds more blocks of a smaller type
ok($mib{q8_0} > 1.8 * $mib{f16}, "q8_0: $mib{q8_0} blocks in 64 MiB, "
   . "f16 $mib{f16}");
ok($mib{q4_0} > 3.0 * $mib{f16}, "q4_0: $mib{q4_0} blocks in 64 MiB");

# an unknown type: usage error, named
my $out = `@{[ $ENV{LLM_ENGINE_WRAP} // "" ]} @{[ $ENV{LLM_ENGINE_BIN} // $t->bin('llm-engine') ]} --model @{[ LlmEngine::model($t) ]} --socket @{[ $t->dir ]}/x.sock --kv-type q5_1 2>&1`;
is($? >> 8, 2, 'an unknown --kv-type: exit 2');
like($out, qr/--kv-type: f16, q8_0, q4_0 or f32, got 'q5_1'/,
     'the message lists the types');

$t->done;

#!/usr/bin/perl
# llm-bench --tokens FILE: decode steps replay given token ids (a served
# stream's, so the engine and llm-bench can be compared on the same
# tokens: bench/served.sh); ids past the vocabulary and unreadable files
# are refused by name, never decoded.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use JSON::PP;
use LlmTest;

my $t = LlmTest->new;
my $bench = $t->bin('llm-bench');
my $model = $t->model;

sub run_bench {
    my (@args) = @_;
    my $out = `$bench -m $model -t 1 -p 4 -n 6 -r 1 --json @args 2>&1`;
    return ($? >> 8, $out);
}

my $f = $t->dir . '/tokens';
open my $fh, '>', $f or die "$f: $!";
print $fh "5, 17\n300 2\n";
close $fh;

my ($rc, $out) = run_bench('--tokens', $f);
is($rc, 0, 'a token file decodes') or diag $out;
my ($json) = $out =~ /^(\{.*\})\s*$/m;
my $j = eval { decode_json($json // '') };
ok($j && $j->{tg_tps} > 0 && $j->{n_gen} == 6, 'tg measured over 6 steps')
    or diag $out;

open $fh, '>', $f or die "$f: $!";
print $fh "5,17,999999999\n";
close $fh;
($rc, $out) = run_bench('--tokens', $f);
isnt($rc, 0, 'an id past the vocabulary is refused');
like($out, qr/token id 999999999 \(number 3 in the file\) is past the vocabulary/,
     'the error names the id and where it is');

($rc, $out) = run_bench('--tokens', $t->dir . '/none');
isnt($rc, 0, 'a missing file is refused');
like($out, qr/--tokens .*none: No such file/, 'the error names the file');

open $fh, '>', $f or die "$f: $!";
print $fh "no ids here\n";
close $fh;
($rc, $out) = run_bench('--tokens', $f);
like($out, qr/no token ids in it/, 'a file without ids is refused');

done_testing;

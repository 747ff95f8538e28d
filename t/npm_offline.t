#!/usr/bin/perl
# The tests that need npm packages (tests/client) when npm cannot reach its
# registry: they skip, each with one line naming the npm error and the
# fix, and every other test file still runs (no BAIL_OUT, no "Further
# testing stopped", also under prove -j); npm ci is tried once per run;
# LLM_NPM_REQUIRED=1 turns the skips into failures of those files only; a
# failure that is not the registry's (a broken lock file) fails instead of
# skipping; tests/client/run.sh skips its SDK part with exit status 77 and
# still runs its curl checks.
#
# All on a copy of t/ and tests/client without node_modules, with
# npm_config_registry=http://127.0.0.1:9/ (nothing listens on the discard
# port: ECONNREFUSED), no retries and an empty npm cache.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use LlmTest;
use LlmNpm;

plan skip_all => 'node and npm are needed (./build.sh test installs them)'
    unless system('command -v node >/dev/null && command -v npm >/dev/null')
           == 0;

my $repo = LlmTest->repo;
my $tmp = tempdir('llm-npm-offline-XXXXXX', TMPDIR => 1,
                  CLEANUP => !$ENV{LLM_TEST_KEEP});
my $copy = "$tmp/repo";
make_path("$copy/tests/client");
system('cp', '-a', "$repo/t", "$copy/t") == 0 or die "cp t: $?";
for my $f (glob "$repo/tests/client/*") {
    next if $f =~ m{/node_modules$};
    system('cp', '-a', $f, "$copy/tests/client/") == 0 or die "cp $f: $?";
}
my $client = "$copy/tests/client";
my $base = LlmNpm::state_base($client);

# Only the npm settings of this test: no retries (npm's default 2 retries
# take about 70 s to give up), an empty cache, an unreachable registry.
local $ENV{npm_config_registry} = 'http://127.0.0.1:9/';
local $ENV{npm_config_fetch_retries} = 0;
local $ENV{npm_config_cache} = "$tmp/npm-cache";
local $ENV{LLM_BUILD} = $LlmTest::BUILD;
delete local $ENV{LLM_NPM_RUN};
delete local $ENV{LLM_NPM_REQUIRED};
delete local $ENV{HARNESS_OPTIONS};

my @npm_t = qw(t/constrained_json.t t/tool_forced.t t/tool_sdk.t);
my @files = ('t/00_load.t', @npm_t);

sub run_in_copy {
    my ($cmd) = @_;
    my $out = `cd '$copy' && $cmd 2>&1`;
    return ($? >> 8, $out);
}

sub clean_state { unlink "$base.lock", "$base.log", "$base.failed" }

# 1. prove -j3: all three npm tests start at once and share one npm ci.
clean_state();
my ($rc, $out) = run_in_copy("prove -j3 @files");
is($rc, 0, 'prove -j3 exits 0 with the registry unreachable') or diag $out;
unlike($out, qr/Bail out|Further testing stopped/i, 'no bail out')
    or diag $out;
like($out, qr/Result: PASS/, 'Result: PASS');
like($out, qr{^t/00_load\.t \.+ ok}m, 'the test without npm ran')
    or diag $out;
for my $f (@npm_t) {
    like($out, qr{^\Q$f\E\ \.+\ skipped:\ needs\ the\ npm\ packages\ of
                  \ tests/client:\ npm\ ci\ in\ \S+\ failed:\ npm\ error
                  \ code\ ECONNREFUSED:\ .*127\.0\.0\.1:9.*the\ registry
                  \ is\ unreachable;\ fix:\ }mx, "$f: skipped, one line with why")
        or diag $out;
}
my $first = () = $out =~ /\(the first attempt of this run\)/g;
is($first, 2, 'one npm ci for the run: two files reuse its answer');
ok(!-e "$client/node_modules/openai", 'nothing was installed');

# 2. The same serially (prove's plain mode bailed out on the first one).
clean_state();
($rc, $out) = run_in_copy("prove @files");
is($rc, 0, 'serial prove exits 0') or diag $out;
my $skips = () = $out =~ /skipped: needs the npm packages/g;
is($skips, 3, 'serial prove: the three npm tests skip');
like($out, qr/Files=4, Tests=[1-9]/, 'every file ran') or diag $out;

# 3. LLM_NPM_REQUIRED=1: the skips become failures of those files only.
clean_state();
($rc, $out) = run_in_copy("LLM_NPM_REQUIRED=1 prove @files");
isnt($rc, 0, 'LLM_NPM_REQUIRED=1: prove fails');
unlike($out, qr/Bail out|Further testing stopped/i, 'no bail out');
like($out, qr{^t/00_load\.t \.+ ok}m, 'LLM_NPM_REQUIRED=1: others run')
    or diag $out;
like($out, qr/Files=4,/, 'every file ran') or diag $out;
my $failed = () = $out =~ /^t\/\w+\.t +\(Wstat: 256 .*Failed: 1\)$/mg;
is($failed, 3, 'the three npm tests fail, one check each')
    or diag $out;
like($out, qr/LLM_NPM_REQUIRED=1: not skipped/, 'and say why');

# 4. An npm failure that is not the registry's is a failure, not a skip:
# a broken package-lock.json (npm: EUSAGE, before any download).
clean_state();
{
    open my $fh, '>>', "$client/package-lock.json" or die $!;
    print $fh "{ broken\n";
    close $fh;
}
($rc, $out) = run_in_copy('prove t/00_load.t t/tool_sdk.t');
isnt($rc, 0, 'broken lock file: prove fails');
like($out, qr/Failed\ test\ 'the\ npm\ packages\ of\ tests\/client:\ npm
              \ ci\ in\ \S+\ failed:\ npm\ error\ code\ EUSAGE:\ .*;
              \ fix\ that/x,
     'broken lock file: a failure naming the npm error') or diag $out;
unlike($out, qr/skipped/, 'and not a skip');
like($out, qr{^t/00_load\.t \.+ ok}m, 'the other file still ran');
system('cp', "$repo/tests/client/package-lock.json", "$client/") == 0
    or die 'cp package-lock.json';

# 5. tests/client/run.sh: exit status 77, one SKIP line, curl checks run.
clean_state();
($rc, $out) = run_in_copy('tests/client/run.sh');
is($rc, 77, 'tests/client/run.sh exits 77 (skipped)') or diag $out;
like($out, qr{^tests/client/run\.sh:\ SKIP:\ npm\ ci\ in\ \S+\ failed:
              \ npm\ error\ code\ ECONNREFUSED:\ .*fix:\ }mx, 'run.sh: one line with why')
    or diag $out;
like($out, qr/^ok - curl: chat completion$/m, 'run.sh: curl checks ran')
    or diag $out;
unlike($out, qr/^not ok/m, 'run.sh: nothing failed');

clean_state();
done_testing();

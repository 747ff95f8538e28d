#!/usr/bin/perl
# llm-engine chooses at start how to hold a model in the memory it may use
# (the audit's item 12 in docs/RELIABILITY.md, docs/STREAMING.md "Choosing at
# start"): resident, streamed experts with a cache that fits, or resident
# without the regrouped (anonymous) copy, logged in one "memory:" line; it
# refuses to start, with what to lower, when not even the KV cache fits; and
# inside a real memory cgroup with a limit below the file's size (v1 or v2, a
# child of this test's own cgroup) it streams, serves and is not OOM-killed.
# That part needs root and a writable memory cgroup, and skips with the reason
# otherwise.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmEngine;

my $t = LlmTest->new;

# 8 layers x 16 experts of the bench shape, Q4_0: 375 MiB, 324 MiB of it
# experts (2.54 MiB a slot, 41 MiB a layer); the rest 51 MiB
my $moe = $t->dir . '/moe.gguf';
system($t->bin('llm-mkmodel'), '-q', '--preset', 'bench-moe', '--layers', 8,
       '--experts', 16, '--experts-used', 2, '--type', 'Q4_0',
       '--threads', 2, '-o', $moe) == 0 or BAIL_OUT('llm-mkmodel failed');
# a dense one: 83 MiB
my $dense = $t->dir . '/dense.gguf';
system($t->bin('llm-mkmodel'), '-q', '--preset', 'bench-moe', '--arch',
       'qwen3', '--layers', 4, '--experts', 0, '--ff', 4096, '--type',
       'Q4_0', '--threads', 2, '-o', $dense) == 0
    or BAIL_OUT('llm-mkmodel failed');
my $file_mib = (-s $moe) / 1048576;

# KV 16 MiB, buffers ~13 MiB, margin 64: 93 MiB besides the weights
my @small = ('--kv-mb', 16, '--ctx', 1024, '--max-batch', 8);
my %req = (messages => [{ role => 'user', content => 'Tell me a story' }],
           max_tokens => 8, ignore_eos => JSON::PP::true);

sub memory_line {
    my ($log) = @_;
    my @l = grep { /llm-engine: memory: / } split /\n/, $log;
    return $l[0] // '';
}

# ---- the plan, with --memory-limit-mb (any machine) ----------------------

my $sock = $t->start_engine('big', model => $moe,
                            args => [@small, '--memory-limit-mb', 4096]);
like(memory_line($t->engine_log('big')),
     qr/memory: resident; allowed 4096\.0 MiB \(--memory-limit-mb\)/,
     'the file fits: resident, with the limit given');
is($t->stop_engine('big'), 0, '  stops cleanly');

$sock = $t->start_engine('lim', model => $moe,
                         args => [@small, '--memory-limit-mb', 256]);
my $line = memory_line($t->engine_log('lim'));
like($line, qr/memory: streamed experts, cache (\d+) MiB .*allowed 256\.0 MiB/,
     'file over the limit: streamed experts') or diag $line;
my ($cache) = $line =~ /cache (\d+) MiB/;
ok(defined $cache && $cache >= 41 && $cache <= 230 - 51 - 93 + 1,
   '  the cache holds a layer and fits what is left')
    or diag $line;
like($line, qr/file 374\.\d MiB \(experts 324\.0 MiB\), regrouped copy \d+/,
     '  the line has the numbers');
like($t->engine_log('lim'), qr/expert cache: $cache MiB, \d+ slots/,
     '  the cache made is the one planned');
my $r = LlmEngine::gen($t, $sock, \%req);
is($r->{rc}, 0, '  serves a request');
is(scalar @{ $r->{tokens} }, 8, '  8 tokens');
is($t->stop_engine('lim'), 0, '  stops cleanly');

$sock = $t->start_engine('dense', model => $dense,
                         args => [@small, '--memory-limit-mb', 150]);
like(memory_line($t->engine_log('dense')),
     qr/memory: resident without regrouping; allowed 150\.0 MiB/,
     'dense file over the limit: resident without regrouping');
$r = LlmEngine::gen($t, $sock, \%req);
is($r->{rc}, 0, '  serves a request');
is(scalar @{ $r->{tokens} }, 8, '  8 tokens');
is($t->stop_engine('dense'), 0, '  stops cleanly');

my $x = $t->dir . '/x.sock';
my $out = `$LlmTest::BUILD/bin/llm-engine --model $moe --socket $x --threads 1 @small --memory-limit-mb 64 2>&1`;
is($? >> 8, 1, 'not even the KV cache and buffers fit: exits 1');
like($out, qr/memory: the KV cache \(16\.0 MiB\).* over 90% of the 64\.0 MiB allowed; lower --kv-mb/,
     '  saying what to lower');
ok(!-e $x, '  without listening');

# ---- a real memory cgroup below the file's size --------------------------

# A child of this process's own memory cgroup with memory limit $bytes:
# (dir, kind) or (undef, why not).
sub make_cgroup {
    my ($bytes) = @_;
    return (undef, 'not root') if $> != 0;
    open my $fh, '<', '/proc/self/cgroup' or return (undef, "/proc: $!");
    my @l = <$fh>;
    chomp @l;
    my ($v1) = map { (split /:/, $_, 3)[2] }
               grep { ((split /:/, $_, 3)[1] // '') =~ /(^|,)memory(,|$)/ }
               @l;
    my ($v2) = map { substr $_, 3 } grep { /^0::/ } @l;
    my $name = "llm-test-memlimit.$$";
    if (defined $v1 && -d '/sys/fs/cgroup/memory') {
        (my $dir = "/sys/fs/cgroup/memory$v1") =~ s{/$}{};
        $dir .= "/$name";
        mkdir $dir or return (undef, "mkdir $dir: $!");
        if (open my $w, '>', "$dir/memory.limit_in_bytes") {
            return ($dir, 'v1') if print $w $bytes and close $w;
        }
        my $e = "$!";
        rmdir $dir;
        return (undef, "cgroup v1 limit in $dir: $e");
    }
    if (defined $v2 && -f '/sys/fs/cgroup/cgroup.controllers') {
        (my $dir = "/sys/fs/cgroup$v2") =~ s{/$}{};
        $dir .= "/$name";
        mkdir $dir or return (undef, "mkdir $dir: $!");
        if (-f "$dir/memory.max" && open my $w, '>', "$dir/memory.max") {
            return ($dir, 'v2') if print $w $bytes and close $w;
        }
        rmdir $dir;
        return (undef, "no memory controller in cgroup v2 $dir (the "
                . "parent's cgroup.subtree_control lacks +memory)");
    }
    return (undef, 'no memory cgroup (v1 controller or v2) mounted');
}

# a limit of 256 MiB: the file is 375 MiB, its regrouped copy 369 MiB of
# anonymous memory (which the engine wrote before this plan, and was
# OOM-killed for)
my ($cg, $kind) = make_cgroup(256 << 20);
SKIP: {
    skip "memory cgroup: $kind", 7 unless $cg;
    diag "cgroup $kind $cg, limit 256 MiB, file ${\ int $file_mib} MiB";
    my $wrap = $t->dir . '/incg.sh';
    open my $w, '>', $wrap or die;
    print $w "#!/bin/sh\necho \$\$ > '$cg/cgroup.procs' || exit 97\n"
             . "exec \"\$@\"\n";
    close $w;
    chmod 0755, $wrap;
    local $ENV{LLM_ENGINE_WRAP} = join ' ', $wrap,
                                  $ENV{LLM_ENGINE_WRAP} // ();
    $sock = $t->start_engine('cg', model => $moe, args => [@small]);
    my $pid = $t->engine_pid('cg');
    my $in = LlmTest::_slurp("/proc/$pid/cgroup");
    like($in, qr{/llm-test-memlimit\.$$\n}, 'the engine runs in the test cgroup');
    $line = memory_line($t->engine_log('cg'));
    like($line, qr/memory: streamed experts, cache \d+ MiB/,
         'detected limit below the file: streamed experts') or diag $line;
    like($line, qr/allowed 256\.0 MiB \(cgroup $kind limit 256\.0 MiB at \Q$cg\E/,
         '  from the cgroup\'s limit');
    $r = LlmEngine::gen($t, $sock, \%req);
    is($r->{rc}, 0, '  serves a request');
    is(scalar @{ $r->{tokens} }, 8, '  8 tokens');
    my $ev = LlmTest::_slurp($kind eq 'v1' ? "$cg/memory.oom_control"
                                           : "$cg/memory.events");
    my ($kills) = $ev =~ /oom_kill (\d+)/;
    ok(!$kills, '  no OOM kill in the cgroup') or diag $ev;
    is($t->stop_engine('cg'), 0, '  drains and exits 0 (not killed)');
    my $peak = LlmTest::_slurp($kind eq 'v1' ? "$cg/memory.max_usage_in_bytes"
                                             : "$cg/memory.peak");
    diag "cgroup peak usage: $peak" if $peak ne '';
}
rmdir $cg if $cg;

$t->done;

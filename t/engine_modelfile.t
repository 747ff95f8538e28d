#!/usr/bin/perl
# The model file changed under a running llm-engine (the audit's item 9 in
# docs/RELIABILITY.md, docs/DEPLOY.md "Replacing the model file"): a new file
# renamed over the path leaves the engine serving the one it loaded (the
# mapping stays valid), logged once; truncated (as `cp` does first) or
# overwritten in place, the next request gets an Error naming the cause, and
# the engine drains and exits with code 3 -- never a death by SIGBUS.

use strict;
use warnings;
use lib 't/lib';
use File::Copy qw(copy);
use Test::More;
use LlmTest;
use LlmEngine;

my $t = LlmTest->new;
my $src = LlmEngine::model($t);
my %req = (messages => [{ role => 'user', content => 'Hello there' }],
           max_tokens => 6, ignore_eos => JSON::PP::true);

sub fresh {
    my ($name) = @_;
    my $p = $t->dir . "/$name.gguf";
    copy($src, $p) or die "copy: $!";
    return $p;
}

# The engine's exit status once it exits by itself (kill 0: no signal).
sub exit_of {
    my ($name) = @_;
    return $t->stop_engine($name, 0);
}

# ---- renamed over: keeps serving the file it loaded -----------------------

my $live = fresh('live');
my $sock = $t->start_engine('a', model => $live);
my $r0 = LlmEngine::gen($t, $sock, \%req);
is($r0->{rc}, 0, 'serves before the change');
copy($src, "$live.new") or die;
rename "$live.new", $live or die "rename: $!";
my $r1 = LlmEngine::gen($t, $sock, \%req);
is($r1->{rc}, 0, 'renamed over: still serves');
is_deeply($r1->{tokens}, $r0->{tokens}, '  the same tokens');
unlink $live;
my $r2 = LlmEngine::gen($t, $sock, \%req);
is($r2->{rc}, 0, 'path removed: still serves');
my @renamed = $t->engine_log('a') =~ /now names another file/g;
is(scalar @renamed, 1, '  logged once');
is($t->stop_engine('a'), 0, '  drains and exits 0');

# ---- truncated in place ---------------------------------------------------

for my $size (0, int((-s $src) / 2)) {
    my $p = fresh("trunc$size");
    $sock = $t->start_engine("t$size", model => $p);
    truncate $p, $size or die "truncate: $!";
    my $r = LlmEngine::gen($t, $sock, \%req);
    isnt($r->{rc}, 0, "truncated to $size: the request fails");
    # the step's check (an Error event), or a fault on the mapping first
    # (the guard's exit; the connection closes)
    if ($r->{error}) {
        like($r->{error}{message}, qr/model file \Q$p\E was truncated while mapped .*DEPLOY\.md/,
             '  with an Error naming the cause');
    } else {
        like($r->{out}, qr/closed the connection/, '  connection closed');
    }
    my $st = exit_of("t$size");
    is($st & 127, 0, '  the engine is not killed by a signal')
        or diag "signal " . ($st & 127);
    is($st >> 8, 3, '  it exits with code 3');
    like(LlmTest::_slurp($t->dir . "/engine-t$size.log"),
         qr/\[error\] llm-engine: model file \Q$p\E was truncated .*while mapped.*DEPLOY\.md/,
         '  and logs one clear line');
}

# ---- overwritten in place, same size --------------------------------------

my $p = fresh('over');
utime time - 3600, time - 3600, $p or die;     # a distinct mtime after
$sock = $t->start_engine('o', model => $p);
{
    open my $fh, '+<', $p or die;
    binmode $fh;
    my $all = do { local $/; <$fh> };
    seek $fh, 0, 0;
    print $fh $all;
    close $fh or die;
}
my $r = LlmEngine::gen($t, $sock, \%req);
isnt($r->{rc}, 0, 'overwritten in place: the request fails');
like($r->{error}{message} // '', qr/was overwritten in place while mapped/,
     '  with an Error naming the cause');
my $st = exit_of('o');
is($st, 3 << 8, '  the engine exits with code 3');

$t->done;

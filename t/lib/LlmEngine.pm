package LlmEngine;

# Engine-only helpers for t/engine_*.t: run build/bin/llm-client against an
# engine started by LlmTest, collect its JSON-line events, run many clients
# at once, read the engine's stats.
#
#   my $t = LlmTest->new;
#   my $sock = $t->start_engine('a', model => LlmEngine::model($t));
#   my $r = LlmEngine::gen($t, $sock, {messages => [...], max_tokens => 8});
#   $r->{rc}, $r->{events}, $r->{text}, $r->{tokens}, $r->{done}, $r->{error}
#
# Core Perl only.

use strict;
use warnings;

use File::Temp qw(tempfile);
use JSON::PP;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(sleep time);

our $JSON = JSON::PP->new->canonical->allow_nonref;

# The model the engine tests run on: $LLM_TEST_MODEL, else the tiny
# generated one (LlmTest makes it with llm-mkmodel).
sub model {
    my ($t) = @_;
    return $ENV{LLM_TEST_MODEL} if $ENV{LLM_TEST_MODEL};
    return $t->model;
}

sub client_bin { $_[0]->bin('llm-client') }

# Parse llm-client output into a result hash.
sub parse {
    my ($rc, $out) = @_;
    my @ev;
    for my $l (split /\n/, $out) {
        next unless $l =~ /^\{/;
        push @ev, eval { $JSON->decode($l) } // { event => 'garbage',
                                                  line => $l };
    }
    my %r = (rc => $rc, events => \@ev, out => $out);
    my (%text, %tokens);
    for my $e (@ev) {
        if ($e->{event} eq 'delta') {
            $text{$e->{index}} .= $e->{text};
            push @{ $tokens{$e->{index}} }, @{ $e->{tokens} };
        }
        $r{done} = $e if $e->{event} eq 'done';
        $r{error} = $e if $e->{event} eq 'error';
        $r{started} = $e if $e->{event} eq 'started';
        $r{info} = $e if $e->{event} eq 'info';
    }
    $r{text} = $text{0} // '';
    $r{tokens} = $tokens{0} // [];
    $r{texts} = \%text;
    $r{all_tokens} = \%tokens;
    return \%r;
}

sub _run {
    my (@cmd) = @_;
    my $pid = open(my $fh, '-|') // die "fork: $!";
    if ($pid == 0) {
        open STDERR, '>&', \*STDOUT;
        exec @cmd or die "exec: $!";
    }
    local $/;
    my $out = <$fh> // '';
    close $fh;
    return ($? >> 8, $out);
}

# One request (a hash for Generate, or extra llm-client flags).
sub gen {
    my ($t, $sock, $req, @flags) = @_;
    my @cmd = (client_bin($t), '--socket', $sock, @flags);
    push @cmd, $JSON->encode($req) if defined $req;
    return parse(_run(@cmd));
}

sub info {
    my ($t, $sock) = @_;
    my $r = gen($t, $sock, undef, '--info');
    return $r->{info};
}

# Start a client in the background; returns a handle for wait_clients.
sub spawn {
    my ($t, $sock, $req, @flags) = @_;
    my ($fh, $file) = tempfile(DIR => $t->dir, SUFFIX => '.out');
    close $fh;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', $file or die;
        open STDERR, '>&', \*STDOUT;
        my @cmd = (client_bin($t), '--socket', $sock, @flags);
        push @cmd, $JSON->encode($req) if defined $req;
        exec @cmd or die "exec: $!";
    }
    return { pid => $pid, file => $file };
}

# Wait for spawned clients; returns their results in order.
sub wait_clients {
    my ($t, @h) = @_;
    my @r;
    for my $h (@h) {
        waitpid($h->{pid}, 0);
        my $rc = $? >> 8;
        open my $fh, '<', $h->{file} or die;
        local $/;
        my $out = <$fh> // '';
        close $fh;
        push @r, parse($rc, $out);
    }
    return @r;
}

# Poll the engine's stats until cond(stats) holds or secs pass.
sub wait_stats {
    my ($t, $sock, $cond, $secs) = @_;
    my $deadline = time + ($secs // 10);
    my $st;
    while (time < $deadline) {
        my $i = info($t, $sock);
        $st = $i->{stats} if $i;
        return $st if $st && $cond->($st);
        sleep 0.05;
    }
    return $st;
}

# A frame: 4-byte big-endian length + body, as hex for llm-client --raw.
sub frame_hex {
    my ($body, $len) = @_;
    $len //= length $body;
    return unpack('H*', pack('N', $len) . $body);
}

# Enough protobuf to write requests by hand (for raw-frame tests).
sub pb_varint {
    my ($v) = @_;
    my $s = '';
    while ($v >= 0x80) { $s .= chr(($v & 0x7f) | 0x80); $v >>= 7 }
    return $s . chr($v);
}
sub pb_bytes { my ($f, $d) = @_; pb_varint($f << 3 | 2) . pb_varint(length $d) . $d }
sub pb_uint { my ($f, $v) = @_; pb_varint($f << 3) . pb_varint($v) }

# A Request{generate: completion of PROMPT, MAX tokens, ignore_eos}, with
# EXTRA encoded Sampling fields appended.
sub completion_body {
    my ($prompt, $max, $extra) = @_;
    my $sampling = pb_uint(1, $max) . pb_uint(16, 1) . ($extra // '');
    my $gen = pb_bytes(5, $prompt) . pb_uint(6, 1) . pb_bytes(7, $sampling);
    return pb_bytes(1, $gen);
}

# Request{info: {}}
sub info_body { pb_bytes(2, '') }

# Preemption: n long greedy streams (max_tokens 200) started together on
# an engine with a KV cache too small for them all, the first two also
# run alone before.  Returns (the streams' results, the two alone's
# tokens); preempted streams must recompute to the same tokens.
sub preempt_run {
    my ($t, $sock, $n) = @_;
    my @long = map { { messages => [{ role => 'user',
                                      content => "long stream $_" }],
                       max_tokens => 200, ignore_eos => JSON::PP::true } }
               1 .. $n;
    my @want = map { gen($t, $sock, $_)->{tokens} } @long[0, 1];
    my $gate = sprintf '%.3f', Time::HiRes::time() + 2;
    my @limit = $ENV{LLM_ENGINE_WRAP} ? ('--timeout', 900) : ();
    my @h = map { spawn($t, $sock, $_, '--start-at', $gate, @limit) } @long;
    return ([ wait_clients($t, @h) ], \@want);
}

1;

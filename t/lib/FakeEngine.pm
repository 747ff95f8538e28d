package FakeEngine;

# A fake llm-engine for fault injection only (the real engine serves every
# other test): listens on a Unix socket, answers each Generate request
# with a scripted event sequence, written the way the script says (whole,
# one byte per write, ...), and InfoRequest with a small InfoResponse.
#
#   my $fe = FakeEngine->start("$dir/fake.sock", mode => 'split');
#   ...
#   $fe->stop;
#
# A test with an engine of its own passes serve => sub { my ($c) = @_; ... }
# (called with each accepted connection, in a process of its own) instead
# of a mode, and uses the frame helpers (frame, field_bytes, ev_info,
# ev_started, ev_done, read_n) to speak the protocol.
#
# Modes: ok, split (one byte per write), garbage (an undecodable frame
# first), close_mid (two deltas, then close), overloaded (Error
# OVERLOADED), huge (a frame length over any limit), slow (Started, then
# the first token after `delay` seconds), error_mid (two deltas, then an
# INTERNAL error event), partial_internal (one delta, then INTERNAL),
# tools (a tool call), drip (`count` deltas `interval` seconds apart),
# stall_after_token (one delta, then `delay` seconds of silence, then the
# rest), overloaded_slow (Error OVERLOADED after `delay` seconds),
# badtext (invalid UTF-8 in a delta, a token's bytes and the model name,
# a fingerprint with a quote and a field of its own), baderror (an Error
# whose message is invalid UTF-8), queued_die (Queued, then the engine
# dies after `delay` seconds).  While it waits, a fake answers Ping.
# Each connection counts its Generate requests into `count_file`, if set.
#
# Core Perl only; protobuf is written by hand (varints and
# length-delimited fields are all the protocol needs).

use strict;
use warnings;

use IO::Socket::UNIX;
use POSIX qw(:sys_wait_h);
use Socket qw(SOCK_STREAM);
use Time::HiRes qw(sleep);

sub varint {
    my ($n) = @_;
    my $s = '';
    while ($n >= 0x80) {
        $s .= chr(($n & 0x7f) | 0x80);
        $n >>= 7;
    }
    return $s . chr($n);
}

sub field_varint { my ($f, $v) = @_; varint($f << 3) . varint($v) }
sub field_bytes { my ($f, $b) = @_; varint(($f << 3) | 2) . varint(length $b) . $b }

sub frame { my ($msg) = @_; pack('N', length $msg) . $msg }

# Event builders (field numbers from proto/llm.proto).
sub ev_started { frame(field_bytes(2, field_varint(1, $_[0] // 5))) }
sub ev_queued { frame(field_bytes(1, field_varint(1, $_[0] // 0))) }
sub ev_delta { frame(field_bytes(3, field_bytes(2, $_[0]))) }

sub ev_tool {
    my ($call, $id, $name, $args) = @_;
    my $m = field_varint(2, $call);
    $m .= field_bytes(3, $id) if length($id // '');
    $m .= field_bytes(4, $name) if length($name // '');
    $m .= field_bytes(5, $args);
    return frame(field_bytes(4, $m));
}

sub ev_done {
    my ($finish, $prompt, $completion) = @_;
    my $choice = field_bytes(1, field_varint(2, $finish // 1));
    my $usage = field_bytes(2, field_varint(1, $prompt // 5)
                               . field_varint(2, $completion // 2));
    return frame(field_bytes(5, $choice . $usage . field_bytes(4, 'fake')
                                . field_bytes(5, 'fp_fake')));
}

sub ev_error {
    my ($code, $msg) = @_;
    return frame(field_bytes(6, field_varint(1, $code)
                                . field_bytes(2, $msg)));
}

# A Delta whose one token has logprob -0.5 and the given bytes.
sub ev_delta_lp {
    my ($text, $tokbytes) = @_;
    my $lp = field_varint(1, 7) . field_bytes(2, $tokbytes)
             . varint((3 << 3) | 5) . pack('f<', -0.5);
    return frame(field_bytes(3, field_bytes(2, $text) . field_varint(3, 7)
                                . field_bytes(4, $lp)));
}

sub ev_done_fp {
    my ($fp, $model) = @_;
    my $choice = field_bytes(1, field_varint(2, 1));
    my $usage = field_bytes(2, field_varint(1, 5) . field_varint(2, 2));
    return frame(field_bytes(5, $choice . $usage . field_bytes(4, $model)
                                . field_bytes(5, $fp)));
}

sub ev_pong { frame(field_bytes(10, '')) }

# Sleeps secs while answering Ping with Pong (the gateway pings while it
# waits for a first token); returns early, false, if the peer closed.
sub wait_pinged {
    my ($c, $secs) = @_;
    my $end = Time::HiRes::time() + $secs;
    my $buf = '';
    while ((my $left = $end - Time::HiRes::time()) > 0) {
        my $rin = '';
        vec($rin, fileno($c), 1) = 1;
        next unless select(my $rout = $rin, undef, undef, $left);
        my $n = sysread($c, $buf, 4096, length $buf);
        return 0 unless $n;
        while (length $buf >= 4) {
            my $len = unpack('N', $buf);
            last if length $buf < 4 + $len;
            my $req = substr($buf, 4, $len);
            substr($buf, 0, 4 + $len, '');
            syswrite($c, ev_pong()) if substr($req, 0, 1) eq "\x32";
        }
    }
    return 1;
}

# queued: requests_queued in its stats (a busy engine, for balancers)
sub ev_info {
    my ($model, $queued) = @_;
    my $stats = $queued ? field_bytes(15, field_varint(3, $queued)) : '';
    return frame(field_bytes(7, field_bytes(1, $model) . field_bytes(5, 'fake0')
                                . field_bytes(7, 'ready') . $stats));
}

sub start {
    my ($class, $path, %o) = @_;
    unlink $path;
    my $l = IO::Socket::UNIX->new(Local => $path, Type => SOCK_STREAM,
                                  Listen => 128) or die "listen $path: $!";
    chmod 0777, $path;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        $SIG{CHLD} = 'IGNORE';
        while (my $c = $l->accept) {
            my $p = fork;
            if (defined $p && $p == 0) {
                close $l;
                $o{serve} ? $o{serve}->($c) : serve($c, %o);
                POSIX::_exit(0);     # no destructors of the parent's objects
            }
            close $c;
        }
        POSIX::_exit(0);     # no destructors of the parent's objects
    }
    close $l;
    return bless { pid => $pid, path => $path, %o }, $class;
}

sub stop {
    my ($self) = @_;
    kill 'KILL', $self->{pid};
    waitpid($self->{pid}, 0);
    unlink $self->{path};
}

sub read_n {
    my ($c, $n) = @_;
    my $buf = '';
    while (length $buf < $n) {
        my $r = sysread($c, $buf, $n - length $buf, length $buf);
        return undef unless $r;
    }
    return $buf;
}

sub serve {
    my ($c, %o) = @_;
    my $mode = $o{mode} // 'ok';
    while (1) {
        my $h = read_n($c, 4) // return;
        my $len = unpack('N', $h);
        my $req = $len ? read_n($c, $len) // return : '';
        if (substr($req, 0, 1) eq "\x12") {
            syswrite($c, ev_info($o{model} // 'fake', $o{queued}));
            next;
        }
        next if substr($req, 0, 1) eq "\x2a";    # Cancel: nothing runs
        next if substr($req, 0, 1) eq "\x32";    # Ping: nothing runs
        if ($o{count_file} && open(my $cf, '>>', $o{count_file})) {
            print $cf "$mode\n";
            close $cf;
        }
        my $ok = ev_started(5) . ev_delta('Hello') . ev_delta(' world')
            . ev_done(1, 5, 2);
        if ($mode eq 'ok') {
            syswrite($c, $ok);
        } elsif ($mode eq 'split') {
            for my $ch (split //, $ok) {
                syswrite($c, $ch);
                sleep 0.002;
            }
        } elsif ($mode eq 'garbage') {
            syswrite($c, frame("\xff\xff\xff\xff\x0f\x01"));
            return;
        } elsif ($mode eq 'huge') {
            syswrite($c, pack('N', 0x7fffffff) . 'xxxx');
            return;
        } elsif ($mode eq 'close_mid') {
            syswrite($c, ev_started(5) . ev_delta('Hello') . ev_delta(' wor'));
            sleep 0.2;
            return;
        } elsif ($mode eq 'error_mid') {
            syswrite($c, ev_started(5) . ev_delta('Hello')
                         . ev_error(5, 'the engine broke'));
        } elsif ($mode eq 'partial_internal') {
            syswrite($c, ev_started(5) . ev_delta('Hel')
                         . ev_error(5, 'lost the expert cache'));
        } elsif ($mode eq 'overloaded') {
            syswrite($c, ev_queued(3) . ev_error(4, 'queue is full'));
        } elsif ($mode eq 'slow') {
            syswrite($c, ev_started(5));
            wait_pinged($c, $o{delay} // 1) or return;
            syswrite($c, ev_delta('late') . ev_done(1, 5, 1));
        } elsif ($mode eq 'drip') {
            syswrite($c, ev_started(5));
            for my $i (1 .. ($o{count} // 100)) {
                sleep($o{interval} // 0.01);
                syswrite($c, ev_delta("t$i ")) or return;
            }
            syswrite($c, ev_done(1, 5, $o{count} // 100));
        } elsif ($mode eq 'stall_after_token') {
            syswrite($c, ev_started(5) . ev_delta('Hel'));
            sleep($o{delay} // 1);
            syswrite($c, ev_delta('lo') . ev_done(1, 5, 2));
        } elsif ($mode eq 'overloaded_slow') {
            sleep($o{delay} // 0.3);
            syswrite($c, ev_queued(3) . ev_error(4, 'queue is full'));
        } elsif ($mode eq 'queued_die') {
            syswrite($c, ev_queued(2));
            wait_pinged($c, $o{delay} // 0.1);
            return;
        } elsif ($mode eq 'badtext') {
            syswrite($c, ev_started(5) . ev_delta("ok \xff\xfe \xc3")
                         . ev_delta_lp("a\xc3", "a\xc3")
                         . ev_done_fp('fp_x","injected":"1', "m\xe9\xff"));
        } elsif ($mode eq 'baderror') {
            syswrite($c, ev_started(5) . ev_error(2, "bad \xc3\x28 \xed\xa0\x80"));
        } elsif ($mode eq 'tools') {
            syswrite($c, ev_started(5)
                         . ev_tool(0, 'call_1', 'get_weather', '{"city":')
                         . ev_tool(0, '', '', '"Paris"}')
                         . ev_done(3, 5, 7));
        }
    }
}

1;

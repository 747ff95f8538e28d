package LlmFrames;

# Speak frames to an engine directly, for tests that need what llm-client
# cannot do: several requests on one connection (Cancel, keepalive), not
# reading, interleaving two connections.  Enough protobuf to decode the
# events the tests look at.
#
#   my $c = LlmFrames::open_conn($sock);
#   LlmFrames::put($c, LlmEngine::completion_body('hi', 100));
#   my $ev = LlmFrames::read_event($c, 10);   # undef on EOF or timeout
#   $ev->{kind} eq 'delta' and $ev->{tokens} ...
#
# Core Perl only.

use strict;
use warnings;

use IO::Select;
use IO::Socket::UNIX;
use Time::HiRes qw(time);

my @KINDS = (undef, qw(queued started delta tool_call done error info
                       tokenize detokenize pong));
my @CODES = qw(none context_length_exceeded invalid_request model_not_found
               overloaded internal bad_frame shutting_down cancelled);

sub open_conn {
    my ($path) = @_;
    return IO::Socket::UNIX->new(Peer => $path) // die "connect $path: $!";
}

# Request bodies.
sub cancel_body { LlmEngine::pb_bytes(5, '') }
sub info_body { LlmEngine::pb_bytes(2, '') }
sub ping_body { LlmEngine::pb_bytes(6, '') }

sub frame { pack('N', length $_[0]) . $_[0] }

sub put {
    my ($c, $body) = @_;
    my $f = frame($body);
    my $off = 0;
    while ($off < length $f) {
        my $n = syswrite($c, $f, length($f) - $off, $off);
        die "write: $!" unless defined $n;
        $off += $n;
    }
    return;
}

# Read exactly N bytes, waiting up to SECS in all; undef on EOF/timeout.
sub _read_n {
    my ($c, $n, $deadline) = @_;
    my $buf = '';
    my $sel = IO::Select->new($c);
    while (length $buf < $n) {
        my $left = $deadline - time;
        return undef if $left <= 0 || !$sel->can_read($left);
        my $r = sysread($c, $buf, $n - length $buf, length $buf);
        return undef unless $r;
    }
    return $buf;
}

# One frame's body, or undef.
sub read_frame {
    my ($c, $secs) = @_;
    my $deadline = time + ($secs // 10);
    my $hdr = _read_n($c, 4, $deadline) // return undef;
    my $len = unpack 'N', $hdr;
    return '' if $len == 0;
    return _read_n($c, $len, $deadline);
}

sub read_event {
    my ($c, $secs) = @_;
    my $b = read_frame($c, $secs);
    return defined $b ? decode_event($b) : undef;
}

# Protobuf: a list of [field, wire type, value].
sub _varint {
    my ($s, $pos) = @_;
    my ($v, $shift) = (0, 0);
    while ($$pos < length $s) {
        my $b = ord substr($s, $$pos++, 1);
        $v |= ($b & 0x7f) << $shift;
        return $v unless $b & 0x80;
        $shift += 7;
    }
    die "truncated varint";
}

sub pb_fields {
    my ($s) = @_;
    my ($pos, @f) = (0);
    while ($pos < length $s) {
        my $key = _varint($s, \$pos);
        my ($field, $wt) = ($key >> 3, $key & 7);
        my $v;
        if ($wt == 0) {
            $v = _varint($s, \$pos);
        } elsif ($wt == 2) {
            my $n = _varint($s, \$pos);
            $v = substr($s, $pos, $n);
            $pos += $n;
        } elsif ($wt == 1) {
            $v = substr($s, $pos, 8);
            $pos += 8;
        } elsif ($wt == 5) {
            $v = substr($s, $pos, 4);
            $pos += 4;
        } else {
            die "wire type $wt";
        }
        push @f, [$field, $wt, $v];
    }
    return @f;
}

sub _usage {
    my %u = (prompt_tokens => 0, completion_tokens => 0, cached_tokens => 0);
    for my $f (pb_fields($_[0])) {
        $u{prompt_tokens} = $f->[2] if $f->[0] == 1;
        $u{completion_tokens} = $f->[2] if $f->[0] == 2;
        $u{cached_tokens} = $f->[2] if $f->[0] == 3;
    }
    return \%u;
}

sub _int32 { my $v = $_[0]; $v >= 2**63 ? $v - 2**64 : $v }

# An Event as a hash: kind, and for the kinds the tests read: delta
# (index, tokens, text), error (code, message, usage), done (usage),
# started (prompt_tokens, cached_tokens), queued (position).
sub decode_event {
    my ($b) = @_;
    my ($top) = pb_fields($b);
    return { kind => 'empty' } unless $top;
    my %e = (kind => $KINDS[$top->[0]] // "field$top->[0]");
    my @f = pb_fields($top->[2]);
    if ($e{kind} eq 'delta') {
        $e{tokens} = [];
        $e{index} = 0;
        $e{text} = '';
        for my $f (@f) {
            $e{index} = $f->[2] if $f->[0] == 1;
            $e{text} .= $f->[2] if $f->[0] == 2;
            next unless $f->[0] == 3;
            if ($f->[1] == 2) {
                my $pos = 0;
                push @{ $e{tokens} }, _int32(_varint($f->[2], \$pos))
                    while $pos < length $f->[2];
            } else {
                push @{ $e{tokens} }, _int32($f->[2]);
            }
        }
    } elsif ($e{kind} eq 'error') {
        $e{code} = 'none';
        $e{message} = '';
        for my $f (@f) {
            $e{code} = $CODES[$f->[2]] // $f->[2] if $f->[0] == 1;
            $e{message} = $f->[2] if $f->[0] == 2;
            $e{usage} = _usage($f->[2]) if $f->[0] == 4;
        }
    } elsif ($e{kind} eq 'done') {
        for my $f (@f) {
            $e{usage} = _usage($f->[2]) if $f->[0] == 2;
        }
    } elsif ($e{kind} eq 'started') {
        $e{prompt_tokens} = 0;
        $e{cached_tokens} = 0;
        for my $f (@f) {
            $e{prompt_tokens} = $f->[2] if $f->[0] == 1;
            $e{cached_tokens} = $f->[2] if $f->[0] == 2;
        }
    } elsif ($e{kind} eq 'queued') {
        $e{position} = 0;
        for my $f (@f) {
            $e{position} = $f->[2] if $f->[0] == 1;
        }
    }
    return \%e;
}

# Read events until a terminal one (done, error, info, tokenize,
# detokenize); returns them all (the last is undef on EOF/timeout).
sub read_until_end {
    my ($c, $secs) = @_;
    my @ev;
    for (;;) {
        my $e = read_event($c, $secs);
        push @ev, $e;
        return @ev if !$e || $e->{kind} =~ /^(?:done|error|info|tokenize|detokenize)$/;
    }
}

# A process's resident memory in kB (/proc/PID/status VmRSS).
sub rss_kb {
    my ($pid) = @_;
    open my $fh, '<', "/proc/$pid/status" or return undef;
    while (<$fh>) {
        return $1 if /^VmRSS:\s+(\d+)/;
    }
    return undef;
}

1;

#!/usr/bin/perl
# A huge prompt is prepared (rendered, tokenized) off the loop that feeds
# the running streams: while another connection's multi-megabyte prompt is
# tokenized, a running stream keeps getting its tokens.  Measured as
# counts: the stream's deltas between the moment the big request is sent
# and its answer.  A connection that closes, or Cancels, while its prompt
# is prepared leaves nothing behind.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use IO::Select;
use LlmTest;
use LlmEngine;
use LlmFrames;

my $t = LlmTest->new;
# a long context: the stream must outlast both preparations.  --ctx goes
# up to the trained length only, so the tiny model trained on 16384
my $model = $t->dir . '/tiny-16k.gguf';
system($t->bin('llm-mkmodel'), '--preset', 'tiny', '--type', 'Q8_0',
       '--seed', '1', '--ctx', '16384', '-q', '-o', $model) == 0
    or BAIL_OUT('llm-mkmodel failed');
my $sock = $t->start_engine('a', model => $model, args => ['--ctx', '16384']);

# frames from a non-blocking socket, as they come
sub pump {
    my ($c, $buf, $out) = @_;
    my $n = sysread($c, $$buf, 65536, length $$buf);
    return 0 unless $n;
    while (length $$buf >= 4) {
        my $len = unpack 'N', $$buf;
        last if length $$buf < 4 + $len;
        push @$out, LlmFrames::decode_event(substr($$buf, 4, $len));
        substr($$buf, 0, 4 + $len) = '';
    }
    return 1;
}

sub ntok { my $n = 0; $n += @{ $_->{tokens} } for grep { $_->{kind} eq 'delta' } @_; $n }

# ~3.5 MB of prompt: too long for the context, so its answer is an Error
# once it is tokenized
my $big = LlmEngine::completion_body(join(' ', map { "w$_" } 1 .. 500_000),
                                     4);
ok(length $big > 3_000_000, 'a prompt of ' . length($big) . ' bytes');

my $s = LlmFrames::open_conn($sock);
LlmFrames::put($s, LlmEngine::completion_body('a running stream', 0));
my ($sbuf, @sev) = ('');
$s->blocking(0);
my $sel = IO::Select->new($s);
while (ntok(@sev) < 5 && $sel->can_read(10)) {
    pump($s, \$sbuf, \@sev) or last;
}
ok(ntok(@sev) >= 5, 'the stream runs');

my $h = LlmFrames::open_conn($sock);
$h->blocking(0);
my $frame = LlmFrames::frame($big);
my ($off, $sent_at, $h_at, $hbuf, @hev) = (0, undef, undef, '');
my $rsel = IO::Select->new($s, $h);
my $wsel = IO::Select->new($h);
while (!@hev) {
    my ($r, $w) = IO::Select->select($rsel, $off < length $frame ? $wsel
                                                                 : undef,
                                     undef, 30);
    last unless $r || $w;
    for my $fh (@{ $w // [] }) {
        my $n = syswrite($h, $frame, 262144, $off);
        $off += $n if $n;
        $sent_at = ntok(@sev) if $off == length $frame;
    }
    for my $fh (sort { ($a == $s) <=> ($b == $s) } @{ $r // [] }) {
        if ($fh == $s) {
            pump($s, \$sbuf, \@sev) or last;
        } else {
            $h_at //= ntok(@sev);
            pump($h, \$hbuf, \@hev) or last;
        }
    }
}
my $during = defined $sent_at && defined $h_at ? $h_at - $sent_at : -1;
is($hev[0] && $hev[0]{kind}, 'error', 'the huge prompt is answered');
is($hev[0] && $hev[0]{code}, 'context_length_exceeded',
   'once tokenized (context length exceeded)');
ok($during >= 20, "the running stream got $during tokens while the huge "
   . "prompt was prepared");
diag("stream tokens while the huge prompt was prepared: $during; its "
     . "answer: " . substr($hev[0]{message} // '', 0, 100));

# a Tokenize of 3 MB text, pipelined with an Info and a small Tokenize:
# the stream goes on meanwhile, and the answers come in order
my $text = join(' ', map { "t$_" } 1 .. 400_000);
my $tk = LlmFrames::frame(LlmEngine::pb_bytes(3, LlmEngine::pb_bytes(1,
                                                                  $text)))
       . LlmFrames::frame(LlmFrames::info_body())
       . LlmFrames::frame(LlmEngine::pb_bytes(3, LlmEngine::pb_bytes(1,
                                                                  'hi')));
my ($tbuf, @tev) = ('');
$h = LlmFrames::open_conn($sock);
$h->blocking(0);
($off, $sent_at) = (0, undef);
$rsel = IO::Select->new($s, $h);
$wsel = IO::Select->new($h);
while (@tev < 3) {
    my ($r, $w) = IO::Select->select($rsel, $off < length $tk ? $wsel : undef,
                                     undef, 30);
    last unless $r || $w;
    for my $fh (@{ $w // [] }) {
        my $n = syswrite($h, $tk, 262144, $off);
        $off += $n if $n;
        $sent_at = ntok(@sev) if $off == length $tk;
    }
    # the big connection first: its first bytes end the count (the
    # Tokenize answer is megabytes; the stream's tokens read after those
    # first bytes may have come after it)
    for my $fh (sort { ($a == $s) <=> ($b == $s) } @{ $r // [] }) {
        if ($fh == $s) {
            pump($s, \$sbuf, \@sev) or last;
        } else {
            $during = ntok(@sev) - ($sent_at // 0)
                if length $tbuf == 0 && !@tev;
            pump($h, \$tbuf, \@tev) or last;
        }
    }
}
is(join(',', map { $_->{kind} } @tev), 'tokenize,info,tokenize',
   'pipelined Tokenize, Info, Tokenize: answered in order');
ok($during >= 20, "the running stream got $during tokens while 3 MB were "
   . "tokenized");
close $h;

# close and Cancel while the prompt is prepared
my $k = LlmFrames::open_conn($sock);
LlmFrames::put($k, $big);
close $k;
my $c = LlmFrames::open_conn($sock);
LlmFrames::put($c, $big);
LlmFrames::put($c, LlmFrames::cancel_body());
my $e = LlmFrames::read_event($c, 30);
is($e && $e->{kind}, 'error', 'Cancel while the prompt is prepared');
is($e && $e->{code}, 'cancelled', 'ERROR_CANCELLED');
is($e && $e->{usage} && $e->{usage}{prompt_tokens}, 0,
   'with zero usage');
LlmFrames::put($c, LlmEngine::completion_body('next', 3));
my @g = LlmFrames::read_until_end($c, 30);
is($g[-1] && $g[-1]{kind}, 'done', 'the connection serves the next one');

# the stream is still fine: cancel it
$s->blocking(1);
LlmFrames::put($s, LlmFrames::cancel_body());
$s->blocking(0);
while ($sel->can_read(10)) {
    pump($s, \$sbuf, \@sev) or last;
    last if $sev[-1]{kind} =~ /^(?:error|done)$/;
}
is($sev[-1]{kind}, 'error', 'the running stream ends on Cancel');
my $st = LlmEngine::wait_stats($t, $sock, sub {
    $_[0]{requests_cancelled} >= 3 && $_[0]{requests_running} == 0 });
is($st->{requests_cancelled}, 3, 'two cancelled during preparation, '
   . 'one running');
is($st->{kv_blocks_free}, $st->{kv_blocks_total}, 'no blocks leaked');

# SIGTERM while a huge prompt is prepared: it is answered (or refused, if
# the signal came first), then the engine exits 0
my $d = LlmFrames::open_conn($sock);
LlmFrames::put($d, $big);
kill 'TERM', $t->engine_pid('a');
$e = LlmFrames::read_event($d, 30);
like($e && $e->{code}, qr/^(?:context_length_exceeded|shutting_down)$/,
     'SIGTERM while a prompt is prepared: the request is answered');
is($t->stop_engine('a'), 0, 'and the engine exits 0');
$t->done;

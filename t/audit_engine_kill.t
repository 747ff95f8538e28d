#!/usr/bin/perl
# Faults with real engines (the audit's fault suite, docs/RELIABILITY.md): an
# engine killed with SIGKILL in the middle of a stream gives the client a
# final error event at once (no [DONE], no waiting for a timeout), and in the
# middle of a JSON answer an OpenAI error; a restarted engine on the same
# socket serves again without an nginx restart; the requests that reached no
# engine while it was down went to the other one.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use IO::Select;
use Time::HiRes qw(sleep time);
use LlmTest;
use LlmEngine;

my $t = LlmTest->new;
my $sa = $t->start_engine('a');
my $sb = $t->start_engine('b');

$t->start_nginx(<<"EOF");
    upstream ab {
        server unix:$sa max_fails=1 fail_timeout=1s;
        server unix:$sb max_fails=1 fail_timeout=1s;
    }
    llm_model tiny upstream=ab;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; llm_read_timeout 60s; }
    }
EOF

my $long = { model => 'tiny', max_tokens => 1800, temperature => 0,
             ignore_eos => JSON::PP::true,
             messages => [ { role => 'user', content => 'Go on and on' } ] };

# which engine serves a connection: the one whose stats show it running
sub running_on {
    for my $n ('a', 'b') {
        my $i = LlmEngine::info($t, $t->engine_sock($n)) // next;
        return $n if ($i->{stats}{requests_running} // 0) > 0;
    }
    return undef;
}

# a stream; kill its engine after the first chunks
my $s = $t->open_stream('/v1/chat/completions',
                        { %$long, stream => JSON::PP::true });
my $sel = IO::Select->new($s);
my $buf = '';
my $deadline = time + 30;
while (time < $deadline && $buf !~ /"content"/) {
    last unless $sel->can_read($deadline - time);
    last unless sysread($s, $buf, 65536, length $buf);
}
like($buf, qr/"content"/, 'stream: tokens flowing');
my $victim = running_on();
ok($victim, 'stream: found its engine (' . ($victim // '?') . ')');
my $t0 = time;
kill 'KILL', $t->engine_pid($victim);
my ($st, $h, $body) = LlmTest::parse_response($buf . do {
    my $rest = '';
    while (time < $t0 + 20) {
        last unless $sel->can_read($t0 + 20 - time);
        last unless sysread($s, $rest, 65536, length $rest);
    }
    $rest });
my $took = time - $t0;
my @ev = LlmTest::sse_events($body);
ok(ref $ev[-1] && $ev[-1]{error}, 'killed mid-stream: a final error event');
ok(!grep({ $_ eq '[DONE]' } @ev), 'killed mid-stream: no [DONE]');
cmp_ok($took, '<', 5, sprintf('killed mid-stream: the stream ended %.2f s '
                              . 'after the kill, not at a timeout', $took));
diag(sprintf('stream ended %.3f s after SIGKILL', $took));
waitpid($t->engine_pid($victim), 0);

# while it is down, requests go to the other engine
my $other = $victim eq 'a' ? 'b' : 'a';
my @ok = grep { $_->{status} == 200 }
         map { $t->post('/v1/chat/completions', { %$long, max_tokens => 4 }) }
         1 .. 4;
is(scalar @ok, 4, "engine $victim down: 4 of 4 answered by $other");

# restart it on the same socket: served again, nginx untouched
$t->start_engine($victim);
sleep 2.2;      # fail_timeout=1s, counted in whole seconds by nginx
my $served = 0;
for (1 .. 8) {
    my $r = $t->post('/v1/chat/completions', { %$long, max_tokens => 4 });
    $served++ if $r->{status} == 200;
}
is($served, 8, 'after the restart: 8 of 8 answered');
# the log of the restarted engine is its own
my $done = () = $t->engine_log($victim) =~ /done: finish/g;
cmp_ok($done, '>', 0, "the restarted engine $victim serves again ($done of 8)");

# a JSON answer whose engine dies: an OpenAI error, never a truncated 200
my $pid = fork // die;
if ($pid == 0) {
    my $v;
    for (1 .. 500) { last if $v = running_on(); sleep 0.01 }
    kill 'KILL', $t->engine_pid($v) if $v;
    require POSIX;
    POSIX::_exit(0);    # no DESTROY of the harness in the child
}
my $r = $t->post('/v1/chat/completions', { %$long, n => 8 });
waitpid($pid, 0);
ok($r->{status} >= 500, "JSON answer, engine killed: $r->{status}");
ok($r->{json}{error}, 'JSON answer, engine killed: an OpenAI error body');

$t->stop_nginx;
$t->done;

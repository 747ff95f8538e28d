#!/usr/bin/perl
# SIGTERM: stop accepting, let the running request finish, exit 0, remove
# the socket; past --drain-timeout the rest get shutting_down.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use IO::Socket::UNIX;
use Time::HiRes qw(sleep);
use LlmTest;
use LlmEngine;

my $t = LlmTest->new;
my $sock = $t->start_engine('a', model => LlmEngine::model($t));
my %req = (messages => [{ role => 'user', content => 'keep talking' }],
           max_tokens => 1000, ignore_eos => JSON::PP::true);

my $h = LlmEngine::spawn($t, $sock, \%req);
LlmEngine::wait_stats($t, $sock, sub { $_[0]{requests_running} == 1 });
kill 'TERM', $t->engine_pid('a');
sleep 0.2;
ok(!IO::Socket::UNIX->new(Peer => $sock), 'no new connections while '
   . 'draining');
my ($r) = LlmEngine::wait_clients($t, $h);
is($r->{done}{usage}{completion_tokens}, 1000,
   'the running request completed');
my $elog = $t->engine_log('a');
is($t->stop_engine('a'), 0, 'exit status 0');
ok(!-e $sock, 'socket file removed');
like($elog, qr/draining 1 requests/, 'drain logged');

# drain timeout: short enough that 1900 tokens cannot finish inside it on
# any machine (at 0.3 s the faster kernels sometimes finished them)
my $s2 = $t->start_engine('b', model => LlmEngine::model($t),
                          args => ['--drain-timeout', '0.05']);
$h = LlmEngine::spawn($t, $s2, { %req, max_tokens => 1900 });
LlmEngine::wait_stats($t, $s2, sub { $_[0]{requests_running} == 1 });
kill 'INT', $t->engine_pid('b');
($r) = LlmEngine::wait_clients($t, $h);
is($r->{error}{code}, 'shutting_down', 'past the timeout: shutting_down');
ok($r->{error}{usage}{completion_tokens} > 0, 'with the usage so far');
is($t->stop_engine('b'), 0, 'exit 0 after the timeout too');

# a stale socket file is replaced; a live one is not
my $s3 = $t->start_engine('c', model => LlmEngine::model($t));
my $log = $t->dir . '/second.log';
system($t->bin('llm-engine') . " --model " . LlmEngine::model($t)
       . " --socket $s3 --threads 1 > $log 2>&1");
isnt($? >> 8, 0, 'a second engine on a live socket refuses to start');
like($t->slurp($log), qr/another process is listening/, 'and says why');
is((stat $s3)[2] & 07777, 0660, 'the socket is mode 0660');
my $pid = $t->engine_pid('c');
kill 'KILL', $pid;
waitpid($pid, 0);
delete $t->{engines}{c};
ok(-S $s3, 'a killed engine leaves its socket file');
my $again = $t->start_engine('c', model => LlmEngine::model($t));
is($again, $s3, 'same path');
ok(LlmEngine::info($t, $again), 'a new engine replaces the stale socket');
like($t->engine_log('c'), qr/removing stale socket/, 'and logs it');
$t->done;

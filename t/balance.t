#!/usr/bin/perl
# llm_balance least_load: an upstream of engines balanced by their load.
# One engine says in its Info that 8 requests wait in its queue (a fake,
# which is also slow); the other is a real idle engine.  least_load sends
# every request to the idle one; round robin over the same servers sends
# some to the busy one.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use FakeEngine;
use Time::HiRes qw(sleep time);

my $t = LlmTest->new;
my $d = $t->dir;
my $busy = FakeEngine->start("$d/busy.sock", mode => 'slow', delay => 0.5,
                             queued => 8, count_file => "$d/busy.count");
$t->start_engine('b');

$t->start_nginx(<<"EOF");
    upstream least {
        llm_balance least_load;
        server unix:$d/busy.sock;
        server unix:%%SOCK_b%%;
    }
    upstream rr {
        server unix:$d/busy.sock;
        server unix:%%SOCK_b%%;
    }
    llm_model tiny upstream=least;
    llm_model tiny-rr upstream=rr;
    llm_info_cache 100ms;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
        location = /healthz { llm_health on; }
    }
EOF

sub busy_count {
    open my $f, '<', "$d/busy.count" or return 0;
    my @l = <$f>;
    return scalar @l;
}

sub done_b { my @l = $t->engine_log('b') =~ /request \S+ done/g; scalar @l }

# the Info answers: the busy engine reports its queue
$t->get('/healthz');
sleep 0.3;
my $h = $t->get('/healthz');
my $js = JSON::PP->new->canonical->encode($h->{json} // {});
like($js, qr/"requests_queued":8/, 'the busy engine reports 8 queued')
    or diag $js;

my $chat = { model => 'tiny', max_tokens => 2, temperature => 0,
             messages => [ { role => 'user', content => 'Hi' } ] };

my $b0 = done_b();
my $c0 = busy_count();
my $t0 = time;
for (1 .. 6) {
    my $r = $t->post('/v1/chat/completions', $chat);
    is($r->{status}, 200, "least_load request $_");
}
sleep 0.2;
is(busy_count() - $c0, 0, 'least_load: none to the busy engine');
is(done_b() - $b0, 6, 'least_load: all six to the idle engine');
ok(time - $t0 < 3, 'least_load: none waited for the slow one');

$c0 = busy_count();
for (1 .. 6) {
    $t->post('/v1/chat/completions', { %$chat, model => 'tiny-rr' });
}
ok(busy_count() - $c0 > 0,
   'round robin over the same servers: some to the busy engine ('
   . (busy_count() - $c0) . ')');

$busy->stop;
$t->done;

#!/usr/bin/perl
# A fleet's shared limits (llm_limit_store): two gateways in front of one
# real engine share one real redis-server.  A key's quota holds across
# both under a concurrent burst (at most one request's reservation over),
# and Redis ends with exactly the usage the gateways logged; requests/min
# holds across both within the minute; a budget in dollars holds across
# both; with Redis stopped, on_error=local serves on the gateway's own
# limits (and its usage reaches Redis when it is back) while
# on_error=deny refuses with 503; each transition is logged.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmKeys;
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(sleep time);

for my $bin (qw(redis-server redis-cli)) {
    system("command -v $bin >/dev/null 2>&1") == 0
        or plan skip_all => "$bin is not installed (Debian: redis-server)";
}

my $g1 = LlmTest->new;
my $g2 = LlmTest->new;
$g1->start_engine('a');
my $sock = $g1->engine_sock('a');

# --- Redis ---------------------------------------------------------------

my $rport = $g1->free_port;
my $rpid;

sub redis_start {
    $rpid = fork // die;
    if ($rpid == 0) {
        open STDOUT, '>>', $g1->dir . '/redis.log';
        open STDERR, '>&', \*STDOUT;
        { exec 'redis-server', '--port', $rport, '--bind', '127.0.0.1',
               '--save', '', '--appendonly', 'no' }
        POSIX::_exit(1);
    }
    for (1 .. 100) {
        return if IO::Socket::INET->new(PeerAddr => "127.0.0.1:$rport");
        sleep 0.05;
    }
    BAIL_OUT('redis-server did not start');
}

sub redis_stop {
    kill 'TERM', $rpid;
    waitpid($rpid, 0);
}

sub rcli { my $o = `redis-cli -p $rport @_`; chomp $o; $o }

redis_start();

# --- the keys and the two gateways ----------------------------------------

my ($qkey, $qline) = LlmKeys::new_key('quota-key', quota => 500);
my ($rkey, $rline) = LlmKeys::new_key('rpm-key', rpm => 6);
my ($bkey, $bline) = LlmKeys::new_key('budget-key');
my ($okey, $oline) = LlmKeys::new_key('open-key', quota => 100000000);
for my $g ($g1, $g2) {
    LlmKeys::write_keys($g, $qline, $rline, "$bline budget=0.00002", $oline);
}

sub gw_conf {
    my ($g, $on_error) = @_;
    my $d = $g->dir;
    return <<"EOF";
    log_format llm '\$status key=\$llm_key_name prompt=\$llm_prompt_tokens '
                   'completion=\$llm_completion_tokens';
    access_log $d/llm.log llm;
    llm_zone llm 1m;
    llm_keys $d/keys;
    llm_limit_store redis://127.0.0.1:$rport/0 timeout=300ms on_error=$on_error;
    upstream eng { server unix:$sock; keepalive 4; }
    llm_model tiny upstream=eng price=1,1,1;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
EOF
}

$g1->start_nginx(gw_conf($g1, 'local'));
$g2->start_nginx(gw_conf($g2, 'deny'));

my $body = { model => 'tiny', max_tokens => 8, temperature => 0,
             messages => [ { role => 'user', content => 'Hello there' } ] };

# a burst: requests open on both gateways at once, then all answers read
sub burst {
    my ($key, $n) = @_;
    my @s;
    for my $i (0 .. $n - 1) {
        my $g = $i % 2 ? $g2 : $g1;
        push @s, [ $g, $g->open_stream('/v1/chat/completions', $body,
                                       Authorization => "Bearer $key") ];
    }
    return map { [ ($_->[0]->read_response($_->[1], 60))[0, 2] ] } @s;
}

sub hexid {
    my ($key) = @_;
    require Digest::SHA;
    return substr(Digest::SHA::sha256_hex($key), 0, 32);
}

sub logged_usage {
    my ($name) = @_;
    my $sum = 0;
    for my $g ($g1, $g2) {
        for (split /\n/, $g->slurp($g->dir . '/llm.log')) {
            $sum += $1 + $2 if /^200 key=\Q$name\E prompt=(\d+) completion=(\d+)/;
        }
    }
    return $sum;
}

# 1. quota 500 tokens across both gateways, 24 concurrent requests: the
# fleet admits while its reservations and settled usage are under the
# quota, so it ends over by at most one reservation plus what admitted
# requests used beyond their estimate (body bytes / 4 + max_tokens; this
# test model's byte-level vocabulary makes ~2 bytes a token)

my @res = burst($qkey, 24);
sleep 0.5;      # the access log line is written after the answer
my $ok = grep { $_->[0] == 200 } @res;
my $refused = grep { $_->[0] == 429 } @res;
is($ok + $refused, 24, 'quota burst: every answer is 200 or 429');
# each gateway's own quota (500) would admit its 12 (12 x ~35 tokens)
ok($refused > 0 && $ok > 0,
   "quota burst: the fleet's quota refused some ($ok admitted, $refused "
   . 'refused)');
my $used = logged_usage('quota-key');
my $est = int(length(JSON::PP->new->canonical->encode($body)) / 4) + 8;
my $each = $ok ? $used / $ok : 0;
my $bound = 500 + $est + $ok * ($each > $est ? $each - $est : 0);
ok($used <= $bound,
   "quota burst: $used tokens used across both gateways <= 500 + one "
   . "reservation ($est) + estimate errors = $bound");
ok($ok * $est >= 500 - $est,
   "quota burst: not refused early ($ok requests reserving $est each)");
is(rcli('GET', 'llm:' . hexid($qkey) . ':used'), $used,
   'Redis holds exactly the usage both gateways logged');

# 2. requests/min across both gateways: 6 in the minute

sleep 61 - time % 60 if time % 60 > 45;     # one calendar minute
@res = burst($rkey, 12);
is(scalar(grep { $_->[0] == 200 } @res), 6,
   'rpm 6: six of twelve requests across both gateways');

# 3. a budget in dollars across both: $0.00002 at $1 per million tokens

my @st;
for my $i (0 .. 5) {
    my $g = $i % 2 ? $g2 : $g1;
    push @st, $g->post('/v1/chat/completions', $body,
                       Authorization => "Bearer $bkey")->{status};
}
my $spent = rcli('GET', 'llm:' . hexid($bkey) . ':spent');
ok((grep { $_ == 429 } @st) > 0, "budget: refused once spent (@st)");
ok($spent >= 20e6 && $spent < 20e6 + 60e6,
   "budget: spent $spent picodollars in Redis, over the budget by less "
   . 'than a request');

# 4. Redis down: on_error=local serves, on_error=deny refuses

redis_stop();
my $r1 = $g1->post('/v1/chat/completions', $body,
                   Authorization => "Bearer $okey");
my $r2 = $g2->post('/v1/chat/completions', $body,
                   Authorization => "Bearer $okey");
is($r1->{status}, 200, 'Redis down, on_error=local: served');
is($r2->{status}, 503, 'Redis down, on_error=deny: 503');
is($r2->{json}{error}{code}, 'limit_store_unavailable', 'deny: the code');
$r1 = $g1->post('/v1/chat/completions', $body,
                Authorization => "Bearer $okey");
is($r1->{status}, 200, 'Redis down: still served');
my @down = $g1->error_log =~ /llm_limit_store \S+ is unavailable/g;
is(scalar @down, 1, 'the transition to down is logged once');

# back: the usage of the requests served alone reaches Redis

redis_start();
sleep 1.2;              # the reconnect back-off
$r1 = $g1->post('/v1/chat/completions', $body,
                Authorization => "Bearer $okey");
is($r1->{status}, 200, 'Redis back: served');
sleep 0.3;
like($g1->error_log, qr/llm_limit_store \S+ is back/, 'the return is logged');
sleep 0.3;
is(rcli('GET', 'llm:' . hexid($okey) . ':used') + 0,
   logged_usage('open-key'),
   'usage of the requests served while Redis was down reached it');

redis_stop();
$g2->stop_nginx;
$g1->done;

#!/usr/bin/perl
# The fleet example (examples/fleet/fleet.sh): two gateways, two engines
# on TCP with a shared secret, Redis and an L4 balancer (nginx's stream
# module), each in its own network namespace.  Through the balancer: a
# key's quota holds across both gateways and Redis holds exactly the usage
# they logged; killing one gateway moves new requests to the other (only
# its in-flight ones are lost); killing one engine moves the model's new
# requests to the other; every answered request is logged once, by one
# gateway.  Skipped where namespaces cannot be made (not root, no
# CAP_SYS_ADMIN) or the stream module or redis-server are missing.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use HTTP::Tiny;
use JSON::PP;
use File::Temp qw(tempdir);
use Time::HiRes qw(sleep);

plan skip_all => 'the fleet needs root (network namespaces)' if $> != 0;
plan skip_all => 'nginx stream module missing (Debian: libnginx-mod-stream)'
    unless -f '/usr/lib/nginx/modules/ngx_stream_module.so';
plan skip_all => 'redis-server is not installed'
    if system('command -v redis-server >/dev/null 2>&1') != 0;
my $probe = "llmprobe$$";
plan skip_all => 'network namespaces are not permitted here'
    if system("ip netns add $probe >/dev/null 2>&1") != 0;
system("ip netns del $probe");

my $t = LlmTest->new;
my $dir = $t->dir . '/fleet';
my $net = 100 + $$ % 150;
my $fleet = $t->repo . '/examples/fleet/fleet.sh';
local $ENV{FLEET_NET} = $net;
local $ENV{BUILD} = $t->build;
local $ENV{QUOTA} = 600;
local $ENV{NGINX_PRELOAD} = $ENV{LLM_NGINX_PRELOAD} // '';
$t->model;

my $up = `$fleet up $dir 2>&1`;
is($? >> 8, 0, 'fleet.sh up') or diag $up;
END { system("FLEET_NET=$net $fleet down $dir >/dev/null 2>&1") if $dir }

my $key = do { local (@ARGV, $/) = "$dir/client.key"; <> };
chomp $key;
my $lb = "http://10.77.$net.1:8080";
my $ht = HTTP::Tiny->new(timeout => 30, keep_alive => 0);

sub chat {
    my $r = $ht->post("$lb/v1/chat/completions", {
        headers => { 'Content-Type' => 'application/json',
                     Authorization => "Bearer $key" },
        content => encode_json({ model => 'tiny', max_tokens => 4,
            temperature => 0,
            messages => [ { role => 'user', content => 'Hi there' } ] }) });
    return $r;
}

my (%ids, $served);
sub note_ok {
    my ($r) = @_;
    return unless $r->{status} == 200;
    $served++;
    $ids{ $r->{headers}{'x-request-id'} // '' }++;
}

my $r = chat();
is($r->{status}, 200, 'a chat through the balancer') or diag $r->{content};
note_ok($r);

# the quota (600 tokens) across both gateways

my %st;
for (1 .. 30) {
    $r = chat();
    $st{ $r->{status} }++;
    note_ok($r);
}
ok($st{429}, "quota across the fleet: refused once used (@{[ %st ]})");
sleep 0.5;

sub logs {
    my %usage = (n => 0, tokens => 0, ids => {});
    for my $g (qw(gw1 gw2)) {
        my $f = "$dir/$g.access.log";
        next unless -f $f;
        open my $fh, '<', $f or next;
        while (<$fh>) {
            next unless /^200 key=client .*prompt=(\d+) completion=(\d+) id=(\S+)/;
            $usage{n}++;
            $usage{tokens} += $1 + $2;
            $usage{ids}{$3}++;
        }
    }
    return \%usage;
}

my $u = logs();
my $rid = substr(do { require Digest::SHA; Digest::SHA::sha256_hex($key) },
                 0, 32);
my $used = `redis-cli -h 10.77.$net.5 GET llm:$rid:used`;
chomp $used;
is($used, $u->{tokens}, "Redis holds the usage both gateways logged ($used)");
ok((grep { $_ > 0 } map { -s "$dir/$_.access.log" // 0 } qw(gw1 gw2)) == 2,
   'the balancer used both gateways');

# kill gateway 1: new requests go to gateway 2

# a crash: the master and its workers killed at once
my $gw1 = `cat $dir/gw1.pid` + 0;
my @workers = split ' ', `pgrep -P $gw1`;
kill 'KILL', $gw1, @workers;
sleep 0.5;
# a new key's worth of quota is not needed: these are refused or served,
# never a connection error
my ($ok, $bad) = (0, 0);
for (1 .. 6) {
    $r = chat();
    ($r->{status} == 200 || $r->{status} == 429) ? $ok++ : $bad++;
    note_ok($r);
}
is($bad, 0, "gateway 1 killed: every request answered by gateway 2 ($ok)");

# kill engine 1: the model's requests go to engine 2 (a fresh quota)

system("redis-cli -h 10.77.$net.5 DEL llm:$rid:used >/dev/null");
kill 'TERM', `cat $dir/eng1.pid` + 0;
sleep 0.5;
my $n200 = 0;
for (1 .. 6) {
    $r = chat();
    $n200++ if $r->{status} == 200;
    note_ok($r);
}
# gateway 2's own zone still counts its earlier usage against 600
ok($n200 > 0, "engine 1 killed: engine 2 serves ($n200 of 6)");
like(do { local (@ARGV, $/) = "$dir/eng2.log"; <> } // '',
     qr/request \S+ done/, 'engine 2 served requests');

# usage recorded once per request

sleep 0.5;
$u = logs();
is($u->{n}, $served, "every answered request logged once ($served)");
ok(!(grep { $_ != 1 } values %{ $u->{ids} }), 'no request id twice');
ok(!(grep { !$u->{ids}{$_} } grep { length } keys %ids),
   'every answered id is in a gateway log');

my $fdir = $dir;
my $down = `FLEET_NET=$net $fleet down $dir 2>&1`;
undef $dir;
my @san = grep { $t->slurp($_) =~ /AddressSanitizer|runtime error:|LeakSanitizer|\[alert\]|\[emerg\]/ }
          glob "$fdir/*.log";
is("@san", '', 'no sanitizer report, alert or emerg in the fleet\'s logs');
unlike(`ip netns list`, qr/llm$net-/, 'fleet.sh down removes the namespaces');

done_testing();

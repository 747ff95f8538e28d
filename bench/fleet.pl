#!/usr/bin/perl
# ./build.sh bench fleet: what a provider hop and a Redis-backed limit
# check add to a request's latency.  Sequential non-streaming chat
# requests (max_tokens 1, keep-alive client), N each, through:
#
#   direct     the "provider": a gateway with this module and a real engine
#              (the tiny test model), plain HTTP
#   provider   a gateway in front of it, the model a provider over TLS
#              (keepalive upstream, verified certificate)
#   local      that gateway's own engine model, a key with rpm/tpm/quota,
#              limits in the gateway's shared zone only
#   redis      the same through a gateway with llm_limit_store (a local
#              redis-server, one round trip per request)
#
# Prints p50, p90 and mean milliseconds per row and the differences.
# Env: N (requests per row, 400), LLM_BUILD.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib";
use LlmTest;
use LlmKeys;
use Socket ();
use JSON::PP;
use POSIX ();
use Time::HiRes qw(time sleep);
use IO::Socket::INET;

my $N = $ENV{N} // 400;
my $p = LlmTest->new;
$p->start_engine('r');
my $pd = $p->dir;
sub sh { system(@_) == 0 or die "failed: @_" }
sh("cd $pd && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=ca "
   . "-keyout ca.key -out ca.pem 2>/dev/null");
sh("cd $pd && openssl req -newkey rsa:2048 -nodes -subj /CN=provider.test "
   . "-keyout srv.key -out srv.csr 2>/dev/null");
open my $e, '>', "$pd/ext.cnf" or die; print $e "subjectAltName=DNS:provider.test\n"; close $e;
sh("cd $pd && openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key "
   . "-CAcreateserial -days 2 -extfile ext.cnf -out srv.pem 2>/dev/null");
my $tls = $p->free_port;
$p->start_nginx(<<"X");
    access_log off;
    upstream eng { server unix:%%SOCK_r%%; keepalive 8; }
    llm_model tiny upstream=eng;
    server {
        listen 127.0.0.1:%%PORT%%;
        listen 127.0.0.1:$tls ssl;
        ssl_certificate $pd/srv.pem;
        ssl_certificate_key $pd/srv.key;
        location /v1/ { llm_api on; }
    }
X

my $rport = $p->free_port;
my $rpid = fork // die;
if ($rpid == 0) {
    open STDOUT, '>', '/dev/null';
    { exec 'redis-server', '--port', $rport, '--bind', '127.0.0.1', '--save',
           '', '--appendonly', 'no' }
    POSIX::_exit(1);
}
for (1 .. 100) { last if IO::Socket::INET->new("127.0.0.1:$rport"); sleep 0.05 }

my ($key, $line) = LlmKeys::new_key('bench', rpm => 1000000, tpm => 100000000,
                                    quota => 1000000000);
my @gw;
for my $store (0, 1) {
    my $g = LlmTest->new;
    LlmKeys::write_keys($g, $line);
    my $d = $g->dir;
    my $st = $store ? "llm_limit_store redis://127.0.0.1:$rport/0;" : '';
    $g->start_nginx(<<"X");
    access_log off;
    llm_zone llm 1m;
    llm_keys $d/keys;
    $st
    llm_provider p url=https://127.0.0.1:$tls/v1 ssl_name=provider.test
                 ssl_trusted_certificate=$pd/ca.pem;
    upstream pk { server 127.0.0.1:$tls; keepalive 8; }
    llm_provider pk url=https://127.0.0.1:$tls/v1 upstream=pk
                 ssl_name=provider.test ssl_trusted_certificate=$pd/ca.pem;
    upstream eng { server unix:@{[ $p->engine_sock('r') ]}; keepalive 8; }
    llm_model remote provider=pk remote_model=tiny;
    llm_model local upstream=eng;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
X
    push @gw, $g;
}

# one keep-alive connection per row, each request in one write with
# TCP_NODELAY (HTTP::Tiny's two writes would meet Nagle and the delayed
# ACK: a 40 ms floor under every figure)
sub run {
    my ($port, $model) = @_;
    my $body = encode_json({ model => $model, max_tokens => 1,
                             temperature => 0,
                             messages => [ { role => 'user',
                                             content => 'Hello' } ] });
    my $req = "POST /v1/chat/completions HTTP/1.1\r\nHost: b\r\n"
              . "Content-Type: application/json\r\n"
              . "Authorization: Bearer $key\r\n"
              . 'Content-Length: ' . length($body) . "\r\n\r\n$body";
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port") or die;
    setsockopt($s, Socket::IPPROTO_TCP(), Socket::TCP_NODELAY(), 1);
    my @t;
    for my $i (1 .. $N + 20) {
        my $t0 = time;
        syswrite($s, $req) == length($req) or die "write: $!";
        my $buf = '';
        while (1) {
            sysread($s, $buf, 65536, length $buf) or die "read: $!";
            next unless $buf =~ /\r\n\r\n/;
            my ($h, $b) = split /\r\n\r\n/, $buf, 2;
            my ($len) = $h =~ /Content-Length: (\d+)/i;
            die "no length: $h" unless defined $len;
            die "status: $h" unless $h =~ m{^HTTP/1.1 200};
            last if length($b) >= $len;
        }
        push @t, (time - $t0) * 1000 if $i > 20;      # 20 to warm up
    }
    @t = sort { $a <=> $b } @t;
    my $sum = 0; $sum += $_ for @t;
    return ($t[int(@t / 2)], $t[int(@t * 0.9)], $sum / @t);
}

my %r;
$r{direct} = [ run($p->port, 'tiny') ];
$r{provider} = [ run($gw[0]->port, 'remote') ];
$r{local} = [ run($gw[0]->port, 'local') ];
$r{redis} = [ run($gw[1]->port, 'local') ];

chomp(my $load = `cut -d' ' -f1-3 /proc/loadavg`);
printf "bench fleet: N=%d sequential requests per row, max_tokens 1, "
       . "keep-alive client, load %s\n\n", $N, $load;
printf "| path | p50 ms | p90 ms | mean ms |\n|---|---:|---:|---:|\n";
for my $k (qw(direct provider local redis)) {
    printf "| %s | %.3f | %.3f | %.3f |\n", $k, @{ $r{$k} };
}
printf "\nprovider hop (provider - direct): p50 %+.3f ms, mean %+.3f ms\n",
       $r{provider}[0] - $r{direct}[0], $r{provider}[2] - $r{direct}[2];
printf "Redis-backed limit check (redis - local): p50 %+.3f ms, "
       . "mean %+.3f ms\n", $r{redis}[0] - $r{local}[0],
       $r{redis}[2] - $r{local}[2];

kill 'TERM', $rpid;
waitpid($rpid, 0);
$_->stop_nginx for @gw;
$p->stop_nginx;
$p->stop_engine('r');

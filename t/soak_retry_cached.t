#!/usr/bin/perl
# Found by bench/soak.sh: a non-streaming request whose engine
# dies after producing tokens is generated again on the next server when
# the connection to the dead engine came from the keepalive cache.
#
# The module's peer free handler sets tries to 0 once a token came
# (ngx_http_llm_peer_free), but nginx's ngx_http_upstream_next() adds a
# try back after calling it when the failed connection was a cached one
# ("if (u->peer.cached && ft_type == NGX_HTTP_UPSTREAM_FT_ERROR)
# u->peer.tries++"), so the request goes to the next server and the first
# attempt's tokens are not billed.  In the soak, two such requests were
# retried on the killed engine's socket (connection refused, so 502); with
# a second live server in the upstream, the answer is generated twice.
#
# The flaky engine here answers the first request on a connection in full
# (so nginx caches the connection) and the second with Started, three
# deltas, then closes; a backup server answers everything.  Expected (as
# docs/GATEWAY.md says): 502, the three tokens billed, the backup never
# asked.  Fixed: after the first token the request's copy of
# llm_next_upstream is emptied (ngx_http_llm_no_retry).

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use FakeEngine;

my $t = LlmTest->new;
my $d = $t->dir;

# A Delta with its one token id (the gateway counts tokens from them).
sub delta {
    my ($text, $tok) = @_;
    return FakeEngine::frame(FakeEngine::field_bytes(3,
        FakeEngine::field_bytes(2, $text) . FakeEngine::field_varint(3, $tok)));
}

# A flaky engine: on each connection, the requests before the die_at-th
# are answered in full, that one gets Started, three deltas, then a close.
sub start_flaky {
    my ($path, $die_at) = @_;
    return FakeEngine->start($path,
                             serve => sub { serve_flaky($_[0], $die_at) });
}

sub serve_flaky {
    my ($c, $die_at) = @_;
    my $n = 0;
    while (1) {
        my $h = FakeEngine::read_n($c, 4) // return;
        my $len = unpack('N', $h);
        my $req = $len ? FakeEngine::read_n($c, $len) // return : '';
        if (substr($req, 0, 1) eq "\x12") {
            syswrite($c, FakeEngine::ev_info('fake'));
            next;
        }
        next if substr($req, 0, 1) eq "\x2a";
        if (++$n < $die_at) {
            syswrite($c, FakeEngine::ev_started(5) . delta('Hello', 100)
                         . FakeEngine::ev_done(1, 5, 1));
            next;
        }
        syswrite($c, FakeEngine::ev_started(5) . delta('Par', 101)
                     . delta('ti', 102) . delta('al', 103));
        return;
    }
}

my @flaky = (start_flaky("$d/flaky.sock", 2),
             start_flaky("$d/flaky1.sock", 1));
my $ok = FakeEngine->start("$d/ok.sock", mode => 'ok',
                           count_file => "$d/ok.count");

$t->start_nginx(<<"EOF");
    log_format llm '\$status completion=\$llm_completion_tokens '
                   'finish=\$llm_finish_reason "\$upstream_addr"';
    access_log $d/llm.log llm;
    upstream u {
        server unix:$d/flaky.sock;
        server unix:$d/ok.sock backup;
        keepalive 4;
    }
    upstream u1 {
        server unix:$d/flaky1.sock;
        server unix:$d/ok.sock backup;
    }
    llm_model m upstream=u;
    llm_model m1 upstream=u1;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
EOF

my $req = { model => 'm', max_tokens => 8,
            messages => [ { role => 'user', content => 'hi' } ] };

# the control: a fresh connection (no keepalive) that dies after 3 tokens
my $r = $t->post('/v1/chat/completions', { %$req, model => 'm1' });
is($r->{status}, 502, 'fresh connection, engine dies after tokens: 502');
ok(!-e "$d/ok.count", 'fresh connection: the backup was not asked');
my $log = '';
for (1 .. 50) {
    $log = $t->slurp("$d/llm.log");
    last if $log =~ /\n/;
    select undef, undef, undef, 0.1;
}
like($log, qr/^502 completion=3 /, 'fresh connection: the 3 tokens billed');

$r = $t->post('/v1/chat/completions', $req);
is($r->{status}, 200, 'first request: answered by the flaky engine');
ok(!-e "$d/ok.count", 'first request: the backup was not asked');

# the same keepalive connection to the flaky engine: it dies after 3 tokens
$r = $t->post('/v1/chat/completions', $req);
for (1 .. 50) {
    $log = $t->slurp("$d/llm.log");
    last if (() = $log =~ /\n/g) >= 3;
    select undef, undef, undef, 0.1;
}
my $second = (split /\n/, $log)[2] // '';
diag("second request: status $r->{status}, log: $second");

ok(!-e "$d/ok.count",
   'tokens were produced: the request is not generated again');
is($r->{status}, 502, 'the engine died after tokens: 502');
like($second, qr/completion=3 /, 'the three tokens produced are billed');

$_->stop for $ok, @flaky;
$t->done;

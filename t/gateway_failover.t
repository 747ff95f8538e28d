#!/usr/bin/perl
# Two real engines: the fallback chain when one is stopped (x-llm-fallback,
# the answering model in "model"), a request header naming its own chain,
# /healthz going 503, 502 as an OpenAI error when nothing is left; a
# client that disconnects mid-stream cancels the engine's work (its Info
# stats, through /healthz); a reload with streams in flight loses none.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use IO::Select;
use Time::HiRes qw(sleep time);

my $t = LlmTest->new;
$t->start_engine('a');
$t->start_engine('b');
my $dead = $t->dir . '/nobody.sock';


my $conf = <<"EOF";
    log_format llm '\$status model=\$llm_model completion=\$llm_completion_tokens '
                   'ttft=\$llm_ttft_ms finish=\$llm_finish_reason';
    access_log %%DIR%%/llm.log llm;
    upstream ua { server unix:%%SOCK_a%%; keepalive 2; }
    upstream ub { server unix:%%SOCK_b%%; keepalive 2; }
    upstream uc { server unix:$dead; }
    llm_model model-a upstream=ua fallback=model-b;
    llm_model model-b upstream=ub;
    llm_model model-c upstream=uc;
    llm_info_cache 100ms;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; llm_fallback_header on; }
        location = /healthz { llm_health on; }
    }
EOF
$t->start_nginx($conf);

sub chat {
    my ($model, %o) = @_;
    return { model => $model, max_tokens => 4, temperature => 0,
             messages => [ { role => 'user', content => 'Hello' } ], %o };
}

my $r = $t->post('/v1/chat/completions', chat('model-a'));
is($r->{status}, 200, 'model-a answers');
is($r->{json}{model}, 'model-a', 'model-a: model');
ok(!$r->{headers}{'x-llm-fallback'}, 'no fallback header when not used');

# a request header naming its own chain

$r = $t->post('/v1/chat/completions', chat('model-c'), 'x-llm-fallback' => 'model-b');
is($r->{status}, 200, 'header chain: dead model-c falls back');
is($r->{json}{model}, 'model-b', 'header chain: model-b answered');
is($r->{headers}{'x-llm-fallback'}, 'model-b', 'header chain: x-llm-fallback');
$r = $t->post('/v1/chat/completions', chat('model-c'), 'x-llm-fallback' => 'nope');
is($r->{status}, 400, 'header chain: unknown model 400');
is($r->{json}{error}{param}, 'x-llm-fallback', 'header chain: param');
$r = $t->post('/v1/chat/completions', chat('model-c'));
is($r->{status}, 502, 'no fallback: 502');
is($r->{json}{error}{code}, 'engine_unavailable', 'no fallback: OpenAI body');

# stop engine a: model-a falls back to model-b, streaming too

$t->stop_engine('a');
$r = $t->post('/v1/chat/completions', chat('model-a'));
is($r->{status}, 200, 'engine a stopped: still 200');
is($r->{json}{model}, 'model-b', 'engine a stopped: model-b answered');
is($r->{headers}{'x-llm-fallback'}, 'model-b', 'engine a stopped: header');

my $s = $t->open_stream('/v1/chat/completions',
                        chat('model-a', stream => JSON::PP::true));
my ($st, $h, $body) = $t->read_response($s);
is($h->{'x-llm-fallback'}, 'model-b', 'stream fallback: header');
my @ev = LlmTest::sse_events($body);
is($ev[0]{model}, 'model-b', 'stream fallback: chunk model');
is($ev[-1], '[DONE]', 'stream fallback: [DONE]');

sleep 0.3;
$r = $t->get('/healthz');
is($r->{status}, 503, 'healthz: 503 when a model has no engine');
is($r->{json}{status}, 'degraded', 'healthz: degraded');
my %up = map { $_->{id} => $_->{up} } @{ $r->{json}{models} };
ok(!$up{'model-a'} && $up{'model-b'}, 'healthz: per model state');

# client disconnect mid-stream: the engine cancels

sub stats_b {
    my $j = $t->get('/healthz')->{json};
    my ($m) = grep { $_->{id} eq 'model-b' } @{ $j->{models} };
    return $m->{backends}[0]{stats};
}

sleep 0.2;
my $before = stats_b()->{requests_cancelled};
$s = $t->open_stream('/v1/chat/completions',
                     chat('model-b', stream => JSON::PP::true, max_tokens => 1900,
                          ignore_eos => JSON::PP::true));
my $sel = IO::Select->new($s);
my $got = '';
while ($sel->can_read(10)) {
    sysread($s, $got, 4096, length $got) or last;
    last if $got =~ /data: /;
}
like($got, qr/data: /, 'disconnect: a token arrived');
close $s;
my $cancelled = $before;
for (1 .. 50) {
    sleep 0.2;
    $cancelled = stats_b()->{requests_cancelled};
    last if $cancelled > $before;
}
ok($cancelled > $before, "disconnect: engine cancelled ($before -> $cancelled)");
my ($line) = grep { /finish=cancelled/ } split /\n/, $t->slurp($t->dir . '/llm.log');
like($line // '', qr/^200 model=model-b completion=[1-9]\d* ttft=\d+ finish=cancelled$/,
     'disconnect: the access log meters the tokens streamed before the cut');

# reload with streams in flight: every stream ends with [DONE]

my @streams = map {
    $t->open_stream('/v1/chat/completions',
                    chat('model-b', stream => JSON::PP::true, max_tokens => 300,
                         ignore_eos => JSON::PP::true))
} 1 .. 3;
sleep 0.1;
ok($t->reload_nginx, 'reload');
for my $i (0 .. $#streams) {
    ($st, $h, $body) = $t->read_response($streams[$i], 60);
    @ev = LlmTest::sse_events($body);
    is($ev[-1], '[DONE]', "stream $i survived the reload");
}
$r = $t->post('/v1/chat/completions', chat('model-b'));
is($r->{status}, 200, 'new worker answers');

# nothing left: 502 with an OpenAI body

$t->stop_engine('b');
$r = $t->post('/v1/chat/completions', chat('model-a'));
is($r->{status}, 502, 'all engines stopped: 502');
is(join(',', sort keys %{ $r->{json}{error} }), 'code,message,param,type',
   'all engines stopped: OpenAI error');

$t->done;

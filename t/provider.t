#!/usr/bin/perl
# Remote providers (llm_provider, llm_model provider=): a second nginx
# with this module and a real engine behind TLS (a test CA) is the
# "remote" OpenAI-compatible API; a fake HTTP provider injects faults.
# Checked: answers and streams through the provider with the gateway's
# model name, the provider's usage billed and logged, the client's key
# never sent upstream (the provider key instead), stream usage forced
# upstream and stripped for a client that did not ask; fallback from a
# dead local engine to the provider and from a failing (5xx, 429), slow
# (ttft=) or unreadable provider to the local engine, never after the
# first token; the provider's own 4xx as an OpenAI error; embeddings and
# Anthropic's route through a provider; TLS verification refusing a
# certificate of another name.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmKeys;
use FakeProvider;
use FakeEngine;
use Time::HiRes qw(time);

system('openssl version >/dev/null 2>&1') == 0
    or plan skip_all => 'openssl (the command) is needed for the test CA';

# --- the remote provider: another gateway over a real engine, TLS ------

my $p = LlmTest->new;
$p->start_engine('r');
my $pd = $p->dir;

sub sh { system(@_) == 0 or die "failed: @_" }
sh("cd $pd && openssl req -x509 -newkey rsa:2048 -nodes -days 2 "
   . "-subj /CN=test-ca -keyout ca.key -out ca.pem 2>/dev/null");
sh("cd $pd && openssl req -newkey rsa:2048 -nodes -subj /CN=provider.test "
   . "-keyout srv.key -out srv.csr 2>/dev/null");
open my $ext, '>', "$pd/ext.cnf" or die;
print $ext "subjectAltName=DNS:provider.test\n";
close $ext;
sh("cd $pd && openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key "
   . "-CAcreateserial -days 2 -extfile ext.cnf -out srv.pem 2>/dev/null");

my ($pkey, $pline) = LlmKeys::new_key('gateway');
LlmKeys::write_keys($p, $pline);

$p->start_nginx(<<"EOF");
    log_format prov '\$status auth="\$http_authorization" model=\$llm_model';
    upstream eng { server unix:%%SOCK_r%%; }
    llm_model tiny upstream=eng;
    llm_keys $pd/keys;
    server {
        listen 127.0.0.1:%%PORT%% ssl;
        ssl_certificate $pd/srv.pem;
        ssl_certificate_key $pd/srv.key;
        access_log $pd/prov.log prov;
        location /v1/ { llm_api on; }
    }
EOF

# --- the gateway -------------------------------------------------------

my $t = LlmTest->new;
$t->start_engine('a');
my $d = $t->dir;
my $fport = $t->free_port;
my $fp = FakeProvider->start(port => $fport, log => "$d/fake.log",
                             delay => 3);
# local engines that cannot serve: one overloaded, one slow to its first
# token (3 s)
my $fe_busy = FakeEngine->start("$d/busy.sock", mode => 'overloaded');
my $fe_slow = FakeEngine->start("$d/slow.sock", mode => 'slow', delay => 3);

open my $kf, '>', "$d/prov.key" or die;
print $kf "$pkey\n";
close $kf;
open $kf, '>', "$d/fake.key" or die;
print $kf "sk-fake-provider-key\n";
close $kf;

my ($key, $line) = LlmKeys::new_key('alice', quota => 100000);
my ($bkey, $bline) = LlmKeys::new_key('bob');
LlmKeys::write_keys($t, $line, "$bline budget=0.0001");
my %auth = (Authorization => "Bearer $key");
my $pport = $p->port;

my $conf = <<"EOF";
    log_format llm '\$status model=\$llm_model prompt=\$llm_prompt_tokens '
                   'completion=\$llm_completion_tokens cost=\$llm_cost '
                   'asked=\$llm_requested_model';
    access_log $d/llm.log llm;
    llm_zone llm 1m;
    llm_keys $d/keys;
    llm_provider remote url=https://127.0.0.1:$pport/v1 key_file=$d/prov.key
                 ssl_trusted_certificate=$pd/ca.pem ssl_name=provider.test;
    llm_provider wrongname url=https://127.0.0.1:$pport/v1
                 key_file=$d/prov.key ssl_trusted_certificate=$pd/ca.pem
                 ssl_name=other.test;
    llm_provider fake url=http://127.0.0.1:$fport/v1/ key_file=$d/fake.key
                 timeout=10s;
    upstream eng { server unix:%%SOCK_a%%; keepalive 2; }
    upstream dead { server unix:$d/nobody.sock; }
    llm_model remote-tiny provider=remote remote_model=tiny;
    llm_model bad-cert provider=wrongname remote_model=tiny;
    llm_model local upstream=eng;
    llm_model dead-local upstream=dead fallback=remote-tiny;
    upstream busy { server unix:$d/busy.sock; }
    upstream slow { server unix:$d/slow.sock; }
    llm_model busy-local upstream=busy fallback=remote-tiny;
    llm_model slow-local upstream=slow ttft=500ms fallback=remote-tiny;
    llm_model fake-ok provider=fake remote_model=ok price=2,0.5,8;
    llm_model fake-nousage provider=fake remote_model=nousage;
    llm_model fake-500 provider=fake remote_model=status-500 fallback=local;
    llm_model fake-429 provider=fake remote_model=status-429 fallback=local;
    llm_model fake-400 provider=fake remote_model=status-400 fallback=local;
    llm_model fake-401 provider=fake remote_model=status-401;
    llm_model flaky provider=fake remote_model=status-502 fallback=local
              error_rate=50%/20s;
    llm_model fake-slow provider=fake remote_model=slow ttft=500ms
              fallback=local;
    llm_model fake-cut provider=fake remote_model=cut fallback=local;
    llm_model fake-garbage provider=fake remote_model=garbage fallback=local;
    llm_model fake-badchunk provider=fake remote_model=badchunk;
    llm_model fake-nostatus provider=fake remote_model=nostatus;
    llm_model fake-miderror provider=fake remote_model=miderror;
    llm_model fake-badutf8 provider=fake remote_model=badutf8;
    llm_model fake-close10 provider=fake remote_model=close10;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
        location = /metrics { llm_metrics; }
    }
EOF
$t->start_nginx($conf, main => "worker_rlimit_core 500m; working_directory $d;");

sub chat {
    my ($model, %o) = @_;
    return { model => $model, max_tokens => 4, temperature => 0,
             messages => [ { role => 'user', content => 'Hello' } ], %o };
}

sub stream {
    my ($body, %h) = @_;
    my $s = $t->open_stream('/v1/chat/completions', $body, %auth, %h);
    my ($st, $hd, $b) = $t->read_response($s, 30);
    return ($st, $hd, [ LlmTest::sse_events($b) ], $b);
}

# a chat through the TLS provider (a real engine behind it)

my $t0;

my $r = $t->post('/v1/chat/completions', chat('remote-tiny'), %auth);
is($r->{status}, 200, 'provider: 200') or diag $r->{content};
is($r->{json}{model}, 'remote-tiny', 'provider: the gateway model name');
is($r->{json}{object}, 'chat.completion', 'provider: chat.completion');
ok(defined $r->{json}{choices}[0]{message}{content}, 'provider: content');
ok($r->{json}{usage}{prompt_tokens} > 0, 'provider: usage from provider');
my $remote_usage = $r->{json}{usage};

select(undef, undef, undef, 0.3);   # its access log line follows the answer
my $plog = $p->slurp("$pd/prov.log");
like($plog, qr/auth="Bearer \Q$pkey\E"/, 'the provider key went upstream');
unlike($plog, qr/\Q$key\E/, "the client's key never went upstream");

# logprobs pass through: chat (content items with top_logprobs) and
# legacy completions (tokens, token_logprobs, top_logprobs)

$r = $t->post('/v1/chat/completions', chat('remote-tiny', logprobs =>
              JSON::PP::true, top_logprobs => 2), %auth);
my $lpc = $r->{json}{choices}[0]{logprobs}{content} // [];
is(scalar @$lpc, $r->{json}{usage}{completion_tokens},
   'provider logprobs: one item per token');
ok(@$lpc && !(grep { @{ $_->{top_logprobs} // [] } != 2 } @$lpc)
   && !(grep { !defined $_->{logprob} || $_->{logprob} > 0 } @$lpc),
   'provider logprobs: each with its 2 top logprobs');
$r = $t->post('/v1/completions', { model => 'remote-tiny', prompt => 'Hi',
                                   max_tokens => 3, logprobs => 2 }, %auth);
my $lpt = $r->{json}{choices}[0]{logprobs} // {};
is(scalar @{ $lpt->{tokens} // [] }, 3, 'completions logprobs: 3 tokens');
is(scalar keys %{ $lpt->{top_logprobs}[0] // {} }, 2,
   'completions logprobs: 2 alternatives a token');
my ($lst, $lhd, $lev) = stream(chat('remote-tiny', stream => JSON::PP::true,
                                    logprobs => JSON::PP::true,
                                    top_logprobs => 1));
my $nlp = 0;
$nlp += scalar @{ $_->{choices}[0]{logprobs}{content} // [] }
    for grep { ref $_ && $_->{choices} && @{ $_->{choices} } } @$lev;
is($nlp, 4, 'streamed provider logprobs: one per token');

# stream: usage forced upstream, stripped for a client that did not ask

my ($st, $hd, $ev) = stream(chat('remote-tiny', stream => JSON::PP::true));
is($st, 200, 'provider stream: 200');
like($hd->{'content-type'}, qr{text/event-stream}, 'provider stream: SSE');
is($ev->[-1], '[DONE]', 'provider stream: [DONE]');
ok(!(grep { ref $_ && $_->{usage} } @$ev), 'no usage chunk unasked');
ok((grep { ref $_ && ($_->{model} // '') eq 'remote-tiny' } @$ev) > 0,
   'provider stream: model name');

($st, $hd, $ev) = stream(chat('remote-tiny', stream => JSON::PP::true,
                              stream_options => { include_usage =>
                                                  JSON::PP::true }));
my @u = grep { ref $_ && $_->{usage} } @$ev;
is(scalar @u, 1, 'one usage chunk when asked');
ok(@u && $u[0]{usage}{completion_tokens} > 0, 'usage chunk counts');

# the fake: what went upstream

$r = $t->post('/v1/chat/completions',
              chat('fake-ok', stream => JSON::PP::true), %auth);
my @reqs = $fp->requests;
my $last = $reqs[-1];
like($last->{line}, qr{^POST /v1/chat/completions HTTP/1.1$},
     'fake: path under the url prefix');
is($last->{headers}{authorization}, 'Bearer sk-fake-provider-key',
   'fake: provider key');
is($last->{body}{model}, 'ok', 'fake: remote_model');
ok($last->{body}{stream_options}{include_usage}, 'fake: include_usage forced');
ok(!(grep { ($_->{headers}{authorization} // '') =~ /\Q$key\E/ } @reqs),
   "fake: client's key never sent");

($st, $hd, $ev, my $raw) = stream(chat('fake-ok', stream => JSON::PP::true));
my $text = join '', map { ref $_ ? ($_->{choices}[0]{delta}{content} // '')
                                 : '' } @$ev;
is($text, "Hello w\xc3\xb6rld", 'fake stream: text in order, UTF-8 intact');
ok(!(grep { ref $_ && $_->{usage} } @$ev), 'fake stream: usage stripped');

$r = $t->post('/v1/chat/completions', chat('fake-nousage'), %auth);
is($r->{status}, 200, 'no usage: 200');
ok($r->{json}{usage}{completion_tokens} > 0, 'no usage: estimated');

# fallback: local engine dead -> provider; provider failing -> local

$r = $t->post('/v1/chat/completions', chat('dead-local'), %auth);
is($r->{status}, 200, 'dead local: 200');
is($r->{json}{model}, 'remote-tiny', 'dead local: provider answered');
is($r->{headers}{'x-llm-fallback'}, 'remote-tiny', 'dead local: header');
is($r->{headers}{'x-llm-model'}, 'remote-tiny', 'dead local: x-llm-model');

$r = $t->post('/v1/chat/completions', chat('busy-local'), %auth);
is($r->{json}{model}, 'remote-tiny', 'overloaded local engine: the '
   . 'provider answered');
$t0 = time;
$r = $t->post('/v1/chat/completions', chat('slow-local'), %auth);
is($r->{json}{model}, 'remote-tiny', 'local engine over ttft=: the '
   . 'provider answered');
ok(time - $t0 < 2.5, 'ttft: before the slow engine\'s first token');

for my $m (qw(fake-500 fake-429 fake-garbage)) {
    $r = $t->post('/v1/chat/completions', chat($m), %auth);
    is($r->{status}, 200, "$m: falls back");
    is($r->{json}{model}, 'local', "$m: local answered");
}

$t0 = time;
$r = $t->post('/v1/chat/completions', chat('fake-slow'), %auth);
my $el = time - $t0;
is($r->{json}{model}, 'local', 'ttft: slow provider left for local');
ok($el < 2.5, sprintf('ttft: moved on before the provider answered '
                      . '(%.2f s)', $el));

$r = $t->post('/v1/chat/completions', chat('fake-400'), %auth);
is($r->{status}, 400, "provider's 400: the answer, no fallback");
is($r->{json}{error}{param}, 'temperature', "provider's 400: param");
like($r->{json}{error}{message}, qr/provider "fake" answered: scripted 400/,
     "provider's 400: message");

$r = $t->post('/v1/chat/completions', chat('fake-401'), %auth);
is($r->{status}, 502, "provider's 401: a gateway fault (502)");
is($r->{json}{error}{code}, 'provider_auth_failed', '401: code');

# error_rate=: after 5 answers that all failed, start at the fallback

my $flaky = sub { scalar grep { ($_->{body}{model} // '') eq 'status-502' }
                  $fp->requests };
for (1 .. 8) {
    $r = $t->post('/v1/chat/completions', chat('flaky'), %auth);
    is($r->{json}{model}, 'local', "flaky $_: answered by the fallback");
}
is($flaky->(), 5, 'error_rate: the failing model was skipped after 5 '
   . 'failures in its window');
like($t->error_log, qr/model "flaky" fails too often, skipped for "local"/,
     'error_rate: the skip is logged');

# never a fallback after the first token

my $before = () = $fp->requests;
($st, $hd, $ev, $raw) = stream(chat('fake-cut', stream => JSON::PP::true));
is($st, 200, 'cut: the stream had started');
ok(!$hd->{'x-llm-fallback'}, 'cut: no fallback after the first token');
my @err = grep { ref $_ && $_->{error} } @$ev;
is(scalar @err, 1, 'cut: an error event ends the stream');
my $after = () = $fp->requests;
is($after - $before, 1, 'cut: one upstream request');

# broken providers: an OpenAI error, or a stream ended by an error event;
# every event valid JSON

$r = $t->post('/v1/chat/completions', chat('fake-nostatus'), %auth);
is($r->{status}, 502, 'not HTTP: 502');
ok($r->{json}{error}{message}, 'not HTTP: an OpenAI error');
$r = $t->post('/v1/chat/completions', chat('fake-close10'), %auth);
is($r->{status}, 502, 'a JSON answer without a length (to the close): 502');
ok($r->{json}{error}{message}, 'without a length: an OpenAI error');
for my $m (qw(fake-badchunk fake-miderror fake-badutf8)) {
    ($st, $hd, $ev, $raw) = stream(chat($m, stream => JSON::PP::true));
    is($st, 200, "$m: the stream had started");
    my @bad = grep { !ref $_ && $_ ne '[DONE]' } @$ev;
    is(scalar @bad, 0, "$m: every event is JSON") or diag $raw;
    my @e = grep { ref $_ && $_->{error} } @$ev;
    is(scalar @e, 1, "$m: one error event ends it");
}
like(join(' ', map { ref $_ && $_->{error} ? $_->{error}{message} : '' }
          @$ev), qr/invalid answer/, 'invalid UTF-8: an invalid answer');

# TLS: a certificate for another name is refused (then no model is left)

$r = $t->post('/v1/chat/completions', chat('bad-cert'), %auth);
is($r->{status}, 502, 'wrong certificate name: 502');
like($t->error_log, qr/upstream SSL certificate does not match/,
     'wrong certificate name: refused by verification');

# legacy completions, embeddings, Anthropic's Messages through providers

$r = $t->post('/v1/completions', { model => 'remote-tiny', prompt => 'Hi',
                                   max_tokens => 3 }, %auth);
is($r->{status}, 200, 'completions via provider');
is($r->{json}{object}, 'text_completion', 'completions: object');

$r = $t->post('/v1/embeddings', { model => 'fake-ok',
                                  input => [ 'a', 'b', 'c' ] }, %auth);
is($r->{status}, 200, 'embeddings via provider');
is_deeply([ map { $_->{index} } @{ $r->{json}{data} } ], [ 0, 1, 2 ],
          'embeddings: in input order');
is($r->{json}{data}[2]{embedding}[0], 2.5, 'embeddings: the right vector');
is($r->{json}{usage}{prompt_tokens}, 7, 'embeddings: provider usage');

$r = $t->post('/v1/messages', { model => 'remote-tiny', max_tokens => 4,
                                messages => [ { role => 'user',
                                                content => 'Hi' } ] },
              'x-api-key' => $key, 'anthropic-version' => '2023-06-01');
is($r->{status}, 200, 'Anthropic route via provider');
is($r->{json}{type}, 'message', 'Anthropic: a message');
ok($r->{json}{usage}{input_tokens} > 0, 'Anthropic: usage');

# /healthz and /v1/models list the provider's models

$r = $t->get('/v1/models', %auth);
ok((grep { $_->{id} eq 'remote-tiny' } @{ $r->{json}{data} // [] }),
   '/v1/models lists a provider model');

# billing: the provider's usage in the access log

my $log = $t->slurp("$d/llm.log");
like($log, qr/200 model=remote-tiny prompt=$remote_usage->{prompt_tokens} (?#
     )completion=$remote_usage->{completion_tokens}/,
     "the provider's usage is logged");
like($log, qr/200 model=fake-ok prompt=11 completion=3/,
     'fake usage logged');

like($log, qr/200 model=fake-ok prompt=11 completion=3 cost=0\.000043000 (?#
     )asked=fake-ok/, '\$llm_cost: 9 x \$2 + 2 x \$0.5 + 3 x \$8 per M');
like($log, qr/200 model=local .* asked=fake-500/,
     'the asked and the served model are logged');
like($log, qr/cost=- asked=remote-tiny/, 'no price: cost "-"');

# a budget in dollars: spent at the price, refused once spent

my @st;
for (1 .. 4) {
    $r = $t->post('/v1/chat/completions', chat('fake-ok'),
                  Authorization => "Bearer $bkey");
    push @st, $r->{status};
}
is("@st", '200 200 200 429', 'budget \$0.0001: three requests of \$0.000043');
is($r->{json}{error}{code}, 'insufficient_quota', 'budget: insufficient_quota');
like($r->{json}{error}{message}, qr/budget \$0\.000100000 spent/,
     'budget: the message says so');

$r = $t->get('/metrics');
my ($mc) = $r->{content} =~ /^llm_cost_dollars_total\{model="fake-ok"\} (\S+)$/m;
ok(defined $mc && abs($mc - (0.000043 * 5 + 0.000014)) < 1e-9,
   "metrics: cost by model, 5 chats + 7 embedding tokens (@{[ $mc // 'none' ]})");
like($r->{content}, qr/^llm_key_cost_dollars_total\{key="bob"\} (?#
     )0\.000129000$/m, 'metrics: cost by key');
like($r->{content}, qr/^llm_fallbacks_from_total\{model="flaky"\} 8$/m,
     'metrics: the model asked for, answered by its fallback');
like($r->{content}, qr/^llm_fallbacks_from_total\{model="dead-local"\} 1$/m,
     'metrics: the dead local model asked for once');

$fp->stop;
$fe_busy->stop;
$fe_slow->stop;
$p->stop_nginx;
$p->stop_engine('r');
$t->done;

#!/usr/bin/perl
# Engines on other hosts: llm-engine --listen on a non-loopback address
# needs --auth-file (or --insecure-listen); with a secret, a TCP client
# without it (or with another) is refused and logged, llm-client
# --auth-file and nginx's llm_engine_auth_file get through (generate and
# the Info probe behind /healthz); the Unix socket needs no secret.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmEngine;

my $t = LlmTest->new;
my $d = $t->dir;
my $bin = $t->bin('llm-engine');
my $model = $t->model;

# a non-loopback listener without a secret is refused at start

my $out = `$bin --model $model --listen 0.0.0.0:1 2>&1`;
isnt($? >> 8, 0, 'no secret on 0.0.0.0: refused to start');
like($out, qr/non-loopback address would let anyone.*--auth-file/s,
     'no secret: the message says why and what to do');

open my $f, '>', "$d/secret" or die;
print $f "s3cret-engine-token\n";
close $f;
open $f, '>', "$d/wrong" or die;
print $f "not-the-secret\n";
close $f;
open $f, '>', "$d/empty" or die;
close $f;

$out = `$bin --model $model --listen 127.0.0.1:1 --auth-file $d/empty 2>&1`;
like($out, qr/holds no secret/, 'an empty secret file is refused');

my $port = $t->free_port;
my $sock = $t->start_engine('a', args => [ '--listen', "127.0.0.1:$port",
                                           '--auth-file', "$d/secret" ]);

my $req = $LlmEngine::JSON->encode({ max_tokens => 2, temperature => 0,
    messages => [ { role => 'user', content => 'Hi' } ] });
my $client = LlmEngine::client_bin($t);

my $r = LlmEngine::parse(LlmEngine::_run($client, '--tcp', "127.0.0.1:$port",
                                         $req));
like($r->{error}{message} // '', qr/authentication failed/,
     'TCP without the secret: refused');
$r = LlmEngine::parse(LlmEngine::_run($client, '--tcp', "127.0.0.1:$port",
                                      '--auth-file', "$d/wrong", $req));
like($r->{error}{message} // '', qr/authentication failed/,
     'TCP with another secret: refused');
$r = LlmEngine::parse(LlmEngine::_run($client, '--tcp', "127.0.0.1:$port",
                                      '--auth-file', "$d/secret", $req));
is(scalar @{ $r->{tokens} // [] }, 2, 'TCP with the secret: served');
$r = LlmEngine::parse(LlmEngine::_run($client, '--socket', $sock, $req));
is(scalar @{ $r->{tokens} // [] }, 2, 'the Unix socket needs no secret');
like($t->engine_log('a'), qr/refused: no secret.*refused: wrong secret/s,
     'refusals are logged');

# nginx: without llm_engine_auth_file the engine refuses it, with it works

my $conf = <<"EOF2";
    upstream eng { server 127.0.0.1:$port; }
    llm_model tiny upstream=eng;
    %%AUTH%%
    llm_info_cache 100ms;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
        location = /healthz { llm_health on; }
    }
EOF2
my $chat = { model => 'tiny', max_tokens => 2,
             messages => [ { role => 'user', content => 'Hi' } ] };

(my $c1 = $conf) =~ s/%%AUTH%%//;
$t->start_nginx($c1);
my $res = $t->post('/v1/chat/completions', $chat);
isnt($res->{status}, 200, "nginx without the secret: not served ($res->{status})");
ok($res->{json}{error}, 'nginx without the secret: an OpenAI error');

(my $c2 = $conf) =~ s{%%AUTH%%}{llm_engine_auth_file $d/secret;};
ok($t->reload_nginx($c2), 'reload with llm_engine_auth_file');
select(undef, undef, undef, 0.5);     # the old worker's last accepts
$res = $t->post('/v1/chat/completions', $chat);
is($res->{status}, 200, 'nginx with the secret: served');
select(undef, undef, undef, 0.3);
$res = $t->get('/healthz');
is($res->{json}{models}[0]{backends}[0]{up}, JSON::PP::true,
   'the Info probe carries the secret too');

$t->done;

#!/usr/bin/perl
# Metrics of the unhappy paths: an engine that is not there counts in
# llm_upstream_errors_total and as a 502 of its model; a fallback answer
# counts in llm_fallbacks_total under the model that answered; a 400 or
# 404 with a made-up model name takes no model slot.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmKeys;

plan skip_all => 'needs the real gateway' if $ENV{LLM_KEYS_SHIM};

my $t = LlmTest->new;
my ($key, $line) = LlmKeys::new_key('k');
LlmKeys::write_keys($t, $line);
my $dead = $t->dir . '/nobody.sock';
my $dir = $t->dir;

$t->start_engine('a');
LlmKeys::start($t, <<"EOF", workers => 2);
    llm_zone llm 1m;
    upstream good { server unix:%%SOCK_a%%; keepalive 2; }
    upstream gone { server unix:$dead; }
    llm_model tiny upstream=good;
    llm_model broken upstream=gone;
    llm_model shaky upstream=gone fallback=tiny;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        llm_keys $dir/keys;
        location /v1/ { llm_api on; }
        location = /metrics { llm_metrics; }
    }
EOF

my $r = LlmKeys::chat($t, $key, model => 'broken');
is($r->{status}, 502, 'an engine that is not there: 502') or diag $r->{content};

$r = LlmKeys::chat($t, $key, model => 'shaky');
is($r->{status}, 200, 'fallback: 200') or diag $r->{content};
is($r->{json}{model}, 'tiny', 'answered by tiny');

$r = LlmKeys::chat($t, $key, model => 'no-such-model-1');
is($r->{status}, 404, 'unknown model: 404');
$r = LlmKeys::chat($t, $key, model => 'no-such-model-2', max_tokens => -1);
is($r->{status}, 400, 'a bad request: 400');

my $m = LlmKeys::metrics($t->get('/metrics')->{content});
is_deeply($m->{errors}, [], 'the text parses');
is(LlmKeys::sample($m, 'llm_requests_total',
                   { model => 'broken', status => 502 }), 1,
   'the 502 under its model');
cmp_ok(LlmKeys::sample($m, 'llm_upstream_errors_total'), '>=', 1,
       'llm_upstream_errors_total counts it');
is(LlmKeys::sample($m, 'llm_fallbacks_total'), 1, 'llm_fallbacks_total = 1');
is(LlmKeys::sample($m, 'llm_requests_total', { model => 'tiny',
                                               status => 200 }),
   1, 'the fallback answer counts under the model that answered');
my @junk = grep { /no-such-model/ } keys %{ $m->{samples} };
is_deeply(\@junk, [], 'made-up model names take no slot');
is(LlmKeys::sample($m, 'llm_requests_total', { model => 'other',
                                               status => 404 }), 1,
   'the 404 counts as model="other"');
is(LlmKeys::sample($m, 'llm_requests_in_flight'), 0, 'in flight back to 0');

$t->done;

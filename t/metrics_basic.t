#!/usr/bin/perl
# llm_metrics: the Prometheus text parses, and its counts match the
# requests made through two workers: answered, 401, 429, tokens by kind,
# histograms, in-flight back to 0, rate-limited.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmKeys;

my $t = LlmTest->new;
my ($ka, $la) = LlmKeys::new_key('a');
my ($one, $l1) = LlmKeys::new_key('one', rpm => 1);
LlmKeys::write_keys($t, $la, $l1);

LlmKeys::start_backends($t);
LlmKeys::start($t, LlmKeys::api($t, listen => 'reuseport'), workers => 2);

my $model = LlmKeys::model();
my ($prompt, $completion, $ok, $unauth, $limited) = (0, 0, 0, 0, 0);

for my $i (1 .. 4) {
    my $r = LlmKeys::chat($t, $ka, content => "Hello number $i");
    next unless $r->{status} == 200;
    $ok++;
    $prompt += $r->{json}{usage}{prompt_tokens};
    $completion += $r->{json}{usage}{completion_tokens};
}
is($ok, 4, '4 answered');
$unauth++ for grep { $_->{status} == 401 }
    map { LlmKeys::chat($t, 'sk-llm-nope') } 1 .. 2;
is($unauth, 2, '2 refused with 401');
my @one = map { LlmKeys::chat($t, $one) } 1 .. 3;
$limited = grep { $_->{status} == 429 } @one;
is($limited, 2, 'rpm=1: 2 of 3 refused with 429');
for (@one) {
    next unless $_->{status} == 200;
    $ok++;
    $prompt += $_->{json}{usage}{prompt_tokens};
    $completion += $_->{json}{usage}{completion_tokens};
}

# one streamed answer with include_usage
{
    my $s = $t->open_stream('/v1/chat/completions', {
        model => $model, max_tokens => 5, temperature => 0, stream => JSON::PP::true,
        stream_options => { include_usage => JSON::PP::true },
        messages => [ { role => 'user', content => 'Stream please' } ] },
        Authorization => "Bearer $ka");
    my ($st, $h, $body) = $t->read_response($s, 60);
    is($st, 200, 'stream: 200');
    my ($u) = grep { ref $_ && $_->{usage} } LlmTest::sse_events($body);
    ok($u, 'stream: a usage chunk') or diag $body;
    if ($u) {
        $ok++;
        $prompt += $u->{usage}{prompt_tokens};
        $completion += $u->{usage}{completion_tokens};
    }
}

my $r = $t->get('/metrics');
is($r->{status}, 200, '/metrics: 200');
like($r->{headers}{'content-type'}, qr{^text/plain; version=0\.0\.4},
     'the Prometheus content type');
my $m = LlmKeys::metrics($r->{content});
is_deeply($m->{errors}, [], 'every line parses') or diag $r->{content};

is($m->{types}{llm_requests_total}, 'counter', 'llm_requests_total counter');
is($m->{types}{llm_tokens_total}, 'counter', 'llm_tokens_total counter');
is($m->{types}{llm_ttft_seconds}, 'histogram', 'llm_ttft_seconds histogram');
is($m->{types}{llm_request_duration_seconds}, 'histogram',
   'llm_request_duration_seconds histogram');
is($m->{types}{llm_requests_in_flight}, 'gauge', 'in-flight gauge');
for (qw(llm_rate_limited_total llm_fallbacks_total llm_upstream_errors_total)) {
    is($m->{types}{$_}, 'counter', "$_ counter");
}

sub sum_of {
    my ($name, $re) = @_;
    my $s = 0;
    for my $k (keys %{ $m->{samples} }) {
        next unless index($k, "$name\{") == 0 || $k eq $name;
        next if $re && $k !~ $re;
        $s += $m->{samples}{$k};
    }
    return $s;
}

is(LlmKeys::sample($m, 'llm_requests_total', { model => $model,
                                               status => 200 }),
   $ok, "llm_requests_total{model=\"$model\",status=\"200\"} = $ok");
is(sum_of('llm_requests_total', qr/status="401"/), 2, 'two 401 counted');
is(sum_of('llm_requests_total', qr/status="429"/), 2, 'two 429 counted');
is(LlmKeys::sample($m, 'llm_rate_limited_total'), 2,
   'llm_rate_limited_total = 2');
is(LlmKeys::sample($m, 'llm_tokens_total', { model => $model,
                                             kind => 'prompt' }),
   $prompt, "prompt tokens = $prompt, the sum of the usage");
is(LlmKeys::sample($m, 'llm_tokens_total', { model => $model,
                                             kind => 'completion' }),
   $completion, "completion tokens = $completion");
ok(exists $m->{samples}{"llm_tokens_total{kind=\"cached\",model=\"$model\"}"},
   'cached tokens present');
is(LlmKeys::sample($m, 'llm_requests_in_flight'), 0, 'in flight: 0');

my $total = sum_of('llm_requests_total');
is(sum_of('llm_request_duration_seconds_count'), $total,
   'one duration per request counted');
is(LlmKeys::sample($m, 'llm_ttft_seconds_count', { model => $model }), $ok,
   'a first token for every answered request');

# histogram buckets are cumulative and end at the count
for my $h (qw(llm_ttft_seconds llm_request_duration_seconds)) {
    my @b = map { [$_ =~ /le="([^"]+)"/, $m->{samples}{$_}] }
            grep { /^${h}_bucket\{/ && /model="\Q$model\E"/ }
            keys %{ $m->{samples} };
    @b = sort { ($a->[0] eq '+Inf' ? 1e99 : $a->[0])
                <=> ($b->[0] eq '+Inf' ? 1e99 : $b->[0]) } @b;
    my $mono = 1;
    for my $i (1 .. $#b) { $mono = 0 if $b[$i][1] < $b[$i - 1][1] }
    ok($mono, "$h buckets are cumulative");
    is($b[-1][0], '+Inf', "$h ends with +Inf");
    is($b[-1][1], LlmKeys::sample($m, "${h}_count", { model => $model }),
       "$h +Inf = count");
}

# only GET and HEAD
$r = $t->post('/metrics', '{}');
is($r->{status}, 405, 'POST /metrics: 405');

$t->done;

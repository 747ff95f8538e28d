#!/usr/bin/perl
# The gateway's routes against the real engine on the tiny test model:
# chat and legacy completions, JSON and SSE (with include_usage), models,
# healthz, and every OpenAI error class the gateway itself produces (400
# with param, 404 route and model_not_found closest first, 405, 413,
# context_length_exceeded from the engine), plus the $llm_* variables in
# the access log.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;

my $t = LlmTest->new;
$t->start_engine('a');


$t->start_nginx(<<'EOF');
    log_format llm '$status model=$llm_model key=$llm_key_name '
                   'prompt=$llm_prompt_tokens completion=$llm_completion_tokens '
                   'cached=$llm_cached_tokens ttft=$llm_ttft_ms '
                   'finish=$llm_finish_reason error=$llm_error_code';
    upstream engines { server unix:%%SOCK_a%%; keepalive 4; }
    llm_model tiny upstream=engines alias=tiny-latest;
    llm_model gpt-4o-mini upstream=engines;
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log %%DIR%%/llm.log llm;
        client_max_body_size 64k;
        gzip on;
        gzip_types text/event-stream application/json;
        gzip_min_length 1;
        location /v1/ { llm_api on; }
        location = /healthz { llm_health on; }
    }
EOF

my $chat = { model => 'tiny', max_tokens => 8, temperature => 0,
             messages => [ { role => 'system', content => 'Be brief.' },
                           { role => 'user', content => 'Hello' } ] };

# chat, JSON

my $r = $t->post('/v1/chat/completions', $chat);
is($r->{status}, 200, 'chat: 200');
my $j = $r->{json};
like($j->{id}, qr/^chatcmpl-\w{24}$/, 'chat: id');
is($j->{object}, 'chat.completion', 'chat: object');
is($j->{model}, 'tiny', 'chat: model');
ok($j->{created} > 1_600_000_000, 'chat: created');
like($j->{system_fingerprint}, qr/^fp_/, 'chat: system_fingerprint');
is($j->{choices}[0]{index}, 0, 'chat: choice index');
is($j->{choices}[0]{message}{role}, 'assistant', 'chat: role');
ok(length $j->{choices}[0]{message}{content}, 'chat: content');
ok(exists $j->{choices}[0]{message}{refusal}, 'chat: refusal key');
ok(exists $j->{choices}[0]{logprobs}, 'chat: logprobs key');
is($j->{choices}[0]{finish_reason}, 'length', 'chat: finish_reason length');
is($j->{usage}{completion_tokens}, 8, 'chat: completion_tokens');
ok($j->{usage}{prompt_tokens} > 0, 'chat: prompt_tokens');
is($j->{usage}{total_tokens},
   $j->{usage}{prompt_tokens} + $j->{usage}{completion_tokens},
   'chat: total_tokens');
ok(exists $j->{usage}{prompt_tokens_details}{cached_tokens},
   'chat: cached_tokens');
my $greedy = $j->{choices}[0]{message}{content};

# the same request, greedy: the same text (aliases route to the same model)

$r = $t->post('/v1/chat/completions', { %$chat, model => 'tiny-latest' });
is($r->{json}{choices}[0]{message}{content}, $greedy, 'alias: same text');
is($r->{json}{model}, 'tiny', 'alias: model is the configured name');

# chat, n = 2, logprobs

$r = $t->post('/v1/chat/completions', { %$chat, n => 2, logprobs => JSON::PP::true,
                                         top_logprobs => 2, temperature => 1,
                                         seed => 7 });
is($r->{status}, 200, 'n=2: 200');
is(scalar @{ $r->{json}{choices} }, 2, 'n=2: two choices');
my $lp = $r->{json}{choices}[0]{logprobs}{content};
ok($lp && @$lp, 'logprobs: content array');
ok(defined $lp->[0]{logprob} && ref $lp->[0]{bytes} eq 'ARRAY',
   'logprobs: logprob and bytes');
is(scalar @{ $lp->[0]{top_logprobs} }, 2, 'logprobs: top_logprobs 2');

# chat, SSE with include_usage

my $s = $t->open_stream('/v1/chat/completions',
                        { %$chat, stream => JSON::PP::true,
                          stream_options => { include_usage => JSON::PP::true } },
                        'Accept-Encoding' => 'gzip');
my ($st, $h, $body) = $t->read_response($s);
is($st, 200, 'sse: 200');
is($h->{'content-type'}, 'text/event-stream', 'sse: content type');
is($h->{'cache-control'}, 'no-cache', 'sse: cache-control');
is($h->{'x-accel-buffering'}, 'no', 'sse: x-accel-buffering');
ok(!$h->{'content-encoding'}, 'sse: gzip never applies');
my @ev = LlmTest::sse_events($body);
is($ev[-1], '[DONE]', 'sse: ends with [DONE]');
my @chunks = grep { ref } @ev;
is($chunks[0]{object}, 'chat.completion.chunk', 'sse: chunk object');
is($chunks[0]{choices}[0]{delta}{role}, 'assistant', 'sse: first delta role');
ok(exists $chunks[0]{usage} && !defined $chunks[0]{usage},
   'sse: usage null in chunks');
my $text = join '', map { $_->{choices}[0]{delta}{content} // '' }
                    grep { @{ $_->{choices} } } @chunks;
is($text, $greedy, 'sse: same text as JSON');
my ($fin) = grep { @{ $_->{choices} } && $_->{choices}[0]{finish_reason} } @chunks;
is($fin->{choices}[0]{finish_reason}, 'length', 'sse: finish chunk');
my $usage = $chunks[-1];
is(scalar @{ $usage->{choices} }, 0, 'sse: usage chunk has no choices');
is($usage->{usage}{completion_tokens}, 8, 'sse: usage completion_tokens');
my %ids = map { $_->{id} => 1 } @chunks;
is(scalar keys %ids, 1, 'sse: one id for all chunks');

# SSE with n = 2 and logprobs: deltas and a finish chunk per choice

$s = $t->open_stream('/v1/chat/completions',
                     { %$chat, stream => JSON::PP::true, n => 2, seed => 3,
                       temperature => 1, logprobs => JSON::PP::true,
                       top_logprobs => 1 });
($st, $h, $body) = $t->read_response($s);
@chunks = grep { ref } LlmTest::sse_events($body);
my %fins = map { $_->{choices}[0]{index} => $_->{choices}[0]{finish_reason} }
           grep { @{ $_->{choices} } && $_->{choices}[0]{finish_reason} } @chunks;
is_deeply(\%fins, { 0 => 'length', 1 => 'length' }, 'sse n=2: a finish per choice');
my ($lpc) = grep { @{ $_->{choices} } && $_->{choices}[0]{logprobs} } @chunks;
ok($lpc && @{ $lpc->{choices}[0]{logprobs}{content} }, 'sse: logprobs in deltas');
my %roles = map { $_->{choices}[0]{index} => 1 }
            grep { @{ $_->{choices} } && ($_->{choices}[0]{delta}{role} // '') eq 'assistant' } @chunks;
is(scalar keys %roles, 2, 'sse n=2: each choice gets the role once');

# HEAD /v1/models: headers only

$r = $t->http('HEAD', '/v1/models');
is($r->{status}, 200, 'HEAD models');
ok(!length($r->{content} // ''), 'HEAD models: no body');

# without include_usage: no usage key

$s = $t->open_stream('/v1/chat/completions', { %$chat, stream => JSON::PP::true });
($st, $h, $body) = $t->read_response($s);
@chunks = grep { ref } LlmTest::sse_events($body);
ok(!exists $chunks[0]{usage}, 'sse: no usage key without include_usage');
ok(!grep({ !@{ $_->{choices} } } @chunks), 'sse: no usage chunk');

# legacy completions

$r = $t->post('/v1/completions', { model => 'tiny', prompt => 'Once upon',
                                   max_tokens => 5, temperature => 0 });
is($r->{status}, 200, 'completions: 200');
like($r->{json}{id}, qr/^cmpl-/, 'completions: id');
is($r->{json}{object}, 'text_completion', 'completions: object');
ok(defined $r->{json}{choices}[0]{text}, 'completions: text');
is($r->{json}{usage}{completion_tokens}, 5, 'completions: usage');

# seeded: unseeded sampling picked the end token first about once in 300
# runs (a 0-token answer, its logprobs empty)
$r = $t->post('/v1/completions', { model => 'tiny', prompt => 'Once upon',
                                   max_tokens => 3, logprobs => 2,
                                   seed => 11 });
my $clp = $r->{json}{choices}[0]{logprobs};
is(scalar @{ $clp->{tokens} }, 3, 'completions logprobs: tokens');
is(scalar @{ $clp->{text_offset} }, 3, 'completions logprobs: text_offset');

# an answer whose first token is the end (forced with logit_bias): logprobs
# asked for are an empty object, not null
{
    my $tk = `@{[ $t->bin('llm-client') ]} --socket @{[ $t->engine_sock('a') ]} --tokenize '<|im_end|>' --parse-special`;
    my ($eos) = $tk =~ /"tokens":\[(\d+)\]/;
    ok(defined $eos, 'the end token id') or diag $tk;
    $r = $t->post('/v1/completions', { model => 'tiny', prompt => 'Once upon',
                                       max_tokens => 3, logprobs => 1,
                                       logit_bias => { $eos => 100 } });
    is($r->{json}{choices}[0]{finish_reason}, 'stop', 'end first: stop');
    is_deeply($r->{json}{choices}[0]{logprobs},
              { tokens => [], token_logprobs => [], top_logprobs => [],
                text_offset => [] }, 'end first: empty completion logprobs');
    $r = $t->post('/v1/chat/completions', { %$chat, logprobs => JSON::PP::true,
                                            logit_bias => { $eos => 100 } });
    is_deeply($r->{json}{choices}[0]{logprobs},
              { content => [], refusal => undef },
              'end first: empty chat logprobs');
}

$s = $t->open_stream('/v1/completions', { model => 'tiny', prompt => 'Once',
                                          max_tokens => 4,
                                          stream => JSON::PP::true });
($st, $h, $body) = $t->read_response($s);
@ev = LlmTest::sse_events($body);
is($ev[-1], '[DONE]', 'completions sse: [DONE]');
is($ev[0]{object}, 'text_completion', 'completions sse: object');

# models, healthz

$r = $t->get('/v1/models');
is($r->{status}, 200, 'models: 200');
is($r->{json}{object}, 'list', 'models: list');
is_deeply([ map { $_->{id} } @{ $r->{json}{data} } ],
          [ 'tiny', 'tiny-latest', 'gpt-4o-mini' ], 'models: names and aliases');
ok($r->{json}{data}[0]{created} > 0, 'models: created from the engine');
$r = $t->get('/v1/models/gpt-4o-mini');
is($r->{json}{id}, 'gpt-4o-mini', 'models/{id}');
$r = $t->get('/v1/models/nope');
is($r->{status}, 404, 'models/{id}: 404');
is($r->{json}{error}{code}, 'model_not_found', 'models/{id}: code');

$r = $t->get('/healthz');
is($r->{status}, 200, 'healthz: 200');
is($r->{json}{status}, 'ok', 'healthz: ok');
my $be = $r->{json}{models}[0]{backends}[0];
ok($be->{up}, 'healthz: backend up');
is($be->{load_state}, 'ready', 'healthz: load state');
ok(length $be->{revision}, 'healthz: revision');
ok(defined $be->{queue_depth}, 'healthz: queue depth');

# errors: every body has the four keys

sub err_ok {
    my ($r, $status, $code, $param, $name) = @_;
    is($r->{status}, $status, "$name: $status");
    my $e = $r->{json}{error};
    ok($e && (join ',', sort keys %$e) eq 'code,message,param,type',
       "$name: four keys");
    is($e->{code}, $code, "$name: code") if defined $code;
    is($e->{param}, $param, "$name: param") if defined $param;
    return $e;
}

my $e = err_ok($t->post('/v1/chat/completions', '{"model": "tiny", '),
               400, undef, undef, 'bad json');
like($e->{message}, qr/line 1, column \d+/, 'bad json: position');
ok(!defined $e->{param}, 'bad json: param null');

err_ok($t->post('/v1/chat/completions', "\"\xff\""), 400, undef, undef,
       'invalid utf-8');
err_ok($t->post('/v1/chat/completions', { messages => [] }), 400,
       'missing_required_parameter', 'model', 'missing model');
err_ok($t->post('/v1/chat/completions', { model => 'tiny' }), 400,
       'missing_required_parameter', 'messages', 'missing messages');
err_ok($t->post('/v1/chat/completions', { model => 'tiny', messages => [] }),
       400, 'empty_array', 'messages', 'empty messages');

my %bad = (
    'temperature' => [ { temperature => 2.5 }, 'decimal_above_max_value' ],
    'top_p' => [ { top_p => -0.1 }, 'decimal_below_min_value' ],
    'n' => [ { n => 0 }, 'integer_below_min_value' ],
    'max_tokens' => [ { max_tokens => 'x' }, 'invalid_type' ],
    'top_logprobs' => [ { logprobs => JSON::PP::true, top_logprobs => 21 },
                        'integer_above_max_value' ],
    'stop' => [ { stop => [ 'a', 'b', 'c', 'd', 'e' ] },
                'array_above_max_length' ],
    'stream_options' => [ { stream_options => { include_usage => JSON::PP::true } },
                          'invalid_value' ],
    'messages[1].role' => [ { messages => [ { role => 'user', content => 'x' },
                                            { role => 'wizard', content => 'y' } ] },
                            'invalid_value' ],
    'messages[0].content[0].type' => [
        { messages => [ { role => 'user', content => [
            { type => 'image_url', image_url => { url => 'http://x/y.png' } } ] } ] },
        'unsupported_content' ],
    'messages[0].tool_call_id' => [ { messages => [ { role => 'tool', content => 'r' } ] },
                                    'missing_required_parameter' ],
    'tools[0].function.parameters' => [
        { tools => [ { type => 'function',
                       function => { name => 'f', parameters => 'nope' } } ] },
        'invalid_type' ],
    'tools[0].type' => [ { tools => [ { type => 'retrieval' } ] }, 'invalid_value' ],
    'tools[0].function.name' => [
        { tools => [ { type => 'function', function => { name => 'bad name!' } } ] },
        'invalid_value' ],
    'tool_choice' => [ { tool_choice => 'required' }, 'invalid_value' ],
    'response_format.type' => [ { response_format => { type => 'xml' } },
                                'invalid_value' ],
    'logit_bias' => [ { logit_bias => { '12' => 200 } }, 'invalid_value' ],
);

for my $param (sort keys %bad) {
    my ($extra, $code) = @{ $bad{$param} };
    err_ok($t->post('/v1/chat/completions', { %$chat, %$extra }), 400, $code,
           $param, "bad $param");
}

# unknown top-level fields are ignored

$r = $t->post('/v1/chat/completions', { %$chat, vendor_extra => { a => 1 } });
is($r->{status}, 200, 'unknown field ignored');

# tools accepted (the tiny model may or may not call them)

$r = $t->post('/v1/chat/completions', { %$chat,
    tools => [ { type => 'function', function => { name => 'get_weather',
        description => 'weather', parameters => { type => 'object',
        properties => { city => { type => 'string' } } } } } ],
    tool_choice => 'auto', parallel_tool_calls => JSON::PP::false });
is($r->{status}, 200, 'tools: accepted');

# 404 model_not_found, closest first

$e = err_ok($t->post('/v1/chat/completions', { %$chat, model => 'gpt-4o-mimi' }),
            404, 'model_not_found', 'model', 'unknown model');
like($e->{message}, qr/'gpt-4o-mini', 'tiny'/, 'unknown model: closest first');

# 404 route, 405 method

$e = err_ok($t->post('/v1/images/generations', { model => 'tiny' }), 404, undef, undef,
            'unknown route');
like($e->{message}, qr{Invalid URL \(POST /v1/images/generations\)}, 'unknown route: message');
$r = $t->get('/v1/chat/completions');
err_ok($r, 405, 'method_not_allowed', undef, 'GET chat');
is($r->{headers}{allow}, 'POST', '405: Allow');
err_ok($t->post('/v1/models', {}), 405, 'method_not_allowed', undef, 'POST models');

# 413 over client_max_body_size (Content-Length, and chunked)

my $big = { %$chat, messages => [ { role => 'user', content => 'x' x 70000 } ] };
err_ok($t->post('/v1/chat/completions', $big), 413, 'request_too_large', undef,
       '413 content-length');

$s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port) or die;
my $payload = 'y' x 70000;
print $s "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
    . "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    . sprintf("%x\r\n%s\r\n0\r\n\r\n", length $payload, $payload);
($st, $h, $body) = $t->read_response($s);
is($st, 413, '413 chunked');
like($body, qr/"code":"request_too_large"/, '413 chunked: OpenAI body');

# a body in a temp file (over client_body_buffer_size) still parses

$r = $t->post('/v1/chat/completions',
              { %$chat, messages => [ { role => 'user', content => 'ab ' x 5000 } ],
                max_tokens => 1 });
ok($r->{status} == 200 || $r->{status} == 400, 'large body read from file')
    or diag $r->{content};

# context_length_exceeded from the engine as 400

$e = err_ok($t->post('/v1/chat/completions',
                     { %$chat, messages => [ { role => 'user',
                                               content => 'hello world ' x 4000 } ] }),
            400, 'context_length_exceeded', undef, 'context length');

# the access log carries the metering variables

$t->stop_nginx;
my $log = $t->slurp($t->dir . '/llm.log');
like($log, qr/^200 model=tiny key=- prompt=\d+ completion=8 cached=\d+ ttft=\d+ finish=length error=-$/m,
     'access log: a finished request');
like($log, qr/^404 model=gpt-4o-mimi .* error=model_not_found$/m,
     'access log: an error code');
like($log, qr/^400 .* error=context_length_exceeded$/m,
     'access log: engine error code');

$t->done;

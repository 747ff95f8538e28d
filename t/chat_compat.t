#!/usr/bin/perl
# Chat-completions compatibility with what current clients send and read
# (issue 33, item 4), against the real engine on the tiny test model
# (a Qwen2.5-style template: no developer role, Hermes tool calls):
#
# - a developer message is the system message of a template without a
#   developer role: the same prompt as with a system message, longer than
#   without it.
# - tool_choice "none" on the demo model (trained to call lookup_order
#   for such a question, which it does with "auto"): no tool-call markup
#   in the content, JSON or streamed, no tool_calls, no finish_reason
#   tool_calls.
# - legacy functions / function_call: mapped to tools / tool_choice, the
#   answer in the legacy shape (message.function_call, finish_reason
#   function_call; streamed as function_call deltas), a legacy call and
#   function result in the history rendered, bad legacy fields are 400s.
# - streamed tool calls: no empty {"content":""} deltas; every event but
#   the last carries tool-call pieces, the first one the role (with
#   content null), counted event by event.
# - x-request-id on every response (the body's id where there is one,
#   also in the stream's chunks and in $llm_request_id in the access log);
#   /v1/models and /v1/models/{id} with the context length
#   (context_length and max_model_len) and the engine's limits.
# - llm_cors: the preflight (204 with the Access-Control-* headers, 403
#   for an origin not listed), Access-Control-Allow-Origin and
#   -Expose-Headers on answers and errors; off by default (OPTIONS 405).
# - invalid values of known fields are 400s naming the field (modalities
#   with audio, reasoning_effort, service_tier, verbosity off their enums,
#   audio, prediction); their valid values and unknown fields pass.
# - /v1/completions with the prompt as token ids ([ids] and [[ids]]): the
#   same answer and prompt_tokens as the text, echo gives the text back;
#   a bad id names itself.  Several prompts (strings or token-id arrays):
#   n choices each, index prompt * n + j, each the same as that prompt
#   alone (greedy), usage over all of them, echo per prompt, streamed too;
#   n times the prompts over the engine's limit is a 400.
# - echo with logprobs: the prompt's tokens come first in the logprobs
#   (null for the first), and a prompt token's logprob is the one the
#   same token had when it was generated.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;

my $t = LlmTest->new;
$t->start_engine('a');
$t->start_engine('demo', model => "$LlmTest::REPO/models/demo/demo-q8_0.gguf");

$t->start_nginx(<<'EOF2');
    upstream engines { server unix:%%SOCK_a%%; keepalive 4; }
    llm_model tiny upstream=engines;
    upstream demo { server unix:%%SOCK_demo%%; keepalive 4; }
    llm_model demo upstream=demo;
    log_format ids '$status $llm_request_id';
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log %%DIR%%/ids.log ids;
        client_max_body_size 1k;
        location /v1/ { llm_api on; }
        location = /healthz { llm_health on; }
        location /cors/v1/ {
            llm_api on;
            llm_cors https://app.example.com http://localhost:3000;
        }
        location /any/v1/ { llm_api on; llm_cors *; }
    }
EOF2

sub chat {
    my (%o) = @_;
    return $t->post('/v1/chat/completions',
                    { model => 'tiny', max_tokens => 1, temperature => 0,
                      %o });
}

sub prompt_tokens {
    my (@msgs) = @_;
    my $r = chat(messages => \@msgs);
    is($r->{status}, 200, 'developer: 200') or diag $r->{content};
    return $r->{json}{usage}{prompt_tokens};
}

# developer messages

my $user = { role => 'user', content => 'Hello' };
my $text = 'Answer in French, briefly and politely.';
my $plain = prompt_tokens($user);
my $dev = prompt_tokens({ role => 'developer', content => $text }, $user);
my $sys = prompt_tokens({ role => 'system', content => $text }, $user);
ok($dev > $plain, "developer: counted ($dev > $plain prompt tokens)");
is($dev, $sys, 'developer: rendered as the system message');
my $both = prompt_tokens({ role => 'system', content => $text },
                         { role => 'developer', content => $text }, $user);
ok($both > $sys, 'developer after system: also rendered');

# tool_choice none

my $tools = [
    { type => 'function', function => {
        name => 'lookup_order', description => 'Look up an order.',
        parameters => { type => 'object', properties => {
            order_id => { type => 'string' } }, required => ['order_id'] } } },
    { type => 'function', function => {
        name => 'issue_refund', description => 'Refund an order.',
        parameters => { type => 'object', properties => {
            order_id => { type => 'string' } }, required => ['order_id'] } } },
];
my $markup = qr/<\/?tool_call>|\{"name": ?"/;
my @asks = ('order 68405 status please', 'where is my order 12345?',
            'Refund order 80975 please, the summer dress broke.');
for my $q (@asks) {
    my %req = (model => 'demo', max_tokens => 60, temperature => 0,
               tools => $tools,
               messages => [ { role => 'user', content => $q } ]);
    my $r = chat(%req, tool_choice => 'auto');
    my $auto = $r->{json}{choices}[0];
    is($auto->{finish_reason}, 'tool_calls', "auto: '$q' calls a tool")
        or diag $r->{content};
    $r = chat(%req, tool_choice => 'none');
    my $ch = $r->{json}{choices}[0];
    is($r->{status}, 200, "none: '$q' 200");
    unlike($ch->{message}{content} // '', $markup,
           "none: no tool-call markup in '$ch->{message}{content}'");
    ok(!$ch->{message}{tool_calls}, 'none: no tool_calls');
    like($ch->{finish_reason}, qr/^(stop|length)$/,
         'none: finish_reason stop or length');

    my $s = $t->open_stream('/v1/chat/completions',
                            { %req, tool_choice => 'none', stream => \1 });
    my ($st, $h, $body) = $t->read_response($s);
    my @ev = grep { ref } LlmTest::sse_events($body);
    my $text = join '', map { $_->{choices}[0]{delta}{content} // '' }
                        grep { @{ $_->{choices} } } @ev;
    is($text, $ch->{message}{content} // '', 'none, streamed: same text');
    ok(!grep({ @{ $_->{choices} } && $_->{choices}[0]{delta}{tool_calls} }
             @ev), 'none, streamed: no tool_calls deltas');
}

# streamed tool calls: the events counted

{
    my $s = $t->open_stream('/v1/chat/completions',
        { model => 'demo', max_tokens => 60, temperature => 0,
          tools => $tools, stream => \1,
          messages => [ { role => 'user',
                          content => 'order 68405 status please' } ] });
    my ($st, $h, $body) = $t->read_response($s);
    my @ev = grep { ref } LlmTest::sse_events($body);
    my @d = map { $_->{choices}[0]{delta} } @ev;
    my $calls = grep { $_->{tool_calls} } @d;
    my $empty = grep { exists $_->{content} && defined $_->{content}
                       && $_->{content} eq '' } @d;
    my $roles = grep { exists $_->{role} } @d;
    ok($calls >= 3, "tool stream: $calls tool_calls deltas");
    is($empty, 0, 'tool stream: no empty content deltas');
    is(scalar @ev, $calls + 1,
       'tool stream: every event but the finish carries a call piece');
    is($roles, 1, 'tool stream: one delta carries the role');
    is($d[0]{role}, 'assistant', 'tool stream: the first one');
    ok(exists $d[0]{content} && !defined $d[0]{content},
       'tool stream: with content null');
    is($ev[-1]{choices}[0]{finish_reason}, 'tool_calls',
       'tool stream: finish_reason tool_calls');

    # a text answer: no empty deltas either, the role on the first
    $s = $t->open_stream('/v1/chat/completions',
        { model => 'demo', max_tokens => 20, temperature => 0, stream => \1,
          messages => [ { role => 'user',
                          content => 'How many days do I have to return '
                                     . 'an item?' } ] });
    ($st, $h, $body) = $t->read_response($s);
    @ev = grep { ref } LlmTest::sse_events($body);
    @d = map { $_->{choices}[0]{delta} } @ev;
    is(scalar(grep { defined $_->{content} && $_->{content} eq '' } @d), 0,
       'text stream: no empty content deltas');
    is($d[0]{role}, 'assistant', 'text stream: the first delta has the role');
    ok(length $d[0]{content}, 'text stream: and text');
}

# x-request-id

{
    my $r = chat(messages => [ $user ]);
    my $id = $r->{headers}{'x-request-id'};
    like($id, qr/^chatcmpl-\w{24}$/, 'x-request-id on chat');
    is($id, $r->{json}{id}, 'x-request-id: the body id');
    my @ids = ($id);

    my $s = $t->open_stream('/v1/chat/completions',
        { model => 'tiny', max_tokens => 3, stream => \1,
          messages => [ $user ] });
    my ($st, $h, $body) = $t->read_response($s);
    my @ev = grep { ref } LlmTest::sse_events($body);
    close $s;
    like($h->{'x-request-id'}, qr/^chatcmpl-\w{24}$/,
         'x-request-id on a stream');
    is(scalar(grep { $_->{id} ne $h->{'x-request-id'} } @ev), 0,
       'x-request-id: the chunks\' id');
    push @ids, $h->{'x-request-id'};

    $r = $t->post('/v1/completions', { model => 'tiny', prompt => 'Hi',
                                       max_tokens => 2 });
    is($r->{headers}{'x-request-id'}, $r->{json}{id},
       'x-request-id on completions: the body id');
    push @ids, $r->{json}{id};

    for my $c ([ 'GET', '/v1/models', undef, 200 ],
               [ 'GET', '/v1/models/tiny', undef, 200 ],
               [ 'GET', '/v1/models/nope', undef, 404 ],
               [ 'GET', '/v1/nowhere', undef, 404 ],
               [ 'GET', '/v1/chat/completions', undef, 405 ],
               [ 'POST', '/v1/chat/completions', '{"model":', 400 ],
               [ 'POST', '/v1/chat/completions', 'x' x 2000, 413 ],
               [ 'GET', '/healthz', undef, 200 ]) {
        my ($m, $path, $b, $status) = @$c;
        $r = $t->http($m, $path, $b);
        is($r->{status}, $status, "$m $path: $status");
        like($r->{headers}{'x-request-id'}, qr/^(req_|chatcmpl-)\w{24}$/,
             "$m $path: x-request-id");
        push @ids, $r->{headers}{'x-request-id'};
    }
    # a stream's line is written when its request is finalized, which
    # may come after its last byte was read
    my %logged;
    for (1 .. 50) {
        %logged = map { (split ' ')[1] => 1 }
                  split /\n/, $t->slurp($t->dir . '/ids.log');
        last unless grep { !$logged{$_} } @ids;
        select(undef, undef, undef, 0.1);
    }
    is(join(' ', grep { !$logged{$_} } @ids), '',
       'every x-request-id is $llm_request_id in the access log');
}

# /v1/models: context length and limits

{
    my $h = $t->get('/healthz')->{json};
    my ($tiny) = grep { $_->{id} eq 'tiny' } @{ $h->{models} };
    my $ctxlen = $tiny->{backends}[0]{context_length};
    ok($ctxlen > 0, "the engine's context window: $ctxlen");
    my $one = $t->get('/v1/models/tiny')->{json};
    is($one->{context_length}, $ctxlen, '/v1/models/{id}: context_length');
    is($one->{max_model_len}, $ctxlen, '/v1/models/{id}: max_model_len');
    ok($one->{limits}{max_choices} >= 1,
       "/v1/models/{id}: limits.max_choices $one->{limits}{max_choices}");
    ok($one->{limits}{max_top_logprobs} >= 1,
       '/v1/models/{id}: limits.max_top_logprobs');
    ok(exists $one->{limits}{$_}, "/v1/models/{id}: limits.$_")
        for qw(max_stop max_stop_bytes);
    my ($listed) = grep { $_->{id} eq 'tiny' }
                   @{ $t->get('/v1/models')->{json}{data} };
    is_deeply($listed, $one, '/v1/models lists the same object');
    my $r = $t->post('/v1/chat/completions',
                     { model => 'tiny', messages => [ $user ],
                       n => $one->{limits}{max_choices} + 1 });
    is($r->{status}, 400, 'n over limits.max_choices: 400');
    like($r->{json}{error}{message}, qr/\b$one->{limits}{max_choices}\b/,
         'n over limits.max_choices: the message gives that one figure');
    is($r->{json}{error}{param}, 'n', 'n over limits.max_choices: param n');
}

# CORS

{
    my $app = 'https://app.example.com';
    my %pre = (Origin => $app, 'Access-Control-Request-Method' => 'POST',
               'Access-Control-Request-Headers' =>
                   'authorization, content-type, x-stainless-os');
    my $r = $t->http('OPTIONS', '/cors/v1/chat/completions', undef, %pre);
    my $h = $r->{headers};
    is($r->{status}, 204, 'preflight: 204');
    is($h->{'access-control-allow-origin'}, $app, 'preflight: the origin');
    like($h->{'access-control-allow-methods'}, qr/\bPOST\b/,
         'preflight: POST allowed');
    is($h->{'access-control-allow-headers'},
       'authorization, content-type, x-stainless-os',
       'preflight: the headers asked for');
    ok($h->{'access-control-max-age'} > 0, 'preflight: max-age');
    like($h->{vary} // '', qr/Origin/, 'preflight: Vary: Origin');
    is($r->{content} // '', '', 'preflight: no body');

    $r = $t->http('OPTIONS', '/cors/v1/models', undef, %pre,
                  Origin => 'http://localhost:3000');
    is($h = $r->{headers}{'access-control-allow-origin'},
       'http://localhost:3000', 'preflight: the second origin');

    $r = $t->http('OPTIONS', '/cors/v1/chat/completions', undef, %pre,
                  Origin => 'https://evil.example.com');
    is($r->{status}, 403, 'preflight, origin not listed: 403');
    is($r->{json}{error}{code}, 'origin_not_allowed',
       'preflight, origin not listed: the code');
    ok(!$r->{headers}{'access-control-allow-origin'},
       'preflight, origin not listed: no Allow-Origin');

    my $body = { model => 'tiny', max_tokens => 2, messages => [ $user ] };
    $r = $t->post('/cors/v1/chat/completions', $body, Origin => $app);
    $h = $r->{headers};
    is($r->{status}, 200, 'CORS chat: 200');
    is($h->{'access-control-allow-origin'}, $app, 'CORS chat: Allow-Origin');
    like($h->{'access-control-expose-headers'}, qr/\bx-request-id\b/,
         'CORS chat: x-request-id exposed');
    $r = $t->post('/cors/v1/chat/completions', '{', Origin => $app);
    is($r->{status}, 400, 'CORS error: 400');
    is($r->{headers}{'access-control-allow-origin'}, $app,
       'CORS error: Allow-Origin');
    my $s = $t->open_stream('/cors/v1/chat/completions',
                            { %$body, stream => \1 }, Origin => $app);
    my ($st, $sh) = $t->read_response($s);
    close $s;
    is($sh->{'access-control-allow-origin'}, $app, 'CORS stream: Allow-Origin');
    $r = $t->post('/cors/v1/chat/completions', $body,
                  Origin => 'https://evil.example.com');
    is($r->{status}, 200, 'origin not listed: the answer');
    ok(!$r->{headers}{'access-control-allow-origin'},
       'origin not listed: no Allow-Origin');

    $r = $t->http('OPTIONS', '/any/v1/chat/completions', undef, %pre,
                  Origin => 'https://anyone.example.org');
    is($r->{status}, 204, 'llm_cors *: preflight 204');
    is($r->{headers}{'access-control-allow-origin'}, '*',
       'llm_cors *: Allow-Origin *');

    $r = $t->http('OPTIONS', '/v1/chat/completions', undef, %pre);
    is($r->{status}, 405, 'no llm_cors: OPTIONS is 405');
    $r = $t->post('/v1/chat/completions', $body, Origin => $app);
    ok(!$r->{headers}{'access-control-allow-origin'},
       'no llm_cors: no Allow-Origin');
}

# known fields with values this server cannot take

{
    my @bad = (
        [ { modalities => [ 'text', 'audio' ] }, 'modalities',
          'unsupported_value' ],
        [ { modalities => [ 'video' ] }, 'modalities[0]', 'invalid_value' ],
        [ { modalities => 'text' }, 'modalities', 'invalid_type' ],
        [ { reasoning_effort => 'bogus' }, 'reasoning_effort',
          'invalid_value' ],
        [ { reasoning_effort => 3 }, 'reasoning_effort', 'invalid_type' ],
        [ { service_tier => 'bogus' }, 'service_tier', 'invalid_value' ],
        [ { verbosity => 'loud' }, 'verbosity', 'invalid_value' ],
        [ { audio => { voice => 'alloy', format => 'wav' } }, 'audio',
          'unsupported_parameter' ],
        [ { prediction => { type => 'content', content => 'x' } },
          'prediction', 'unsupported_parameter' ],
        [ { prediction => { type => 'bogus', content => 'x' } },
          'prediction.type', 'invalid_value' ],
    );
    for my $b (@bad) {
        my ($extra, $param, $code) = @$b;
        my $r = chat(messages => [ $user ], %$extra);
        my $e = $r->{json}{error};
        is($r->{status}, 400, "400 for $param ($code)");
        is($e->{param}, $param, "param $param");
        is($e->{code}, $code, "code $code");
        is($e->{type}, 'invalid_request_error', "$param: the type");
    }
    my $r = chat(messages => [ $user ], reasoning_effort => 'bogus');
    like($r->{json}{error}{message},
         qr/'bogus'.*'none', 'minimal', 'low', 'medium', 'high', 'xhigh', and 'max'/,
         'the message lists the documented values');

    $r = chat(messages => [ $user ], modalities => ['text'],
              reasoning_effort => 'low', service_tier => 'auto',
              verbosity => 'medium', prediction => undef, audio => undef,
              store => JSON::PP::false, metadata => { a => 'b' },
              some_vendor_extra => { x => 1 });
    is($r->{status}, 200, 'valid values and unknown fields pass')
        or diag $r->{content};
}

# completions: token-id prompts

{
    my $text = 'The cat sat on the';
    my $bin = $t->bin('llm-tokenize');
    my $ids = `printf '%s' '$text' | '$bin' -m '${\ $t->model}' --bos --special --ids-only`;
    my @ids = split ' ', $ids;
    ok(@ids > 2, "'$text' is @ids");
    my %c = (model => 'tiny', max_tokens => 6, temperature => 0);
    my $r = $t->post('/v1/completions', { %c, prompt => $text });
    my $want = $r->{json}{choices}[0]{text};
    my $ptok = $r->{json}{usage}{prompt_tokens};
    is($ptok, scalar @ids, 'text prompt: its tokens');
    for my $p ([ map { 0 + $_ } @ids ], [ [ map { 0 + $_ } @ids ] ]) {
        my $shape = ref $p->[0] ? '[[ids]]' : '[ids]';
        $r = $t->post('/v1/completions', { %c, prompt => $p });
        is($r->{status}, 200, "$shape: 200") or diag $r->{content};
        is($r->{json}{choices}[0]{text}, $want, "$shape: the same text");
        is($r->{json}{usage}{prompt_tokens}, $ptok,
           "$shape: the same prompt_tokens");
    }
    $r = $t->post('/v1/completions',
                  { %c, prompt => [ map { 0 + $_ } @ids ], echo => \1 });
    is($r->{json}{choices}[0]{text}, $text . $want,
       'token-id prompt with echo: the text first');

    for my $b ([ [ 'a', [ 3, 4 ] ], 'prompt[1]', qr/string/ ],
               [ [ [ 3, 4 ], 'a' ], 'prompt[1]', qr/token ids/ ],
               [ [ [ 3, 4 ], [ 5, -1 ] ], 'prompt[1][1]',
                 qr/not a token id/ ],
               [ [ ('a') x 9 ], 'n', qr/at most \d+, got 2 x 9/ ],
               [ [ 5, -1 ], 'prompt[1]', qr/not a token id/ ],
               [ [ 5, 'x' ], 'prompt[1]', qr/integer/ ],
               [ [ [] ], 'prompt[0]', qr/empty/ ],
               [ [], 'prompt', qr/empty/ ],
               [ [ 5, 99999999 ], 'prompt', qr/99999999.*vocabulary/ ]) {
        $r = $t->post('/v1/completions', { %c, n => 2, prompt => $b->[0] });
        is($r->{status}, 400,
           '400 for prompt ' . JSON::PP->new->encode($b->[0]));
        is($r->{json}{error}{param}, $b->[1], "param $b->[1]");
        like($r->{json}{error}{message}, $b->[2], "message $b->[2]");
    }
}

# completions: several prompts

{
    my %c = (model => 'tiny', max_tokens => 5, temperature => 0);
    my @texts = ('The cat sat on the', 'Once upon a time', 'Hello');
    my (@alone, @ptok, @tok);
    my $bin = $t->bin('llm-tokenize');
    for my $p (@texts) {
        my $r = $t->post('/v1/completions', { %c, prompt => $p });
        push @alone, $r->{json}{choices}[0]{text};
        push @ptok, $r->{json}{usage}{prompt_tokens};
        push @tok, [ map { 0 + $_ } split ' ',
                     `printf '%s' '$p' | '$bin' -m '${\ $t->model}' --bos --special --ids-only` ];
    }
    my $total = 0;
    $total += $_ for @ptok;
    for my $case ([ 'strings', \@texts ], [ 'token ids', \@tok ]) {
        my ($what, $prompts) = @$case;
        my $r = $t->post('/v1/completions',
                         { %c, prompt => $prompts, n => 2 });
        is($r->{status}, 200, "several prompts ($what): 200")
            or diag $r->{content};
        my @ch = @{ $r->{json}{choices} // [] };
        is(scalar @ch, 6, "several prompts ($what): n choices each");
        is_deeply([ map { $_->{index} } @ch ], [ 0 .. 5 ],
                  "several prompts ($what): indexes 0..5");
        is_deeply([ map { $_->{text} } @ch ],
                  [ map { ($_) x 2 } @alone ],
                  "several prompts ($what): choice p * n + j answers prompt p");
        is($r->{json}{usage}{prompt_tokens}, $total,
           "several prompts ($what): prompt_tokens of all");
    }
    my $r = $t->post('/v1/completions',
                     { %c, prompt => [ @texts[0, 1] ], echo => \1 });
    is_deeply([ map { $_->{text} } @{ $r->{json}{choices} } ],
              [ map { $texts[$_] . $alone[$_] } 0, 1 ],
              'several prompts with echo: each its own prompt first');

    my $s = $t->open_stream('/v1/completions',
                            { %c, prompt => \@texts, stream => \1 });
    my ($st, $h, $body) = $t->read_response($s);
    close $s;
    my %text;
    for my $e (grep { ref } LlmTest::sse_events($body)) {
        $text{ $_->{index} } .= $_->{text} // '' for @{ $e->{choices} };
    }
    is_deeply([ map { $text{$_} } 0 .. 2 ], \@alone,
              'several prompts, streamed: each index its prompt\'s text');
}

# completions: echo with logprobs

{
    my %c = (model => 'tiny', temperature => 0, logprobs => 2);
    my $text = 'The cat sat on the';
    my $r = $t->post('/v1/completions', { %c, prompt => $text, max_tokens => 3 });
    my $gen = $r->{json}{choices}[0];
    my @glp = @{ $gen->{logprobs}{token_logprobs} };
    is(scalar @glp, 3, 'without echo: the generated tokens only');

    $r = $t->post('/v1/completions', { %c, prompt => $text, max_tokens => 3,
                                        echo => \1 });
    my $ch = $r->{json}{choices}[0];
    my $lp = $ch->{logprobs};
    my $np = $r->{json}{usage}{prompt_tokens};
    is(scalar @{ $lp->{tokens} }, $np + 3, 'echo: prompt and output tokens');
    is($ch->{text}, $text . $gen->{text}, 'echo: the text');
    is(join('', @{ $lp->{tokens} }), $ch->{text}, 'echo: tokens spell it');
    is($lp->{token_logprobs}[0], undef, 'echo: the first token: null');
    is($lp->{top_logprobs}[0], undef, 'echo: its top_logprobs: null');
    is(scalar(grep { defined $_ && $_ <= 0 }
              @{ $lp->{token_logprobs} }[1 .. $#{ $lp->{token_logprobs} }]),
       $np + 2, 'echo: every other token has a logprob');
    is(scalar(grep { ref $_ eq 'HASH' && keys %$_ >= 1 && keys %$_ <= 2 }
              @{ $lp->{top_logprobs} }[1 .. $np - 1]),
       $np - 1, 'echo: the prompt tokens have top_logprobs');
    my $off = 0;
    my @want = map { my $o = $off; $off += length $_; $o } @{ $lp->{tokens} };
    is_deeply($lp->{text_offset}, \@want, 'echo: text_offset from 0');
    my @tail = @{ $lp->{token_logprobs} }[$np .. $np + 2];
    ok(!grep({ abs($tail[$_] - $glp[$_]) > 1e-3 } 0 .. 2),
       'echo: the output tokens\' logprobs are unchanged');

    # the output fed back as prompt: its logprobs are those it had
    my $bin = $t->bin('llm-tokenize');
    my @ids = map { 0 + $_ } split ' ',
        `printf '%s' '$text' | '$bin' -m '${\ $t->model}' --bos --special --ids-only`;
    $r = $t->post('/v1/completions', { %c, prompt => [ @ids ],
                                       max_tokens => 3 });
    # the prompt and the first two tokens generated, as ids
    my @gtext = @{ $r->{json}{choices}[0]{logprobs}{tokens} };
    my $gt = join '', @gtext[0, 1];
    my @ids2 = map { 0 + $_ } split ' ',
        `printf '%s' '$text$gt' | '$bin' -m '${\ $t->model}' --bos --special --ids-only`;
    $r = $t->post('/v1/completions', { %c, prompt => [ @ids2 ],
                                       max_tokens => 1, echo => \1 });
    my $l2 = $r->{json}{choices}[0]{logprobs}{token_logprobs};
    SKIP: {
        skip 'the output does not tokenize back to the same tokens', 1
            unless @ids2 == @ids + 2;
        ok(abs($l2->[@ids] - $glp[0]) < 1e-3
           && abs($l2->[@ids + 1] - $glp[1]) < 1e-3,
           "a prompt token's logprob is the one it had as output "
           . "($l2->[@ids] vs $glp[0], $l2->[@ids + 1] vs $glp[1])");
    }

    my $s = $t->open_stream('/v1/completions',
        { %c, prompt => $text, max_tokens => 3, echo => \1,
          stream => \1 });
    my ($st, $h, $body) = $t->read_response($s);
    close $s;
    my (@stoks, $stext);
    for my $e (grep { ref } LlmTest::sse_events($body)) {
        for my $c (@{ $e->{choices} }) {
            $stext .= $c->{text} // '';
            push @stoks, @{ $c->{logprobs}{tokens} // [] };
        }
    }
    is($stext, $ch->{text}, 'echo with logprobs, streamed: the text');
    is_deeply(\@stoks, $lp->{tokens}, 'echo with logprobs, streamed: tokens');
}

# legacy functions and function_call

my @functions = map { $_->{function} } @$tools;
my %legacy = (model => 'demo', max_tokens => 60, temperature => 0,
              functions => \@functions,
              messages => [ { role => 'user',
                              content => 'order 68405 status please' } ]);
my $r = chat(%legacy);
my $m = $r->{json}{choices}[0]{message};
is($r->{status}, 200, 'functions: 200') or diag $r->{content};
is($m->{function_call}{name}, 'lookup_order', 'functions: function_call');
is_deeply(eval { JSON::PP->new->decode($m->{function_call}{arguments}) },
          { order_id => '68405' }, 'functions: arguments');
ok(!exists $m->{tool_calls}, 'functions: no tool_calls');
is($m->{content}, undef, 'functions: content null');
is($r->{json}{choices}[0]{finish_reason}, 'function_call',
   'functions: finish_reason function_call');

$r = chat(%legacy, function_call => { name => 'issue_refund' });
is($r->{json}{choices}[0]{message}{function_call}{name}, 'issue_refund',
   'function_call by name forces that function');
$r = chat(%legacy, function_call => 'none');
ok(!$r->{json}{choices}[0]{message}{function_call},
   'function_call none: no call');
unlike($r->{json}{choices}[0]{message}{content}, $markup,
       'function_call none: no markup');

my $s = $t->open_stream('/v1/chat/completions', { %legacy, stream => \1 });
my ($st, $h, $body) = $t->read_response($s);
my @ev = grep { ref } LlmTest::sse_events($body);
my @fc = map { $_->{choices}[0]{delta}{function_call} // () }
         grep { @{ $_->{choices} } } @ev;
ok(@fc >= 1, 'functions, streamed: function_call deltas');
is($fc[0]{name}, 'lookup_order', 'functions, streamed: name first');
is(join('', map { $_->{arguments} } @fc), $m->{function_call}{arguments},
   'functions, streamed: the same arguments');
ok(!grep({ @{ $_->{choices} } && $_->{choices}[0]{delta}{tool_calls} } @ev),
   'functions, streamed: no tool_calls deltas');
is($ev[-1]{choices}[0]{finish_reason}, 'function_call',
   'functions, streamed: finish_reason function_call');

# a legacy call and its result in the history
my @turns = ({ role => 'user', content => 'order 68405 status please' },
             { role => 'assistant', content => undef,
               function_call => { name => 'lookup_order',
                                  arguments => '{"order_id": "68405"}' } },
             { role => 'function', name => 'lookup_order',
               content => '{"status": "shipped"}' });
$r = chat(%legacy, messages => \@turns);
is($r->{status}, 200, 'legacy history: 200') or diag $r->{content};
my $with = $r->{json}{usage}{prompt_tokens};
$r = chat(%legacy, messages => [ @turns[0, 2] ]);
ok($with > $r->{json}{usage}{prompt_tokens},
   'legacy history: the function_call is rendered');

for my $bad ([ { tools => $tools }, 'functions' ],
             [ { functions => undef, function_call => 'auto' },
               'function_call' ],
             [ { functions => [ { description => 'x' } ] },
               'functions[0].name' ],
             [ { function_call => 'required' }, 'function_call' ],
             [ { functions => 'f' }, 'functions' ]) {
    $r = chat(%legacy, %{ $bad->[0] });
    is($r->{status}, 400, "legacy: 400 for $bad->[1]");
    is($r->{json}{error}{param}, $bad->[1], "legacy: param $bad->[1]");
}

$t->done;

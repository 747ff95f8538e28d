#!/usr/bin/perl
# POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages
# API, a dialect over the chat route) through nginx and the real engine:
# a Message (text, tool_use), system as a string and as text blocks, a
# tool use round trip (tool_use, then tool_result), tool_choice any, tool
# and none, stop_sequences (stop_reason stop_sequence and the string),
# max_tokens, the stream's event sequence (every event named as its type,
# in Anthropic's order, the text and the tool input the same as
# unstreamed), count_tokens (the prompt create counts, tools included,
# free of the key's tokens), errors in Anthropic's shape (400s, 401, 404,
# 405, 413, 429, 503, an engine error mid-stream) and the key's usage settled as for
# chat.  Thinking blocks come from a fake engine sending reasoning.  Every
# response and event validates against tests/schemas/anthropic-messages.json
# (written from Anthropic's API reference).

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use JSON::PP;
use LlmTest;
use LlmKeys;
use LlmSchema;
use FakeEngine;

my $t = LlmTest->new;
my $S = LlmSchema->load($t->repo . '/tests/schemas/anthropic-messages.json');
my $J = JSON::PP->new->canonical;

my ($key, $kline) = LlmKeys::new_key('anth', rpm => 1000);
my ($lim, $lline) = LlmKeys::new_key('limited', rpm => 2);
my ($quo, $qline) = LlmKeys::new_key('quota', quota => 40);
LlmKeys::write_keys($t, $kline, $lline, $qline);

# the fake engine: reasoning, then text (a thinking model's answer), and
# the Generate it got, for the thinking field's translation
my $dir = $t->dir;
my $fake = FakeEngine->start("$dir/fake.sock", serve => sub {
    my ($c) = @_;
    while (1) {
        my $h = FakeEngine::read_n($c, 4) // return;
        my $req = FakeEngine::read_n($c, unpack('N', $h)) // return;
        if (substr($req, 0, 1) eq "\x12") {
            syswrite($c, FakeEngine::ev_info('think'));
            next;
        }
        next unless substr($req, 0, 1) eq "\x0a";
        open my $f, '>', "$dir/fake.req" or die;
        print $f $req;
        close $f;
        my $reason = FakeEngine::frame(FakeEngine::field_bytes(3,
            FakeEngine::field_bytes(5, 'Let me think.')));
        syswrite($c, FakeEngine::ev_started(7) . $reason
                     . FakeEngine::ev_delta('Hi!') . FakeEngine::ev_done(1, 7, 5));
    }
});
my $broken = FakeEngine->start("$dir/broken.sock", mode => 'error_mid');
my $busy = FakeEngine->start("$dir/busy.sock", mode => 'overloaded');

$t->start_engine('a');
$t->start_nginx(<<"EOF");
    log_format llm '\$request_uri \$status key=\$llm_key_name '
                   'prompt=\$llm_prompt_tokens '
                   'completion=\$llm_completion_tokens';
    llm_zone llm 1m;
    llm_keys $dir/keys;
    upstream engines { server unix:%%SOCK_a%%; keepalive 4; }
    upstream think { server unix:$dir/fake.sock; }
    upstream broken { server unix:$dir/broken.sock; }
    upstream busy { server unix:$dir/busy.sock; }
    llm_model tiny upstream=engines;
    llm_model think upstream=think;
    llm_model broken upstream=broken;
    llm_model busy upstream=busy;
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log $dir/access.log llm;
        location /v1/ { llm_api on; client_max_body_size 64k; }
        location = /metrics { llm_metrics; }
    }
EOF

my %H = ('x-api-key' => $key, 'anthropic-version' => '2023-06-01');

sub valid {
    my ($name, $v, $what) = @_;
    my @e = $S->validate($name, $v);
    ok(!@e, "$what: a valid $name") or diag(join("\n", @e[0 .. ($#e > 5 ? 5 : $#e)]));
}

sub msg {
    my ($body, %h) = @_;
    return $t->post('/v1/messages', { model => 'tiny', max_tokens => 8,
                                      temperature => 0, %$body },
                    %H, %h);
}

sub count {
    my ($body) = @_;
    my $r = $t->post('/v1/messages/count_tokens', { model => 'tiny', %$body }, %H);
    is($r->{status}, 200, 'count_tokens 200') or diag($r->{content});
    valid('MessageTokensCount', $r->{json}, 'count_tokens');
    return $r->{json}{input_tokens} // -1;
}

# All tokens of the prompt: input_tokens leaves out the cache reads.
sub total_in {
    my ($u) = @_;
    return $u->{input_tokens} + ($u->{cache_read_input_tokens} // 0)
           + ($u->{cache_creation_input_tokens} // 0);
}

# A stream: its events as [name, data], each checked for its shape.
sub stream {
    my ($body, $what, %h) = @_;
    my $s = $t->open_stream('/v1/messages', { model => 'tiny', max_tokens => 8,
                                              temperature => 0, %$body,
                                              stream => JSON::PP::true },
                            %H, %h);
    my ($status, $hd, $raw) = $t->read_response($s);
    is($status, 200, "$what: 200");
    like($hd->{'content-type'} // '', qr{^text/event-stream}, "$what: SSE");
    my (@ev, @bad);
    for my $block (split /\n\n/, $raw) {
        next if $block =~ /^:/;
        my ($name) = $block =~ /^event: (\S+)$/m;
        my ($data) = $block =~ /^data: (.*)$/m;
        my $d = eval { decode_json($data // '') };
        push @bad, $block unless $name && $d && $d->{type} eq $name;
        push @bad, $S->validate('MessageStreamEvent', $d) if $d;
        push @ev, [ $name, $d ];
    }
    ok(!@bad, "$what: every event is named as its type and valid")
        or diag(join("\n", @bad[0 .. ($#bad > 5 ? 5 : $#bad)]));
    return @ev;
}

# The event names must follow Anthropic's grammar: message_start, ping,
# (content_block_start, content_block_delta*, content_block_stop)*,
# message_delta, message_stop; blocks numbered from 0.
sub check_order {
    my ($what, @ev) = @_;
    my $names = join ' ', map { $_->[0] } @ev;
    like($names, qr/^message_start ping (content_block_start( content_block_delta)* content_block_stop )*message_delta message_stop$/,
         "$what: Anthropic's event order") or diag($names);
    my @idx = map { $_->[1]{index} } grep { $_->[0] eq 'content_block_start' } @ev;
    is_deeply(\@idx, [ 0 .. $#idx ], "$what: blocks numbered 0, 1, ...");
}

# create
my $r = msg({ messages => [ { role => 'user', content => 'Hello' } ] });
is($r->{status}, 200, 'create 200') or diag($r->{content});
valid('Message', $r->{json}, 'create');
my $m = $r->{json};
like($m->{id}, qr/^msg_[A-Za-z0-9]{24}$/, 'id msg_...');
is($m->{model}, 'tiny', 'model');
is($m->{content}[0]{type}, 'text', 'a text block');
is($m->{stop_reason}, 'max_tokens', 'stop_reason max_tokens');
is($m->{stop_sequence}, undef, 'stop_sequence null');
is($m->{usage}{output_tokens}, 8, 'output_tokens: max_tokens');
my $hello_in = total_in($m->{usage});
ok($hello_in > 0, 'input tokens counted');
my $text = $m->{content}[0]{text};

# system: a string and text blocks are the same prompt; both add to it
# (longer than the template's default system message)
my $SYS = 'You are a terse assistant: answer every question in one short '
          . 'sentence, without greetings, lists or examples.';
my $sys1 = msg({ system => $SYS,
                 messages => [ { role => 'user', content => 'Hello' } ] });
my $sys2 = msg({ system => [ { type => 'text', text => $SYS } ],
                 metadata => { user_id => 'u-42' }, top_p => 0.9, top_k => 40,
                 messages => [ { role => 'user',
                                 content => [ { type => 'text', text => 'Hello' } ] } ] });
is($sys1->{status}, 200, 'system string 200') or diag($sys1->{content});
ok(total_in($sys1->{json}{usage}) > $hello_in, 'system: more input tokens');
is(total_in($sys2->{json}{usage}), total_in($sys1->{json}{usage}),
   'system and content as text blocks: the same prompt (metadata, top_p, '
   . 'top_k accepted)');

# count_tokens: the prompt create counted, without max_tokens
is(count({ messages => [ { role => 'user', content => 'Hello' } ] }), $hello_in,
   'count_tokens: the input tokens of create');
is(count({ system => $SYS,
           messages => [ { role => 'user', content => 'Hello' } ] }),
   total_in($sys1->{json}{usage}), 'count_tokens with system');

# thinking blocks of earlier turns are dropped, as the templates drop
# earlier reasoning
my @turns = ({ role => 'user', content => 'Hello' }, undef,
             { role => 'user', content => 'And then?' });
$turns[1] = { role => 'assistant', content => [ { type => 'text', text => 'Hi there.' } ] };
my $plain = count({ messages => [ @turns ] });
$turns[1] = { role => 'assistant', content => [
    { type => 'thinking', thinking => 'A long thought about greetings.', signature => 'sig' },
    { type => 'redacted_thinking', data => 'opaque' },
    { type => 'text', text => 'Hi there.' } ] };
is(count({ messages => [ @turns ] }), $plain, 'thinking blocks sent back: dropped');

# tools: the named tool, its input parsed; the round trip
my $tools = [ { name => 'get_weather', description => 'The weather in a city',
                input_schema => { type => 'object',
                                  properties => { city => { type => 'string',
                                                            enum => [ 'Paris', 'Rome' ] } },
                                  required => [ 'city' ],
                                  additionalProperties => JSON::PP::false } } ];
my $ask = [ { role => 'user', content => 'What is the weather in Paris?' } ];
my $tu = msg({ max_tokens => 200, tools => $tools, messages => $ask,
               tool_choice => { type => 'tool', name => 'get_weather' } });
is($tu->{status}, 200, 'tool_choice tool 200') or diag($tu->{content});
valid('Message', $tu->{json}, 'tool_use');
my ($use) = grep { $_->{type} eq 'tool_use' } @{ $tu->{json}{content} };
ok($use && $use->{name} eq 'get_weather' && $use->{id} =~ /^toolu_/,
   'a tool_use block with a toolu_ id') or diag($tu->{content});
ok($use && ref $use->{input} eq 'HASH' && ($use->{input}{city} // '') =~ /^(Paris|Rome)$/,
   'its input is the parsed arguments');
is($tu->{json}{stop_reason}, 'tool_use', 'stop_reason tool_use');
ok(count({ tools => $tools, messages => $ask })
   > count({ messages => $ask }), 'count_tokens counts the tools');

my $follow = [ @$ask, { role => 'assistant', content => $tu->{json}{content} },
               { role => 'user', content => [
                   { type => 'tool_result', tool_use_id => $use ? $use->{id} : 'x',
                     content => 'RESULT-7781: sunny' },
                   { type => 'text', text => 'Thanks' } ] } ];
my $rt = msg({ tools => $tools, messages => $follow });
is($rt->{status}, 200, 'tool_result sent back: 200') or diag($rt->{content});
valid('Message', $rt->{json}, 'after tool_result');
is(total_in($rt->{json}{usage}), count({ tools => $tools, messages => $follow }),
   'the round trip prompt is the one count_tokens counts');
ok(total_in($rt->{json}{usage}) > total_in($tu->{json}{usage}),
   'the tool_use and tool_result are in the prompt');
my $rt_err = msg({ tools => $tools, messages => [ @$ask,
    { role => 'assistant', content => $tu->{json}{content} },
    { role => 'user', content => [ { type => 'tool_result', is_error => JSON::PP::true,
                                     tool_use_id => $use ? $use->{id} : 'x',
                                     content => [ { type => 'text', text => 'RESULT-7781: sunny' } ] },
                                   { type => 'text', text => 'Thanks' } ] } ] });
is($rt_err->{status}, 200, 'tool_result with is_error and text blocks');
ok(total_in($rt_err->{json}{usage}) > total_in($rt->{json}{usage}),
   'is_error marks the result (more tokens)');

# tool_choice any and none
my $any = msg({ max_tokens => 200, tools => $tools, messages => $ask,
                tool_choice => { type => 'any', disable_parallel_tool_use => JSON::PP::true } });
is($any->{status}, 200, 'tool_choice any 200') or diag($any->{content});
ok((grep { $_->{type} eq 'tool_use' } @{ $any->{json}{content} }) == 1,
   'any: one tool_use block') or diag($any->{content});
my $none = msg({ max_tokens => 30, tools => $tools, messages => $ask,
                 tool_choice => { type => 'none' } });
is($none->{status}, 200, 'tool_choice none 200') or diag($none->{content});
ok(!(grep { $_->{type} eq 'tool_use' } @{ $none->{json}{content} })
   && $none->{json}{stop_reason} ne 'tool_use', 'none: no tool_use');

# stop_sequences: a string of the greedy text ends it there
my $long = msg({ max_tokens => 16, messages => [ { role => 'user', content => 'Tell me a story' } ] });
my $lt = $long->{json}{content}[0]{text} // '';
my ($stop) = $lt =~ /^.{3,}?([A-Za-z]{2})/s;
SKIP: {
    skip "no two letters in the greedy text '$lt'", 8 unless $stop;
    my $pos = index($lt, $stop);
    my $ss = msg({ max_tokens => 16, stop_sequences => [ 'QQQZ', $stop ],
                   messages => [ { role => 'user', content => 'Tell me a story' } ] });
    valid('Message', $ss->{json}, 'stop_sequences');
    is($ss->{json}{stop_reason}, 'stop_sequence', 'stop_reason stop_sequence');
    is($ss->{json}{stop_sequence}, $stop, "stop_sequence: the string matched ('$stop')");
    is($ss->{json}{content}[0]{text} // '', substr($lt, 0, $pos), 'the text ends before it');
    my @ev = stream({ max_tokens => 16, stop_sequences => [ $stop ],
                      messages => [ { role => 'user', content => 'Tell me a story' } ] },
                    'stream with stop_sequences');
    my ($md) = grep { $_->[0] eq 'message_delta' } @ev;
    is($md->[1]{delta}{stop_reason}, 'stop_sequence', 'stream: stop_reason stop_sequence');
    is($md->[1]{delta}{stop_sequence}, $stop, 'stream: stop_sequence');
}

# the stream of a text answer: the same text as unstreamed
my @ev = stream({ messages => [ { role => 'user', content => 'Hello' } ] }, 'stream');
check_order('stream', @ev);
is($ev[0][1]{message}{usage}{output_tokens}, 0, 'message_start: no output yet');
is(total_in($ev[0][1]{message}{usage}), $hello_in, 'message_start: the input tokens');
is(join('', map { $_->[1]{delta}{text} } grep { $_->[0] eq 'content_block_delta' } @ev),
   $text, 'text_delta pieces: the unstreamed text');
my ($md) = grep { $_->[0] eq 'message_delta' } @ev;
is($md->[1]{delta}{stop_reason}, 'max_tokens', 'message_delta: stop_reason');
is($md->[1]{usage}{output_tokens}, 8, 'message_delta: output_tokens');

# the stream of a tool call: input_json_delta pieces make the input
@ev = stream({ max_tokens => 200, tools => $tools, messages => $ask,
               tool_choice => { type => 'tool', name => 'get_weather' } }, 'tool stream');
check_order('tool stream', @ev);
my ($bs) = grep { $_->[0] eq 'content_block_start'
                  && $_->[1]{content_block}{type} eq 'tool_use' } @ev;
ok($bs && $bs->[1]{content_block}{name} eq 'get_weather'
   && $bs->[1]{content_block}{id} =~ /^toolu_/, 'content_block_start: tool_use, id, name');
my $json = join '', map { $_->[1]{delta}{partial_json} }
                    grep { ($_->[1]{delta}{type} // '') eq 'input_json_delta' } @ev;
is_deeply(eval { decode_json($json) }, $use ? $use->{input} : {},
          'input_json_delta pieces: the unstreamed input');
($md) = grep { $_->[0] eq 'message_delta' } @ev;
is($md->[1]{delta}{stop_reason}, 'tool_use', 'tool stream: stop_reason tool_use');

# thinking: reasoning becomes a thinking block before the text
$r = $t->post('/v1/messages', { model => 'think', max_tokens => 100,
                                thinking => { type => 'enabled', budget_tokens => 1024 },
                                messages => [ { role => 'user', content => 'Hi' } ] }, %H);
valid('Message', $r->{json}, 'thinking');
is_deeply([ map { $_->{type} } @{ $r->{json}{content} // [] } ], [ 'thinking', 'text' ],
          'thinking, then text');
is($r->{json}{content}[0]{thinking}, 'Let me think.', 'the reasoning text');
like($t->slurp("$dir/fake.req"), qr/\{"enable_thinking":true\}/,
     'thinking enabled: the template\'s enable_thinking');
$t->post('/v1/messages', { model => 'think', max_tokens => 100, thinking => { type => 'disabled' },
                           messages => [ { role => 'user', content => 'Hi' } ] }, %H);
like($t->slurp("$dir/fake.req"), qr/\{"enable_thinking":false\}/, 'thinking disabled');
@ev = stream({ model => 'think', messages => [ { role => 'user', content => 'Hi' } ] },
             'thinking stream');
check_order('thinking stream', @ev);
is(join(' ', map { $_->[1]{content_block}{type} // $_->[1]{delta}{type} // () }
             grep { $_->[0] =~ /^content_block_(start|delta)$/ } @ev),
   'thinking thinking_delta signature_delta text text_delta',
   'thinking block (thinking_delta, signature_delta), then the text block');

# errors, in Anthropic's shape
sub refused {
    my ($r, $status, $type, $what, $re) = @_;
    is($r->{status}, $status, "$what: $status") or diag($r->{content});
    valid('ErrorResponse', $r->{json}, $what);
    is($r->{json}{error}{type}, $type, "$what: $type");
    like($r->{json}{error}{message}, $re, "$what: the message says why") if $re;
}
my $hi = [ { role => 'user', content => 'Hi' } ];
refused($t->post('/v1/messages', { model => 'tiny', messages => $hi }, %H),
        400, 'invalid_request_error', 'no max_tokens', qr/max_tokens: Field required/);
refused($t->post('/v1/messages', '{"model":', %H), 400, 'invalid_request_error', 'bad JSON');
refused(msg({ messages => [] }), 400, 'invalid_request_error', 'no messages', qr/messages/);
refused(msg({ messages => [ { role => 'system', content => 'x' } ] }), 400,
        'invalid_request_error', 'role system in messages', qr/messages\.0\.role/);
refused(msg({ messages => [ { role => 'user', content => [
            { type => 'image', source => { type => 'base64', media_type => 'image/png', data => 'AA==' } } ] } ] }),
        400, 'invalid_request_error', 'an image block', qr/messages\.0\.content\.0\.type.*'image'/);
refused(msg({ messages => $hi, tools => [ { type => 'web_search_20250305', name => 'web_search' } ] }),
        400, 'invalid_request_error', 'a server tool', qr/server tools/);
refused(msg({ messages => $hi, temperature => 1.5 }), 400, 'invalid_request_error',
        'temperature over 1', qr/temperature/);
refused(msg({ messages => $hi, tool_choice => { type => 'tool', name => 'nope' }, tools => $tools }),
        400, 'invalid_request_error', 'tool_choice of an unknown tool', qr/nope/);
refused(msg({ messages => $hi, thinking => { type => 'enabled' } }), 400,
        'invalid_request_error', 'thinking without budget_tokens', qr/budget_tokens/);
refused(msg({ model => 'no-such-model', messages => $hi }), 404, 'not_found_error', 'unknown model');
refused(msg({ messages => $hi }, 'x-api-key' => 'sk-llm-bad'), 401, 'authentication_error', 'bad key');
refused($t->post('/v1/messages', { model => 'tiny', max_tokens => 4, messages => $hi }),
        401, 'authentication_error', 'no key');
refused($t->get('/v1/messages', %H), 405, 'invalid_request_error', 'GET');
refused(msg({ messages => [ { role => "user", content => "x" x 70000 } ] }), 413,
        'request_too_large', 'a body over client_max_body_size');
refused(msg({ model => 'busy', messages => $hi }), 503, 'overloaded_error',
        'every engine overloaded');
msg({ messages => $hi }, 'x-api-key' => $lim) for 1 .. 2;
refused(msg({ messages => $hi }, 'x-api-key' => $lim), 429, 'rate_limit_error',
        'over the key\'s requests per minute');

# an engine error after the first token: an error event ends the stream
@ev = stream({ model => 'broken', messages => $hi }, 'engine error mid-stream');
is($ev[0][0], 'message_start', 'the stream had started');
is($ev[-1][0], 'error', 'an error event ends it');
is($ev[-1][1]{error}{type}, 'api_error', 'api_error');

# usage settles the key as for chat; count_tokens costs no tokens: a key
# of 40 tokens still has them after three counts, none after one answer
for (1 .. 3) {
    is($t->post('/v1/messages/count_tokens', { model => 'tiny', messages => $hi },
                'x-api-key' => $quo)->{status}, 200, 'count_tokens on the quota key');
}
# (the greedy story: 31 prompt tokens, 16 generated, see stop_sequences)
$r = $t->post('/v1/messages', { model => 'tiny', max_tokens => 16, temperature => 0,
                                messages => [ { role => 'user', content => 'Tell me a story' } ] },
              'x-api-key' => $quo);
is($r->{status}, 200, 'the quota key answers after the counts') or diag($r->{content});
my ($used_in, $used_out) = (total_in($r->{json}{usage} // {}),
                            $r->{json}{usage}{output_tokens} // -1);
my $used = $used_in + $used_out;
ok($used >= 40, "it used the quota ($used tokens)");
refused($t->post('/v1/messages', { model => 'tiny', max_tokens => 4, messages => $hi },
                 'x-api-key' => $quo), 429, 'rate_limit_error', 'the quota is spent');

$t->stop_nginx;
my $log = $t->slurp("$dir/access.log");
like($log, qr{^/v1/messages 200 key=quota prompt=$used_in completion=$used_out$}m,
     'the access log: the answer\'s usage');
like($log, qr{^/v1/messages/count_tokens 200 key=quota prompt=0 completion=0$}m,
     'the access log: a count uses no tokens');
unlike($t->error_log, qr/\[(alert|emerg)\]/, 'no alerts in error.log');
$fake->stop;
$broken->stop;
$busy->stop;
$t->done;

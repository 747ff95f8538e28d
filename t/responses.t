#!/usr/bin/perl
# POST /v1/responses (OpenAI's Responses API, a dialect over the chat
# route) end to end, nginx in front of the real engine: the tiny model and
# the demo model (trained to call lookup_order).  Every response body and
# every stream event validates against the official OpenAPI schemas
# (tests/schemas/openai-responses.json: Response and the event schemas).
# - a string input; an item list with instructions: the prompt is the
#   chat request's (the same prompt_tokens as the equivalent chat call);
# - tools + tool_choice (auto on the demo model, named, required, none):
#   function_call items, then the round trip with function_call and
#   function_call_output items, consecutive calls merged;
# - text.format json_schema and json_object: the text is JSON that fits;
# - max_output_tokens: status incomplete, incomplete_details;
# - the stream: the typed events in order with sequence numbers 0..n, the
#   deltas add up to the done text, response.completed carries the whole
#   Response and usage; a streamed tool call;
# - usage settles the key (the rate-limit headers, the access log);
# - the store (llm_responses_store, two workers: shared): a conversation
#   continued with previous_response_id, an output item sent back as an
#   item_reference, store:false keeps nothing, unknown ids are 400s; the
#   store's lifetime, a full store dropping the oldest, and off (reloads):
#   clear 400s;
# - the 400s: bad enums, bad item and part types, hosted tools, the chat
#   route's checks renamed to the Responses fields.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use JSON::PP;
use Time::HiRes qw(sleep);
use LlmTest;
use LlmKeys;
use LlmSchema;

my $t = LlmTest->new;
$t->start_engine('a');
$t->start_engine('demo', model => "$LlmTest::REPO/models/demo/demo-q8_0.gguf");

my ($key, $line) = LlmKeys::new_key('k1', tpm => 100000);
# a slow bucket for the settlement check: 6000 a minute refill 0.1 a ms,
# so a slow (sanitizer) build's milliseconds between the two requests
# cannot hide the tokens spent
my ($skey, $sline) = LlmKeys::new_key('k2', tpm => 6000);
LlmKeys::write_keys($t, $line, $sline);
my $dir = $t->dir;

my $conf = <<"EOF";
    %%STORE%%
    log_format llm '\$status \$request_uri key=\$llm_key_name '
                   'prompt=\$llm_prompt_tokens '
                   'completion=\$llm_completion_tokens '
                   'finish=\$llm_finish_reason error=\$llm_error_code';
    llm_zone llm 1m;
    upstream engines { server unix:%%SOCK_a%%; keepalive 4; }
    llm_model tiny upstream=engines;
    upstream demo { server unix:%%SOCK_demo%%; keepalive 4; }
    llm_model demo upstream=demo;
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log %%DIR%%/llm.log llm;
        location /v1/ { llm_api on; }
        location /keyed/v1/ { llm_api on; llm_keys $dir/keys; }
    }
EOF
sub conf { my ($store) = @_; (my $c = $conf) =~ s/%%STORE%%/$store/; $c }
$t->start_nginx(conf(''), workers => 2);

my $schema = LlmSchema->load($t->repo
                             . '/tests/schemas/openai-responses.json');

sub resp { my ($body, %h) = @_; return $t->post('/v1/responses', $body, %h) }

sub valid {
    my ($name, $value, $what) = @_;
    my @err = $schema->validate($name, $value);
    ok(!@err, "$what: a valid $name") or diag join("\n", @err);
}

# a 200 with a valid Response; returns it
sub ok_resp {
    my ($body, $what) = @_;
    my $r = resp($body);
    is($r->{status}, 200, "$what: 200") or diag $r->{content};
    my $j = $r->{json} // {};
    valid('Response', $j, $what);
    like($j->{id} // '', qr/^resp_[A-Za-z0-9]{24}$/, "$what: id resp_...");
    is($r->{headers}{'x-request-id'}, $j->{id}, "$what: x-request-id");
    return $j;
}

sub texts {
    my ($j) = @_;
    return join '', map { $_->{text} } map { @{ $_->{content} } }
                    grep { $_->{type} eq 'message' } @{ $j->{output} };
}

sub bad {
    my ($body, $param, $re, $what) = @_;
    my $r = resp($body);
    is($r->{status}, 400, "$what: 400") or diag $r->{content};
    my $e = $r->{json}{error} // {};
    is($e->{type}, 'invalid_request_error', "$what: invalid_request_error");
    is($e->{param}, $param, "$what: param $param") if defined $param;
    like($e->{message} // '', $re, "$what: says why") or diag $r->{content};
}

# a string input

my $j = ok_resp({ model => 'tiny', input => 'Say hi', max_output_tokens => 8,
                  temperature => 0 }, 'string input');
is($j->{object}, 'response', 'object response');
ok($j->{status} eq 'completed' || $j->{status} eq 'incomplete',
   "status $j->{status}");
is($j->{store}, JSON::PP::true, 'store true: kept (llm_responses_store)');
is($j->{model}, 'tiny', 'the model');
is($j->{max_output_tokens}, 8, 'max_output_tokens echoed');
my ($msg) = grep { $_->{type} eq 'message' } @{ $j->{output} };
ok($msg, 'a message item');
like($msg->{id} // '', qr/^msg_/, 'message id msg_...');
is($msg->{role}, 'assistant', 'role assistant');
is($msg->{content}[0]{type}, 'output_text', 'an output_text part');
my $u = $j->{usage};
ok($u->{input_tokens} > 0 && $u->{output_tokens} > 0, 'usage counted');
is($u->{total_tokens}, $u->{input_tokens} + $u->{output_tokens},
   'total_tokens is the sum');

# max_output_tokens: incomplete

$j = ok_resp({ model => 'tiny', input => 'Tell a long story',
               max_output_tokens => 3, temperature => 0 },
             'max_output_tokens 3');
is($j->{status}, 'incomplete', 'length: status incomplete');
is($j->{incomplete_details}{reason}, 'max_output_tokens',
   'length: incomplete_details.reason');
is($j->{usage}{output_tokens}, 3, 'length: 3 output tokens');
is($j->{completed_at}, undef, 'incomplete: no completed_at');

# instructions and an item list: the same prompt as the chat request

sub chat_prompt {
    my (@msgs) = @_;
    my $r = $t->post('/v1/chat/completions',
                     { model => 'tiny', messages => \@msgs, max_tokens => 1 });
    return $r->{json}{usage}{prompt_tokens};
}

$j = ok_resp({ model => 'tiny', instructions => 'You are terse.',
               input => [ { role => 'user', content => 'Hello there' },
                          { type => 'message', role => 'assistant',
                            content => [ { type => 'output_text',
                                           text => 'Hi.' } ] },
                          { role => 'developer', content => 'Be kind.' },
                          { type => 'message', role => 'user',
                            content => [ { type => 'input_text',
                                           text => 'How ' },
                                         { type => 'input_text',
                                           text => 'are you?' } ] } ],
               max_output_tokens => 1 }, 'items');
is($j->{instructions}, 'You are terse.', 'instructions echoed');
is($j->{usage}{input_tokens},
   chat_prompt({ role => 'system', content => 'You are terse.' },
               { role => 'user', content => 'Hello there' },
               { role => 'assistant', content => 'Hi.' },
               { role => 'developer', content => 'Be kind.' },
               { role => 'user', content => 'How are you?' }),
   'items: the prompt of the equivalent chat request');
my $plain = ok_resp({ model => 'tiny', input => 'Hello there',
                      max_output_tokens => 1 }, 'no instructions');
cmp_ok($plain->{usage}{input_tokens}, '<', $j->{usage}{input_tokens},
       'instructions make the prompt longer');

# tools

my $tools = [
    { type => 'function', name => 'lookup_order',
      description => 'Look up an order.',
      parameters => { type => 'object',
                      properties => { order_id => { type => 'string' } },
                      required => ['order_id'] } },
    { type => 'function', name => 'issue_refund',
      description => 'Refund an order.', strict => JSON::PP::false,
      parameters => { type => 'object',
                      properties => { order_id => { type => 'string' } },
                      required => ['order_id'] } },
];

$j = ok_resp({ model => 'demo', input => 'order 68405 status please',
               tools => $tools, tool_choice => 'auto', temperature => 0,
               max_output_tokens => 60 }, 'demo, auto');
my ($call) = grep { $_->{type} eq 'function_call' } @{ $j->{output} };
ok($call, 'auto: a function_call item') or diag explain $j->{output};
$call //= {};
is($call->{name}, 'lookup_order', 'auto: lookup_order');
like($call->{call_id} // '', qr/^call_/, 'auto: call_id call_...');
like($call->{id} // '', qr/^fc_/, 'auto: id fc_...');
is($call->{status}, 'completed', 'auto: status completed');
my $args = eval { decode_json($call->{arguments} // '') };
ok($args && defined $args->{order_id}, "auto: arguments $call->{arguments}");
is($j->{tool_choice}, 'auto', 'tool_choice echoed');
is(scalar @{ $j->{tools} }, 2, 'tools echoed');
is($j->{tools}[0]{name}, 'lookup_order', 'tools echoed by name');

# the round trip: the call and its output as items
my $rt = ok_resp({ model => 'demo', tools => $tools, temperature => 0,
                   max_output_tokens => 60,
                   input => [ { role => 'user',
                                content => 'order 68405 status please' },
                              $call,
                              { type => 'function_call_output',
                                call_id => $call->{call_id},
                                output => '{"order_id":"68405","status":'
                                          . '"shipped","carrier":"UPS"}' } ] },
                 'round trip');
my $answer = texts($rt);
ok(length $answer, "round trip: an answer ($answer)");
ok(!grep({ $_->{type} eq 'function_call' } @{ $rt->{output} }),
   'round trip: no new call');
my $chat_rt = $t->post('/v1/chat/completions', {
    model => 'demo', temperature => 0, max_tokens => 60,
    tools => [ map { { type => 'function', function => {
        name => $_->{name}, description => $_->{description},
        parameters => $_->{parameters} } } } @$tools ],
    messages => [ { role => 'user', content => 'order 68405 status please' },
                  { role => 'assistant', content => undef,
                    tool_calls => [ { id => $call->{call_id},
                                      type => 'function',
                                      function => {
                                          name => $call->{name},
                                          arguments => $call->{arguments} } } ] },
                  { role => 'tool', tool_call_id => $call->{call_id},
                    content => '{"order_id":"68405","status":"shipped",'
                               . '"carrier":"UPS"}' } ] });
is($rt->{usage}{input_tokens}, $chat_rt->{json}{usage}{prompt_tokens},
   'round trip: the prompt of the equivalent chat request');
is($answer, $chat_rt->{json}{choices}[0]{message}{content},
   'round trip: the chat answer, greedy');

# consecutive calls are one assistant message
my $two = ok_resp({ model => 'demo', tools => $tools, max_output_tokens => 1,
                    input => [ { role => 'user', content => 'two orders' },
                               { type => 'function_call', call_id => 'call_a',
                                 name => 'lookup_order',
                                 arguments => '{"order_id":"1"}' },
                               { type => 'function_call', call_id => 'call_b',
                                 name => 'lookup_order',
                                 arguments => '{"order_id":"2"}' },
                               { type => 'reasoning', id => 'rs_x',
                                 summary => [] },
                               { type => 'function_call_output',
                                 call_id => 'call_a', output => 'A' },
                               { type => 'function_call_output',
                                 call_id => 'call_b',
                                 output => [ { type => 'input_text',
                                               text => 'B' } ] } ] },
                  'two calls');
my $chat_two = $t->post('/v1/chat/completions', {
    model => 'demo', max_tokens => 1,
    tools => [ map { { type => 'function', function => {
        name => $_->{name}, description => $_->{description},
        parameters => $_->{parameters} } } } @$tools ],
    messages => [ { role => 'user', content => 'two orders' },
                  { role => 'assistant', content => undef, tool_calls => [
                      { id => 'call_a', type => 'function', function => {
                          name => 'lookup_order',
                          arguments => '{"order_id":"1"}' } },
                      { id => 'call_b', type => 'function', function => {
                          name => 'lookup_order',
                          arguments => '{"order_id":"2"}' } } ] },
                  { role => 'tool', tool_call_id => 'call_a', content => 'A' },
                  { role => 'tool', tool_call_id => 'call_b',
                    content => 'B' } ] });
is($two->{usage}{input_tokens}, $chat_two->{json}{usage}{prompt_tokens},
   'two calls: merged into one assistant message, as in chat');

# named and required on the tiny model (constrained), none on the demo
$j = ok_resp({ model => 'tiny', input => 'x', tools => $tools,
               tool_choice => { type => 'function', name => 'issue_refund' },
               max_output_tokens => 1200, temperature => 0.7, seed => 11 },
             'named');
($call) = grep { $_->{type} eq 'function_call' } @{ $j->{output} };
is($call && $call->{name}, 'issue_refund', 'named: the named function');
ok(eval { defined decode_json($call->{arguments})->{order_id} },
   'named: arguments are JSON with the required order_id')
    or diag $call->{arguments};
is_deeply($j->{tool_choice}, { type => 'function', name => 'issue_refund' },
          'named: tool_choice echoed');
$j = ok_resp({ model => 'tiny', input => 'x', tools => $tools,
               tool_choice => 'required', max_output_tokens => 1200,
               temperature => 0.7, seed => 4 }, 'required');
ok(grep({ $_->{type} eq 'function_call' } @{ $j->{output} }),
   'required: a function_call');
$j = ok_resp({ model => 'demo', input => 'order 68405 status please',
               tools => $tools, tool_choice => 'none', temperature => 0,
               max_output_tokens => 60 }, 'none');
ok(!grep({ $_->{type} eq 'function_call' } @{ $j->{output} }),
   'none: no function_call');
unlike(texts($j), qr/<\/?tool_call>/, 'none: no markup in the text');

# structured output

my $person = { type => 'object',
               properties => { name => { type => 'string' },
                               age => { type => 'integer' } },
               required => ['name', 'age'], additionalProperties => JSON::PP::false };
$j = ok_resp({ model => 'tiny', input => 'A person as JSON',
               text => { format => { type => 'json_schema', name => 'person',
                                     schema => $person, strict => \1 } },
               max_output_tokens => 400, temperature => 0.8, seed => 5 },
             'json_schema');
my $obj = eval { decode_json(texts($j)) };
ok(ref $obj eq 'HASH' && defined $obj->{name} && defined $obj->{age}
   && $obj->{age} =~ /^-?\d+$/ && keys %$obj == 2,
   'json_schema: the text is JSON that fits the schema') or diag texts($j);
is($j->{text}{format}{type}, 'json_schema', 'json_schema: text echoed');
$j = ok_resp({ model => 'tiny', input => 'JSON please',
               text => { format => { type => 'json_object' } },
               max_output_tokens => 400, temperature => 0.8, seed => 6 },
             'json_object');
# random weights may write a string past max_output_tokens: then the
# answer is incomplete, its text a JSON object begun
if (($j->{status} // '') eq 'incomplete') {
    is($j->{incomplete_details}{reason}, 'max_output_tokens',
       'json_object: incomplete only at max_output_tokens');
    like(texts($j), qr/^\s*\{/, 'json_object: a JSON object begun')
        or diag texts($j);
} else {
    is(ref(eval { decode_json(texts($j)) }), 'HASH',
       'json_object: the text is a JSON object') or diag texts($j);
}

# reasoning and the other settings are checked and echoed

$j = ok_resp({ model => 'tiny', input => 'x', max_output_tokens => 1,
               reasoning => { effort => 'low', summary => 'auto' },
               metadata => { a => 'b' }, store => \0, truncation => 'auto',
               parallel_tool_calls => \0, top_p => 0.5, user => 'u1',
               top_k => 5, min_p => 0.1, seed => 1,
               include => [], unknown_field => 1 }, 'settings');
is_deeply($j->{reasoning}, { effort => 'low', summary => 'auto' },
          'reasoning echoed');
is_deeply($j->{metadata}, { a => 'b' }, 'metadata echoed');
is($j->{store}, JSON::PP::false, 'store: false asked, false said');
my $nostore = $j;
is($j->{truncation}, 'auto', 'truncation echoed');
is($j->{parallel_tool_calls}, JSON::PP::false, 'parallel_tool_calls echoed');
is($j->{top_p}, 0.5, 'top_p echoed');

# the stream

sub stream {
    my ($body) = @_;
    my $s = $t->open_stream('/v1/responses', { %$body, stream => \1 });
    my ($status, $h, $raw) = $t->read_response($s);
    is($status, 200, 'stream: 200') or diag $raw;
    like($h->{'content-type'} // '', qr{^text/event-stream}, 'stream: SSE');
    my @ev;
    for my $block (split /\n\n/, $raw) {
        next if $block =~ /^:/;
        my ($name) = $block =~ /^event: (\S+)$/m;
        my ($data) = $block =~ /^data: (.*)$/m;
        my $e = eval { decode_json($data // '') };
        ok($e && $name && $e->{type} eq $name,
           "stream: event: $name matches its data") or diag $block;
        push @ev, $e // {};
    }
    my @bad;
    for my $e (@ev) {
        my $type = $e->{type} // '';
        (my $n = $type) =~ s/^response\.//;
        my %names = (created => 'ResponseCreatedEvent',
                     in_progress => 'ResponseInProgressEvent',
                     completed => 'ResponseCompletedEvent',
                     incomplete => 'ResponseIncompleteEvent',
                     failed => 'ResponseFailedEvent',
                     error => 'ResponseErrorEvent',
                     'output_item.added' => 'ResponseOutputItemAddedEvent',
                     'output_item.done' => 'ResponseOutputItemDoneEvent',
                     'content_part.added' => 'ResponseContentPartAddedEvent',
                     'content_part.done' => 'ResponseContentPartDoneEvent',
                     'output_text.delta' => 'ResponseTextDeltaEvent',
                     'output_text.done' => 'ResponseTextDoneEvent',
                     'function_call_arguments.delta'
                         => 'ResponseFunctionCallArgumentsDeltaEvent',
                     'function_call_arguments.done'
                         => 'ResponseFunctionCallArgumentsDoneEvent');
        my $sn = $names{$n};
        push(@bad, "unknown event $type"), next unless $sn;
        push @bad, map { "$type: $_" } $schema->validate($sn, $e);
    }
    ok(!@bad, 'stream: every event valid against its schema')
        or diag join("\n", @bad[0 .. ($#bad > 20 ? 20 : $#bad)]);
    is_deeply([ map { $_->{sequence_number} } @ev ], [ 0 .. $#ev ],
              'stream: sequence_number 0, 1, 2, ...');
    return @ev;
}

my @ev = stream({ model => 'tiny', input => 'Say hi', temperature => 0,
                  max_output_tokens => 12 });
my @types = map { $_->{type} } @ev;
my $seq = join ' ', @types;
like($seq, qr/^response\.created response\.in_progress response\.output_item\.added response\.content_part\.added (response\.output_text\.delta )+response\.output_text\.done response\.content_part\.done response\.output_item\.done response\.(completed|incomplete)$/,
     'stream: the event sequence') or diag $seq;
my $deltas = join '', map { $_->{delta} }
                      grep { $_->{type} eq 'response.output_text.delta' } @ev;
my ($tdone) = grep { $_->{type} eq 'response.output_text.done' } @ev;
is($deltas, $tdone->{text}, 'stream: the deltas add up to the done text');
my $final = $ev[-1]{response};
is(texts($final), $tdone->{text}, 'stream: the final response has the text');
is($final->{id}, $ev[0]{response}{id}, 'stream: one response id');
is($ev[0]{response}{status}, 'in_progress', 'stream: created in_progress');
is($final->{usage}{output_tokens}, 12, 'stream: usage in the final event');
my $nonstream = ok_resp({ model => 'tiny', input => 'Say hi',
                          temperature => 0, max_output_tokens => 12 },
                        'the same, not streamed');
is(texts($nonstream), $tdone->{text}, 'stream: the same text, greedy');
is($final->{usage}{input_tokens}, $nonstream->{usage}{input_tokens},
   'stream: the same input_tokens');
is($final->{status}, 'incomplete', 'stream: 12 tokens: incomplete');
is($ev[-1]{type}, 'response.incomplete', 'stream: response.incomplete last');

# a streamed tool call
@ev = stream({ model => 'demo', input => 'order 68405 status please',
               tools => $tools, temperature => 0, max_output_tokens => 60 });
$seq = join ' ', map { $_->{type} } @ev;
like($seq, qr/response\.output_item\.added (response\.function_call_arguments\.delta )+response\.function_call_arguments\.done response\.output_item\.done response\.completed$/,
     'stream: tool call events') or diag $seq;
my $adeltas = join '', map { $_->{delta} }
    grep { $_->{type} eq 'response.function_call_arguments.delta' } @ev;
my ($adone) = grep { $_->{type} eq 'response.function_call_arguments.done' }
              @ev;
is($adeltas, $adone->{arguments}, 'stream: argument deltas add up');
is($adone->{name}, 'lookup_order', 'stream: the call name in .done');
($call) = grep { $_->{type} eq 'function_call' } @{ $ev[-1]{response}{output} };
is($call && $call->{arguments}, $adone->{arguments},
   'stream: the call in the final response');

# usage settles the key

my $k = $t->post('/keyed/v1/responses',
                 { model => 'tiny', input => 'Hello', max_output_tokens => 5 },
                 Authorization => "Bearer $skey");
my $kt1 = Time::HiRes::time();
is($k->{status}, 200, 'keyed: 200') or diag $k->{content};
my $ku = $k->{json}{usage};
my $k2 = $t->post('/keyed/v1/responses',
                  { model => 'tiny', input => 'Hello', max_output_tokens => 5 },
                  Authorization => "Bearer $skey");
my $refill = int((Time::HiRes::time() - $kt1) * 100) + 1;
cmp_ok($k2->{headers}{'x-ratelimit-remaining-tokens'} // 1e9, '<=',
       6000 - $ku->{total_tokens} + $refill,
       "keyed: the next request sees the tokens spent (refill <= $refill)");
my $log = $t->slurp("$dir/llm.log");
like($log, qr{^200 /keyed/v1/responses key=k2 prompt=$ku->{input_tokens} completion=$ku->{output_tokens} }m,
     'access log: the key, prompt and completion tokens');
is($t->post('/keyed/v1/responses', { model => 'tiny', input => 'x' })->{status},
   401, 'keyed: no key, 401');
{
    my $s = $t->open_stream('/keyed/v1/responses',
                            { model => 'tiny', input => 'Hello again',
                              max_output_tokens => 6, stream => \1,
                              # greedy: a sampled answer may end early
                              temperature => 0 },
                            Authorization => "Bearer $key");
    my ($status, $h, $raw) = $t->read_response($s);
    close $s;     # nginx may log only when the client closes its side
    is($status, 200, 'keyed stream: 200');
    my ($last) = grep { /^data: / } reverse split /\n/, $raw;
    my $su = eval { decode_json(substr($last // '', 6)) }->{response}{usage};
    is($su->{output_tokens}, 6, 'keyed stream: usage in the last event');
    my $want = qr{^200 /keyed/v1/responses key=k1 prompt=$su->{input_tokens} completion=6 finish=length }m;
    for (1 .. 50) { last if $t->slurp("$dir/llm.log") =~ $want; sleep 0.1 }
    $log = $t->slurp("$dir/llm.log");
    like($log, $want,
         'keyed stream: the access log has its usage and finish');
}

# the store: previous_response_id and item_reference

my $first = ok_resp({ model => 'tiny', instructions => 'Be brief.',
                      input => 'Hello there', max_output_tokens => 4,
                      temperature => 0 }, 'first turn');
my $next = ok_resp({ model => 'tiny', input => 'And then?',
                     previous_response_id => $first->{id},
                     max_output_tokens => 4, temperature => 0 },
                   'previous_response_id');
is($next->{previous_response_id}, $first->{id}, 'previous_response_id echoed');
my $full = ok_resp({ model => 'tiny', max_output_tokens => 4, temperature => 0,
                     input => [ { role => 'user', content => 'Hello there' },
                                @{ $first->{output} },
                                { role => 'user', content => 'And then?' } ] },
                   'the same conversation sent whole');
is($next->{usage}{input_tokens}, $full->{usage}{input_tokens},
   'previous_response_id: the whole conversation, instructions not carried over');
is(texts($next), texts($full), 'previous_response_id: the same answer, greedy');
my $nostore2 = ok_resp({ model => 'tiny', input => 'And then?', store => \0,
                         previous_response_id => $first->{id},
                         max_output_tokens => 4, temperature => 0 },
                       'previous_response_id with store false');
is($nostore2->{usage}{input_tokens}, $next->{usage}{input_tokens},
   'store false: the previous response is still read');
is($nostore2->{store}, JSON::PP::false, 'store false: not kept');
my $third = ok_resp({ model => 'tiny', input => 'More?', max_output_tokens => 4,
                      previous_response_id => $next->{id}, temperature => 0 },
                    'a third turn');
cmp_ok($third->{usage}{input_tokens}, '>', $next->{usage}{input_tokens},
       'a chain of previous_response_id: the conversation grows');
my ($first_msg) = grep { $_->{type} eq 'message' } @{ $first->{output} };
my $ref = ok_resp({ model => 'tiny', max_output_tokens => 4, temperature => 0,
                    input => [ { role => 'user', content => 'Hello there' },
                               { type => 'item_reference',
                                 id => $first_msg->{id} },
                               { role => 'user', content => 'And then?' } ] },
                  'item_reference');
is($ref->{usage}{input_tokens}, $full->{usage}{input_tokens},
   'item_reference: the item kept under its id');
my ($nostore_msg) = grep { $_->{type} eq 'message' } @{ $nostore->{output} };
bad({ model => 'tiny', input => [ { type => 'item_reference',
                                    id => $nostore_msg->{id} } ] },
    'input[0].id', qr/Item with id '$nostore_msg->{id}' not found/,
    'store false: its items are not kept');
bad({ model => 'tiny', input => 'x', previous_response_id => $nostore->{id} },
    'previous_response_id', qr/Previous response with id '$nostore->{id}' not found/,
    'store false: the response is not kept');
bad({ model => 'tiny', input => 'x', previous_response_id => 'resp_nope' },
    'previous_response_id', qr/not found/, 'an unknown previous_response_id');
bad({ model => 'tiny', input => 'x', previous_response_id => 5 },
    'previous_response_id', qr/expected a string/, 'previous_response_id 5');

# the 400s

bad({ model => 'tiny', input => [ { type => 'web_search_call', id => 'x' } ] },
    'input[0].type', qr/Unsupported input item type 'web_search_call'/,
    'a hosted tool item');
bad({ model => 'tiny', input => [ { role => 'user', content => 'a' },
                                  { role => 'user', content => [
                                      { type => 'input_text', text => 'a' },
                                      { type => 'input_image',
                                        image_url => 'http://x/y.png' } ] } ] },
    'input[1].content[1].type', qr/text only/, 'an image part');
bad({ model => 'tiny', input => [ { role => 'user', content => [
        { type => 'bogus' } ] } ] },
    'input[0].content[0].type', qr/Invalid value: 'bogus'/, 'a bad part type');
bad({ model => 'tiny', input => [ { role => 'robot', content => 'a' } ] },
    'input[0].role', qr/Invalid value: 'robot'/, 'a bad role');
bad({ model => 'tiny', input => [ { type => 'function_call', name => 'f',
                                    arguments => '{}' } ] },
    'input[0].call_id', qr/Missing required parameter/, 'a call without id');
bad({ model => 'tiny' }, 'input', qr/Missing required parameter: 'input'/,
    'no input');
bad({ model => 'tiny', input => 5 }, 'input', qr/expected a string or an array/,
    'input a number');
bad({ model => 'tiny', input => 'x', tools => [ { type => 'web_search' } ] },
    'tools[0].type', qr/'web_search' is not supported/, 'a hosted tool');
bad({ model => 'tiny', input => 'x', tool_choice => 'sometimes' },
    'tool_choice', qr/Invalid value: 'sometimes'/, 'a bad tool_choice');
bad({ model => 'tiny', input => 'x', reasoning => { effort => 'huge' } },
    'reasoning.effort', qr/Invalid value: 'huge'/, 'a bad effort');
bad({ model => 'tiny', input => 'x', reasoning => { summary => 'long' } },
    'reasoning.summary', qr/Invalid value: 'long'/, 'a bad summary');
bad({ model => 'tiny', input => 'x', text => { format => { type => 'xml' } } },
    'text.format.type', qr/Invalid value: 'xml'/, 'a bad format');
bad({ model => 'tiny', input => 'x',
      text => { format => { type => 'json_schema', schema => {} } } },
    'text.format.name', qr/Missing required/, 'json_schema without a name');
bad({ model => 'tiny', input => 'x', text => { verbosity => 'loud' } },
    'text.verbosity', qr/Invalid value: 'loud'/, 'a bad verbosity');
bad({ model => 'tiny', input => 'x', truncation => 'sometimes' },
    'truncation', qr/Invalid value/, 'a bad truncation');
bad({ model => 'tiny', input => 'x', max_output_tokens => 0 },
    'max_output_tokens', qr/below minimum/, 'max_output_tokens 0');
bad({ model => 'tiny', input => 'x', max_output_tokens => 20000000 },
    'max_output_tokens', qr/./, 'max_output_tokens too large (the chat check, renamed)');
bad({ model => 'tiny', input => 'x', max_output_tokens => 100000 },
    undef, qr/context/, 'max_output_tokens over the context (the engine)');
bad({ model => 'tiny', input => 'x', temperature => 3 },
    'temperature', qr/./, 'temperature 3 (the chat check)');
bad({ model => 'tiny', input => 'x', background => \1 },
    'background', qr/not supported/, 'background');
bad({ model => 'tiny', input => 'x', metadata => { a => 1 } },
    'metadata', qr/strings/, 'metadata with a number');
bad({ model => 'tiny', input => 'x', store => 'yes' },
    'store', qr/expected a boolean/, 'store a string');
bad('{"model":"tiny","input":', undef, qr/could not parse the JSON/,
    'bad JSON');
bad({ model => 'tiny', input => 'x', tools => [ { type => 'function' } ] },
    'tools[0].name', qr/Missing required/, 'a tool without a name');
is(resp({ model => 'nope', input => 'x' })->{status}, 404, 'unknown model: 404');
is($t->get('/v1/responses')->{status}, 405, 'GET: 405');
is($t->get("/v1/responses/$first->{id}")->{status}, 404,
   'GET /v1/responses/{id}: 404, responses are not retrievable');

$log = $t->slurp("$dir/llm.log");
like($log, qr{^400 /v1/responses key=- prompt=0 completion=0 finish=- error=previous_response_not_found$}m,
     'access log: the 400\'s code');

# the store's lifetime, then off (reloads; each waits until both old
# workers are gone, so that the new configuration answers)

sub reload {
    my ($store) = @_;
    my $gone = () = $t->error_log =~ /worker process \d+ exited/g;
    my $ok = $t->reload_nginx(conf($store), workers => 2);
    for (1 .. 200) {
        my $now = () = $t->error_log =~ /worker process \d+ exited/g;
        return $ok if $now >= $gone + 2;
        sleep 0.05;
    }
    return 0;
}

ok(reload('llm_responses_store 1m 3s;'),
   'reload: a store of 1m for 3s');
$first = ok_resp({ model => 'tiny', input => 'Hi', max_output_tokens => 2 },
                 'lifetime: a response');
ok_resp({ model => 'tiny', input => 'x', previous_response_id => $first->{id},
          max_output_tokens => 1 }, 'lifetime: kept at first');
sleep 4;
bad({ model => 'tiny', input => 'x', previous_response_id => $first->{id} },
    'previous_response_id', qr/not found/, 'lifetime: gone after 3s');
ok(reload('llm_responses_store 32k;'), 'reload: a store of 32k');
my @ids;
for my $i (1 .. 24) {
    my $r = resp({ model => 'tiny', input => "story $i", temperature => 0.9,
                   seed => $i, max_output_tokens => 200 });
    push @ids, $r->{json}{id};
}
bad({ model => 'tiny', input => 'x', previous_response_id => $ids[0] },
    'previous_response_id', qr/not found/, 'full: the oldest went');
ok_resp({ model => 'tiny', input => 'x', previous_response_id => $ids[-1],
          max_output_tokens => 1 }, 'full: the newest is kept');
unlike($t->error_log, qr/\[(alert|crit)\]|llm_responses.*no memory/,
       'full: no alert, no memory error logged');
ok(reload('llm_responses_store off;'),
   'reload: store off');
$j = ok_resp({ model => 'tiny', input => 'Hi', max_output_tokens => 2 },
             'off: a response');
is($j->{store}, JSON::PP::false, 'off: store false');
bad({ model => 'tiny', input => 'x', previous_response_id => $j->{id} },
    'previous_response_id', qr/does not store responses \(llm_responses_store off\)/,
    'off: previous_response_id');
bad({ model => 'tiny', input => [ { type => 'item_reference', id => 'msg_1' } ] },
    'input[0].type', qr/does not store responses/, 'off: item_reference');

$t->done;

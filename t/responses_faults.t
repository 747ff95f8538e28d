#!/usr/bin/perl
# /v1/responses with scripted engines (t/lib/FakeEngine.pm), for what the
# real test models do not do: a thinking model's reasoning (a reasoning
# item before the message, streamed as reasoning_text events), text and
# then a tool call in one answer (two items), an engine error in the
# middle of a stream (the open item closed incomplete, an "error" event,
# then response.failed), the engine gone mid-stream, and invalid UTF-8
# from the engine (every body and event still valid UTF-8 and JSON).
# Every body and event validates against the official schemas.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use Encode ();
use JSON::PP;
use LlmTest;
use LlmSchema;
use FakeEngine;

my $STRICT = JSON::PP->new->utf8->allow_nonref;
my $t = LlmTest->new;
my $d = $t->dir;

# a Delta with reasoning (Delta.reasoning is field 5)
sub ev_think {
    return FakeEngine::frame(FakeEngine::field_bytes(3,
                             FakeEngine::field_bytes(5, $_[0])));
}

my $think = sub {
    my ($c) = @_;
    while (1) {
        my $h = FakeEngine::read_n($c, 4) // return;
        my $len = unpack('N', $h);
        my $req = $len ? FakeEngine::read_n($c, $len) // return : '';
        if (substr($req, 0, 1) eq "\x12") {
            syswrite($c, FakeEngine::ev_info('fake'));
            next;
        }
        next if substr($req, 0, 1) =~ /[\x2a\x32]/;
        syswrite($c, FakeEngine::ev_started(5) . ev_think('Let me ')
                     . ev_think('think.') . FakeEngine::ev_delta('It is ')
                     . FakeEngine::ev_delta('sunny.')
                     . FakeEngine::ev_tool(0, 'call_1', 'get_weather',
                                           '{"city":')
                     . FakeEngine::ev_tool(0, '', '', '"Paris"}')
                     . FakeEngine::ev_done(3, 5, 9));
    }
};

my %fe;
$fe{think} = FakeEngine->start("$d/think.sock", serve => $think);
$fe{error_mid} = FakeEngine->start("$d/error_mid.sock", mode => 'error_mid');
$fe{close_mid} = FakeEngine->start("$d/close_mid.sock", mode => 'close_mid');
$fe{badtext} = FakeEngine->start("$d/badtext.sock", mode => 'badtext');

$t->start_nginx(<<"EOF");
    upstream u_think { server unix:$d/think.sock; }
    upstream u_error_mid { server unix:$d/error_mid.sock; }
    upstream u_close_mid { server unix:$d/close_mid.sock; }
    upstream u_badtext { server unix:$d/badtext.sock; }
    llm_model think upstream=u_think;
    llm_model error_mid upstream=u_error_mid;
    llm_model close_mid upstream=u_close_mid;
    llm_model badtext upstream=u_badtext;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
EOF

my $schema = LlmSchema->load($t->repo
                             . '/tests/schemas/openai-responses.json');

my %EVENT = (
    'response.created' => 'ResponseCreatedEvent',
    'response.in_progress' => 'ResponseInProgressEvent',
    'response.completed' => 'ResponseCompletedEvent',
    'response.incomplete' => 'ResponseIncompleteEvent',
    'response.failed' => 'ResponseFailedEvent',
    'error' => 'ResponseErrorEvent',
    'response.output_item.added' => 'ResponseOutputItemAddedEvent',
    'response.output_item.done' => 'ResponseOutputItemDoneEvent',
    'response.content_part.added' => 'ResponseContentPartAddedEvent',
    'response.content_part.done' => 'ResponseContentPartDoneEvent',
    'response.output_text.delta' => 'ResponseTextDeltaEvent',
    'response.output_text.done' => 'ResponseTextDoneEvent',
    'response.reasoning_text.delta' => 'ResponseReasoningTextDeltaEvent',
    'response.reasoning_text.done' => 'ResponseReasoningTextDoneEvent',
    'response.function_call_arguments.delta'
        => 'ResponseFunctionCallArgumentsDeltaEvent',
    'response.function_call_arguments.done'
        => 'ResponseFunctionCallArgumentsDoneEvent',
);

# valid UTF-8 and JSON, and valid against the schema $name
sub valid {
    my ($bytes, $name, $what) = @_;
    my $copy = $bytes;
    ok(eval { Encode::decode('UTF-8', $copy, Encode::FB_CROAK); 1 },
       "$what: valid UTF-8");
    my $j = eval { $STRICT->decode($bytes) };
    ok($j, "$what: valid JSON") or return {};
    my @err = $schema->validate($name, $j);
    ok(!@err, "$what: a valid $name") or diag join("\n", @err);
    return $j;
}

sub stream {
    my ($model, $what) = @_;
    my $s = $t->open_stream('/v1/responses',
                            { model => $model, input => 'hi', stream => \1 });
    my ($status, $h, $raw) = $t->read_response($s);
    is($status, 200, "$what: 200");
    my @ev;
    for my $block (split /\n\n/, $raw) {
        next if $block =~ /^:/;
        my ($name) = $block =~ /^event: (\S+)$/m;
        my ($data) = $block =~ /^data: (.*)$/m;
        my $sn = $EVENT{$name // ''};
        ok($sn, "$what: a known event " . ($name // '?')) or next;
        my $e = valid($data // '', $sn, "$what: $name");
        is($e->{type}, $name, "$what: $name: its type");
        push @ev, $e;
    }
    is_deeply([ map { $_->{sequence_number} } @ev ], [ 0 .. $#ev ],
              "$what: sequence numbers");
    return @ev;
}

# reasoning, text and a tool call

my $r = $t->post('/v1/responses', { model => 'think', input => 'hi' });
is($r->{status}, 200, 'think: 200');
my $j = valid($r->{content}, 'Response', 'think');
is_deeply([ map { $_->{type} } @{ $j->{output} } ],
          [ 'reasoning', 'message', 'function_call' ],
          'think: reasoning, message, function_call');
my ($rs, $msg, $fc) = @{ $j->{output} };
like($rs->{id}, qr/^rs_/, 'reasoning: id rs_...');
is_deeply($rs->{content}, [ { type => 'reasoning_text',
                              text => 'Let me think.' } ],
          'reasoning: its text');
is_deeply($rs->{summary}, [], 'reasoning: no summary');
is($msg->{content}[0]{text}, 'It is sunny.', 'message: the text alone');
is($fc->{arguments}, '{"city":"Paris"}', 'call: the arguments');
is($fc->{call_id}, 'call_1', 'call: the engine\'s call id');
is($j->{status}, 'completed', 'think: completed (tool_calls)');

my @ev = stream('think', 'think stream');
my $seq = join ' ', map { $_->{type} } @ev;
is($seq, join(' ', qw(response.created response.in_progress
    response.output_item.added response.content_part.added
    response.reasoning_text.delta response.reasoning_text.delta
    response.reasoning_text.done response.content_part.done
    response.output_item.done
    response.output_item.added response.content_part.added
    response.output_text.delta response.output_text.delta
    response.output_text.done response.content_part.done
    response.output_item.done
    response.output_item.added response.function_call_arguments.delta
    response.function_call_arguments.delta
    response.function_call_arguments.done response.output_item.done
    response.completed)), 'think stream: the whole sequence');
is_deeply([ map { $_->{output_index} // () } @ev[2 .. $#ev - 1] ],
          [ (0) x 7, (1) x 7, (2) x 5 ], 'think stream: output indexes');
my $fin = $ev[-1]{response};
is_deeply([ map { $_->{type} } @{ $fin->{output} } ],
          [ 'reasoning', 'message', 'function_call' ],
          'think stream: the final output');
is($fin->{output}[0]{content}[0]{text}, 'Let me think.',
   'think stream: the reasoning in the final output');
is($fin->{usage}{output_tokens}, 9, 'think stream: usage');

# an engine error mid-stream

@ev = stream('error_mid', 'error_mid');
$seq = join ' ', map { $_->{type} } @ev;
like($seq, qr/response\.output_text\.delta response\.output_text\.done response\.content_part\.done response\.output_item\.done error response\.failed$/,
     'error_mid: the item closed, error, response.failed') or diag $seq;
my ($err) = grep { $_->{type} eq 'error' } @ev;
is($err->{message}, 'the engine broke', 'error_mid: the engine\'s message');
is($ev[-1]{response}{status}, 'failed', 'error_mid: status failed');
is($ev[-1]{response}{error}{code}, 'server_error', 'error_mid: server_error');
is($ev[-1]{response}{output}[0]{status}, 'incomplete',
   'error_mid: the message item incomplete');
is($ev[-1]{response}{output}[0]{content}[0]{text}, 'Hello',
   'error_mid: with the text so far');

# the engine gone mid-stream

@ev = stream('close_mid', 'close_mid');
is($ev[-1]{type}, 'response.failed', 'close_mid: response.failed last');
like($ev[-2]{message} // '', qr/closed the stream/,
     'close_mid: the error says the engine went away');

# invalid UTF-8 from the engine

$r = $t->post('/v1/responses', { model => 'badtext', input => 'hi' });
$j = valid($r->{content}, 'Response', 'badtext');
like($j->{output}[0]{content}[0]{text}, qr/^ok \x{fffd}/,
     'badtext: bad bytes as U+FFFD');
stream('badtext', 'badtext stream');

$_->stop for values %fe;
$t->done;

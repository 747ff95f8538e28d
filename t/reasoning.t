#!/usr/bin/perl
# Reasoning split end to end (engine/src/decode/reasoning.h): a model whose
# chat template opens <think> for the answer (t/data/think.jinja, Qwen3 /
# DeepSeek-R1 style) answers through nginx with its thinking in
# reasoning_content, JSON and streamed, and nothing of it in content; the
# engine says "reasoning think" (from the template's </think>), and
# --reasoning-format none turns it off; legacy completions are never
# split.  The random model never closes the block, so all its output is
# reasoning: the close and the answer after it are checked with a
# scripted model in engine/tests/test_scheduler.c and test_reasoning.c.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use JSON::PP;
use LlmTest;

my $t = LlmTest->new;

my $model = $t->build . '/models/test-think.gguf';
unless (-f $model) {
    system('mkdir', '-p', $t->build . '/models') == 0 or die;
    system($t->bin('llm-mkmodel'), '--preset', 'tiny', '--type', 'Q8_0',
           '--chat-template', 't/data/think.jinja', '-q',
           '-o', "$model.tmp.$$") == 0 or die 'llm-mkmodel';
    rename "$model.tmp.$$", $model or die "rename: $!";
}

$t->start_engine('th', model => $model, args => ['--name', 'think']);
$t->start_engine('no', model => $model,
                 args => ['--name', 'plain', '--reasoning-format', 'none']);
like($t->engine_log('th'), qr/reasoning think/,
     'the engine takes the think format from the template');
like($t->engine_log('no'), qr/reasoning none/, '--reasoning-format none');

$t->start_nginx(<<"EOF2");
    upstream th { server unix:%%SOCK_th%%; }
    upstream no { server unix:%%SOCK_no%%; }
    llm_model think upstream=th;
    llm_model plain upstream=no;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
EOF2

my %req = (temperature => 0, max_tokens => 12, ignore_eos => JSON::PP::true,
           messages => [ { role => 'user', content => 'Why is the sky blue?' } ]);

my $r = $t->post('/v1/chat/completions', { %req, model => 'think' });
is($r->{status}, 200, 'chat: 200');
my $msg = $r->{json}{choices}[0]{message};
my $rsn = $msg->{reasoning_content} // '';
ok(length $rsn, "chat: reasoning_content holds the thinking (" . length($rsn)
   . " bytes)");
ok(!defined $msg->{content} || $msg->{content} eq '',
   'chat: nothing of it in content');
is($r->{json}{usage}{completion_tokens}, 12, 'chat: every token billed');

# the same answer streamed: reasoning deltas only, the same text
my $sock = $t->open_stream('/v1/chat/completions',
                           { %req, model => 'think', stream => \1 });
my ($st, $h, $body) = $t->read_response($sock);
is($st, 200, 'stream: 200');
my ($srsn, $scontent) = ('', '');
for my $ev (grep { ref } LlmTest::sse_events($body)) {
    next unless $ev->{choices} && @{ $ev->{choices} };
    my $d = $ev->{choices}[0]{delta} // {};
    $srsn .= $d->{reasoning_content} // '';
    $scontent .= $d->{content} // '';
}
is($srsn, $rsn, 'stream: the reasoning deltas add up to the JSON answer');
is($scontent, '', 'stream: no content deltas');

# the format off: the same tokens are content
$r = $t->post('/v1/chat/completions', { %req, model => 'plain' });
is($r->{status}, 200, 'reasoning off: 200');
$msg = $r->{json}{choices}[0]{message};
ok(!exists $msg->{reasoning_content}, 'reasoning off: no reasoning_content');
is($msg->{content}, $rsn, 'reasoning off: the same text as content');

# Anthropic's Messages: the same thinking as a thinking block, no text
$r = $t->post('/v1/messages', { model => 'think', max_tokens => 12,
                                temperature => 0,
                                messages => [ $req{messages}[0] ] });
is($r->{status}, 200, 'messages: 200');
my @blocks = @{ $r->{json}{content} // [] };
is($blocks[0]{type} // '', 'thinking', 'messages: a thinking block first');
is($blocks[0]{thinking} // '', $rsn, 'messages: the same thinking');
ok(!grep({ $_->{type} eq 'text' && length $_->{text} } @blocks),
   'messages: no text of it');

# the Responses API: the same thinking as a reasoning item
$r = $t->post('/v1/responses', { model => 'think', max_output_tokens => 12,
                                 temperature => 0, ignore_eos => JSON::PP::true,
                                 input => $req{messages}[0]{content} });
is($r->{status}, 200, 'responses: 200');
my @items = @{ $r->{json}{output} // [] };
is($items[0]{type} // '', 'reasoning', 'responses: a reasoning item first');
is(join('', map { $_->{text} // '' } @{ $items[0]{content} // [] }), $rsn,
   'responses: the same thinking');
ok(!grep({ $_->{type} eq 'message' } @items), 'responses: no message of it');

# completions are the raw continuation, never split
$r = $t->post('/v1/completions', { model => 'think', prompt => "<think>\n",
                                   max_tokens => 6, temperature => 0 });
is($r->{status}, 200, 'completions: 200');
ok(!exists $r->{json}{choices}[0]{reasoning_content},
   'completions: no reasoning_content');

$t->done;

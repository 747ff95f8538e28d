#!/usr/bin/perl
# Chat-completions compatibility with what current clients send and read
# (issue 33, item 4), against the real engine on the tiny test model
# (a Qwen2.5-style template: no developer role, Hermes tool calls):
#
# - a developer message is the system message of a template without a
#   developer role: the same prompt as with a system message, longer than
#   without it.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;

my $t = LlmTest->new;
$t->start_engine('a');

$t->start_nginx(<<'EOF2');
    upstream engines { server unix:%%SOCK_a%%; keepalive 4; }
    llm_model tiny upstream=engines;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
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

$t->done;

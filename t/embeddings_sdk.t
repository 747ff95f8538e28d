#!/usr/bin/perl
# The official openai client's embeddings.create (tests/client, pinned in
# its package-lock.json) against /v1/embeddings: the SDK's default, float,
# base64 (decoded as newer SDKs do by default), token ids, errors as
# BadRequestError, the answer validated with ajv against the official
# schema.  The engine runs the
# tiny-embed model with --embeddings.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmClient;
use LlmKeys;
use LlmNpm;

my $client = LlmTest->repo . '/tests/client';
LlmNpm::need('tests/client', 'openai', 'ajv');

my $t = LlmTest->new;
my $model = $t->build . '/models/test-embed.gguf';
unless (-f $model) {
    system('mkdir', '-p', $t->build . '/models') == 0 or die;
    system($t->bin('llm-mkmodel'), '--preset', 'tiny-embed', '--type',
           'Q8_0', '-q', '-o', "$model.tmp.$$") == 0 or die 'llm-mkmodel';
    rename "$model.tmp.$$", $model or die "rename: $!";
}
$t->start_engine('e', model => $model, args => ['--embeddings']);
my ($key, $line) = LlmKeys::new_key('rag', tpm => 1000000);
LlmKeys::write_keys($t, $line);
$t->start_nginx(<<"EOF");
    llm_zone llm 1m;
    llm_keys @{[ $t->dir ]}/keys;
    upstream emb { server unix:%%SOCK_e%%; keepalive 2; }
    llm_model embed upstream=emb;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
EOF

local $ENV{LLM_URL} = 'http://127.0.0.1:' . $t->port . '/v1';
local $ENV{LLM_KEY} = $key;
my ($rc, $oks, $fails) = LlmClient::run_tap("$client/embeddings.mjs",
    echo => qr/^(#|not ok)/);
is($rc, 0, 'embeddings.mjs exits 0');
is($fails, 0, 'no check failed');
is($oks, 14, 'every check ran');
$t->done;

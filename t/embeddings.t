#!/usr/bin/perl
# POST /v1/embeddings end to end: llm-mkmodel's tiny-embed model (qwen3,
# pooling_type 3: last token) under an engine started with --embeddings,
# behind nginx.  The response validates against the official OpenAPI
# CreateEmbeddingResponse schema (tests/schemas); base64 decodes to the
# float list; vectors are unit length; identical inputs give identical
# vectors, different inputs different ones; a batch gives bit for bit the
# vectors of its inputs sent alone; the four input forms; dimensions
# (refused, then Matryoshka with --embd-truncate); mean and cls pooling;
# the OpenAI-shaped 400s; usage metered in the access log, the key's
# limits and the metrics; a chat request to an embedding model and an
# embedding request to a chat model are 400s that say why; an answer
# larger than llm_max_frame (each input is a frame of its own).

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use JSON::PP;
use MIME::Base64;
use LlmTest;
use LlmKeys;
use LlmSchema;

my $t = LlmTest->new;

# the embedding model, made once per build like the tiny one
my $model = $t->build . '/models/test-embed.gguf';
unless (-f $model) {
    system('mkdir', '-p', $t->build . '/models') == 0 or die;
    system($t->bin('llm-mkmodel'), '--preset', 'tiny-embed', '--type',
           'Q8_0', '-q', '-o', "$model.tmp.$$") == 0 or die 'llm-mkmodel';
    rename "$model.tmp.$$", $model or die "rename: $!";
}

$t->start_engine('e', model => $model, args => ['--embeddings']);
$t->start_engine('m', model => $model,
                 args => ['--embeddings', '--pooling', 'mean',
                          '--embd-truncate']);
$t->start_engine('c', model => $model,
                 args => ['--embeddings', '--pooling', 'cls']);
$t->start_engine('g');     # the tiny chat model

like($t->engine_log('e'), qr/embeddings: 128 dimensions, last pooling,/,
     'the engine logs its embedding mode, pooling from the file');

my ($key, $line) = LlmKeys::new_key('k1', tpm => 100000);
LlmKeys::write_keys($t, $line);
my $dir = $t->dir;

$t->start_nginx(<<"EOF");
    log_format llm '\$status model=\$llm_model key=\$llm_key_name '
                   'prompt=\$llm_prompt_tokens '
                   'completion=\$llm_completion_tokens '
                   'error=\$llm_error_code';
    llm_zone llm 1m;
    upstream emb { server unix:%%SOCK_e%%; }
    upstream embm { server unix:%%SOCK_m%%; }
    upstream embc { server unix:%%SOCK_c%%; }
    upstream chat { server unix:%%SOCK_g%%; }
    llm_model embed upstream=emb;
    llm_model embed-mean upstream=embm;
    llm_model embed-cls upstream=embc;
    llm_model tiny upstream=chat;
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log %%DIR%%/llm.log llm;
        location /v1/ { llm_api on; }
        location /keyed/v1/ { llm_api on; llm_keys $dir/keys; }
        location /small/v1/ { llm_api on; llm_max_frame 1k; }
        location = /metrics { llm_metrics; }
    }
EOF

my $schema = LlmSchema->load($t->repo
                             . '/tests/schemas/openai-embeddings.json');

sub emb { my ($body, %h) = @_; return $t->post('/v1/embeddings', $body, %h) }

sub norm { my $s = 0; $s += $_ * $_ for @{ $_[0] }; return sqrt $s }

sub dot {
    my ($a, $b) = @_;
    my $s = 0;
    $s += $a->[$_] * $b->[$_] for 0 .. $#$a;
    return $s;
}

sub vec_of { return $_[0]{json}{data}[$_[1] // 0]{embedding} }

# one string

my $r = emb({ model => 'embed', input => 'The quick brown fox' });
is($r->{status}, 200, 'one string: 200') or diag $r->{content};
is_deeply([ $schema->validate('CreateEmbeddingResponse', $r->{json}) ], [],
          'the body validates against CreateEmbeddingResponse');
is($r->{json}{object}, 'list', 'object list');
is($r->{json}{model}, 'embed', 'model: the name asked for');
is(scalar @{ $r->{json}{data} }, 1, 'one embedding');
is($r->{json}{data}[0]{index}, 0, 'index 0');
is(scalar @{ vec_of($r) }, 128, '128 dimensions (embedding_length)');
ok(abs(norm(vec_of($r)) - 1) < 1e-5, 'L2-normalized: |v| = 1');
my $pt = $r->{json}{usage}{prompt_tokens};
ok($pt >= 4, "usage.prompt_tokens counts the input ($pt)");
is($r->{json}{usage}{total_tokens}, $pt, 'total_tokens = prompt_tokens');
like($r->{headers}{'content-type'}, qr{^application/json}, 'JSON answer');
my $fox = vec_of($r);

# the validator itself refuses what the schema does not allow
ok(scalar $schema->validate('CreateEmbeddingResponse',
                            { %{ $r->{json} }, object => 'embedding' }),
   'the validator catches a wrong object');

# identical input: cosine 1 (the same bits); different input: differs

my $again = vec_of(emb({ model => 'embed', input => 'The quick brown fox' }));
is_deeply($again, $fox, 'the same input again: the same vector');
ok(abs(dot($again, $fox) - 1) < 1e-6, 'cosine of identical inputs is 1');
my $dog = vec_of(emb({ model => 'embed', input => 'A lazy dog sleeps' }));
ok(dot($dog, $fox) < 0.9999, 'different inputs: different vectors (cosine '
   . sprintf('%.4f', dot($dog, $fox)) . ')');

# a batch: each input its own sequence, the same bits as alone (the long
# one spans forward calls: more than the step's 128 tokens)

my @texts = ('The quick brown fox', 'A lazy dog sleeps', 'x',
             'The quick brown fox jumps over the lazy dog ' x 20);
$r = emb({ model => 'embed', input => \@texts });
is($r->{status}, 200, 'a batch of 4: 200') or diag $r->{content};
is_deeply([ $schema->validate('CreateEmbeddingResponse', $r->{json}) ], [],
          'the batch validates');
is_deeply([ map { $_->{index} } @{ $r->{json}{data} } ], [0, 1, 2, 3],
          'indexes in input order');
my $sum = 0;
for my $i (0 .. $#texts) {
    my $one = emb({ model => 'embed', input => $texts[$i] });
    is_deeply(vec_of($r, $i), vec_of($one),
              "batch input $i equals the input alone, bit for bit");
    $sum += $one->{json}{usage}{prompt_tokens};
}
ok($sum > 128, "the batch is more than one forward call ($sum tokens)");
is($r->{json}{usage}{prompt_tokens}, $sum,
   'batch usage: the sum of the inputs alone');

# one frame per input: 300 inputs (150 KB of vectors) under an
# llm_max_frame of 1k

$r = $t->post('/small/v1/embeddings',
              { model => 'embed', input => [ map { "word $_" } 1 .. 300 ] });
is($r->{status}, 200, '300 inputs through 1k frames: 200')
    or diag $r->{content};
is(scalar @{ $r->{json}{data} // [] }, 300, '300 embeddings');
is($r->{json}{data}[299]{index}, 299, 'the last one is index 299');
is_deeply(vec_of($r, 1),
          vec_of(emb({ model => 'embed', input => 'word 2' })),
          'input 1 of 300: its vector alone');

# token ids: the same as the text they spell (tokenized by the engine)

my $tk = `@{[ $t->bin('llm-client') ]} --socket @{[ $t->engine_sock('e') ]} --tokenize 'The quick brown fox'`;
my ($ids) = $tk =~ /"tokens":\[([\d,]+)\]/;
ok($ids, "the engine tokenizes the text") or diag $tk;
my @ids = map { $_ + 0 } split /,/, $ids // '';
$r = emb({ model => 'embed', input => \@ids });
is($r->{status}, 200, 'token ids: 200') or diag $r->{content};
is($r->{json}{usage}{prompt_tokens}, scalar @ids, 'usage: the ids given');
is_deeply(vec_of($r), $fox, 'token ids give the vector of their text');
$r = emb({ model => 'embed', input => [ \@ids, [ @ids[0, 1] ] ] });
is($r->{status}, 200, 'lists of token ids: 200') or diag $r->{content};
is(scalar @{ $r->{json}{data} }, 2, 'two embeddings');
is($r->{json}{usage}{prompt_tokens}, @ids + 2, 'usage: all the ids');

# base64: little-endian float32, the same values

$r = emb({ model => 'embed', input => 'The quick brown fox',
           encoding_format => 'base64' });
is($r->{status}, 200, 'base64: 200') or diag $r->{content};
my $b64 = $r->{json}{data}[0]{embedding} // '';
ok(!ref $b64 && $b64 =~ m{^[A-Za-z0-9+/]+=*$}, 'base64: a base64 string');
my @dec = unpack 'f<*', decode_base64($b64);
is(scalar @dec, 128, 'base64 decodes to 128 float32');
is_deeply([ map { sprintf '%.9g', $_ } @dec ],
          [ map { sprintf '%.9g', $_ } @$fox ],
          'base64 decodes to the float list, bit for bit');
$r = emb({ model => 'embed', input => 'x', encoding_format => 'float' });
is($r->{status}, 200, 'encoding_format float: 200');

# user accepted; dimensions

$r = emb({ model => 'embed', input => 'x', user => 'u-1' });
is($r->{status}, 200, 'user: accepted');
$r = emb({ model => 'embed', input => 'x', dimensions => 128 });
is($r->{status}, 200, 'dimensions = embedding length: 200');
$r = emb({ model => 'embed', input => 'x', dimensions => 64 });
is($r->{status}, 400, 'dimensions 64 without --embd-truncate: 400');
is($r->{json}{error}{param}, 'dimensions', '  param dimensions');
like($r->{json}{error}{message}, qr/--embd-truncate/, '  says why');
my $full = emb({ model => 'embed-mean', input => 'The quick brown fox' });
$r = emb({ model => 'embed-mean', input => 'The quick brown fox',
           dimensions => 32 });
is($r->{status}, 200, 'dimensions 32 with --embd-truncate: 200')
    or diag $r->{content};
is(scalar @{ vec_of($r) // [] }, 32, '32 values');
ok(abs(norm(vec_of($r)) - 1) < 1e-5, 'truncated vector renormalized');
my $n32 = norm([ @{ vec_of($full) }[0 .. 31] ]);
ok(abs(vec_of($r)->[5] - vec_of($full)->[5] / $n32) < 1e-6,
   'Matryoshka: the first 32 values of the full vector, renormalized');
$r = emb({ model => 'embed-mean', input => 'x', dimensions => 129 });
is($r->{status}, 400, 'dimensions over the embedding length: 400');

# the pooling: mean and cls differ from last

my $cls = vec_of(emb({ model => 'embed-cls',
                       input => 'The quick brown fox' }));
my $cls2 = vec_of(emb({ model => 'embed-cls', input => 'The lazy dog' }));
ok(abs(norm($cls) - 1) < 1e-5, 'cls: unit length');
ok(dot(vec_of($full), $fox) < 0.9999 && dot($cls, $fox) < 0.9999,
   'mean and cls pooling differ from last');
# causal attention: the first token sees only itself, so inputs with the
# same first token have the same cls vector
ok(abs(dot($cls, $cls2) - 1) < 1e-6,
   'cls: inputs with the same first token share it (causal model)');

# errors, OpenAI-shaped

my @bad = (
    [ { model => 'embed' }, 'input', 'missing_required_parameter' ],
    [ { input => 'x' }, 'model', 'missing_required_parameter' ],
    [ { model => 'embed', input => '' }, 'input', 'invalid_value' ],
    [ { model => 'embed', input => [] }, 'input', 'invalid_value' ],
    [ { model => 'embed', input => ['a', ''] }, 'input[1]',
      'invalid_value' ],
    [ { model => 'embed', input => [[]] }, 'input[0]', 'invalid_value' ],
    [ { model => 'embed', input => 42 }, 'input', 'invalid_type' ],
    [ { model => 'embed', input => { a => 1 } }, 'input', 'invalid_type' ],
    [ { model => 'embed', input => ['a', 1] }, 'input[1]', 'invalid_type' ],
    [ { model => 'embed', input => [1, 'a'] }, 'input', 'invalid_type' ],
    [ { model => 'embed', input => [1, -2] }, 'input', 'invalid_type' ],
    [ { model => 'embed', input => [[1], [2.5]] }, 'input[1]',
      'invalid_type' ],
    [ { model => 'embed', input => [ ('a') x 2049 ] }, 'input',
      'invalid_value' ],
    [ { model => 'embed', input => 'x', encoding_format => 'int8' },
      'encoding_format', 'invalid_value' ],
    [ { model => 'embed', input => 'x', dimensions => 0 }, 'dimensions',
      'invalid_value' ],
    [ { model => 'embed', input => 'x', dimensions => '8' }, 'dimensions',
      'invalid_type' ],
    [ { model => 'embed', input => 'x', user => 5 }, 'user',
      'invalid_type' ],
);
my $enc = JSON::PP->new->canonical;
for my $b (@bad) {
    my ($body, $param, $code) = @$b;
    my $e = emb($body);
    my $what = substr($enc->encode($body), 0, 50);
    is($e->{status}, 400, "400: $what");
    is($e->{json}{error}{type}, 'invalid_request_error', '  type')
        or diag $e->{content};
    is($e->{json}{error}{param}, $param, "  param $param");
    is($e->{json}{error}{code}, $code, "  code $code");
}
$r = $t->post('/v1/embeddings', '{"model":');
is($r->{status}, 400, 'bad JSON: 400');
$r = emb({ model => 'embed', input => [999999] });
is($r->{status}, 400, 'a token id outside the vocabulary: 400 (engine)');
is($r->{json}{error}{param}, 'input', '  param input');
like($r->{json}{error}{message}, qr/not in the vocabulary/, '  says why');
$r = emb({ model => 'embed', input => [ (5) x 2049 ] });
is($r->{status}, 400, 'an input over the context (2048 tokens): 400');
like($r->{json}{error}{message}, qr/maximum context length of 2048/,
     '  names the context length');
$r = emb({ model => 'nope', input => 'x' });
is($r->{status}, 404, 'unknown model: 404');
is($r->{json}{error}{code}, 'model_not_found', '  model_not_found');
$r = $t->get('/v1/embeddings');
is($r->{status}, 405, 'GET: 405');

# the wrong kind of model, both ways

$r = emb({ model => 'tiny', input => 'x' });
is($r->{status}, 400, 'embeddings from a chat model: 400');
like($r->{json}{error}{message}, qr/--embeddings/, '  says why');
$r = $t->post('/v1/chat/completions',
              { model => 'embed',
                messages => [ { role => 'user', content => 'hi' } ] });
is($r->{status}, 400, 'chat with an embedding model: 400');
like($r->{json}{error}{message}, qr{embedding model.*/v1/embeddings},
     '  says use /v1/embeddings');

# the engine's Info: the mode, and the Embeds counted in its stats

my $info = `@{[ $t->bin('llm-client') ]} --socket @{[ $t->engine_sock('e') ]} --info`;
like($info, qr/"embeddings":true/, 'Info: embeddings true');
like($info, qr/"embedding_length":128/, 'Info: embedding_length 128');
like($info, qr/"pooling":"last"/, 'Info: pooling last');
like($info, qr/"max_embed_inputs":2048/, 'Info: limits.max_embed_inputs');
my ($reqs) = $info =~ /"requests_total":(\d+)/;
cmp_ok($reqs // 0, '>=', 10, "Info: the Embeds answered counted ($reqs)");

# a client that leaves while its inputs run: the engine drops the job,
# the next request is answered

my $s = $t->open_stream('/v1/embeddings',
                        { model => 'embed',
                          input => [ ('word ' x 400) x 40 ] });
select(undef, undef, undef, 0.05);
close $s;
$r = emb({ model => 'embed', input => 'The quick brown fox' });
is($r->{status}, 200, 'after a client left mid-request: 200');
is_deeply(vec_of($r), $fox, '  and the same vector');
for (1 .. 50) {
    last if $t->engine_log('e') =~ /cancelled by the client/;
    select(undef, undef, undef, 0.1);
}
like($t->engine_log('e'), qr/request emb-\w+ cancelled by the client/,
     'the engine was told (Cancel) and dropped the job');

# metering: the access log's variables, the key's tokens, the metrics

my $k = $t->post('/keyed/v1/embeddings',
                 { model => 'embed', input => ['a b c', 'd e f'] },
                 Authorization => "Bearer $key");
is($k->{status}, 200, 'keyed: 200') or diag $k->{content};
my $kpt = $k->{json}{usage}{prompt_tokens};
like($k->{headers}{'x-ratelimit-limit-tokens'} // '', qr/^100000$/,
     'keyed: the key\'s token limit in the headers');
my $k2 = $t->post('/keyed/v1/embeddings',
                  { model => 'embed', input => 'a b c' },
                  Authorization => "Bearer $key");
cmp_ok($k2->{headers}{'x-ratelimit-remaining-tokens'} // 1e9, '<=',
       100000 - $kpt, 'the next request sees the tokens spent');
my $log = $t->slurp("$dir/llm.log");
like($log, qr/^200 model=embed key=k1 prompt=$kpt completion=0 /m,
     'access log: model, key, prompt tokens, no completion');
like($log, qr/^400 model=\S* key=- prompt=0 completion=0 error=invalid_value$/m,
     'access log: the error code of a 400');
my $m = LlmKeys::metrics($t->get('/metrics')->{content});
cmp_ok(LlmKeys::sample($m, 'llm_tokens_total',
                       { model => 'embed', kind => 'prompt' }), '>=', $kpt,
       'metrics: the prompt tokens of the model');

$t->done;

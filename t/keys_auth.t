#!/usr/bin/perl
# API keys: Bearer and x-api-key, surrounding whitespace, wrong and missing
# keys (401 as OpenAI sends them), models= (403), llm_keys off, and no
# key in any log.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmKeys;

my $t = LlmTest->new;
my ($alice, $la) = LlmKeys::new_key('alice');
my ($bob, $lb) = LlmKeys::new_key('bob', models => 'some-other-model,x');
my ($wrong) = LlmKeys::new_key('nobody');
LlmKeys::write_keys($t, $la, "  $lb   # a comment after the options", '',
                    "\t# a comment line");

my $pass = LlmKeys::pass_directive();
LlmKeys::start_backends($t);
LlmKeys::start($t, LlmKeys::api($t, extra => <<'EOC',
    log_format keys '$status key=$llm_key_name model=$llm_model '
                    'error=$llm_error_code "$request"';
    access_log %%DIR%%/keys-access.log keys;
EOC
                                  ) . <<"EOF");
    server {
        listen 127.0.0.1:%%PORT_open%%;
        llm_keys off;
        location /v1/ { $pass }
    }
EOF

my $r = LlmKeys::chat($t, $alice);
is($r->{status}, 200, 'Bearer with a good key: 200') or diag $r->{content};
is($r->{json}{object}, 'chat.completion', 'a completion came back');

$r = LlmKeys::chat($t, undef, headers => { 'x-api-key' => $alice });
is($r->{status}, 200, 'x-api-key with a good key: 200');

$r = LlmKeys::chat($t, undef,
                   headers => { Authorization => "  bearer \t $alice \t " });
is($r->{status}, 200, 'scheme in any case, whitespace around ignored');

$r = LlmKeys::chat($t, undef, headers => { 'x-api-key' => "  $alice  " });
is($r->{status}, 200, 'x-api-key: whitespace around ignored');

$r = LlmKeys::chat($t, $alice, headers => { 'x-api-key' => $alice });
is($r->{status}, 200, 'both headers with the same key: 200');

$r = LlmKeys::chat($t, undef, headers => {
    Authorization => 'Basic dXNlcjpwYXNz', 'x-api-key' => $alice });
is($r->{status}, 200, 'a non-Bearer Authorization falls back to x-api-key');

# wrong key: OpenAI's 401

$r = LlmKeys::chat($t, $wrong);
is($r->{status}, 401, 'wrong key: 401');
is($r->{json}{error}{code}, 'invalid_api_key', 'code invalid_api_key');
is($r->{json}{error}{type}, 'invalid_request_error',
   'type invalid_request_error');
ok(exists $r->{json}{error}{param} && !defined $r->{json}{error}{param},
   'param is null');
is($r->{json}{error}{message}, 'Incorrect API key provided: sk-llm-****. '
   . 'You can find your API key with the administrator of this gateway.',
   "OpenAI's message text, the key masked to its public prefix");
unlike($r->{content}, qr/\Q$wrong\E/, 'the wrong key is not echoed whole');

$r = LlmKeys::chat($t, $alice . 'x');
is($r->{status}, 401, 'a good key with a character more: 401');

$r = LlmKeys::chat($t, substr($alice, 0, -1));
is($r->{status}, 401, 'a good key with a character less: 401');

# missing key

$r = LlmKeys::chat($t, undef);
is($r->{status}, 401, 'no key: 401');
like($r->{json}{error}{message}, qr/^You didn't provide an API key/,
     "OpenAI's message for a missing key");
ok(exists $r->{json}{error}{code}, 'all four error fields present');

$r = LlmKeys::chat($t, undef, headers => { Authorization => 'Bearer   ' });
is($r->{status}, 401, 'an empty Bearer: 401');

$r = LlmKeys::chat($t, undef, headers => { 'x-api-key' => '' });
is($r->{status}, 401, 'an empty x-api-key: 401');

# models=

$r = LlmKeys::chat($t, $bob);
is($r->{status}, 403, 'a model the key may not use: 403')
    or diag $r->{content};
ok($r->{json}{error}{message}, '403 has an OpenAI error body');

# llm_keys off: open access

{
    local $t->{port} = $t->named_port('open');
    $r = LlmKeys::chat($t, undef);
    is($r->{status}, 200, 'llm_keys off: no key needed');
}

# no key in any log, not even the wrong one

$t->stop_nginx;
my $logs = LlmKeys::all_logs($t);
ok(length $logs, 'the logs have something');
unlike($logs, qr/\Q$alice\E/, 'the good key is in no log');
unlike($logs, qr/\Q$wrong\E/, 'the wrong key is in no log');
unlike($logs, qr/\Q@{[substr($wrong, -8)]}\E|\Q@{[substr($wrong, 7, 8)]}\E/,
       'not even a part of it');
unlike($logs, qr/\Q$bob\E/, "bob's key is in no log");
like($logs, qr/unknown API key/, 'the failure is logged (without the key)');
my $acc = $t->slurp($t->dir . '/keys-access.log');
like($acc, qr/^200 key=alice /m, '$llm_key_name in the access log');
like($acc, qr/^401 key=- .*error=invalid_api_key/m,
     'a 401 in the access log: no key name, the error code');
like($acc, qr/^403 key=bob /m, 'the 403 names the key');

$t->done;

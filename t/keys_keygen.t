#!/usr/bin/perl
# llm-keygen: a new random key each run, its line is SHA-256 hex + name +
# options, --hash agrees with Digest::SHA, --key-file writes mode 0600,
# bad options exit non-zero; and nginx accepts the key it made.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use Digest::SHA qw(sha256_hex);
use LlmTest;
use LlmKeys;

my $t = LlmTest->new;
my $kg = $t->bin('llm-keygen');
plan skip_all => "$kg not built" unless -x $kg;

my @out = `$kg --name alice --rpm 60 --tpm 1000 --quota 5 --models a,b`;
is($?, 0, 'exit 0');
chomp @out;
is(scalar @out, 2, 'two lines: key, keys-file line');
my ($key, $line) = @out;
like($key, qr/^sk-llm-[0-9A-Za-z]{40}$/, 'key: sk-llm- and 40 base62');
is($line, sha256_hex($key) . ' alice rpm=60 tpm=1000 quota=5 models=a,b',
   'the line: sha256 name options');

my ($k2) = `$kg`;
chomp $k2;
isnt($k2, $key, 'a different key each run');
like(`$kg | tail -1`, qr/^[0-9a-f]{64} key\n$/, 'default name "key"');

my $h = `printf '  %s \\n' '$key' | $kg --hash`;
is($h, sha256_hex($key) . "\n", '--hash of stdin, whitespace ignored');

my $kf = $t->dir . '/api-key';
my @o = `$kg --name bob --key-file $kf`;
is(scalar @o, 1, '--key-file: only the line on stdout');
is((stat $kf)[2] & 0777, 0600, 'the key file is 0600');
my $fk = $t->slurp($kf);
chomp $fk;
is($o[0], sha256_hex($fk) . " bob\n", 'the line matches the file');

for my $bad ('--rpm x', '--rpm -1', '--name "a b"', '--models "a,,b"',
             '--bogus', '--name') {
    system("$kg $bad >/dev/null 2>&1");
    isnt($? >> 8, 0, "rejects $bad");
}
is(system("$kg --help >/dev/null"), 0, '--help exits 0');

# nginx takes its line and the key works
LlmKeys::write_keys($t, $line =~ s/ models=a,b//r);
LlmKeys::start_backends($t);
LlmKeys::start($t, LlmKeys::api($t));
my $r = LlmKeys::chat($t, $key);
is($r->{status}, 200, 'the key llm-keygen made authenticates')
    or diag $r->{content};
is($r->{headers}{'x-ratelimit-limit-requests'}, 60, 'with its rpm');

$t->done;

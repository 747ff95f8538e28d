#!/usr/bin/perl
# A full llm_zone: keys seen in the last two minutes are not evicted, so a
# new key gets a 503 server_error (and the error log names the zone)
# while the keys already tracked keep working; nothing worse than [error].

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmKeys;

my $t = LlmTest->new;
my @keys = map { [ LlmKeys::new_key("k$_", rpm => $_ == 1 ? 3 : 1000) ] }
           1 .. 400;
LlmKeys::write_keys($t, map { $_->[1] } @keys);

LlmKeys::start_backends($t);
LlmKeys::start($t, LlmKeys::api($t, zone => 'llm_zone small 64k;'));

my ($ok, $first_full, $r) = (0, undef);
for my $i (0 .. $#keys) {
    $r = LlmKeys::chat($t, $keys[$i][0], max_tokens => 1);
    if ($r->{status} == 200) {
        $ok++;
        next;
    }
    $first_full = $i;
    last;
}
ok(defined $first_full, "the 64k zone fills up (after $ok keys)");
cmp_ok($ok, '>=', 50, 'it holds at least 50 keys');
is($r->{status}, 503, 'a new key then gets 503');
is($r->{json}{error}{type}, 'server_error', 'type server_error');
like($t->error_log, qr/llm_zone "small" is full, request of key "k\d+" refused/,
     'the error log names the zone and the key name');

$r = LlmKeys::chat($t, $keys[0][0], max_tokens => 1);
is($r->{status}, 200, 'a key already tracked still works');
is($r->{headers}{'x-ratelimit-remaining-requests'}, 1,
   'with its counters (rpm=3, used twice)');

my $m = LlmKeys::metrics($t->get('/metrics')->{content});
is(LlmKeys::sample($m, 'llm_requests_total', { model => LlmKeys::model(),
                                               status => 200 }),
   $ok + 1, 'the metrics still count');

$t->done;

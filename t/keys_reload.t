#!/usr/bin/perl
# nginx -s reload: a changed keys file is picked up (a new key works, a
# removed key gets 401, a changed limit applies) and the zone's counters
# survive (a key's used requests/min, the metrics).

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmKeys;

my $t = LlmTest->new;
my ($ka, $la) = LlmKeys::new_key('a', rpm => 4);
my ($kb, $lb) = LlmKeys::new_key('b');
my ($kc, $lc) = LlmKeys::new_key('c', rpm => 1);
LlmKeys::write_keys($t, $la, $lb);

LlmKeys::start_backends($t);
my $conf = LlmKeys::api($t);
LlmKeys::start($t, $conf, workers => 2);

is(LlmKeys::chat($t, $ka)->{status}, 200, 'a: 1st');
is(LlmKeys::chat($t, $ka)->{status}, 200, 'a: 2nd');
is(LlmKeys::chat($t, $ka)->{status}, 200, 'a: 3rd');
is(LlmKeys::chat($t, $kb)->{status}, 200, 'b works');
is(LlmKeys::chat($t, $kc)->{status}, 401, 'c is not known yet');

my $m = LlmKeys::metrics($t->get('/metrics')->{content});
my $before = LlmKeys::sample($m, 'llm_requests_total',
                             { model => LlmKeys::model(), status => 200 });
is($before, 4, 'metrics: 4 answered before the reload');
my $start = LlmKeys::sample($m, 'llm_zone_start_time_seconds');

# b goes, c comes, a keeps rpm=4
LlmKeys::write_keys($t, $lc, $la);
ok(LlmKeys::reload($t, $conf, workers => 2), 'reloaded');

is(LlmKeys::chat($t, $kb)->{status}, 401, 'b was removed: 401');
is(LlmKeys::chat($t, $kc)->{status}, 200, 'c was added: 200');
is(LlmKeys::chat($t, $kc)->{status}, 429, 'c has its rpm=1');
my $r = LlmKeys::chat($t, $ka);
is($r->{status}, 200, 'a: 4th after the reload');
is($r->{headers}{'x-ratelimit-remaining-requests'}, 0,
   'a: the 3 before the reload still count');
is(LlmKeys::chat($t, $ka)->{status}, 429, 'a: 5th is refused');

$m = LlmKeys::metrics($t->get('/metrics')->{content});
is(LlmKeys::sample($m, 'llm_requests_total',
                   { model => LlmKeys::model(), status => 200 }),
   $before + 2, 'metrics kept over the reload');
is(LlmKeys::sample($m, 'llm_zone_start_time_seconds'), $start,
   'the zone is the same one');
is(LlmKeys::sample($m, 'llm_zone_reloads_total'), 1, 'one reload counted');

# a changed limit applies to the kept counters
LlmKeys::write_keys($t, $lc, $la =~ s/rpm=4/rpm=60/r);
ok(LlmKeys::reload($t, $conf, workers => 2), 'reloaded again');
$r = LlmKeys::chat($t, $ka);
is($r->{status}, 200, 'a with rpm=60: passes again');
is($r->{headers}{'x-ratelimit-limit-requests'}, 60, 'the new limit');
is($r->{headers}{'x-ratelimit-remaining-requests'}, 55,
   'what was used stays used: 60 - 5');

$t->done;

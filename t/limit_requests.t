#!/usr/bin/perl
# requests/min across two workers: exactly rpm requests pass in a burst,
# the rest get OpenAI's 429 (type requests) with Retry-After; every
# response carries the x-ratelimit-* headers; other keys are not affected.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use POSIX ();
use LlmTest;
use LlmKeys;

my $t = LlmTest->new;
my ($k5, $l5) = LlmKeys::new_key('five', rpm => 5);
my ($free, $lf) = LlmKeys::new_key('free');
my ($burst, $lbu) = LlmKeys::new_key('burst', rpm => 6);
LlmKeys::write_keys($t, $l5, $lf, $lbu);

LlmKeys::start_backends($t);
LlmKeys::start($t, LlmKeys::api($t, listen => 'reuseport',
                             location => 'add_header X-Worker $pid always;'),
                workers => 2);

# HTTP::Tiny opens a new connection per request (keep_alive => 0) and
# reuseport spreads connections over both workers
my (%pids, @ok, @limited, @all);
for my $i (1 .. 12) {
    my $r = LlmKeys::chat($t, $k5);
    push @all, $r;
    push @ok, $r if $r->{status} == 200;
    push @limited, $r if $r->{status} == 429;
}

is(scalar @ok, 5, 'rpm=5: 5 of 12 requests pass');
is(scalar @limited, 7, 'the other 7 get 429');

my %workers = map { ($_->{headers}{'x-worker'} // '?') => 1 } @all;
is(scalar keys %workers, 2, 'the requests went to both workers')
    or diag explain \%workers;

my $h = $ok[0]{headers};
is($h->{'x-ratelimit-limit-requests'}, 5, 'x-ratelimit-limit-requests');
is($h->{'x-ratelimit-remaining-requests'}, 4,
   'remaining after the first request: 4');
like($h->{'x-ratelimit-reset-requests'}, qr/^(\d+(\.\d+)?(ms|s)|\d+m\d+(\.\d+)?s)$/,
     'reset-requests in OpenAI\'s duration format') or diag explain $h;
like($h->{'x-ratelimit-reset-requests'}, qr/^(?:11\.\d{1,3}|12)s$/,
     'reset-requests: 12 s for the one used request at rpm=5');
is($ok[4]{headers}{'x-ratelimit-remaining-requests'}, 0,
   'remaining after the fifth: 0');
ok(!exists $h->{'x-ratelimit-limit-tokens'},
   'no token headers for a key without tpm');

my $r = $limited[0];
is($r->{json}{error}{code}, 'rate_limit_exceeded', 'code rate_limit_exceeded');
is($r->{json}{error}{type}, 'requests', 'type requests');
like($r->{json}{error}{message},
     qr/^Rate limit reached for key "five" on requests per min \(RPM\): Limit 5, Used 5, Requested 1\. Please try again in \S+\.$/,
     "OpenAI's message text") or diag $r->{json}{error}{message};
like($r->{headers}{'retry-after'}, qr/^\d+$/, 'Retry-After in seconds');
cmp_ok($r->{headers}{'retry-after'}, '>=', 1, 'Retry-After >= 1');
cmp_ok($r->{headers}{'retry-after'}, '<=', 13, 'Retry-After <= 13 (60/5 + 1)');
is($r->{headers}{'x-ratelimit-remaining-requests'}, 0,
   '429 carries the x-ratelimit headers too');

# 12 s refill one request: wait for the time Retry-After gave
my $wait = $r->{headers}{'retry-after'};
my $last = $limited[-1]{headers}{'retry-after'};
ok(!exists $all[0]{headers}{'retry-after'}, 'no Retry-After on a 200');

# other keys are separate
for (1 .. 6) {
    $r = LlmKeys::chat($t, $free);
    last if $r->{status} != 200;
}
is($r->{status}, 200, 'a key without limits is not limited');
ok(!exists $r->{headers}{'x-ratelimit-limit-requests'},
   'and gets no x-ratelimit headers');

# 16 clients at once over both workers: exactly 6 pass

my @kids;
for my $i (1 .. 16) {
    pipe(my $rd, my $wr) or die "pipe: $!";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        close $rd;
        my $res = LlmKeys::chat($t, $burst);
        print $wr $res->{status}, ' ', $res->{headers}{'x-worker'} // '?', "\n";
        close $wr;
        POSIX::_exit(0);
    }
    close $wr;
    push @kids, [$pid, $rd];
}
my (%st, %w);
for (@kids) {
    my ($pid, $rd) = @$_;
    my $line = <$rd> // '';
    waitpid($pid, 0);
    my ($code, $worker) = split ' ', $line;
    $st{$code // 'none'}++;
    $w{$worker // '?'}++;
}
is($st{200} // 0, 6, 'concurrent burst, rpm=6: exactly 6 of 16 pass')
    or diag explain \%st;
is($st{429} // 0, 10, 'and 10 get 429');
note('burst spread over workers: ', join(', ', map { "$_=$w{$_}" } keys %w));

SKIP: {
    skip 'LLM_TEST_QUICK: no refill wait', 2 if $ENV{LLM_TEST_QUICK};
    sleep $last + 0.2;
    $r = LlmKeys::chat($t, $k5);
    is($r->{status}, 200, "after Retry-After ($last s) one more passes");
    $r = LlmKeys::chat($t, $k5);
    is($r->{status}, 429, 'and only one');
}

$t->done;

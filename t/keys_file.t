#!/usr/bin/perl
# The keys file format: every mistake stops nginx -t with file:line and
# what was expected; a good file with comments, blank lines and every
# option passes.  (No nginx is started: nginx -t only.)

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;
use LlmKeys;

my $t = LlmTest->new;
my (undef, $good) = LlmKeys::new_key('good', rpm => 1, tpm => 2,
                                      quota => 3, models => 'a,b');
my (undef, $other) = LlmKeys::new_key('other');
my $h = (split ' ', $other)[0];

sub check {
    my ($name, $content, $re) = @_;
    my $f = $t->dir . '/keys';
    open my $fh, '>', $f or die;
    print $fh $content;
    close $fh;
    $t->write_conf(LlmKeys::api($t));
    my ($rc, $out) = $t->test_conf;
    if (defined $re) {
        isnt($rc, 0, "$name: nginx -t fails");
        like($out, $re, "$name: the message") or diag $out;
    } else {
        is($rc, 0, "$name: nginx -t passes") or diag $out;
    }
}

check('good file', "# comment\n\n  $good  # trailing\n\t$other\r\n", undef);
check('empty file', "", undef);
check('short hash', "abc name\n", qr{keys:1: the first field must be the key's SHA-256 as 64 hex digits});
check('not hex', "# c\n" . ('g' x 64) . " name\n", qr{keys:2: the SHA-256 has a character that is not a hex digit at position 1});
check('no name', "$h\n", qr{keys:1: expected "SHA256-HEX NAME \[options\]"});
check('bad name', "$h na\"me\n", qr{keys:1: the name may have only letters});
check('duplicate name', "$good\n" . ($h =~ s/^./f/r) . " good\n",
      qr{keys:2: the name "good" is already used on line 1});
check('duplicate hash', "$other\n$h other2\n", qr{keys:2: the same hash as line 1});
check('unknown option', "$h n burst=3\n", qr{keys:1: unknown option "burst=3"});
check('bad number', "$h n rpm=abc\n", qr{keys:1: "rpm=abc" expects a whole number});
check('too large', "$h n tpm=1000000000001\n", qr{keys:1: "tpm=1000000000001" is over the largest limit});
check('no value', "$h n rpm\n", qr{keys:1: expected NAME=VALUE, not "rpm"});
check('bad models', "$h n models=a,,b\n", qr{keys:1: models= expects a comma separated list});

unlink $t->dir . '/keys';
$t->write_conf(LlmKeys::api($t));
my ($rc, $out) = $t->test_conf;
isnt($rc, 0, 'missing file: nginx -t fails');
like($out, qr{open\(\) ".*/keys" failed}, 'missing file: the message');

# llm_metrics needs a zone; llm_limit_zone must name one
$t->write_conf(LlmKeys::api($t, zone => '', keys => ''));
($rc, $out) = $t->test_conf;
like($out, qr/llm_metrics needs an llm_zone/, 'llm_metrics without a zone');
$t->write_conf(LlmKeys::api($t, zone => 'llm_limit_zone nope;', keys => ''));
($rc, $out) = $t->test_conf;
like($out, qr/zero size shared memory zone "nope"|unknown llm_zone "nope"/,
     'llm_limit_zone of an unknown zone');
$t->write_conf(LlmKeys::api($t, zone => 'llm_zone z 8k;', keys => ''));
($rc, $out) = $t->test_conf;
like($out, qr/llm_zone "z" is too small/, 'a zone too small');

# LlmTest::engine_sock() autovivifies $t->{engines}{a} for %%SOCK_a%%;
# no engine was started here
delete $t->{engines}{a} unless $t->{engines}{a}{pid};

done_testing();

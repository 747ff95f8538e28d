#!/usr/bin/perl
# Starts the real engine and nginx with the module for the client tests
# (through the Perl harness, t/lib/LlmTest.pm), prints
#   URL=http://127.0.0.1:PORT/v1
#   KEY=<a key with no limits>   LIMITED=<a key allowed 1 request/min>
# and keeps everything running until its stdin closes.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../../t/lib";
use LlmTest;
use LlmClient;

$| = 1;
my $t = LlmTest->new;
my ($url, $key, $lim) = LlmClient::start_gateway($t,
    keys => [ [ 'client', rpm => 1000 ], [ 'limited', rpm => 1 ] ]);
print "URL=$url\nKEY=$key\nLIMITED=$lim\n";
print "READY\n";
1 while <STDIN>;
$t->stop_nginx;
my $log = $t->error_log;
print STDERR "server.pl: [alert] or [emerg] in error.log\n"
    if $log =~ /\[(alert|emerg)\]/;
exit 0;

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
use LlmKeys;

$| = 1;
my $t = LlmTest->new;
my ($key, $line) = LlmKeys::new_key('client', rpm => 1000);
my ($lim, $lline) = LlmKeys::new_key('limited', rpm => 1);
LlmKeys::write_keys($t, $line, $lline);
$t->start_engine('a');
my $user = $> == 0 ? 'user root;' : '';
$t->start_nginx(<<"EOF2", main => $user);
    llm_zone llm 1m;
    llm_keys @{[ $t->dir ]}/keys;
    upstream engines { server unix:%%SOCK_a%%; keepalive 4; }
    llm_model tiny upstream=engines;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
EOF2
print "URL=http://127.0.0.1:", $t->port, "/v1\nKEY=$key\nLIMITED=$lim\n";
print "READY\n";
1 while <STDIN>;
$t->stop_nginx;
my $log = $t->error_log;
print STDERR "server.pl: [alert] or [emerg] in error.log\n"
    if $log =~ /\[(alert|emerg)\]/;
exit 0;

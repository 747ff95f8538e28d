#!/usr/bin/perl
# The built module loads into the distro nginx: nginx -t passes with
# load_module, and a plain server comes up and serves next to it.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use LlmTest;

my $t = LlmTest->new;
ok(-f "$LlmTest::BUILD/modules/ngx_http_llm_module.so", 'module built');

my $conf = <<'EOF';
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 200 "up\n"; }
    }
EOF
$t->write_conf($conf);
my ($rc, $out) = $t->test_conf;
is($rc, 0, 'nginx -t with load_module') or diag $out;
like($out, qr/test is successful/, 'nginx -t reports success');

$t->start_nginx($conf);
my $r = $t->get('/');
is($r->{status}, 200, 'nginx with the module serves');
$t->done;

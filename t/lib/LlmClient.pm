package LlmClient;

# What the tests with the npm client suites (tests/client: the official
# openai SDK, ajv) share: the gateway they talk to (the real engine and
# nginx with the module serving /v1/ for model tiny) and running a node
# script that prints TAP.
#
#   use LlmClient;
#   my $t = LlmTest->new;
#   my ($url, $key) = LlmClient::start_gateway($t,
#       keys => [ [ 'tools', rpm => 1000 ] ]);
#   my ($rc, $oks, $fails) = LlmClient::run_tap("$client/x.mjs",
#       echo => qr/^#/, diag => qr/^(not )?ok 1 /);
#
# The packages themselves: LlmNpm::need('tests/client', 'openai', 'ajv').
# As root, nginx's workers run as root (LlmTest::write_conf does that), so
# they can open the engine's socket.

use strict;
use warnings;
use Test::More ();
use LlmKeys;

# Writes the key file (one key per [name, limits...] of keys, limits as
# LlmKeys::new_key takes them), starts engine 'a' (engine: a hash ref of
# LlmTest::start_engine's options) and nginx with one upstream of it
# (keepalive: its keepalive connections, 4) for model tiny; returns the
# base URL (http://127.0.0.1:PORT/v1) and the keys, in order.
sub start_gateway {
    my ($t, %o) = @_;
    my (@keys, @lines);
    for my $k (@{ $o{keys} }) {
        my ($name, @limits) = @$k;
        my ($key, $line) = LlmKeys::new_key($name, @limits);
        push @keys, $key;
        push @lines, $line;
    }
    LlmKeys::write_keys($t, @lines);
    $t->start_engine('a', %{ $o{engine} // {} });
    my $keepalive = $o{keepalive} // 4;
    $t->start_nginx(<<"EOF");
    llm_zone llm 1m;
    llm_keys @{[ $t->dir ]}/keys;
    upstream engines { server unix:%%SOCK_a%%; keepalive $keepalive; }
    llm_model tiny upstream=engines;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v1/ { llm_api on; }
    }
EOF
    return ('http://127.0.0.1:' . $t->port . '/v1', @keys);
}

# Runs `node script` and counts the lines of its TAP: returns its exit
# status and the numbers of `ok` and `not ok` lines.  Lines matching echo
# are printed as comments ("# line"), those matching diag go to diag().
sub run_tap {
    my ($script, %o) = @_;
    my ($oks, $fails) = (0, 0);
    open my $fh, '-|', 'node', $script or die "node: $!";
    while (my $l = <$fh>) {
        print "# $l" if $o{echo} && $l =~ $o{echo};
        $oks++ if $l =~ /^ok /;
        $fails++ if $l =~ /^not ok /;
        Test::More::diag($l) if $o{diag} && $l =~ $o{diag};
    }
    close $fh;
    return ($? >> 8, $oks, $fails);
}

1;

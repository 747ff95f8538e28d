package LlmKeys;

# Helpers for the keys, limits and metrics tests (t/keys_*.t, t/limit_*.t,
# t/metrics_*.t), on top of LlmTest:
#
#   my ($key, $line) = LlmKeys::new_key('alice', rpm => 3);
#   LlmKeys::write_keys($t, $line, ...);       # $t->dir/keys
#   my $api = LlmKeys::api($t);                # the http{} part for /v1/
#   my $m = LlmKeys::metrics($text);           # parsed Prometheus text
#
# Keys are made here as llm-keygen makes them (sk-llm- and 40 base62), so
# the tests do not depend on the tool; t/keys_keygen.t tests the tool.
# Core Perl only (Digest::SHA is core).

use strict;
use warnings;

use Digest::SHA qw(sha256_hex);
use Test::More;
use Time::HiRes qw(time);

my @B62 = ('0' .. '9', 'A' .. 'Z', 'a' .. 'z');

# A new random key and its keys-file line.
sub new_key {
    my ($name, %o) = @_;
    my $key = 'sk-llm-' . join('', map { $B62[int rand 62] } 1 .. 40);
    my $line = sha256_hex($key) . " $name";
    for my $opt (qw(rpm tpm quota models)) {
        $line .= " $opt=$o{$opt}" if defined $o{$opt};
    }
    return ($key, $line);
}

sub write_keys {
    my ($t, @lines) = @_;
    my $f = $t->dir . '/keys';
    open my $fh, '>', "$f.tmp" or die "$f: $!";
    print $fh "# test keys: sha256 name options\n";
    print $fh "$_\n" for @lines;
    close $fh;
    rename "$f.tmp", $f or die "rename $f: $!";
    return $f;
}

# The model name the tests ask for.
sub model { $ENV{LLM_KEYS_SHIM} ? 'tiny' : 'tiny' }

# The directive that serves the OpenAI routes in a location.
sub pass_directive { $ENV{LLM_KEYS_SHIM} ? 'llm_shim;' : 'llm_api on;' }

# The http{}-level lines the gateway needs to reach its engine.
sub upstreams {
    return '' if $ENV{LLM_KEYS_SHIM};
    return "    upstream engines { server unix:%%SOCK_a%%; keepalive 4; }\n"
         . "    llm_model " . model() . " upstream=engines;\n";
}

# The http{} body of a gateway with the keys file, a zone and /metrics.
# %o: zone (the llm_zone line, default "llm_zone llm 1m;"), keys (an
# llm_keys line), extra (more http{} lines), location (more /v1/ lines),
# listen (extra listen parameters, e.g. "reuseport").
sub api {
    my ($t, %o) = @_;
    my $zone = $o{zone} // 'llm_zone llm 1m;';
    my $keys = $o{keys} // "llm_keys $t->{dir}/keys;";
    my $extra = $o{extra} // '';
    my $loc = $o{location} // '';
    my $listen = $o{listen} // '';
    my $pass = pass_directive();

    $extra = upstreams() . $extra;

    return <<"EOF";
    $zone
    $keys
$extra
    server {
        listen 127.0.0.1:%%PORT%% $listen;
        location /v1/ {
            $pass
$loc
        }
        location = /metrics {
            llm_metrics;
        }
    }
EOF
}

# Starts what the gateway needs besides nginx (the engine, unless shimmed).
sub start_backends {
    my ($t) = @_;
    $t->start_engine('a') unless $ENV{LLM_KEYS_SHIM};
}

# A small chat request.
sub chat {
    my ($t, $key, %o) = @_;
    my %h;
    $h{Authorization} = "Bearer $key" if defined $key;
    %h = (%h, %{ $o{headers} // {} });
    return $t->post('/v1/chat/completions', {
        model => $o{model} // model(),
        messages => [ { role => 'user', content => $o{content} // 'Hi' } ],
        max_tokens => $o{max_tokens} // 4,
        temperature => 0,
    }, %h);
}

# Parses Prometheus text exposition 0.0.4.  Returns a hash ref:
# { samples => { 'name{a="b",c="d"}' => value, ... },  (labels sorted)
#   types => { family => type }, errors => [ lines that did not parse ] }
sub metrics {
    my ($text) = @_;
    my (%s, %types, @err);
    for my $line (split /\n/, $text) {
        next if $line eq '';
        if ($line =~ /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/) {
            $types{$2} = $3 if $1 eq 'TYPE';
            next;
        }
        if ($line =~ /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/) {
            my ($name, $labels, $v) = ($1, $2 // '', $3);
            my @l;
            while ($labels =~ /\G([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?/gc) {
                push @l, "$1=\"$2\"";
            }
            if (pos($labels) // 0) {
                push @err, $line if pos($labels) != length $labels;
            } elsif ($labels ne '') {
                push @err, $line;
            }
            if ($v !~ /^(?:[0-9.eE+-]+|\+Inf|-Inf|NaN)$/) {
                push @err, $line;
                next;
            }
            my $k = @l ? "$name\{" . join(',', sort @l) . '}' : $name;
            $s{$k} = $v;
            next;
        }
        push @err, $line;
    }
    return { samples => \%s, types => \%types, errors => \@err };
}

# The value of one sample, 0 when absent.  labels: a hash ref.
sub sample {
    my ($m, $name, $labels) = @_;
    my @l = map { "$_=\"$labels->{$_}\"" } sort keys %{ $labels // {} };
    my $k = @l ? "$name\{" . join(',', @l) . '}' : $name;
    return $m->{samples}{$k} // 0;
}

# Starts nginx (LlmTest::start_nginx, which adds "user root;" when run as
# root, so that the workers can reach the engine's socket in the test's
# dir).
sub start {
    my ($t, $conf, %o) = @_;
    return $t->start_nginx($conf, %o);
}

# Reloads nginx and waits until the old workers have exited, so that the
# next request is answered by the new configuration.  %o: workers (1).
sub reload {
    my ($t, $conf, %o) = @_;
    my $workers = $o{workers} // 1;
    my $before = () = $t->error_log =~ /worker process \d+ exited/g;
    $t->reload_nginx($conf, %o) or return 0;
    my $deadline = time + 15;
    while (time < $deadline) {
        my $now = () = $t->error_log =~ /worker process \d+ exited/g;
        return 1 if $now >= $before + $workers;
        select(undef, undef, undef, 0.05);
    }
    return 0;
}

# Every text the error and access logs have: for "no key in any log".
sub all_logs {
    my ($t) = @_;
    my $all = '';
    for my $f (glob($t->dir . '/*.log'), glob($t->dir . '/nginx.out')) {
        $all .= $t->slurp($f);
    }
    return $all;
}

1;

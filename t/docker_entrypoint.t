#!/usr/bin/perl
# The container image's entry point (examples/docker/entrypoint.sh) run
# outside a container: the image's paths mapped onto this build tree and a
# temp dir through its LLM_* variables.  Checks: it serves the demo model
# and, with no keys given, makes a key and says where it is and how to read
# it (the same key after a restart); a mounted secret or LLM_API_KEY
# replaces it; a missing model is one clear error; SIGTERM stops nginx
# then the engine, exit 0; an engine that dies stops nginx, exit non-zero.
# And the Dockerfile ships the demo model where the entry point looks for
# it, strips what it copies, leaves the bench tools out, and .dockerignore
# keeps .git, build/ and node_modules out of the build context.

use strict;
use warnings;
use lib 't/lib';
use Test::More;
use File::Path qw(make_path);
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(sleep time);
use LlmTest;

my $t = LlmTest->new;
my $repo = $t->repo;
my $d = $t->dir;
chmod 0711, $d;    # nginx's workers (nobody) reach the socket below it
my $entry = "$repo/examples/docker/entrypoint.sh";

my %env = (
    PATH => "$LlmTest::BUILD/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    LLM_MODEL => "$repo/models/demo/demo-q8_0.gguf",
    LLM_THREADS => 1,
    LLM_RUN_DIR => "$d/run",
    LLM_STATE_DIR => "$d/state",
    LLM_NGINX_CONF => "$repo/examples/docker/nginx.conf",
    LLM_MODULE => "$LlmTest::BUILD/modules/ngx_http_llm_module.so",
    LLM_LISTEN => '127.0.0.1:' . $t->port,
    LLM_KEYS_SECRET => "$d/secrets/llm-keys",
    # ./build.sh asan: the sanitizer runtime for the module in the distro
    # nginx (as LlmTest does), here for the whole entry point
    $ENV{LLM_NGINX_PRELOAD} ? (LD_PRELOAD => $ENV{LLM_NGINX_PRELOAD}) : (),
);
my $n = 0;

# Starts the entry point with %env plus %more; returns (pid, log file).
sub start {
    my (%more) = @_;
    my $log = "$d/entry-" . ++$n . '.log';
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        delete @ENV{grep { /^LLM_/ } keys %ENV};
        %ENV = (%ENV, %env, %more);
        delete $ENV{$_} for grep { !defined $ENV{$_} } keys %ENV;
        open STDOUT, '>', $log or die;
        open STDERR, '>&', \*STDOUT or die;
        exec $entry or die "exec: $!";
    }
    return ($pid, $log);
}

# Waits up to $secs for $pid to exit; its exit status, or undef.
my %exited;    # pid => exit status, once reaped by wait_up
sub reap {
    my ($pid, $secs) = @_;
    return delete $exited{$pid} if exists $exited{$pid};
    my $deadline = time + $secs;
    while (time < $deadline) {
        return $? >> 8 if waitpid($pid, WNOHANG) == $pid;
        sleep 0.05;
    }
    return undef;
}

# Up when /healthz answers 200 with the engine ready.
sub wait_up {
    my ($pid) = @_;
    my $deadline = time + 60;
    while (time < $deadline) {
        if (waitpid($pid, WNOHANG) == $pid) {
            $exited{$pid} = $? >> 8;
            return 0;
        }
        my $r = $t->get('/healthz');
        return 1 if $r->{status} == 200 && $r->{content} =~ /"ready"/;
        sleep 0.1;
    }
    return 0;
}

sub chat {
    my ($key) = @_;
    return $t->post('/v1/chat/completions',
        { model => 'default', temperature => 0, max_tokens => 8,
          messages => [{ role => 'user', content => 'Hello!' }] },
        defined $key ? (Authorization => "Bearer $key") : ());
}

sub slurp { my $f = shift; open my $fh, '<', $f or return ''; local $/; <$fh> }

sub child_pid {
    my ($parent, $comm) = @_;
    for my $stat (glob '/proc/[0-9]*/stat') {
        my $s = slurp($stat);
        return $1 if $s =~ /^(\d+) \(\Q$comm\E\) \S (\d+)/ && $2 == $parent;
    }
    return undef;
}

# Stops the entry point with SIGTERM; its exit status.
sub stop {
    my ($pid) = @_;
    kill 'TERM', $pid;
    my $rc = reap($pid, 40);
    if (!defined $rc) {
        kill 'KILL', $pid;
        waitpid($pid, 0);
    }
    return $rc;
}

# 1. No keys given: a key is made; the log says where and how to read it.
my ($pid, $log) = start();
ok(wait_up($pid), 'serves: /healthz 200, the engine ready') or diag slurp($log);
my $out = slurp($log);
like($out, qr{the API key is in \Q$d\E/state/api-key inside the container},
     'the log says where the key is');
like($out, qr{docker exec CONTAINER cat \Q$d\E/state/api-key},
     'and how to read it');
unlike($out, qr/sk-llm-/, 'the key itself is not logged');
my $key = slurp("$d/state/api-key") =~ s/\s+\z//r;
like($key, qr/^sk-llm-\w+$/, 'the key file holds a key');
my $r = chat($key);
is($r->{status}, 200, 'a chat with the key: 200')
    or diag "$r->{status} $r->{content}\n" . slurp($log);
is($r->{json}{model}, 'default', 'model "default"');
like($r->{json}{system_fingerprint} // '', qr/^fp_/, 'answered by the engine');
is(chat(undef)->{status}, 401, 'without a key: 401');
like(slurp("$d/run/nginx.conf"), qr{llm_keys \Q$d\E/state/keys;},
     'nginx.conf made from the template');
my $npid = slurp("$d/run/nginx.pid") =~ s/\s+//r;
my $epid = child_pid($pid, 'llm-engine');
ok($epid, 'the engine is a child of the entry point');
is(stop($pid), 0, 'SIGTERM: the entry point exits 0');
ok(!kill(0, $npid), 'nginx is gone');
ok(!kill(0, $epid), 'the engine is gone');
like(slurp($log), qr/gracefully shutting down.*llm-engine: signal 15/s,
     'nginx quits gracefully first, then the engine drains');

# 2. Restarted (the container's state kept): the same key.
($pid, $log) = start();
ok(wait_up($pid), 'restarted') or diag slurp($log);
unlike(slurp($log), qr/made a demo key/, 'no new key');
is(slurp("$d/state/api-key") =~ s/\s+\z//r, $key, 'the same key file');
is(chat($key)->{status}, 200, 'the key still works');
is(stop($pid), 0, 'stopped');

# 3. A mounted secret (a keys file) replaces the made key.
make_path("$d/secrets");
my $skey = `$LlmTest::BUILD/bin/llm-keygen --name secret --key-file $d/skey >$d/secrets/llm-keys && cat $d/skey`;
$skey =~ s/\s+\z//;
($pid, $log) = start();
ok(wait_up($pid), 'with a secret') or diag slurp($log);
like(slurp($log), qr{keys: \Q$d\E/secrets/llm-keys \(a mounted secret\)},
     'the log names the secret');
is(chat($skey)->{status}, 200, 'the secret key works');
is(chat($key)->{status}, 401, 'the made key does not');
is(stop($pid), 0, 'stopped');
unlink "$d/secrets/llm-keys";

# 4. LLM_API_KEY: one key from the environment.
my $ekey = 'sk-llm-' . ('x' x 40);
($pid, $log) = start(LLM_API_KEY => $ekey);
ok(wait_up($pid), 'with LLM_API_KEY') or diag slurp($log);
is(chat($ekey)->{status}, 200, 'LLM_API_KEY works');
is(chat($key)->{status}, 401, 'the made key does not');
is(stop($pid), 0, 'stopped');

# 5. A missing model: one clear error, exit 1, nothing left running.
($pid, $log) = start(LLM_MODEL => "$d/none.gguf");
is(reap($pid, 20), 1, 'missing model: exit 1');
like(slurp($log), qr{error: no model file at \Q$d\E/none\.gguf \(LLM_MODEL\): mount one},
     'missing model: says so and how')
    or diag slurp($log);

# 6. The engine dies: nginx is stopped, the entry point exits non-zero.
($pid, $log) = start();
ok(wait_up($pid), 'started again') or diag slurp($log);
$npid = slurp("$d/run/nginx.pid") =~ s/\s+//r;
$epid = child_pid($pid, 'llm-engine');
kill 'KILL', $epid if $epid;
my $rc = reap($pid, 30);
ok(defined $rc && $rc != 0, 'engine killed: the entry point exits non-zero')
    or do { diag slurp($log); stop($pid) };
like(slurp($log), qr/llm-engine exited \(status \d+\): stopping nginx/,
     'engine killed: says so');
ok(!kill(0, $npid), 'engine killed: nginx is gone');

# 7. The image: the files it needs, where the entry point looks.
my $df = slurp("$repo/Dockerfile");
like($df, qr{^COPY models/demo/demo-q8_0\.gguf .*/usr/share/llm/$}m,
     'Dockerfile: the demo model in /usr/share/llm/');
like(slurp($entry), qr{LLM_MODEL:-/usr/share/llm/demo-q8_0\.gguf\}},
     'the entry point serves it by default');
like($df, qr/strip --strip-unneeded/, 'Dockerfile strips the binaries');
unlike($df, qr{COPY --from=build /src/build/bin/? }, 'not every tool copied');
unlike($df, qr/llm-(bench|kbench|maskbench|toolbench|mkmodel)\b.*\/out/,
       'no bench or dev tools in the runtime stage');
my %ignored = map { $_ => 1 } grep { /\S/ && !/^#/ }
    split /\n/, slurp("$repo/.dockerignore");
ok($ignored{$_}, ".dockerignore: $_") for qw(.git build **/node_modules);

done_testing();

package LlmNpm;

# The npm packages some tests need (tests/client: the official openai SDK
# and ajv), installed with `npm ci` from the committed package-lock.json
# the first time a test needs them, or again when the lock file changed.
#
#   use LlmNpm;
#   LlmNpm::need('tests/client', 'openai', 'ajv');   # in a t/*.t file
#
#   # in a shell script; exit status 0 ready, 77 skip, 1 fail:
#   perl -I"$REPO/t/lib" -MLlmNpm -e 'exit LlmNpm::cli(@ARGV)' \
#       tests/client/run.sh "$REPO/tests/client" openai ajv
#
# When npm cannot reach its registry (no route, no DNS, a proxy with its
# own certificate, a proxy or mirror refusing the request), the test
# skips: one line says which test, that `npm ci` failed, the npm error's
# first lines and how to fix it; the other test files run as usual.  Any
# other npm failure (a lock file out of step with package.json, a full
# disk, no permission) is a failure of the test, never a skip: it is the
# project's or the machine's fault and would otherwise hide a test that
# can fail.  Missing node or npm is a skip too (`./build.sh test`
# installs them).  LLM_NPM_REQUIRED=1 turns every skip into a failure.
#
# One `npm ci` per directory at a time (a lock file: `prove -j` runs
# several such tests at once), and one attempt per test run: a failed
# attempt is remembered for the run (the parent process, i.e. prove, or
# LLM_NPM_RUN when set), so an unreachable registry costs its timeout
# (about 70 s with npm's default retries) once, not once per file.

use strict;
use warnings;

use Digest::MD5 qw(md5_hex);
use Fcntl qw(:flock);
use File::Spec;
use Test::More;

# npm error codes that mean "the registry could not be reached or refused
# us", as opposed to a fault of the project or of this machine.
my %UNREACHABLE = map { $_ => 1 } qw(
    ECONNREFUSED ECONNRESET ENOTFOUND EAI_AGAIN EAI_FAIL ETIMEDOUT
    ESOCKETTIMEDOUT EHOSTUNREACH ENETUNREACH ENETDOWN EPIPE EPROTO
    ERR_SOCKET_TIMEOUT ERR_SOCKET_CONNECTION_TIMEOUT
    SELF_SIGNED_CERT_IN_CHAIN DEPTH_ZERO_SELF_SIGNED_CERT
    UNABLE_TO_GET_ISSUER_CERT_LOCALLY UNABLE_TO_GET_ISSUER_CERT
    UNABLE_TO_VERIFY_LEAF_SIGNATURE CERT_HAS_EXPIRED CERT_NOT_YET_VALID
    ERR_TLS_CERT_ALTNAME_INVALID
    E401 E403 E407 E429 E500 E502 E503 E504
);

my $FIX = 'reach the registry (a proxy: npm_config_https_proxy; a proxy '
    . 'with its own certificate: NODE_EXTRA_CA_CERTS or npm_config_cafile; '
    . 'a mirror: npm_config_registry), then run the test again';

# Makes sure $dir's npm packages are installed (each of @modules present
# in node_modules, none older than package-lock.json) and returns
# ('ok', undef), or ('skip', $why) when node/npm are missing or the
# registry is unreachable, or ('fail', $why) for any other failure.
# $why is one line; the whole npm output stays in a log file it names.
sub ensure {
    my ($dir, @modules) = @_;

    if (system('command -v node >/dev/null 2>&1 '
               . '&& command -v npm >/dev/null 2>&1') != 0)
    {
        return ('skip', 'node and npm are needed and are not installed; '
                . 'fix: apt-get install nodejs npm (./build.sh test '
                . 'installs them)');
    }
    return ('ok', undef) if _installed($dir, @modules);

    my $base = state_base($dir);
    open my $lock, '>>', "$base.lock"
        or return ('fail', "cannot open $base.lock: $!");
    flock($lock, LOCK_EX) or return ('fail', "cannot lock $base.lock: $!");

    # Another test of this run may have installed them (or failed to)
    # while this one waited for the lock.
    if (_installed($dir, @modules)) {
        close $lock;
        return ('ok', undef);
    }
    my $run = _run_id();
    if (open my $fh, '<', "$base.failed") {
        my ($id, $verdict, $why) = map { chomp; $_ } <$fh>;
        close $fh;
        if (defined $why && $id eq $run) {
            close $lock;
            return ($verdict, "$why (the first attempt of this run)");
        }
    }
    unlink "$base.failed";

    my $log = "$base.log";
    my $rc = system("cd '$dir' && npm ci --no-audit --no-fund "
                    . "--prefer-offline >'$log' 2>&1");
    if ($rc == 0 && _installed($dir, @modules)) {
        close $lock;
        return ('ok', undef);
    }

    my ($verdict, $why) = $rc == 0
        ? ('fail', "npm ci in $dir succeeded but one of @modules is not in "
           . "node_modules: package.json should list it")
        : _verdict($dir, $log, $rc);
    if (open my $fh, '>', "$base.failed.tmp") {
        print $fh "$run\n$verdict\n$why\n";
        close $fh;
        rename "$base.failed.tmp", "$base.failed";
    }
    close $lock;
    return ($verdict, $why);
}

# For t/*.t files: returns when the packages are ready; otherwise skips
# the whole file, or fails it (one failed check, no BAIL_OUT: the other
# files run), with the one-line reason.
sub need {
    my ($rel, @modules) = @_;
    my $dir = _repo() . "/$rel";
    my ($verdict, $why) = ensure($dir, @modules);
    return if $verdict eq 'ok';
    if ($verdict eq 'skip' && !$ENV{LLM_NPM_REQUIRED}) {
        plan skip_all => "needs the npm packages of $rel: $why";
    }
    $why .= ' (LLM_NPM_REQUIRED=1: not skipped)' if $verdict eq 'skip';
    plan tests => 1;
    fail("the npm packages of $rel: $why");
    exit 0;    # Test::More exits 1: one failed test
}

# For shell scripts: prints "$name: SKIP: ..." or "$name: FAIL: ..." on
# stderr and returns the exit status (0 ready, 77 skip, 1 fail).
sub cli {
    my ($name, $dir, @modules) = @_;
    my ($verdict, $why) = ensure($dir, @modules);
    return 0 if $verdict eq 'ok';
    if ($verdict eq 'skip' && !$ENV{LLM_NPM_REQUIRED}) {
        print STDERR "$name: SKIP: $why\n";
        return 77;
    }
    $why .= ' (LLM_NPM_REQUIRED=1: not skipped)' if $verdict eq 'skip';
    print STDERR "$name: FAIL: $why\n";
    return 1;
}

# The prefix of the lock, log and remembered-failure files of $dir's
# installs: one set per user and directory, in the temp directory.
sub state_base {
    my ($dir) = @_;
    return File::Spec->catfile(File::Spec->tmpdir,
        "llm-npm-$<-" . substr(md5_hex($dir), 0, 12));
}

# True when every module is in node_modules and the install is not older
# than package-lock.json (npm ci writes node_modules/.package-lock.json).
sub _installed {
    my ($dir, @modules) = @_;
    for my $m (@modules) {
        return 0 unless -d "$dir/node_modules/$m";
    }
    my $hidden = "$dir/node_modules/.package-lock.json";
    return 0 unless -f $hidden;
    return (stat "$dir/package-lock.json")[9] <= (stat $hidden)[9];
}

# Classifies a failed npm ci from its log: the error code (npm 9 writes
# "npm ERR! code X", npm 10 and later "npm error code X") and the first
# line of the message.
sub _verdict {
    my ($dir, $log, $rc) = @_;
    my ($code, $msg);
    if (open my $fh, '<', $log) {
        while (my $l = <$fh>) {
            chomp $l;
            next unless $l =~ s/^npm (?:ERR!|error)\s*//;
            if (!defined $code && $l =~ /^code (\S+)/) {
                $code = $1;
            } elsif (!defined $msg && $l ne ''
                     && $l !~ /^(?:code|syscall|errno|errcode|signal)\b/) {
                $msg = $l;
            }
        }
        close $fh;
    }
    $code //= 'unknown';
    $msg //= $rc == -1 ? "could not run npm: $!" : "exit status " . ($rc >> 8);
    $msg =~ s/\s+/ /g;
    $msg = substr($msg, 0, 200) . '...' if length $msg > 200;
    my $what = "npm ci in $dir failed: npm error code $code: $msg";
    if ($UNREACHABLE{$code} || $msg =~ /\b(?:ECONNREFUSED|ENOTFOUND|
            EAI_AGAIN|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH)\b/x)
    {
        return ('skip', "$what; the registry is unreachable; fix: $FIX "
                . "(npm's output: $log)");
    }
    return ('fail', "$what; fix that (npm's output: $log)");
}

# One test run: LLM_NPM_RUN when set, else the parent process (prove, or
# the shell running a script) and its start time.
sub _run_id {
    return "env $ENV{LLM_NPM_RUN}" if defined $ENV{LLM_NPM_RUN};
    my $ppid = getppid();
    my $start = '?';
    if (open my $fh, '<', "/proc/$ppid/stat") {
        my $s = <$fh>;
        close $fh;
        # the command name (field 2) may hold spaces: split after it
        $start = (split ' ', substr($s, rindex($s, ')') + 2))[19]
            if defined $s;
    }
    return "ppid $ppid $start";
}

sub _repo {
    require Cwd;
    require File::Basename;
    return Cwd::abs_path(File::Basename::dirname(__FILE__) . '/../..');
}

1;

package LlmTest;

# The integration-test harness: starts the real llm-engine and the distro
# nginx with the built module, each test file with its own temp dir, a
# generated nginx.conf and free loopback ports, the way nginx-tests does.
#
#   use lib 't/lib';
#   use LlmTest;
#   my $t = LlmTest->new;
#   my $sock = $t->start_engine('a');             # tiny test model
#   $t->start_nginx(<<'EOF');                     # the http{} body
#       upstream eng { server unix:%%SOCK_a%%; keepalive 4; }
#       server { listen 127.0.0.1:%%PORT%%; location /v1/ { ... } }
#   EOF
#   my $res = $t->post('/v1/chat/completions', {model => 'm', ...},
#                      Authorization => 'Bearer ...');
#   $t->done;   # stops everything, checks the error log, done_testing
#
# Core Perl only (Test::More, HTTP::Tiny, JSON::PP, IO::Socket::*).

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use HTTP::Tiny;
use IO::Select;
use IO::Socket::INET;
use IO::Socket::UNIX;
use JSON::PP;
use POSIX qw(:sys_wait_h);
use Test::More;
use Time::HiRes qw(sleep time);

our $REPO = abs_path(dirname(__FILE__) . '/../..');
our $BUILD = $ENV{LLM_BUILD} // "$REPO/build";
our $NGINX = $ENV{LLM_NGINX} // '/usr/sbin/nginx';
our $JSON = JSON::PP->new->canonical->allow_nonref;

sub new {
    my ($class, %opts) = @_;
    my $self = bless {
        dir => tempdir('llm-test-XXXXXX', TMPDIR => 1,
                       CLEANUP => !$ENV{LLM_TEST_KEEP}),
        engines => {},
        ports => {},
        nginx_pid => undef,
        %opts,
    }, $class;
    $self->{port} = $self->free_port;
    return $self;
}

sub dir { $_[0]{dir} }
sub port { $_[0]{port} }
sub build { $BUILD }
sub repo { $REPO }
sub bin { "$BUILD/bin/$_[1]" }

# A free loopback TCP port: bind to port 0 and read what the kernel chose.
sub free_port {
    my ($self) = @_;
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Proto => 'tcp', Listen => 1, ReuseAddr => 1)
        or die "free_port: $!";
    my $p = $s->sockport;
    close $s;
    return $p;
}

# The tiny generated test model (build.sh test makes it; made here if not).
sub model {
    my ($self) = @_;
    my $m = "$BUILD/models/test-tiny.gguf";
    unless (-f $m) {
        # test files run side by side (prove -j) may both make it: each
        # writes its own temporary file, and the rename is atomic (the
        # model is the same bytes whoever makes it)
        system("mkdir -p $BUILD/models") == 0 or die;
        system($self->bin('llm-mkmodel'), '--preset', 'tiny', '--type',
               'Q8_0', '--seed', '1', '-q', '-o', "$m.tmp.$$") == 0
            or die "llm-mkmodel failed";
        rename "$m.tmp.$$", $m or die "rename: $!";
    }
    return $m;
}

sub _spawn {
    my ($self, $log, @cmd) = @_;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>>', $log or die;
        open STDERR, '>>', $log or die;
        exec @cmd or die "exec $cmd[0]: $!";
    }
    return $pid;
}

sub _wait_socket {
    my ($path, $pid, $secs) = @_;
    my $deadline = time + $secs;
    while (time < $deadline) {
        if (-S $path) {
            my $c = IO::Socket::UNIX->new(Peer => $path);
            if ($c) { close $c; return 1 }
        }
        return 0 if waitpid($pid, WNOHANG) == $pid;
        sleep 0.05;
    }
    return 0;
}

# Starts an engine named NAME; returns its socket path.  Options: model,
# args (array ref of extra flags), env (hash ref).
sub start_engine {
    my ($self, $name, %o) = @_;
    my $sock = "$self->{dir}/engine-$name.sock";
    my $log = "$self->{dir}/engine-$name.log";
    # LLM_ENGINE_BIN / LLM_ENGINE_WRAP: another build's engine, run under
    # a wrapper (./build.sh cross: the aarch64 engine under qemu-aarch64)
    my @cmd = ((split ' ', $ENV{LLM_ENGINE_WRAP} // ''),
               $ENV{LLM_ENGINE_BIN} // $self->bin('llm-engine'),
               '--model', $o{model} // $self->model,
               '--socket', $sock, '--threads', $o{threads} // 1,
               @{ $o{args} // [] });
    local %ENV = (%ENV, %{ $o{env} // {} });
    my $pid = $self->_spawn($log, @cmd);
    _wait_socket($sock, $pid, $o{timeout} // 60)
        or BAIL_OUT("engine $name did not start:\n" . _slurp($log));
    $self->{engines}{$name} = { pid => $pid, sock => $sock, log => $log };
    return $sock;
}

sub engine_pid { $_[0]{engines}{$_[1]}{pid} }
sub engine_log { _slurp($_[0]{engines}{$_[1]}{log}) }
sub engine_sock {
    my ($self, $name) = @_;
    my $e = $self->{engines}{$name};    # no autovivification: not started
    return $e ? $e->{sock} : "$self->{dir}/engine-$name.sock";
}

# Stops engine NAME with SIGNAL (TERM); returns its exit status.
sub stop_engine {
    my ($self, $name, $sig) = @_;
    my $e = delete $self->{engines}{$name} or return;
    kill $sig // 'TERM', $e->{pid};
    my $deadline = time + 30;
    while (time < $deadline) {
        return $? if waitpid($e->{pid}, WNOHANG) == $e->{pid};
        sleep 0.05;
    }
    kill 'KILL', $e->{pid};
    waitpid($e->{pid}, 0);
    return $?;
}

# Writes nginx.conf around the given http{} body and starts nginx.
# Placeholders: %%PORT%% (the main port), %%PORT_x%% (another free port,
# named x), %%SOCK_x%% (engine x's socket), %%DIR%% (the temp dir).
# Options: workers (1), main (extra main-context lines), events.
sub write_conf {
    my ($self, $http, %o) = @_;
    my $dir = $self->{dir};
    my $workers = $o{workers} // 1;
    my $main = $o{main} // '';
    # As root, workers would run as nobody and could not open the engines'
    # sockets (mode 0660, owned by the user running the tests).
    $main = "user root;\n$main" if $> == 0 && $main !~ /^\s*user\s/m;
    my $conf = <<"EOF";
load_module $BUILD/modules/ngx_http_llm_module.so;
daemon off;
master_process on;
worker_processes $workers;
pid $dir/nginx.pid;
error_log $dir/error.log info;
$main
events { worker_connections 1024; }
http {
    access_log $dir/access.log;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
$http
}
EOF
    $conf =~ s/%%PORT%%/$self->{port}/g;
    $conf =~ s{%%PORT_(\w+)%%}{$self->named_port($1)}ge;
    $conf =~ s{%%SOCK_(\w+)%%}{$self->engine_sock($1)}ge;
    $conf =~ s/%%DIR%%/$dir/g;
    open my $f, '>', "$dir/nginx.conf" or die "nginx.conf: $!";
    print $f $conf;
    close $f;
    return "$dir/nginx.conf";
}

sub named_port {
    my ($self, $name) = @_;
    return $self->{ports}{$name} //= $self->free_port;
}

# nginx -t on the written config; returns (exit status, output).
sub test_conf {
    my ($self) = @_;
    local %ENV = %ENV;
    $ENV{LD_PRELOAD} = $ENV{LLM_NGINX_PRELOAD} if $ENV{LLM_NGINX_PRELOAD};
    my $out = `$NGINX -t -p $self->{dir} -c $self->{dir}/nginx.conf -e $self->{dir}/error.log 2>&1`;
    return ($? >> 8, $out);
}

sub start_nginx {
    my ($self, $http, %o) = @_;
    $self->write_conf($http, %o);
    local %ENV = %ENV;
    $ENV{LD_PRELOAD} = $ENV{LLM_NGINX_PRELOAD} if $ENV{LLM_NGINX_PRELOAD};
    my $pid = $self->_spawn("$self->{dir}/nginx.out", $NGINX, '-p',
                            $self->{dir}, '-c', "$self->{dir}/nginx.conf",
                            '-e', "$self->{dir}/error.log");
    $self->{nginx_pid} = $pid;
    my $deadline = time + 20;
    while (time < $deadline) {
        my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                      PeerPort => $self->{port});
        if ($c) { close $c; return $pid }
        if (waitpid($pid, WNOHANG) == $pid) {
            BAIL_OUT("nginx did not start:\n" . _slurp("$self->{dir}/nginx.out")
                     . _slurp("$self->{dir}/error.log"));
        }
        sleep 0.05;
    }
    BAIL_OUT("nginx did not listen on $self->{port}:\n"
             . _slurp("$self->{dir}/error.log"));
}

# nginx -s reload equivalent: SIGHUP to the master, then wait until the
# old workers are gone (a new "start worker process" appears in the log).
sub reload_nginx {
    my ($self, $http, %o) = @_;
    $self->write_conf($http, %o) if defined $http;
    my $before = () = $self->error_log =~ /start worker process/g;
    kill 'HUP', $self->{nginx_pid};
    my $deadline = time + 10;
    while (time < $deadline) {
        my $now = () = $self->error_log =~ /start worker process/g;
        return 1 if $now > $before;
        sleep 0.05;
    }
    return 0;
}

sub stop_nginx {
    my ($self) = @_;
    my $pid = delete $self->{nginx_pid} or return;
    kill 'QUIT', $pid;
    my $deadline = time + 15;
    while (time < $deadline) {
        return if waitpid($pid, WNOHANG) == $pid;
        sleep 0.05;
    }
    kill 'KILL', $pid;
    waitpid($pid, 0);
}

sub error_log { _slurp("$_[0]{dir}/error.log") }
sub access_log { _slurp("$_[0]{dir}/access.log") }

sub http {
    my ($self, $method, $path, $body, %h) = @_;
    my $ht = HTTP::Tiny->new(timeout => $self->{timeout} // 60,
                             keep_alive => 0);
    my %opt = (headers => \%h);
    if (defined $body) {
        $opt{content} = ref $body ? $JSON->encode($body) : $body;
        $h{'Content-Type'} //= 'application/json';
    }
    my $url = "http://127.0.0.1:$self->{port}$path";
    my $r = $ht->request($method, $url, \%opt);
    $r->{json} = eval { $JSON->decode($r->{content}) }
        if ($r->{headers}{'content-type'} // '') =~ /json/;
    return $r;
}

sub get { my ($self, $path, %h) = @_; $self->http('GET', $path, undef, %h) }
sub post { my ($self, $path, $b, %h) = @_; $self->http('POST', $path, $b, %h) }

# A raw HTTP/1.1 request on a fresh socket, for streams and disconnects.
# Returns the connected socket after sending; read with read_sse().
sub open_stream {
    my ($self, $path, $body, %h) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $self->{port}) or die "$!";
    my $content = ref $body ? $JSON->encode($body) : $body;
    my $req = "POST $path HTTP/1.1\r\nHost: localhost\r\n"
        . "Content-Type: application/json\r\n"
        . "Content-Length: " . length($content) . "\r\n"
        . join('', map { "$_: $h{$_}\r\n" } sort keys %h)
        . "Connection: close\r\n\r\n" . $content;
    print $s $req;
    return $s;
}

# Reads a whole response from a socket (until close or timeout); returns
# (status, headers hash, body with chunked encoding removed).
sub read_response {
    my ($self, $s, $timeout) = @_;
    my $buf = '';
    my $sel = IO::Select->new($s);
    my $deadline = time + ($timeout // 60);
    while (time < $deadline) {
        last unless $sel->can_read($deadline - time);
        my $n = sysread($s, $buf, 65536, length $buf);
        last unless $n;
    }
    return parse_response($buf);
}

sub parse_response {
    my ($buf) = @_;
    my ($head, $body) = split /\r\n\r\n/, $buf, 2;
    $body //= '';
    my ($status_line, @lines) = split /\r\n/, $head // '';
    my ($status) = ($status_line // '') =~ m{^HTTP/\S+ (\d+)};
    my %h;
    for (@lines) {
        my ($k, $v) = /^([^:]+):\s*(.*)$/ or next;
        $h{lc $k} = defined $h{lc $k} ? "$h{lc $k}, $v" : $v;
    }
    if (($h{'transfer-encoding'} // '') =~ /chunked/) {
        my $out = '';
        while ($body =~ s/^([0-9a-fA-F]+)\r\n//) {
            my $len = hex $1;
            last if $len == 0;
            $out .= substr($body, 0, $len, '');
            $body =~ s/^\r\n//;
        }
        $body = $out;
    }
    return ($status, \%h, $body);
}

# Splits an SSE body into its data: payloads (decoded JSON, or the string
# "[DONE]"), ignoring comments.
sub sse_events {
    my ($body) = @_;
    my @ev;
    for my $block (split /\n\n/, $body) {
        for my $line (split /\n/, $block) {
            next unless $line =~ /^data: ?(.*)$/;
            my $d = $1;
            push @ev, $d eq '[DONE]' ? $d : eval { $JSON->decode($d) } // $d;
        }
    }
    return @ev;
}

# Stops everything; checks the error log and the engines' logs for alerts,
# emergencies and sanitizer reports.
sub done {
    my ($self) = @_;
    $self->stop_nginx;
    $self->stop_engine($_) for keys %{ $self->{engines} };
    my $log = $self->error_log;
    unlike($log, qr/\[(alert|emerg)\]/, 'no alert or emerg in error.log');
    unlike($log, qr/AddressSanitizer|runtime error:|LeakSanitizer/,
           'no sanitizer report from nginx');
    for my $f (glob "$self->{dir}/engine-*.log") {
        unlike(_slurp($f), qr/AddressSanitizer|runtime error:|LeakSanitizer/,
               "no sanitizer report in " . (split m{/}, $f)[-1]);
    }
    done_testing();
}

sub DESTROY {
    my ($self) = @_;
    local $?;
    if ($self->{nginx_pid}) {
        kill 'KILL', $self->{nginx_pid};
        waitpid($self->{nginx_pid}, 0);
    }
    for my $e (values %{ $self->{engines} // {} }) {
        next unless $e->{pid};
        kill 'KILL', $e->{pid};
        waitpid($e->{pid}, 0);
    }
}

sub _slurp {
    my ($f) = @_;
    open my $fh, '<', $f or return '';
    local $/;
    return <$fh> // '';
}

sub slurp { my ($self, $f) = @_; return _slurp($f) }

1;

package FakeProvider;

# A fake OpenAI-compatible HTTP provider, for fault injection only (the
# real one in the tests is a second nginx with this module and a real
# engine behind TLS): listens on a loopback port, logs every request (its
# headers and body, one JSON line each, to `log`), and answers by the
# model the request names:
#
#   ok        a chat answer (stream: chunks, a usage chunk only when
#             stream_options.include_usage is true, [DONE]); embeddings
#             answered in reverse order
#   nousage   as ok, never with usage
#   status-N  HTTP status N with an OpenAI error body (param "temperature")
#   slow      as ok after `delay` seconds of silence
#   cut       a stream: two chunks, then the connection closes
#   garbage   200 with a body that is not JSON
#   badchunk  a stream whose chunked encoding breaks after one chunk
#   nostatus  bytes that are not an HTTP answer
#   miderror  a stream: one chunk, then an OpenAI error object
#   badutf8   a stream: one chunk, then a chunk with invalid UTF-8
#   close10   an HTTP/1.0 JSON answer without a length, to the close
#
#   my $fp = FakeProvider->start(port => $port, log => "$dir/fake.log");
#   ...
#   my @reqs = $fp->requests;     # [{headers => {...}, body => {...}}]
#   $fp->stop;
#
# Core Perl only.

use strict;
use warnings;

use IO::Socket::INET;
use JSON::PP;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(sleep);

my $JSON = JSON::PP->new->canonical;

sub start {
    my ($class, %o) = @_;
    my $srv = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                    LocalPort => $o{port}, Listen => 64,
                                    ReuseAddr => 1, Proto => 'tcp')
        or die "FakeProvider: listen: $!";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        $SIG{CHLD} = 'IGNORE';
        while (my $c = $srv->accept) {
            my $k = fork;
            if (defined $k && $k == 0) {
                _serve($c, \%o);
                POSIX::_exit(0);    # no destructors of the parent's objects
            }
            close $c;
        }
        POSIX::_exit(0);
    }
    close $srv;
    return bless { pid => $pid, %o }, $class;
}

sub stop {
    my ($self) = @_;
    kill 'TERM', $self->{pid};
    waitpid($self->{pid}, 0);
}

sub requests {
    my ($self) = @_;
    open my $f, '<', $self->{log} or return ();
    return map { $JSON->decode($_) } <$f>;
}

# One connection: requests until the peer closes (keepalive).
sub _serve {
    my ($c, $o) = @_;
    binmode $c;
    while (1) {
        my $head = '';
        while ($head !~ /\r\n\r\n/) {
            my $n = sysread($c, $head, 1, length $head);
            return unless $n;
        }
        my ($line, @h) = split /\r\n/, $head;
        my %h;
        for (@h) { $h{lc $1} = $2 if /^([^:]+):\s*(.*)$/ }
        my $body = '';
        while (length $body < ($h{'content-length'} // 0)) {
            my $n = sysread($c, $body, $h{'content-length'} - length $body,
                            length $body);
            return unless $n;
        }
        my $req = eval { $JSON->decode($body) } // {};
        if (open my $f, '>>', $o->{log}) {
            print $f $JSON->encode({ line => $line, headers => \%h,
                                     body => $req }), "\n";
            close $f;
        }
        return unless _answer($c, $o, $line, $req);
    }
}

sub _send { my ($c, $s) = @_; syswrite($c, $s) }

sub _chunk { my ($c, $s) = @_; _send($c, sprintf("%x\r\n%s\r\n", length $s, $s)) }

# Answers one request; returns 0 when the connection is to be closed.
sub _answer {
    my ($c, $o, $line, $req) = @_;
    my $model = $req->{model} // '';
    my $usage = { prompt_tokens => 11, completion_tokens => 3,
                  total_tokens => 14,
                  prompt_tokens_details => { cached_tokens => 2 } };

    if ($model =~ /^status-(\d+)$/) {
        my $b = $JSON->encode({ error => { message => "scripted $1",
            type => 'invalid_request_error', param => 'temperature',
            code => 'scripted' } });
        _send($c, "HTTP/1.1 $1 Scripted\r\nContent-Type: application/json\r\n"
                  . "Content-Length: " . length($b) . "\r\n\r\n$b");
        return 1;
    }
    if ($model eq 'nostatus') {
        _send($c, "SSH-2.0-OpenSSH_9.2\r\n\r\n");
        return 0;
    }
    if ($model eq 'close10') {
        my $b = JSON::PP->new->canonical->utf8->encode({ id => 'x',
            object => 'chat.completion', model => $model,
            choices => [ { index => 0, finish_reason => 'stop',
                message => { role => 'assistant', content => 'old' } } ],
            usage => $usage });
        _send($c, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                  . "\r\n$b");
        return 0;
    }
    if ($model eq 'garbage') {
        _send($c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                  . "Content-Length: 9\r\n\r\nnot json!");
        return 1;
    }
    sleep($o->{delay} // 3) if $model eq 'slow';

    if ($line =~ m{/embeddings }) {
        my @in = ref $req->{input} ? @{ $req->{input} } : ($req->{input});
        my @data = map { { object => 'embedding', index => $_,
                           embedding => [ 0.5 + $_, -0.25, 0.125 ] } }
                   reverse 0 .. $#in;
        my $b = $JSON->encode({ object => 'list', data => \@data,
            model => $model, usage => { prompt_tokens => 7,
                                        total_tokens => 7 } });
        _send($c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                  . "Content-Length: " . length($b) . "\r\n\r\n$b");
        return 1;
    }

    my @words = ('Hel', 'lo ', "w\x{f6}rld");
    if (!$req->{stream}) {
        my $b = JSON::PP->new->canonical->utf8->encode({ id => 'x',
            object => 'chat.completion', model => $model,
            choices => [ { index => 0, finish_reason => 'stop',
                message => { role => 'assistant',
                             content => join('', @words) } } ],
            ($model eq 'nousage' ? () : (usage => $usage)) });
        _send($c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                  . "Content-Length: " . length($b) . "\r\n\r\n$b");
        return 1;
    }
    _send($c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
              . "Transfer-Encoding: chunked\r\n\r\n");
    my $enc = JSON::PP->new->canonical->utf8;
    my $i = 0;
    for my $w (@words) {
        _chunk($c, "data: " . $enc->encode({ id => 'x', model => $model,
            object => 'chat.completion.chunk',
            choices => [ { index => 0, finish_reason => undef,
                           delta => { content => $w } } ] }) . "\n\n");
        if ($model eq 'cut' && ++$i == 2) {
            return 0;
        }
        if ($model eq 'badchunk') {
            _send($c, "zz\r\nnot a chunk\r\n");
            return 0;
        }
        if ($model eq 'miderror') {
            _chunk($c, "data: " . $enc->encode({ error => {
                message => 'upstream overloaded mid-stream',
                type => 'server_error', code => 'overloaded' } }) . "\n\n");
            _send($c, "0\r\n\r\n");
            return 1;
        }
        if ($model eq 'badutf8') {
            _chunk($c, "data: {\"choices\":[{\"index\":0,\"delta\":"
                       . "{\"content\":\"\xff\xfe\"}}]}\n\n");
            _send($c, "0\r\n\r\n");
            return 1;
        }
        sleep 0.05;
    }
    _chunk($c, "data: " . $enc->encode({ id => 'x', model => $model,
        choices => [ { index => 0, finish_reason => 'stop', delta => {} } ] })
        . "\n\n");
    if ($model ne 'nousage'
        && ($req->{stream_options} // {})->{include_usage})
    {
        _chunk($c, "data: " . $enc->encode({ id => 'x', model => $model,
            choices => [], usage => $usage }) . "\n\n");
    }
    _chunk($c, "data: [DONE]\n\n");
    _send($c, "0\r\n\r\n");
    return 1;
}

1;

package LlmSchema;

# A small JSON Schema validator for the OpenAPI schemas copied under
# tests/schemas (the subset they use: type, properties, required, items,
# enum, $ref into the same file, allOf, anyOf, oneOf (exactly one branch
# fits); $recursiveRef, formats, lengths and bounds, descriptions and x-*
# keys are not checked), and for the Anthropic schemas written there: type
# as a list of types (["string", "null"]), const and additionalProperties
# false.
# validate() returns the list of violations, empty when the value fits.

use strict;
use warnings;
use JSON::PP;
use Scalar::Util qw(looks_like_number);
use B;

sub load {
    my ($class, $file) = @_;
    open my $f, '<', $file or die "$file: $!";
    local $/;
    my $doc = JSON::PP->new->decode(<$f>);
    return bless { doc => $doc }, $class;
}

sub _ref {
    my ($self, $ref) = @_;
    $ref =~ m{^#/(.*)$} or die "unsupported \$ref $ref";
    my $node = $self->{doc};
    $node = $node->{$_} // die "no $ref" for split m{/}, $1;
    return $node;
}

# The JSON type of a decoded value (JSON::PP keeps numbers as numbers).
sub _type {
    my ($v) = @_;
    return 'null' unless defined $v;
    return 'boolean' if JSON::PP::is_bool($v);
    return 'object' if ref $v eq 'HASH';
    return 'array' if ref $v eq 'ARRAY';
    my $flags = B::svref_2object(\$v)->FLAGS;
    if ($flags & (B::SVp_IOK | B::SVp_NOK) && !($flags & B::SVp_POK)) {
        return $v == int($v) && $v !~ /[.eE]/ ? 'integer' : 'number';
    }
    return 'string';
}

sub validate {
    my ($self, $name, $value) = @_;
    my @err;
    $self->_check($self->{doc}{components}{schemas}{$name} // die("no $name"),
                  $value, '$', \@err);
    return @err;
}

sub _check {
    my ($self, $s, $v, $path, $err) = @_;
    # OpenAPI 3.0's nullable, beside a $ref or a type: null fits
    return if !defined $v && JSON::PP::is_bool($s->{nullable})
              && $s->{nullable};
    if ($s->{'$ref'}) {
        my %rest = %$s;
        delete $rest{'$ref'};
        $self->_check(\%rest, $v, $path, $err) if grep { !/^(description|default|title|x-)/ } keys %rest;
        $s = $self->_ref($s->{'$ref'});
    }
    for my $sub (@{ $s->{allOf} // [] }) {
        $self->_check($sub, $v, $path, $err);
    }
    for my $k (grep { $s->{$_} } qw(anyOf oneOf)) {
        my ($fit, $best) = (0, undef);
        for my $sub (@{ $s->{$k} }) {
            my @e;
            $self->_check($sub, $v, $path, \@e);
            $fit++ unless @e;
            $best = \@e if !defined $best || @e < @$best;
        }
        if ($fit == 0) {
            push @$err, "$path: fits no branch of $k; the nearest: "
                        . join('; ', @$best);
        } elsif ($k eq 'oneOf' && $fit > 1) {
            push @$err, "$path: fits $fit branches of oneOf";
        }
    }
    if (my $want = $s->{type}) {
        my $got = _type($v);
        my @want = ref $want ? @$want : ($want);
        my $ok = grep { $got eq $_ || ($_ eq 'number' && $got eq 'integer') }
                      @want;
        unless ($ok) {
            push @$err, "$path: expected " . join('|', @want) . ", got $got";
            return;
        }
    }
    if (exists $s->{const} && !(defined $v && !ref $v && $v eq $s->{const})) {
        push @$err, "$path: " . ($v // 'null') . " is not $s->{const}";
    }
    if (ref $v eq 'HASH' && JSON::PP::is_bool($s->{additionalProperties})
        && !$s->{additionalProperties})
    {
        for my $k (sort keys %$v) {
            push @$err, "$path: unexpected property $k"
                unless exists(($s->{properties} // {})->{$k});
        }
    }
    if ($s->{enum} && !grep { defined $v && $_ eq $v } @{ $s->{enum} }) {
        push @$err, "$path: " . ($v // 'null') . " is not one of "
                    . join(', ', @{ $s->{enum} });
    }
    if (ref $v eq 'HASH') {
        for my $k (@{ $s->{required} // [] }) {
            push @$err, "$path: missing required $k" unless exists $v->{$k};
        }
        for my $k (keys %{ $s->{properties} // {} }) {
            $self->_check($s->{properties}{$k}, $v->{$k}, "$path.$k", $err)
                if exists $v->{$k};
        }
    }
    if (ref $v eq 'ARRAY' && $s->{items}) {
        for my $i (0 .. $#$v) {
            $self->_check($s->{items}, $v->[$i], "$path\[$i\]", $err);
            last if @$err > 20;
        }
    }
}

1;

#!/usr/bin/env bash
#
# The nginx core for the module's fuzz targets: nginx's own sources at the
# version of the installed nginx (Debian's nginx-dev ships only headers),
# configured with the module as an addon and built with clang, coverage
# instrumentation and ASan+UBSan, into $BUILD/nginx-src.
#
# The source comes from Debian's archive with `apt-get source`, through a
# private list of deb-src entries (the mirrors of the system's own
# debian.sources): the system's apt configuration is left as it is.
#
#   fuzz/nginx.sh BUILD_DIR

set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:?usage: nginx.sh BUILD_DIR}
TREE=$BUILD/nginx-src
APT=$BUILD/apt
CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined"

version=$(dpkg-query -W -f='${Version}' nginx 2>/dev/null \
          || dpkg-query -W -f='${Version}' nginx-dev)
upstream=${version#*:}
upstream=${upstream%%-*}

fetch() {
    local tarball
    # (|| true: no tarball yet is an empty answer, not an error under
    # set -e -o pipefail)
    tarball=$(ls "$APT"/src/nginx_"$upstream".orig.tar.* 2>/dev/null \
              | head -1 || true)
    if [ -z "$tarball" ]; then
        mkdir -p "$APT/sources.list.d" "$APT/lists/partial" "$APT/src"
        local f
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -f "$f" ] || continue
            grep -q 'debian' "$f" || continue
            sed -e 's/^Types: deb$/Types: deb-src/' "$f" \
                >"$APT/sources.list.d/$(basename "$f")"
        done
        if [ -f /etc/apt/sources.list ]; then
            sed -n 's/^deb \(.*debian.*\)$/deb-src \1/p' /etc/apt/sources.list \
                >"$APT/sources.list.d/system.list"
        fi
        local opts=(-o "Dir::Etc::SourceList=/dev/null"
                    -o "Dir::Etc::SourceParts=$APT/sources.list.d"
                    -o "Dir::State::Lists=$APT/lists")
        echo "==> fetching nginx $upstream sources (apt-get source)"
        apt-get "${opts[@]}" update -qq
        # the .orig tarball is all that is needed; the Debian part of a
        # security update may not be where the lists say: ignore its error
        (cd "$APT/src" && apt-get "${opts[@]}" source --download-only \
            "nginx=$version" >/dev/null 2>&1 || true)
        tarball=$(ls "$APT"/src/nginx_"$upstream".orig.tar.* 2>/dev/null \
                  | head -1 || true)
        [ -n "$tarball" ] || { echo "nginx.sh: no nginx $upstream source" >&2;
                               exit 1; }
    fi
    rm -rf "$TREE" "$BUILD/nginx-$upstream"
    tar -C "$BUILD" -xf "$tarball"
    mv "$BUILD/nginx-$upstream" "$TREE"
}

[ -f "$TREE/src/core/nginx.c" ] || fetch

# configure again when the module's file set or the protocol changes
sig=$( { cat "$REPO/config" "$REPO/proto/llm.proto";
         ls "$REPO"/ngx_http_llm_module/; } | sha256sum | cut -d' ' -f1)
if [ ! -f "$TREE/objs/Makefile" ] \
   || [ "$(cat "$TREE/objs/.fuzz-sig" 2>/dev/null)" != "$sig" ]; then
    echo "==> configuring nginx $upstream with clang for the fuzz targets"
    (cd "$TREE" && ./configure --with-cc=clang --with-cc-opt="$CFLAGS" \
        --with-ld-opt="-fsanitize=address,undefined" --with-compat \
        --with-debug --with-threads --without-http_rewrite_module \
        --without-http_gzip_module --add-dynamic-module="$REPO" \
        >"$BUILD/nginx-configure.log" 2>&1) \
        || { tail -20 "$BUILD/nginx-configure.log"; exit 1; }
    echo "$sig" >"$TREE/objs/.fuzz-sig"
fi

# the core objects, the module's objects (the .so is not needed)
make -s -C "$TREE" -f objs/Makefile -j"${JOBS:-2}" binary modules \
    >"$BUILD/nginx-make.log" 2>&1 \
    || { grep -E 'error|warning' "$BUILD/nginx-make.log" | head -40; exit 1; }

# nginx.c without its main() (libFuzzer brings one)
objcopy --redefine-sym main=ngx_fuzz_nginx_main \
    "$TREE/objs/src/core/nginx.o" "$TREE/objs/nginx-nomain.o"

#!/usr/bin/env bash
#
# One entry point for building, running, testing and benchmarking.
#
#   ./build.sh              build everything into build/
#   ./build.sh test         build, then run every test (CI runs this)
#   ./build.sh run          build, start llm-engine + nginx on 127.0.0.1:8080
#   ./build.sh bench NAME   run bench/NAME.sh (core, serve, gateway, ...)
#   ./build.sh asan         build with -fsanitize=address,undefined, run tests
#   ./build.sh fuzz [TARGET] [SECONDS]
#                           build the libFuzzer targets (fuzz/, clang) and
#                           run each (or TARGET) for SECONDS (default 60)
#   ./build.sh cross        cross-build the engine for aarch64 and run its
#                           tests under qemu-aarch64 (part of `test`)
#   ./build.sh train-demo   retrain the bundled demo model (about an hour)
#   ./build.sh clean        remove build/
#
# Environment: NGINX_SRC=<dir> builds the module against another nginx
# source tree (default: a copy of Debian's /usr/share/nginx/src);
# JOBS=<n> parallel make jobs; LLM_SHARED=<dir> the shared reference data
# (default ../shared); PORT=<n> the port `run` listens on (8080).

set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=${BUILD:-$REPO/build}
JOBS=${JOBS:-$(nproc)}
export REPO BUILD
export LLM_SHARED=${LLM_SHARED:-$REPO/../shared}

say() { printf '==> %s\n' "$*"; }
die() { printf 'build.sh: error: %s\n' "$*" >&2; exit 1; }


# Debian packages: what the build, the tests and `run` need.  Only the
# missing ones are installed.

PKGS_BUILD=(gcc make pkg-config nginx nginx-dev libprotobuf-c-dev
    protobuf-c-compiler libjansson-dev libpcre2-dev liburing-dev libssl-dev
    zlib1g-dev libhiredis-dev)
PKGS_TEST=(perl curl nodejs npm python3 python3-numpy python3-jinja2
    openssl redis-server libnginx-mod-stream iproute2)
PKGS_BENCH=(wrk linux-perf time fio)
# aarch64: the engine cross-built with Debian's cross compiler against the
# arm64 libraries (multiarch), its tests run under qemu's user mode
PKGS_CROSS=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
    libprotobuf-c-dev:arm64 libjansson-dev:arm64 libpcre2-dev:arm64
    liburing-dev:arm64 libssl-dev:arm64)

ensure_packages() {
    local missing=() p
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null \
                | grep -q 'install ok installed'; then
            missing+=("$p")
        fi
    done
    # node and npm may come from elsewhere (nodesource); accept those
    local m=() q
    for q in "${missing[@]}"; do
        case $q in
        nodejs) command -v node >/dev/null || m+=("$q") ;;
        npm) command -v npm >/dev/null || m+=("$q") ;;
        *) m+=("$q") ;;
        esac
    done
    missing=("${m[@]}")
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        local arch=""
        if printf '%s\n' "${missing[@]}" | grep -q ':arm64$' \
           && ! dpkg --print-foreign-architectures | grep -qx arm64; then
            arch="sudo dpkg --add-architecture arm64 && sudo apt-get update && "
        fi
        die "missing Debian packages: ${missing[*]}
run as root, or install them first: ${arch}sudo apt-get install ${missing[*]}"
    fi
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if printf '%s\n' "${missing[@]}" | grep -q ':arm64$' \
       && ! dpkg --print-foreign-architectures | grep -qx arm64; then
        dpkg --add-architecture arm64
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}


# The engine: libllm, llm-engine, tools, unit tests.

build_engine() {
    local opt=${1:-} san=${2:-} dir=${3:-$BUILD}
    make -s -C "$REPO/engine" -j"$JOBS" BUILD="$dir" \
        ${opt:+OPT="$opt"} ${san:+SAN="$san"} all
}


# The module, as a dynamic module against Debian's nginx sources.  The
# configure step runs again only when its inputs change (the addon config,
# the protocol, the set of module sources, the flags); make does the rest.

build_module() {
    local dir=${1:-$BUILD} ccopt=${2:-} ldopt=${3:-}
    local src=${NGINX_SRC:-} tree flags sig

    if [ -z "$src" ]; then
        [ -d /usr/share/nginx/src ] \
            || die "/usr/share/nginx/src is missing (package nginx-dev)"
        tree=$dir/nginx-src
        if [ ! -f "$tree/.copied" ]; then
            rm -rf "$tree"
            mkdir -p "$dir"
            cp -a /usr/share/nginx/src "$tree"
            touch "$tree/.copied"
        fi
    else
        tree=$(cd "$src" && pwd)
    fi

    flags=()
    if [ -f "$tree/conf_flags" ]; then
        # shellcheck disable=SC1091
        . "$tree/conf_flags"
        flags=("${NGX_CONF_FLAGS[@]}")
    fi
    flags+=(--with-compat "--add-dynamic-module=$REPO")
    [ -n "$ccopt" ] && flags+=("--with-cc-opt=$ccopt")
    [ -n "$ldopt" ] && flags+=("--with-ld-opt=$ldopt")

    sig=$( { printf '%s\n' "${flags[@]}"; cat "$REPO/config" \
             "$REPO/proto/llm.proto"; ls "$REPO"/ngx_http_llm_module/; } \
           | sha256sum | cut -d' ' -f1)

    if [ ! -f "$tree/objs/Makefile" ] \
       || [ "$(cat "$tree/objs/.llm-config-sig" 2>/dev/null)" != "$sig" ]
    then
        say "configuring nginx module build in $tree"
        (cd "$tree" && ./configure "${flags[@]}" >"$dir/nginx-configure.log" \
            2>&1) || { tail -20 "$dir/nginx-configure.log";
                       die "nginx configure failed (log: $dir/nginx-configure.log)"; }
        echo "$sig" >"$tree/objs/.llm-config-sig"
    fi

    make -s -C "$tree" -f objs/Makefile -j"$JOBS" modules \
        >"$dir/nginx-make.log" 2>&1 \
        || { grep -E 'error|warning' "$dir/nginx-make.log" | head -40;
             die "module build failed (log: $dir/nginx-make.log)"; }

    mkdir -p "$dir/modules"
    if ! cmp -s "$tree/objs/ngx_http_llm_module.so" \
                "$dir/modules/ngx_http_llm_module.so"; then
        cp "$tree/objs/ngx_http_llm_module.so" "$dir/modules/"
    fi
}


cmd_build() {
    ensure_packages "${PKGS_BUILD[@]}"
    say "engine"
    build_engine
    say "module"
    build_module
    say "built: $BUILD/bin, $BUILD/modules/ngx_http_llm_module.so"
}


# Test models are generated by the project's own tool, once per build dir.

make_models() {
    local dir=${1:-$BUILD}
    mkdir -p "$dir/models"
    if [ ! -f "$dir/models/test-tiny.gguf" ]; then
        "$dir/bin/llm-mkmodel" --preset tiny --type Q8_0 --seed 1 \
            -o "$dir/models/test-tiny.gguf.tmp" >/dev/null
        mv "$dir/models/test-tiny.gguf.tmp" "$dir/models/test-tiny.gguf"
    fi
}


# The engine's unit test binaries in DIR/tests (all but those named in
# $UNIT_SKIP) through prove, WRAP (an emulator, or "") in front of each,
# JOBS at a time; the names of the failed ones in UNIT_FAILS.  Run from the
# repo root (the tests read engine/tests/data).

UNIT_SKIP=
UNIT_FAILS=()

unit_tests() {
    local dir=$1 wrap=$2 jobs=$3 t tests=() rc=0
    for t in "$dir"/tests/test_*; do
        [ -x "$t" ] || continue
        case " $UNIT_SKIP " in *" $(basename "$t") "*) continue ;; esac
        tests+=("$t")
    done
    UNIT_FAILS=()
    if [ ${#tests[@]} -eq 0 ]; then
        UNIT_FAILS=("unit tests (none built in $dir/tests)")
        return 1
    fi
    (cd "$REPO" && prove --exec "$wrap" -j"$jobs" "${tests[@]}" 2>&1 \
        | tee "$dir/unit.log"; exit "${PIPESTATUS[0]}") || rc=1
    # prove's summary names each failed file: "<path> (Wstat: ...)"
    while IFS= read -r t; do
        UNIT_FAILS+=("$(basename "$t")${wrap:+($wrap)}")
    done < <(grep -oE '^[^ ]+/tests/test_[A-Za-z0-9_]+ +\(Wstat' \
             "$dir/unit.log" | cut -d' ' -f1 || true)
    [ $rc -eq 0 ] || [ ${#UNIT_FAILS[@]} -ne 0 ] || UNIT_FAILS=("unit tests")
    return $rc
}


# Runs every test suite, keeps going after a failure, prints a summary.

run_tests() {
    local dir=${1:-$BUILD} fails=() skips=() t name rc
    # one npm ci attempt for the whole run (t/lib/LlmNpm.pm)
    export LLM_NPM_RUN="build.sh $$ $(date +%s)"

    make_models "$dir"

    say "engine layers (engine/layers.sh)"
    "$REPO/engine/layers.sh" || fails+=("engine layers")

    # TAP from each binary (engine/tests/testkit.h), counted by prove
    say "engine unit tests (prove, TAP)"
    unit_tests "$dir" "" 1 || fails+=("${UNIT_FAILS[@]}")

    say "integration tests (prove -r t/)"
    rm -f "$dir/prove.log"
    if ! (cd "$REPO" && LLM_BUILD="$dir" prove -r t/ 2>&1 \
          | tee "$dir/prove.log"; exit "${PIPESTATUS[0]}"); then
        fails+=("prove")
    fi
    # a skipped test file: "t/x.t .... skipped: why"
    while IFS= read -r t; do
        skips+=("${t%% *}")
    done < <(grep -E '^t/[^ ]+ \.+ skipped: ' "$dir/prove.log" || true)

    (fuzz_smoke) || fails+=("fuzz")

    for t in tests/tokenizer/run.sh tests/client/run.sh; do
        [ -x "$REPO/$t" ] || continue
        say "$t"
        rc=0
        (cd "$REPO" && LLM_BUILD="$dir" "$REPO/$t") || rc=$?
        case $rc in
        0) ;;
        77) skips+=("$t") ;;     # npm registry unreachable (says why)
        *) fails+=("$t") ;;
        esac
    done

    echo
    [ ${#skips[@]} -ne 0 ] && say "SKIPPED (the reasons are above): ${skips[*]}"
    if [ ${#fails[@]} -ne 0 ]; then
        say "FAILED: ${fails[*]}"
        return 1
    fi
    say "all tests passed${skips[*]:+ (some skipped, see above)}"
}


# The engine for aarch64 (NEON kernels), cross-built into build/aarch64,
# its unit tests and a few integration tests (the distro nginx and the
# real module in front of the aarch64 engine) under qemu-aarch64.
# test_expert_cache and t/engine_stream.t stay native only: qemu's user
# mode has no io_uring.

CROSS_T=(t/engine_basic.t t/engine_batch.t t/gateway_routes.t t/tool_sdk.t)

run_cross() {
    local dir=$BUILD/aarch64 fails=()
    command -v qemu-aarch64 >/dev/null || die "qemu-aarch64 is missing"
    say "engine for aarch64 (aarch64-linux-gnu-gcc)"
    make -s -C "$REPO/engine" -j"$JOBS" BUILD="$dir" \
        CC=aarch64-linux-gnu-gcc all
    mkdir -p "$dir/models"
    [ -f "$BUILD/models/test-tiny.gguf" ] \
        && cp "$BUILD/models/test-tiny.gguf" "$dir/models/"

    # $JOBS at a time (qemu runs each about 10x slower than native)
    say "aarch64 engine unit tests under qemu-aarch64 ($JOBS at a time)"
    printf -- '--- test_expert_cache (aarch64): SKIP, qemu-aarch64 has no'
    printf ' io_uring (it runs natively above)\n'
    # test_reference at the NEON level only: the scalar level runs natively
    # above, and under qemu its I-quant files would take most of the suite
    UNIT_SKIP=test_expert_cache LLM_REF_SIMD=neon LLM_BUILD="$dir" \
        unit_tests "$dir" qemu-aarch64 "$JOBS" || fails+=("${UNIT_FAILS[@]}")

    say "integration tests, aarch64 engine under qemu-aarch64"
    if ! (cd "$REPO" && LLM_BUILD="$BUILD" \
          LLM_ENGINE_BIN="$dir/bin/llm-engine" LLM_ENGINE_WRAP=qemu-aarch64 \
          prove -j"$JOBS" "${CROSS_T[@]}"); then
        fails+=("prove(aarch64)")
    fi

    if [ ${#fails[@]} -ne 0 ]; then
        say "FAILED: ${fails[*]}"
        return 1
    fi
    say "aarch64: all tests passed"
}


cmd_cross() {
    [ "$(uname -m)" = x86_64 ] \
        || die "cross: the aarch64 cross-build runs on x86-64 hosts"
    ensure_packages "${PKGS_BUILD[@]}" "${PKGS_TEST[@]}" "${PKGS_CROSS[@]}"
    cmd_build
    make_models "$BUILD"
    run_cross
}


# On an x86-64 host the aarch64 engine is tested too (cross, qemu); on an
# aarch64 host the native run is that test.
cmd_test() {
    local rc=0
    if [ "$(uname -m)" = x86_64 ]; then
        ensure_packages "${PKGS_BUILD[@]}" "${PKGS_TEST[@]}" "${PKGS_CROSS[@]}"
        cmd_build
        run_tests "$BUILD" || rc=1
        run_cross || rc=1
        [ $rc -eq 0 ] && say "all tests passed, x86-64 and aarch64"
        return $rc
    fi
    ensure_packages "${PKGS_BUILD[@]}" "${PKGS_TEST[@]}"
    cmd_build
    run_tests "$BUILD"
}


cmd_asan() {
    local dir=$BUILD/asan san="-fsanitize=address,undefined"
    ensure_packages "${PKGS_BUILD[@]}" "${PKGS_TEST[@]}"
    say "engine (asan)"
    build_engine "-O1 -g -fno-omit-frame-pointer" "$san" "$dir"
    say "module (asan)"
    build_module "$dir" "$san -fno-omit-frame-pointer" "$san"
    # The distro nginx is not instrumented: the module's runtime comes in
    # with LD_PRELOAD (t/lib/LlmTest.pm reads LLM_NGINX_PRELOAD).
    export LLM_NGINX_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    run_tests "$dir"
}


# The fuzz targets (fuzz/README.md): clang's libFuzzer with ASan+UBSan,
# built into build/fuzz whatever the build dir of the tests.

PKGS_FUZZ=(clang libclang-rt-14-dev)

build_fuzz() {
    ensure_packages "${PKGS_BUILD[@]}" "${PKGS_FUZZ[@]}"
    say "fuzz targets (clang, -fsanitize=fuzzer,address,undefined)"
    make -s -C "$REPO/fuzz" BUILD="$BUILD/fuzz" JOBS="$JOBS" all
}

# `./build.sh test`: each target for 3 s on its corpus
fuzz_smoke() {
    say "fuzz smoke run (each target 3 s on its corpus)"
    build_fuzz && bash "$REPO/fuzz/run.sh" "$BUILD/fuzz" all 3
}

cmd_fuzz() {
    build_fuzz
    bash "$REPO/fuzz/run.sh" "$BUILD/fuzz" "${1:-all}" "${2:-60}"
}


cmd_run() {
    local port=${PORT:-8080} run=$BUILD/run model key
    cmd_build
    mkdir -p "$run" "$BUILD/models"

    model=${MODEL:-$REPO/models/demo/demo-q8_0.gguf}
    if [ ! -f "$model" ]; then
        model=$BUILD/models/default.gguf
        if [ ! -f "$model" ]; then
            say "making the default model (synthetic, random weights)"
            "$BUILD/bin/llm-mkmodel" --preset tiny --type Q8_0 --seed 1 \
                -o "$model.tmp" >/dev/null
            mv "$model.tmp" "$model"
        fi
    fi

    if [ ! -f "$run/api-key" ]; then
        "$BUILD/bin/llm-keygen" --name demo --rpm 600 --tpm 1000000 \
            --key-file "$run/api-key" >"$run/keys"
        chmod 600 "$run/api-key" "$run/keys"
    fi
    key=$(cat "$run/api-key")

    # Run as root, the workers would drop to nobody and could not open the
    # engine's socket (mode 0660): this local demo keeps them as root.
    local user="# workers run as the invoking user"
    [ "$(id -u)" -eq 0 ] && user="user root;"
    sed -e "s|@BUILD@|$BUILD|g" -e "s|@RUN@|$run|g" -e "s|@PORT@|$port|g" \
        -e "s|@USER@|$user|" \
        "$REPO/examples/run.conf.in" >"$run/nginx.conf"
    mkdir -p "$run/tmp"

    RUN_DIR=$run ENGINE_PID= NGINX_PID=
    # Stops both whatever state they are in: runs under set -e, so every
    # step tolerates a process that is already gone.
    cleanup() {
        trap - INT TERM EXIT
        set +e
        [ -n "$NGINX_PID" ] && kill -QUIT "$NGINX_PID" 2>/dev/null
        [ -n "$ENGINE_PID" ] && kill -TERM "$ENGINE_PID" 2>/dev/null
        wait 2>/dev/null
        rm -f "$RUN_DIR/engine.sock" "$RUN_DIR/nginx.pid"
        say "stopped"
    }
    trap cleanup INT TERM EXIT

    rm -f "$run/engine.sock"
    "$BUILD/bin/llm-engine" --model "$model" --socket "$run/engine.sock" \
        --threads "$(nproc)" --alias default &
    ENGINE_PID=$!

    local i
    for i in $(seq 1 300); do
        [ -S "$run/engine.sock" ] && break
        kill -0 "$ENGINE_PID" 2>/dev/null || die "llm-engine exited"
        sleep 0.1
    done
    [ -S "$run/engine.sock" ] || die "llm-engine did not create its socket"

    /usr/sbin/nginx -p "$run" -c "$run/nginx.conf" -e "$run/error.log" &
    NGINX_PID=$!
    sleep 0.5
    kill -0 "$NGINX_PID" 2>/dev/null \
        || die "nginx did not start (see $run/error.log)"

    cat <<EOF

Ready.  Model: $model
  curl http://127.0.0.1:$port/healthz
  curl http://127.0.0.1:$port/v1/chat/completions \\
      -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \\
      -d '{"model":"default","messages":[{"role":"user","content":"Hello!"}]}'

OpenAI client: base URL http://127.0.0.1:$port/v1, API key in $run/api-key
Ctrl-C stops both.
EOF
    wait -n "$ENGINE_PID" "$NGINX_PID" || true
}


# Retrains the bundled demo model from nothing (tools/train-demo/, about an
# hour on 2 cores; not run by CI) and quantizes it to Q8_0.

cmd_train_demo() {
    local out=$BUILD/demo-train
    ensure_packages "${PKGS_BUILD[@]}" python3 python3-numpy python3-jinja2 \
        python3-torch python3-matplotlib libopenblas0-pthread
    cmd_build
    mkdir -p "$out" "$REPO/models/demo"
    # Debian's torch calls whatever libblas.so.3 the alternatives pick,
    # which may be the reference BLAS (40x slower matmuls): use OpenBLAS,
    # single-threaded like torch (--threads 1 is the recipe's default).
    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
        nice -n 10 /usr/bin/python3 "$REPO/tools/train-demo/train.py" \
        --out "$out" --seed "${SEED:-1}" \
        --llm-tokenize "$BUILD/bin/llm-tokenize" "$@"
    "$BUILD/bin/llm-quantize" "$out/demo-f32.gguf" \
        "$REPO/models/demo/demo-q8_0.gguf" Q8_0
    cp "$out/loss.png" "$out/train-log.json" "$REPO/models/demo/"
    say "models/demo/demo-q8_0.gguf (see models/demo/MODEL_CARD.md)"
}


cmd_bench() {
    local name=${1:-}
    [ -n "$name" ] || die "usage: ./build.sh bench NAME (one of: $(cd "$REPO/bench" && ls ./*.sh | sed 's|^\./||; s|\.sh$||' | tr '\n' ' '))"
    [ -f "$REPO/bench/$name.sh" ] || die "no benchmark '$name' (bench/$name.sh)"
    ensure_packages "${PKGS_TEST[@]}" "${PKGS_BENCH[@]}"
    cmd_build
    bash "$REPO/bench/$name.sh" "${@:2}"
}


case ${1:-build} in
build) cmd_build ;;
test) cmd_test ;;
run) cmd_run ;;
bench) shift; cmd_bench "$@" ;;
asan) cmd_asan ;;
fuzz) shift; cmd_fuzz "$@" ;;
cross) cmd_cross ;;
train-demo) shift; cmd_train_demo "$@" ;;
clean) rm -rf "$BUILD" ;;
-h|--help|help) sed -n '3,21p' "$0" | sed 's/^# \{0,1\}//' ;;
*) die "unknown command '$1' (build, test, run, bench NAME, asan, fuzz, cross, clean)" ;;
esac

#!/usr/bin/env bash
#
# ./build.sh bench gateway: what the gateway adds and what it holds.
#
#   1. added latency: the same request (1 user message, max_tokens 1 on
#      the real engine; 16 tokens from the fake) sent N times directly to
#      the engine socket and N times through nginx, the paths taking
#      turns; p50 and p99; beside them what a stock proxy_pass hop to a
#      second nginx process over a Unix socket adds to a "return 200"
#      (the floor of any upstream module: two more process wakeups), and
#      the same proxy_pass measured as the gateway is: through nginx
#      minus its backend (the second nginx) reached directly on a raw
#      socket
#   2. non-streaming requests/s at 64 connections (wrk, fake engine)
#   3. STREAMS concurrent SSE streams through one nginx (2 workers) with a
#      fake token source (STREAM_TOKENS tokens, one per STREAM_INTERVAL
#      ms): errors, and nginx memory per open stream
#
# Env: BUILD, REPO (set by build.sh), N (2000), STREAMS (10000), RAMP
# (streams opened per second, 2000), DURATION (wrk seconds, 10),
# STREAM_TOKENS (60) and STREAM_INTERVAL (2500 ms between tokens: a
# stream lasts 150 s, so all are open at once even on a loaded machine),
# MOD (the module to load, $BUILD/modules/ngx_http_llm_module.so: another
# build's, to compare two modules with the same engine).
# Needs node, wrk (Debian package wrk).

set -euo pipefail

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
N=${N:-2000}
STREAMS=${STREAMS:-10000}
RAMP=${RAMP:-2000}
DURATION=${DURATION:-10}
STREAM_TOKENS=${STREAM_TOKENS:-60}
STREAM_INTERVAL=${STREAM_INTERVAL:-2500}
NGINX=${NGINX:-/usr/sbin/nginx}
MOD=${MOD:-$BUILD/modules/ngx_http_llm_module.so}
MODEL=$BUILD/models/test-tiny.gguf

for f in "$MOD" "$BUILD/bin/llm-engine" "$MODEL"; do
    [ -e "$f" ] || { echo "bench/gateway: $f is missing (./build.sh first)" >&2; exit 1; }
done
command -v node >/dev/null || { echo "bench/gateway: node is needed" >&2; exit 1; }
command -v wrk >/dev/null || { echo "bench/gateway: wrk is needed (apt-get install wrk)" >&2; exit 1; }

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

D=$(mktemp -d "${TMPDIR:-/tmp}/llm-bench-gw-XXXXXX")
PIDS=()
cleanup() {
    [ -f "$D/nginx.pid" ] && kill -QUIT "$(cat "$D/nginx.pid")" 2>/dev/null || true
    [ -f "$D/hop/nginx.pid" ] && kill -QUIT "$(cat "$D/hop/nginx.pid")" 2>/dev/null || true
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$D"
}
trap cleanup EXIT

wait_ready() {   # file
    for _ in $(seq 1 200); do
        grep -q READY "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    echo "bench/gateway: $1 did not get ready" >&2
    cat "$1" >&2
    exit 1
}

node "$REPO/bench/gateway-fake.mjs" "$D/fast.sock" 16 0 >"$D/fast.log" 2>&1 &
PIDS+=($!)
node "$REPO/bench/gateway-fake.mjs" "$D/slow.sock" "$STREAM_TOKENS" "$STREAM_INTERVAL" >"$D/slow.log" 2>&1 &
PIDS+=($!)
"$BUILD/bin/llm-engine" --model "$MODEL" --socket "$D/real.sock" --threads 1 \
    --name fake >"$D/engine.log" 2>&1 &
PIDS+=($!)
wait_ready "$D/fast.log"
wait_ready "$D/slow.log"
for _ in $(seq 1 200); do [ -S "$D/real.sock" ] && break; sleep 0.05; done

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
USER_LINE=
[ "$(id -u)" -eq 0 ] && USER_LINE="user root;"

cat >"$D/nginx.conf" <<EOF
load_module $MOD;
$USER_LINE
worker_processes 2;
worker_rlimit_nofile $(ulimit -n);
pid $D/nginx.pid;
error_log $D/error.log warn;
events { worker_connections $(( $(ulimit -n) - 100 )); }
http {
    access_log off;
    client_body_temp_path $D/body;
    upstream fast { server unix:$D/fast.sock; keepalive 64; }
    upstream slow { server unix:$D/slow.sock; }
    upstream real { server unix:$D/real.sock; keepalive 8; }
    upstream hop { server unix:$D/hop.sock; keepalive 8; }
    server {
        listen 127.0.0.1:$PORT reuseport backlog=4096;
        location /v1/ { llm_pass slow; llm_api on; }
        location /fast/v1/ { llm_pass fast; llm_api on; }
        location /real/v1/ { llm_pass real; llm_api on; }
        location = /ping { return 200 '{}'; }
        location = /proxy {
            proxy_pass http://hop/ping;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
# The stock-hop baseline: a second nginx (its own process, as the engine
# is) answering "return 200" on a Unix socket.
mkdir -p "$D/hop"
cat >"$D/hop/nginx.conf" <<EOF
$USER_LINE
worker_processes 1;
pid $D/hop/nginx.pid;
error_log $D/hop/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $D/hop/body;
    server {
        listen unix:$D/hop.sock;
        location = /ping { return 200 '{}'; }
    }
}
EOF
"$NGINX" -p "$D/hop" -c "$D/hop/nginx.conf" -e "$D/hop/error.log"
"$NGINX" -p "$D" -c "$D/nginx.conf" -e "$D/error.log"
sleep 0.5
WORKERS=$(pgrep -P "$(cat "$D/nginx.pid")" | paste -sd, -)

echo "# Gateway benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, nginx $("$NGINX" -v 2>&1 | sed 's/.*\///'), 2 workers"
echo "# N=$N STREAMS=$STREAMS RAMP=$RAMP/s DURATION=${DURATION}s STREAM_TOKENS=$STREAM_TOKENS STREAM_INTERVAL=${STREAM_INTERVAL}ms"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg) (a shared machine makes latency noisy)"
echo
echo "## 1. added latency, fake engine (16 tokens at once), $N sequential requests"
node "$REPO/bench/gateway-load.mjs" latency "$D/fast.sock" \
    "http://127.0.0.1:$PORT/fast/v1/chat/completions" "$N" 16 \
    "http://127.0.0.1:$PORT/ping" "http://127.0.0.1:$PORT/proxy" "$D/hop.sock"
echo
echo "## 1b. added latency, real llm-engine (tiny model, max_tokens 1), $N sequential requests"
node "$REPO/bench/gateway-load.mjs" latency "$D/real.sock" \
    "http://127.0.0.1:$PORT/real/v1/chat/completions" "$N" 1 \
    "http://127.0.0.1:$PORT/ping" "http://127.0.0.1:$PORT/proxy" "$D/hop.sock"
echo

cat >"$D/post.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"fake","max_tokens":16,"messages":[{"role":"user","content":"Hello"}]}'
EOF
cpu_ticks() {     # utime + stime of the nginx workers, in clock ticks
    local t=0 p
    for p in ${WORKERS//,/ }; do
        t=$(( t + $(awk '{print $14 + $15}' "/proc/$p/stat") ))
    done
    echo "$t"
}
echo "## 2. non-streaming requests/s, 64 connections, fake engine (16 tokens), ${DURATION}s"
T0=$(cpu_ticks)
wrk -t2 -c64 -d"${DURATION}s" --latency -s "$D/post.lua" \
    "http://127.0.0.1:$PORT/fast/v1/chat/completions" >"$D/wrk.out"
T1=$(cpu_ticks)
grep -E 'Requests/sec|Non-2xx|Socket errors|50%|99%|requests in' "$D/wrk.out"
REQS=$(awk '/requests in/ {print $1}' "$D/wrk.out")
echo "nginx CPU per request: $(awk -v t=$((T1 - T0)) -v n="$REQS" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%.1f us (user+sys of the workers / requests)", t / hz * 1e6 / n }')"
echo

echo "## 3. $STREAMS concurrent SSE streams ($STREAM_TOKENS tokens, 1 per $STREAM_INTERVAL ms), fake engine"
node "$REPO/bench/gateway-load.mjs" streams "127.0.0.1:$PORT" "$STREAMS" "$RAMP" "$WORKERS"
ALERTS=$(grep -cE '\[(alert|emerg|crit)\]' "$D/error.log" || true)
echo "error.log: $ALERTS alert/emerg/crit lines"
[ "$ALERTS" -eq 0 ] || grep -E '\[(alert|emerg|crit)\]' "$D/error.log" | head -5

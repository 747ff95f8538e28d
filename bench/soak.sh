#!/usr/bin/env bash
#
# ./build.sh bench soak: a bounded soak of the whole gateway, and its
# reconciliation table (docs/BENCHMARKS.md, Soak).
#
# The distro nginx with the built module (2 workers, a keys file with one
# key, a zone, llm_metrics, an access log with the $llm_* variables and
# the request's x-soak-id) in front of two real llm-engine processes on
# the tiny test model: engine a serves "tiny" (fallback=tiny-b), engine b
# serves "tiny-b"; model "gone" has no engine and falls back to tiny-b.
# CLIENTS clients send a mixed load (bench/soak.mjs: chats with and
# without tools, streams with include_usage, completions, streams the
# client closes after a few chunks, the fallback model) for DURATION
# seconds.  Half-way through engine a's counters are read and it is killed
# with SIGKILL, then restarted on the same socket; nginx keeps running.
# At the end: requests, cancelled, prompt and completion tokens by
# clients, access log, /metrics and engines; RSS of the nginx workers and
# engines after the warm-up and at the end; the 5xx, and which were
# expected (only requests in flight on the killed engine).  Exits 1 when
# it does not reconcile exactly (beyond those requests) or when an RSS
# grew by more than 5% after the warm-up.
#
# Env: BUILD, REPO (set by build.sh), DURATION (300 s), CLIENTS (8),
# WARMUP (seconds of load through nginx before the start RSS, 20; the
# engines are warmed directly before), MODEL (the GGUF,
# default the tiny test model), KEEP=1 keeps the work directory.

set -euo pipefail

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
DURATION=${DURATION:-300}
CLIENTS=${CLIENTS:-8}
WARMUP=${WARMUP:-20}
NGINX=${NGINX:-/usr/sbin/nginx}
MOD=$BUILD/modules/ngx_http_llm_module.so
MODEL=${MODEL:-$BUILD/models/test-tiny.gguf}

if [ ! -f "$MODEL" ] && [ "$MODEL" = "$BUILD/models/test-tiny.gguf" ] \
   && [ -x "$BUILD/bin/llm-mkmodel" ]; then
    mkdir -p "$BUILD/models"
    "$BUILD/bin/llm-mkmodel" --preset tiny --type Q8_0 --seed 1 \
        -o "$MODEL.tmp" >/dev/null
    mv "$MODEL.tmp" "$MODEL"
fi
for f in "$MOD" "$BUILD/bin/llm-engine" "$BUILD/bin/llm-client" \
         "$BUILD/bin/llm-keygen" "$MODEL"; do
    [ -e "$f" ] || { echo "bench/soak: $f is missing (./build.sh first)" >&2; exit 1; }
done
command -v node >/dev/null || { echo "bench/soak: node is needed" >&2; exit 1; }
# the kill comes half-way, after the warm-up; the restarted engine's RSS
# is read WARMUP seconds after it, before the end
[ "$DURATION" -ge $(( 2 * WARMUP + 10 )) ] \
    || { echo "bench/soak: DURATION must be at least 2 x WARMUP + 10 s" >&2; exit 1; }

D=$(mktemp -d "${TMPDIR:-/tmp}/llm-soak-XXXXXX")
APID= BPID= LPID=
cleanup() {
    [ -f "$D/nginx.pid" ] && kill -QUIT "$(cat "$D/nginx.pid")" 2>/dev/null || true
    for p in $APID $BPID $LPID; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ "${KEEP:-0}" = 1 ]; then echo "bench/soak: kept $D" >&2; else rm -rf "$D"; fi
}
trap cleanup EXIT

now_ms() { date +%s%3N; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
workers_rss() {
    local t=0 p
    for p in $(pgrep -P "$(cat "$D/nginx.pid")"); do t=$(( t + $(rss_kb "$p") )); done
    echo "$t"
}
# The engine's stats as one JSON object (llm-client --info).
info() {   # socket
    "$BUILD/bin/llm-client" --socket "$1" --info
}
start_engine() {   # socket name log
    "$BUILD/bin/llm-engine" --model "$MODEL" --socket "$1" --threads 1 \
        --name "$2" >>"$3" 2>&1 &
}
wait_engine() {   # socket
    for _ in $(seq 1 600); do
        info "$1" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "bench/soak: the engine on $1 did not answer" >&2
    exit 1
}
wait_idle() {   # socket: no request running or queued
    for _ in $(seq 1 600); do
        info "$1" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{
            const j=JSON.parse(s.trim().split("\n").pop()); const t=j.stats||j;
            process.exit(t.requests_running===0&&t.requests_queued===0?0:1)})' && return 0
        sleep 0.1
    done
    echo "bench/soak: the engine on $1 did not go idle" >&2
}

start_engine "$D/a.sock" tiny "$D/engine-a.log"; APID=$!
start_engine "$D/b.sock" tiny-b "$D/engine-b.log"; BPID=$!
wait_engine "$D/a.sock"
wait_engine "$D/b.sock"

# Warm the engines directly: 32 long answers each touch their whole KV
# cache (its pages are mapped on first use), so the RSS after the warm-up
# is the working size.  Their counts are read here and subtracted.
warm_engine() {   # socket
    local i j pids=()
    for i in $(seq 1 8); do
        for j in 1 2 3 4; do
            "$BUILD/bin/llm-client" --socket "$1" \
                "{\"messages\":[{\"role\":\"user\",\"content\":\"warm up $i $j\"}],
                  \"max_tokens\":1000,\"ignore_eos\":true}" >/dev/null
        done &
        pids+=($!)
    done
    wait "${pids[@]}"
}
warm_engine "$D/a.sock"
warm_engine "$D/b.sock"
info "$D/a.sock" >"$D/info-a-base.txt"
info "$D/b.sock" >"$D/info-b-base.txt"
# "gone": a socket file nobody listens on (connect: ECONNREFUSED)
python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.close()' "$D/gone.sock"

KEY=$("$BUILD/bin/llm-keygen" --name soak --key-file "$D/key" >"$D/keys" && cat "$D/key")

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
USER_LINE=
[ "$(id -u)" -eq 0 ] && USER_LINE="user root;"
cat >"$D/nginx.conf" <<EOF
load_module $MOD;
$USER_LINE
worker_processes 2;
pid $D/nginx.pid;
error_log $D/error.log warn;
events { worker_connections 4096; }
http {
    client_body_temp_path $D/body;
    llm_zone soak 16m;
    llm_keys $D/keys;
    upstream a { server unix:$D/a.sock; keepalive 16; }
    upstream b { server unix:$D/b.sock; keepalive 16; }
    upstream gone { server unix:$D/gone.sock; }
    llm_model tiny upstream=a fallback=tiny-b;
    llm_model tiny-b upstream=b;
    llm_model gone upstream=gone fallback=tiny-b;
    log_format soak '\$msec \$request_time \$status \$http_x_soak_id '
                    '\$llm_model \$llm_prompt_tokens \$llm_completion_tokens '
                    '\$llm_finish_reason \$llm_error_code "\$upstream_addr"';
    server {
        listen 127.0.0.1:$PORT;
        location /v1/ {
            llm_api on;
            access_log $D/access.log soak;
        }
        location = /metrics {
            llm_metrics;
            access_log off;
        }
    }
}
EOF
"$NGINX" -p "$D" -c "$D/nginx.conf" -e "$D/error.log"
for _ in $(seq 1 100); do [ -s "$D/nginx.pid" ] && break; sleep 0.05; done
sleep 0.3

cat >"$D/settings.json" <<EOF
{"date": "$(date -u '+%Y-%m-%d %H:%M UTC')", "duration": $DURATION, "clients": $CLIENTS,
 "warmup": $WARMUP, "nginx": "$("$NGINX" -v 2>&1 | sed 's/.*\///')", "cores": $(nproc),
 "model": "$(basename "$MODEL")", "sockA": "$D/a.sock", "sockB": "$D/b.sock",
 "load0": "$(cut -d' ' -f1-3 /proc/loadavg)", "load1": "LOAD1"}
EOF

echo "bench/soak: ${DURATION}s, $CLIENTS clients, work directory $D" >&2
T0=$(now_ms)
node "$REPO/bench/soak.mjs" load "http://127.0.0.1:$PORT" "$KEY" "$DURATION" \
    "$CLIENTS" "$WARMUP" "$D/clients.jsonl" "$D/warm" &
LPID=$!

# after the warm-up: the RSS at start
while [ ! -f "$D/warm" ]; do sleep 0.2; done
{
    echo "nginx0 $(workers_rss)"
    echo "a0 $(rss_kb "$APID")"
    echo "b0 $(rss_kb "$BPID")"
} >"$D/rss.txt"

# half-way: engine a's counters, then SIGKILL, then a restart
sleep $(( DURATION / 2 - WARMUP ))
{
    echo "akill $(rss_kb "$APID")"
    echo "bkill $(rss_kb "$BPID")"
    echo "nginxkill $(workers_rss)"
} >>"$D/rss.txt"
SNAP=$(now_ms)
info "$D/a.sock" >"$D/info-a-old.txt"
kill -KILL "$APID"
KILL=$(now_ms)
wait "$APID" 2>/dev/null || true
sleep 1
RESTART=$(now_ms)
start_engine "$D/a.sock" tiny "$D/engine-a.log"; APID=$!
wait_engine "$D/a.sock"
READY=$(now_ms)
echo "bench/soak: engine a killed at $(( (KILL - T0) / 1000 ))s, serving again after $(( READY - KILL )) ms" >&2
sleep "$WARMUP"
echo "anew0 $(rss_kb "$APID")" >>"$D/rss.txt"

wait "$LPID"
LPID=
# the cancelled requests end when the engines have answered their Cancel
wait_idle "$D/a.sock"
wait_idle "$D/b.sock"
N=$(wc -l <"$D/clients.jsonl")
for _ in $(seq 1 100); do
    [ "$(wc -l <"$D/access.log")" -ge "$N" ] && break
    sleep 0.1
done
sleep 0.5
curl -s "http://127.0.0.1:$PORT/metrics" >"$D/metrics.txt"
info "$D/a.sock" >"$D/info-a-new.txt"
info "$D/b.sock" >"$D/info-b.txt"
{
    echo "nginx1 $(workers_rss)"
    echo "a1 $(rss_kb "$APID")"
    echo "b1 $(rss_kb "$BPID")"
} >>"$D/rss.txt"
printf 't0 %s\nsnap %s\nkill %s\nrestart %s\nready %s\n' \
    "$T0" "$SNAP" "$KILL" "$RESTART" "$READY" >"$D/times.txt"
sed -i "s|LOAD1|$(cut -d' ' -f1-3 /proc/loadavg)|" "$D/settings.json"
for f in a-base b-base a-old a-new b; do
    node -e 'const s=require("fs").readFileSync(process.argv[1],"utf8").trim().split("\n").pop();
        const j=JSON.parse(s); console.log(JSON.stringify(j.stats||j))' \
        "$D/info-$f.txt" >"$D/stats-$f.json"
done
ALERTS=$(grep -cE '\[(alert|emerg|crit)\]' "$D/error.log" || true)

RC=0
node "$REPO/bench/soak.mjs" report "$D" || RC=$?
echo "error.log: $ALERTS alert/emerg/crit lines"
[ "$ALERTS" -eq 0 ] || { grep -E '\[(alert|emerg|crit)\]' "$D/error.log" | head -5; RC=1; }
exit "$RC"

#!/usr/bin/env bash
#
# ./build.sh bench keys: what API keys, per-key limits and metrics cost.
#
# The same non-streaming request (fake engine, 16 tokens at once) with wrk
# at 64 connections through one nginx (2 workers), in four locations:
#
#   A  open        no llm_keys, llm_limit_zone off (no metrics)
#   B  metrics     no llm_keys, the zone's metrics recorded
#   C  key         llm_keys with KEYS keys, a key without limits, metrics
#   D  key+limits  the same file, a key with rpm/tpm (never reached), metrics
#
# For each: requests/s, p50/p99 latency, and nginx CPU per request (user +
# sys of both workers / requests); the differences are the cost.
#
# Env: BUILD, REPO (set by build.sh), DURATION (wrk seconds per location,
# 10), KEYS (keys in the file, 10000).  Needs node, wrk, python3.

set -euo pipefail

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
DURATION=${DURATION:-10}
KEYS=${KEYS:-10000}
NGINX=${NGINX:-/usr/sbin/nginx}
MOD=$BUILD/modules/ngx_http_llm_module.so

[ -e "$MOD" ] || { echo "bench/keys: $MOD is missing (./build.sh first)" >&2; exit 1; }
command -v node >/dev/null || { echo "bench/keys: node is needed" >&2; exit 1; }
command -v wrk >/dev/null || { echo "bench/keys: wrk is needed (apt-get install wrk)" >&2; exit 1; }

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

D=$(mktemp -d "${TMPDIR:-/tmp}/llm-bench-keys-XXXXXX")
PIDS=()
cleanup() {
    [ -f "$D/nginx.pid" ] && kill -QUIT "$(cat "$D/nginx.pid")" 2>/dev/null || true
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$D"
}
trap cleanup EXIT

node "$REPO/bench/gateway-fake.mjs" "$D/fast.sock" 16 0 >"$D/fast.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 200); do grep -q READY "$D/fast.log" 2>/dev/null && break; sleep 0.05; done
grep -q READY "$D/fast.log" || { echo "bench/keys: fake engine did not start" >&2; cat "$D/fast.log" >&2; exit 1; }

# KEYS random keys; the first two are used: "plain" (no limits) and
# "limited" (limits far above what the run can reach)
python3 - "$D" "$KEYS" <<'EOF'
import hashlib, secrets, sys
d, n = sys.argv[1], int(sys.argv[2])
with open(d + '/keys', 'w') as f, open(d + '/plain.key', 'w') as p, \
     open(d + '/limited.key', 'w') as l:
    for i in range(n):
        k = 'sk-llm-' + secrets.token_urlsafe(30)
        h = hashlib.sha256(k.encode()).hexdigest()
        if i == 0:
            f.write(f'{h} plain\n'); p.write(k)
        elif i == 1:
            f.write(f'{h} limited rpm=100000000 tpm=100000000000\n'); l.write(k)
        else:
            f.write(f'{h} k{i} rpm=60 tpm=100000\n')
EOF

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
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $D/body;
    llm_zone llm 16m;
    upstream fast { server unix:$D/fast.sock; keepalive 64; }
    server {
        listen 127.0.0.1:$PORT reuseport backlog=4096;
        llm_pass fast;
        location /a/v1/ { llm_api on; llm_limit_zone off; }
        location /b/v1/ { llm_api on; }
        location /c/v1/ { llm_api on; llm_keys $D/keys; }
        location /d/v1/ { llm_api on; llm_keys $D/keys; }
        location = /metrics { llm_metrics; }
    }
}
EOF
"$NGINX" -p "$D" -c "$D/nginx.conf" -e "$D/error.log"
sleep 0.5
WORKERS=$(pgrep -P "$(cat "$D/nginx.pid")" | paste -sd, -)

cpu_ticks() {
    local t=0 p
    for p in ${WORKERS//,/ }; do
        t=$(( t + $(awk '{print $14 + $15}' "/proc/$p/stat") ))
    done
    echo "$t"
}

run() {   # name path keyfile
    local name=$1 path=$2 key=${3:-} auth=
    [ -n "$key" ] && auth="wrk.headers[\"Authorization\"] = \"Bearer $(cat "$key")\""
    cat >"$D/post.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
$auth
wrk.body = '{"model":"fake","max_tokens":16,"messages":[{"role":"user","content":"Hello"}]}'
EOF
    local t0 t1 reqs rps p50 p99 non2xx cpu
    t0=$(cpu_ticks)
    wrk -t2 -c64 -d"${DURATION}s" --latency -s "$D/post.lua" \
        "http://127.0.0.1:$PORT$path/v1/chat/completions" >"$D/wrk.out"
    t1=$(cpu_ticks)
    reqs=$(awk '/requests in/ {print $1}' "$D/wrk.out")
    rps=$(awk '/Requests\/sec/ {print $2}' "$D/wrk.out")
    p50=$(awk '$1 == "50%" {print $2}' "$D/wrk.out")
    p99=$(awk '$1 == "99%" {print $2}' "$D/wrk.out")
    non2xx=$(awk '/Non-2xx/ {print $NF}' "$D/wrk.out")
    cpu=$(awk -v t=$((t1 - t0)) -v n="$reqs" -v hz="$(getconf CLK_TCK)" \
          'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    printf '| %-28s | %9s | %7s | %7s | %8s | %s |\n' \
        "$name" "$rps" "$p50" "$p99" "$cpu" "${non2xx:-0}"
}

echo "# Keys/limits/metrics benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, nginx $("$NGINX" -v 2>&1 | sed 's/.*\///'), 2 workers"
echo "# wrk -t2 -c64 -d${DURATION}s, fake engine (16 tokens at once), $KEYS keys in the file"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg) (a shared machine makes this noisy)"
echo
echo "| location                     |     req/s |     p50 |     p99 | CPU us/req | non-2xx |"
echo "|------------------------------|-----------|---------|---------|----------|---------|"
run "A open (no keys, no zone)" /a
run "B metrics only" /b
run "C key, no limits, metrics" /c "$D/plain.key"
run "D key + rpm/tpm + metrics" /d "$D/limited.key"
echo
echo "llm_requests_total after the runs:"
curl -s "http://127.0.0.1:$PORT/metrics" | grep '^llm_requests_total' | head -5
ALERTS=$(grep -cE '\[(alert|emerg|crit)\]' "$D/error.log" || true)
echo "error.log: $ALERTS alert/emerg/crit lines"

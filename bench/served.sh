#!/usr/bin/env bash
#
# ./build.sh bench served: the served path against the engine's own
# decode (issue 36).  llm-engine on the bench model (Q4_0, ANCHORS.md
# shape) behind the distro nginx with the module (llm_pass, keepalive),
# streamed /v1/completions from bench/sse_load.py (HTTP/1.1, chunked SSE,
# greedy, ignore_eos, include_usage), each client its own prompt (no
# shared prefix).
#
# 1. R rounds of: the engine stopped (SIGSTOP), `llm-bench -t THREADS -p
#    P1 -n GEN1 -r 1` on the same file with the engine's KV type; the
#    engine resumed, the same engine without the gateway (llm-client on
#    its socket), then one client through nginx, each streaming GEN1
#    tokens after its own P1-token prompt, sampled at temperature 1
#    (seeded): llm-bench decodes random tokens, and so must the streams,
#    since which experts a token routes to sets a step's memory traffic
#    (a synthetic model's greedy output loops on a few tokens, and one
#    repeated token decoded at 94 tok/s where random ones gave 73).  Columns: llm-bench's mean decode step as tok/s, the served
#    stream's decode tok/s as the client saw it ((tokens - 1) / first to
#    last event) and as the engine logged it, served / bench; and
#    llm-bench again on the tokens the direct stream generated
#    (--tokens), so that the engine is also compared with llm-bench on
#    the same tokens (the direct / bench-on-its-tokens column).
# 2. The issue's rows: 1 client x P1, 8 x P1, 8 x P2 tokens, GEN
#    generated: aggregate tok/s, aggregate decode tok/s, TTFT p50 / p95.
# 3. Where a served step's time goes, over the one-client streams of
#    part 1 (the engine's stats, per step): the forward call, sampling
#    (masks included), detokenization (stop strings, reasoning / tool
#    routing), event encoding, the server loop between steps (epoll,
#    socket writes and reads), the rest of the step (KV bookkeeping,
#    scheduling).
#
# Env: BUILD, REPO, MODEL (build/models/bench-moe-q4_0.gguf, made if
# absent), THREADS (2), R (3), P1 (84), P2 (343), GEN (64), GEN1 (128),
# KV (the engine's default, f16), EXTRA (more llm-engine flags), NGINX.

set -euo pipefail

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
MODEL=${MODEL:-$BUILD/models/bench-moe-q4_0.gguf}
THREADS=${THREADS:-2}
R=${R:-3}
P1=${P1:-84}
P2=${P2:-343}
GEN=${GEN:-64}
GEN1=${GEN1:-128}
KV=${KV:-f16}
EXTRA=${EXTRA:-}
NGINX=${NGINX:-/usr/sbin/nginx}
BIN=$BUILD/bin
MOD=$BUILD/modules/ngx_http_llm_module.so
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

for f in "$BIN/llm-engine" "$BIN/llm-client" "$BIN/llm-bench" "$MOD" "$NGINX"; do
    [ -e "$f" ] || { echo "bench/served: $f is missing (./build.sh first)" >&2; exit 1; }
done
if [ ! -f "$MODEL" ]; then
    echo "bench/served: making $MODEL (llm-mkmodel --preset bench-moe --type Q4_0)" >&2
    mkdir -p "$(dirname "$MODEL")"
    "$BIN/llm-mkmodel" --preset bench-moe --type Q4_0 --seed 1 -q -o "$MODEL.tmp"
    mv "$MODEL.tmp" "$MODEL"
fi

D=$(mktemp -d "${TMPDIR:-/tmp}/llm-bench-served-XXXXXX")
SOCK=$D/engine.sock
EPID=
cleanup() {
    [ -n "$EPID" ] && kill -CONT "$EPID" 2>/dev/null && kill "$EPID" 2>/dev/null \
        && wait "$EPID" 2>/dev/null
    [ -f "$D/nginx.pid" ] && kill -QUIT "$(cat "$D/nginx.pid")" 2>/dev/null
    rm -rf "$D"
}
trap cleanup EXIT

# shellcheck disable=SC2086
"$BIN/llm-engine" --model "$MODEL" --name bench --socket "$SOCK" \
    --threads "$THREADS" --kv-type "$KV" $EXTRA 2> "$D/engine.log" &
EPID=$!
for _ in $(seq 600); do
    [ -S "$SOCK" ] && "$BIN/llm-client" --socket "$SOCK" --info >/dev/null 2>&1 && break
    kill -0 "$EPID" 2>/dev/null || { cat "$D/engine.log" >&2; exit 1; }
    sleep 0.1
done

. "$REPO/bench/lib.sh"
PORT=$(bench_free_port)
bench_gateway_conf "$D" "$MOD" "$SOCK" "$PORT"
"$NGINX" -p "$D" -c "$D/nginx.conf" -e "$D/error.log"
URL=http://127.0.0.1:$PORT/v1/completions
for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$PORT/v1/models" && break
    sleep 0.05
done

# A prompt of at most N tokens in $D/p.KEY, its first words "KEY:" so
# that no two prompts share a cached block (the prefix cache keys blocks
# of 16 tokens by everything before them): every request prefills its
# whole prompt, as the issue's clients did.
WORDS="the quick brown fox jumps over a lazy dog while seven bold wizards quietly vex the jolly king near old river banks under grey skies and every merchant counts silver coins beside the harbour wall"
ntok() {
    "$BIN/llm-client" --socket "$SOCK" --tokenize "0:$1" --add-special \
        | $PY -c 'import json,sys; print(len(json.load(sys.stdin)["tokens"]))'
}
words() {   # N KEY
    $PY - "$1" "$2" "$WORDS" <<'PY'
import sys
n, key, w = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split()
print("%d: " % key + " ".join(w[(key * 3 + k) % len(w)] for k in range(n)), end="")
PY
}
KEY=0
make_prompt() {     # N -> $D/p.$KEY (KEY incremented first)
    local want=$1 lo=1 hi=$(( $1 + 8 )) mid
    KEY=$((KEY + 1))
    while [ $lo -lt $hi ]; do    # the most words with <= want tokens
        mid=$(( (lo + hi + 1) / 2 ))
        if [ "$(ntok "$(words $mid $KEY)")" -le "$want" ]; then lo=$mid; else hi=$(( mid - 1 )); fi
    done
    words $lo $KEY > "$D/p.$KEY"
}

# warm up: page the weights in, the gateway's keepalive connection up
make_prompt "$P1"
$PY "$REPO/bench/sse_load.py" "$URL" 1 "$GEN1" "$D/p.$KEY" > /dev/null

info() { "$BIN/llm-client" --socket "$SOCK" --info; }

echo "# bench served: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# model $MODEL ($(stat -L -c %s "$MODEL") bytes), threads $THREADS, KV $KV${EXTRA:+, engine flags $EXTRA}"
echo "# nginx $("$NGINX" -v 2>&1 | sed 's/.*\///'), 1 worker, llm_pass over a unix socket, keepalive 16"
echo
echo "## 1. one served stream against llm-bench, interleaved ($R rounds; $P1-token prompt, $GEN1 tokens, temperature 1)"
echo
echo "| round | llm-bench pp$P1 tok/s | llm-bench tg mean tok/s | llm-bench on the direct stream's tokens | direct (engine socket), engine log tok/s | served, client tok/s | served, engine log tok/s | client / bench | engine log / bench | direct / bench on its tokens | load |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
S0=$(info)
BSUM=0
for r in $(seq 1 "$R"); do
    kill -STOP "$EPID"
    B=$("$BIN/llm-bench" --model "$MODEL" -t "$THREADS" -p "$P1" -n "$GEN1" -r 1 \
        --kv-type "$KV" --json 2>/dev/null | tail -1)
    kill -CONT "$EPID"
    sleep 0.2
    # the same engine without the gateway: llm-client on its socket
    make_prompt "$P1"
    LOGN=$(wc -l < "$D/engine.log")
    "$BIN/llm-client" --socket "$SOCK" "$($PY -c 'import json,sys; print(json.dumps({"prompt": open(sys.argv[1]).read(), "max_tokens": int(sys.argv[2]), "temperature": 1, "seed": int(sys.argv[3]), "ignore_eos": True}))' "$D/p.$KEY" "$GEN1" "$r")" > "$D/direct.out"
    sleep 0.1
    DLOG=$(tail -n +"$((LOGN + 1))" "$D/engine.log" | grep " done: " | tail -1)
    # llm-bench again, decoding the tokens that stream produced: a gap
    # between it and llm-bench's random tokens is the workload's (which
    # experts the tokens route to), not the serving path's
    $PY -c 'import json,sys; print(",".join(str(t) for l in open(sys.argv[1]) for e in [json.loads(l)] if e.get("event") == "delta" for t in e.get("tokens", [])))' "$D/direct.out" > "$D/direct.tok"
    kill -STOP "$EPID"
    BT=$("$BIN/llm-bench" --model "$MODEL" -t "$THREADS" -p "$P1" -n "$GEN1" -r 1 \
        --kv-type "$KV" --tokens "$D/direct.tok" --json 2>/dev/null | tail -1)
    kill -CONT "$EPID"
    sleep 0.2
    make_prompt "$P1"
    LOGN=$(wc -l < "$D/engine.log")
    S=$(SSE_TEMPERATURE=1 SSE_SEED=$r $PY "$REPO/bench/sse_load.py" "$URL" 1 "$GEN1" "$D/p.$KEY")
    sleep 0.1
    ELOG=$(tail -n +"$((LOGN + 1))" "$D/engine.log" | grep " done: " | tail -1)
    $PY - "$B" "$S" "$ELOG" "$r" "$(cut -d' ' -f1 /proc/loadavg)" "$DLOG" "$BT" >> "$D/rounds" <<'PY'
import json, re, sys
def logged(line):
    m = re.search(r"completion (\d+) tokens.* decode ([0-9.]+) ms", line)
    return (int(m.group(1)) - 1) / float(m.group(2)) * 1e3 if m else 0.0
b = json.loads(sys.argv[1]); s = json.loads(sys.argv[2]); bt = json.loads(sys.argv[7])
print(json.dumps({"round": sys.argv[4], "pp": b["pp_tps"],
                  "bench": 1e3 / b["tg_mean_ms"],
                  "bench_tok": 1e3 / bt["tg_mean_ms"], "direct": logged(sys.argv[6]),
                  "client": s["stream_decode_tok_s"], "served": logged(sys.argv[3]),
                  "load": sys.argv[5]}))
PY
    tail -1 "$D/rounds" | $PY -c '
import json, sys
r = json.load(sys.stdin)
print("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f | %.3f | %s |" % (
    r["round"], r["pp"], r["bench"], r["bench_tok"], r["direct"], r["client"],
    r["served"], r["client"] / r["bench"], r["served"] / r["bench"],
    r["direct"] / r["bench_tok"], r["load"]))'

done
S1=$(info)
$PY - "$D/rounds" <<'PY'
import json, statistics, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
med = {k: statistics.median(r[k] for r in rs) for k in ("bench", "bench_tok", "direct", "client", "served")}
print("| median | | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f | %.3f | |" % (
    med["bench"], med["bench_tok"], med["direct"], med["client"], med["served"],
    med["client"] / med["bench"], med["served"] / med["bench"],
    med["direct"] / med["bench_tok"]))
PY
echo
echo "## 2. the issue's rows ($GEN tokens each)"
echo
echo "| clients | prompt tokens | aggregate tok/s (incl. prefill) | aggregate decode tok/s | stream decode tok/s | TTFT p50 | TTFT p95 | errors |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for row in "1 $P1" "8 $P1" "8 $P2"; do
    set -- $row
    FILES=()
    for i in $(seq 1 "$1"); do make_prompt "$2"; FILES+=("$D/p.$KEY"); done
    S=$($PY "$REPO/bench/sse_load.py" "$URL" "$1" "$GEN" "${FILES[@]}")
    $PY - "$S" <<'PY'
import json, sys
s = json.loads(sys.argv[1])
print("| %d | %.0f | %.1f | %.1f | %.1f | %.2f s | %.2f s | %d |" % (
    s["clients"], s.get("prompt_tokens_mean", 0), s.get("agg_tok_s", 0),
    s.get("agg_decode_tok_s", 0), s.get("stream_decode_tok_s", 0),
    s.get("ttft_p50_ms", 0) / 1e3, s.get("ttft_p95_ms", 0) / 1e3,
    s["errors"]))
PY
done
echo
echo "## 3. a served step's time, over part 1's streams (engine stats)"
echo
$PY - "$S0" "$S1" <<'PY'
import json, sys
a = json.loads(sys.argv[1])["stats"]; b = json.loads(sys.argv[2])["stats"]
d = lambda k: b.get(k, 0) - a.get(k, 0)
steps = d("steps_total")
dsteps = d("decode_steps_total")
samp, detok, emit = d("sample_ms_total"), d("detok_ms_total"), d("emit_ms_total")
# decode-only steps (one token, no prompt): their forward = their wall
# (forward through sampling) less what sampling, detokenizing and
# encoding cost per step (one stream: the same in every step)
per = (samp + detok + emit) / steps
fwd_dec = d("decode_step_ms_total") / dsteps - per
fwd_pf = (d("forward_ms_total") - fwd_dec * dsteps) / max(1, steps - dsteps)
rest = (d("step_ms_total") - d("forward_ms_total") - samp - detok - emit) / steps
loop = d("loop_ms_total") / steps
rows = [("forward", fwd_dec), ("sampling", samp / steps),
        ("detokenize", detok / steps), ("emit (encode events)", emit / steps),
        ("rest of the step (scheduling, KV bookkeeping)", rest),
        ("loop between steps (epoll, socket reads and writes)", loop)]
total = sum(v for _, v in rows)
print("%d steps, of them %d decode-only; the prompt's steps' forward: %.1f ms each" % (
    steps, dsteps, fwd_pf))
print()
print("| part of a decode step | ms | share |")
print("| --- | ---: | ---: |")
for k, v in rows:
    print("| %s | %.4f | %.2f%% |" % (k, v, 100 * v / total))
print("| total: %.1f tok/s | %.4f | 100%% |" % (1e3 / total, total))
PY

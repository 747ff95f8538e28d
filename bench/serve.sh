#!/usr/bin/env bash
#
# ./build.sh bench serve: continuous batching on the bench model.
#
# N concurrent clients (CLIENTS, default "1 8 32 64") x prompts of about
# PROMPTS tokens (default "32 128") x GEN generated tokens (64), greedy,
# ignore_eos, on build/models/bench-moe-q4_0.gguf (made with llm-mkmodel
# if absent), THREADS forward threads (2).  Each client has its own
# prompt (no shared prefix).  Prints a table: aggregate tok/s over the
# wall time (prefill included), aggregate decode tok/s (the tokens after
# each stream's first, over the time from the first first token to the
# last end), TTFT p50 / p95, decode relative to 1 client, the rate of
# the engine's decode-only steps (one token per sequence, no prompt in
# the batch: the batch's generation rate with prefill excluded, from
# the engine's stats) and that relative to 1 client, and
# the engine's CPU seconds for the run with generated tokens per CPU
# second: on a shared machine the wall-time figures follow the load, the
# per-CPU-second one much less.
#
# Env: BUILD, REPO (set by build.sh), MODEL, THREADS, CLIENTS, PROMPTS,
# GEN, MAX_BATCH (64), STEP_TOKENS (the engine's default), EXTRA (more
# llm-engine flags).

set -euo pipefail

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
MODEL=${MODEL:-$BUILD/models/bench-moe-q4_0.gguf}
THREADS=${THREADS:-2}
CLIENTS=${CLIENTS:-"1 8 32 64"}
PROMPTS=${PROMPTS:-"32 128"}
GEN=${GEN:-64}
MAX_BATCH=${MAX_BATCH:-64}
STEP_TOKENS=${STEP_TOKENS:-}
EXTRA=${EXTRA:-}
ENGINE=$BUILD/bin/llm-engine
CLIENT=$BUILD/bin/llm-client

for f in "$ENGINE" "$CLIENT"; do
    [ -x "$f" ] || { echo "bench/serve: $f is missing (./build.sh first)" >&2; exit 1; }
done
if [ ! -f "$MODEL" ]; then
    echo "bench/serve: making $MODEL (llm-mkmodel --preset bench-moe --type Q4_0)"
    mkdir -p "$(dirname "$MODEL")"
    "$BUILD/bin/llm-mkmodel" --preset bench-moe --type Q4_0 --seed 1 -q \
        -o "$MODEL.tmp"
    mv "$MODEL.tmp" "$MODEL"
fi

D=$(mktemp -d "${TMPDIR:-/tmp}/llm-bench-serve-XXXXXX")
SOCK=$D/engine.sock
EPID=
cleanup() {
    [ -n "$EPID" ] && kill "$EPID" 2>/dev/null && wait "$EPID" 2>/dev/null
    rm -rf "$D"
}
trap cleanup EXIT

STEP_ARG=
[ -n "$STEP_TOKENS" ] && STEP_ARG="--step-tokens $STEP_TOKENS"
# shellcheck disable=SC2086
"$ENGINE" --model "$MODEL" --socket "$SOCK" --threads "$THREADS" \
    --max-batch "$MAX_BATCH" $STEP_ARG \
    --max-queue 1024 $EXTRA 2> "$D/engine.log" &
EPID=$!
for _ in $(seq 600); do
    [ -S "$SOCK" ] && "$CLIENT" --socket "$SOCK" --info >/dev/null 2>&1 && break
    kill -0 "$EPID" 2>/dev/null || { cat "$D/engine.log" >&2; exit 1; }
    sleep 0.1
done

# A prompt of about N tokens (with the "<i>: " the client puts first).
WORDS=(the quick brown fox jumps over a lazy dog while seven bold wizards
       quietly vex the jolly king near old river banks under grey skies)
prompt_of() {
    local want=$1 text="" n=0 i=0
    while :; do
        local next="$text ${WORDS[$((i % ${#WORDS[@]}))]}"
        n=$("$CLIENT" --socket "$SOCK" --tokenize "0:$next" --add-special \
            | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tokens"]))')
        [ "$n" -gt "$want" ] && break
        text=$next
        i=$((i + 1))
    done
    printf '%s' "${text# }"
}

# user + system clock ticks of the engine so far
cpu_ticks() {
    awk '{ print $14 + $15 }' "/proc/$EPID/stat"
}

json_req() {
    python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1],
        "max_tokens": int(sys.argv[2]), "temperature": 0,
        "ignore_eos": True}))' "$1" "$2"
}

# warm up: page the weights in
"$CLIENT" --socket "$SOCK" "$(json_req "warm up the page cache" 8)" >/dev/null

INFO=$("$CLIENT" --socket "$SOCK" --info)
echo "# bench serve: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# model $MODEL"
echo "# $(echo "$INFO" | python3 -c 'import json,sys; i=json.load(sys.stdin); print("%s %s, ctx %d, max_batch %d, kv %d blocks x %d" % (i["architecture"], i["quantization"], i["context_length"], i["max_batch"], i["stats"]["kv_blocks_total"], i["stats"]["kv_block_tokens"]))')"
echo "# threads $THREADS, step tokens ${STEP_TOKENS:-$(grep -o "step budget [0-9]*" "$D/engine.log" | head -1 | grep -o "[0-9]*$" || echo default)}, $GEN generated per request, greedy"
echo
printf '| clients | prompt tokens | aggregate tok/s (incl. prefill) | aggregate decode tok/s | TTFT p50 | TTFT p95 | decode vs 1 client | decode-only steps tok/s | vs 1 client | engine CPU s | generated tok per CPU s |\n'
printf '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n'
for P in $PROMPTS; do
    TEXT=$(prompt_of "$P")
    REQ=$(json_req "$TEXT" "$GEN")
    BASE=
    DBASE=
    for N in $CLIENTS; do
        CPU0=$(cpu_ticks)
        ST0=$("$CLIENT" --socket "$SOCK" --info)
        OUT=$("$CLIENT" --socket "$SOCK" --bench "$N" --timeout 3600 "$REQ")
        ST1=$("$CLIENT" --socket "$SOCK" --info)
        CPU1=$(cpu_ticks)
        LINE=$(python3 - "$OUT" "$N" "${BASE:-0}" "$((CPU1 - CPU0))" "$(getconf CLK_TCK)" "$ST0" "$ST1" "${DBASE:-0}" <<'PY'
import json, sys
r = json.loads(sys.argv[1]); n = int(sys.argv[2]); base = float(sys.argv[3])
cpu = int(sys.argv[4]) / float(sys.argv[5])
s0 = json.loads(sys.argv[6])["stats"]; s1 = json.loads(sys.argv[7])["stats"]
dbase = float(sys.argv[8])
# steps with one token per sequence and no prompt in the batch: the
# generation rate of the batch, prefill excluded (engine stats)
dt = s1.get("decode_tokens_total", 0) - s0.get("decode_tokens_total", 0)
dms = s1.get("decode_step_ms_total", 0) - s0.get("decode_step_ms_total", 0)
dtps = dt / dms * 1e3 if dms > 0 else 0.0
rel = "%.2fx" % (r["agg_decode_tok_s"] / base) if base > 0 else "1.00x"
drel = "%.2fx" % (dtps / dbase) if dbase > 0 else "1.00x"
err = "" if r["errors"] == 0 else " (%d errors)" % r["errors"]
per = r["completion_tokens"] / cpu if cpu > 0 else 0.0
print("| %d | %.0f | %.1f | %.1f | %.2f s | %.2f s | %s%s | %.1f | %s | %.2f | %.1f |\t%r" % (
    n, r["prompt_tokens_mean"], r["agg_tok_s"], r["agg_decode_tok_s"],
    r["ttft_p50_ms"] / 1e3, r["ttft_p95_ms"] / 1e3, rel, err, dtps, drel,
    cpu, per, dtps))
PY
)
        echo "${LINE%%$'\t'*}"
        if [ -z "$BASE" ]; then
            BASE=$(echo "$OUT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["agg_decode_tok_s"])')
            DBASE=${LINE##*$'\t'}
        fi
    done
done
echo
"$CLIENT" --socket "$SOCK" --info | python3 -c 'import json,sys; s=json.load(sys.stdin)["stats"]; print("# engine: %d requests, %d preempted, %d steps, %d tokens through the forward pass" % (s["requests_total"], s["requests_preempted"], s["steps_total"], s["step_tokens_total"]))'
echo "# $(grep -c 'failed:' "$D/engine.log" || true) requests failed"

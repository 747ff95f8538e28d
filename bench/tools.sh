#!/usr/bin/env bash
#
# ./build.sh bench tools: what tool calls cost, on a model with a
# 151,936-token vocabulary (Qwen2/3's size, the synthetic Hermes template).
#
# CLIENTS concurrent chat requests (default "1 8") of GEN tokens (256,
# ignore_eos, seeded, temperature TEMP 0.7) with the same messages, run
# REPS times (2) in turn:
#   plain     no tools (a shorter prompt: for reference only)
#   none      the two tools below, tool_choice none: the same prompt as
#             the rows after it, the opener masked, no parsing; the base
#             of the ratios
#   auto      the two tools, tool_choice auto: the parser on the text and
#             the opener watch, no mask until a call starts
#   strings   tool_choice required, a tool of 8 required string parameters:
#             the opener, then the arguments (mostly the mask's string fast
#             path)
#   numbers   tool_choice required, a tool taking an array of at least
#             10000 integers: every step a trie walk
# The required calls cannot complete within GEN tokens, so every step of
# those is masked.  The tools make the prompt longer (the template renders
# them: attention over more context at every step, more prefill), hence
# the base none.  TTFT p50 includes the prefill and, for the tool rows,
# the hooks' set-up (one pass over the vocabulary per sequence).  The
# table gives the mean aggregate decode tok/s (wall time), its ratio to
# none, generated tokens per engine CPU second relative to none (less
# sensitive to the load of a shared machine), and TTFT p50.  Then
# llm-toolbench times the hooks' set-up alone for three families.  Above
# temperature 0 a masked step samples among the allowed tokens only,
# which on this tiny shape costs less than sampling all 151,936.
#
# Env: BUILD, REPO (set by build.sh), SHAPE (tiny), CLIENTS, GEN, TEMP,
# REPS, THREADS (2), TYPE (Q4_0).

set -euo pipefail

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
SHAPE=${SHAPE:-tiny}
CLIENTS=${CLIENTS:-"1 8"}
GEN=${GEN:-256}
TEMP=${TEMP:-0.7}
REPS=${REPS:-2}
THREADS=${THREADS:-2}
TYPE=${TYPE:-Q4_0}
ENGINE=$BUILD/bin/llm-engine
CLIENT=$BUILD/bin/llm-client

for f in "$ENGINE" "$CLIENT" "$BUILD/bin/llm-mkmodel" "$BUILD/bin/llm-toolbench"; do
    [ -x "$f" ] || { echo "bench/tools: $f is missing (./build.sh first)" >&2; exit 1; }
done

D=$(mktemp -d "${TMPDIR:-/tmp}/llm-bench-tools-XXXXXX")
EPID=
cleanup() {
    [ -n "$EPID" ] && kill "$EPID" 2>/dev/null && wait "$EPID" 2>/dev/null
    rm -rf "$D"
}
trap cleanup EXIT

req() {
    KIND=$1 GEN=$GEN TEMP=$TEMP python3 -c '
import json, os
kind, gen = os.environ["KIND"], int(os.environ["GEN"])
def fn(name, params):
    return {"type": "function", "function": {"name": name, "parameters": params}}
strings = fn("record", {"type": "object", "properties": {
    k: {"type": "string"} for k in "abcdefgh"}, "required": list("abcdefgh"),
    "additionalProperties": False})
numbers = fn("series", {"type": "object", "properties": {"v": {
    "type": "array", "items": {"type": "integer"}, "minItems": 10000}},
    "required": ["v"], "additionalProperties": False})
r = {"messages": [{"role": "user", "content": "Record the weather."}],
     "max_tokens": gen, "temperature": float(os.environ["TEMP"]), "seed": 7,
     "ignore_eos": True}
if kind != "plain":
    r["tools"] = [strings, numbers]
if kind in ("none", "auto"):
    r["tool_choice"] = kind
elif kind in ("strings", "numbers"):
    r["tool_choice"] = {"type": "function", "function": {
        "name": "record" if kind == "strings" else "series"}}
print(json.dumps(r))'
}

MODEL=$BUILD/models/json-$SHAPE-v151936-$(echo "$TYPE" | tr 'A-Z' 'a-z').gguf
if [ ! -f "$MODEL" ]; then
    echo "# making $MODEL" >&2
    mkdir -p "$(dirname "$MODEL")"
    "$BUILD/bin/llm-mkmodel" --preset "$SHAPE" --vocab 151936 \
        --type "$TYPE" --seed 1 -q -o "$MODEL.tmp" >&2
    mv "$MODEL.tmp" "$MODEL"
fi

echo "# bench tools: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $SHAPE, vocab 151936, $GEN tokens per request, ignore_eos, temperature $TEMP, threads $THREADS, $TYPE, $REPS runs each in turn"
echo
printf '| clients | mode | decode tok/s | / none | per engine CPU s / none | TTFT p50 ms |\n'
printf '| --- | --- | --- | --- | --- | --- |\n'

SOCK=$D/engine.sock
"$ENGINE" --model "$MODEL" --socket "$SOCK" --threads "$THREADS" \
    --max-batch 16 2> "$D/engine.log" &
EPID=$!
for _ in $(seq 1200); do
    [ -S "$SOCK" ] && "$CLIENT" --socket "$SOCK" --info >/dev/null 2>&1 && break
    kill -0 "$EPID" 2>/dev/null || { cat "$D/engine.log" >&2; exit 1; }
    sleep 0.1
done
grep -q 'tool calls hermes' "$D/engine.log" \
    || { echo "bench/tools: the engine does not use the hermes family" >&2; exit 1; }
"$CLIENT" --socket "$SOCK" --bench 8 "$(req plain)" >/dev/null   # warm up

MODES="plain none auto strings numbers"
for N in $CLIENTS; do
    declare -A SUM=() TOK=() CPU=() TTFT=()
    for K in $MODES; do SUM[$K]=0; TOK[$K]=0; CPU[$K]=0; TTFT[$K]=0; done
    for _ in $(seq "$REPS"); do
        for K in $MODES; do
            C0=$(awk '{ print $14 + $15 }' "/proc/$EPID/stat")
            OUT=$("$CLIENT" --socket "$SOCK" --bench "$N" --timeout 3600 "$(req $K)")
            C1=$(awk '{ print $14 + $15 }' "/proc/$EPID/stat")
            read -r V NT TT <<<"$(echo "$OUT" | python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["errors"] == 0, r; print(r["agg_decode_tok_s"], r["completion_tokens"], r["ttft_p50_ms"])')"
            SUM[$K]=$(python3 -c "print(${SUM[$K]} + $V)")
            TTFT[$K]=$(python3 -c "print(${TTFT[$K]} + $TT)")
            TOK[$K]=$((TOK[$K] + NT))
            CPU[$K]=$((CPU[$K] + C1 - C0))
        done
    done
    for K in $MODES; do
        python3 - "$N" "$K" "$REPS" "${SUM[$K]}" "${SUM[none]}" \
            "${TOK[$K]}" "${CPU[$K]}" "${TOK[none]}" "${CPU[none]}" \
            "${TTFT[$K]}" <<'PY'
import sys
n, k, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
v, p = float(sys.argv[4]) / reps, float(sys.argv[5]) / reps
tk, ck, tp, cp = (max(int(x), 1) for x in sys.argv[6:10])
tt = float(sys.argv[10]) / reps
print("| %s | %s | %.1f | %.1f%% | %.1f%% | %.1f |" % (
    n, k, v, 100 * v / p, 100 * (tk / ck) / (tp / cp), tt))
PY
    done
done

kill "$EPID"
wait "$EPID" 2>/dev/null || true
EPID=

echo
echo "# the hooks' set-up per sequence (llm-toolbench, two tools)"
for F in hermes mistral deepseek-v3 minimax-m2; do
    "$BUILD/bin/llm-toolbench" -m "$MODEL" --format "$F" | sed 's/^/    /'
done

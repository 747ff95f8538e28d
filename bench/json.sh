#!/usr/bin/env bash
#
# ./build.sh bench json: decode tok/s with and without a json_schema
# constraint on models with a 151,936-token vocabulary (Qwen2/3's size),
# and the mask's own cost per step on real vocabularies.
#
# For each model shape in SHAPES (default "tiny bench-moe"; made with
# llm-mkmodel --vocab 151936 if absent: "tiny" is the worst case, a step so
# cheap that the mask weighs most; "bench-moe" is ANCHORS.md's shape),
# CLIENTS concurrent completions (default "1 8") of GEN tokens (256,
# ignore_eos, seeded) at each temperature of TEMPS (default "0 0.7") are
# run REPS times (2) in turn:
#   none     no constraint
#   strings  json_schema: an object of 8 required string properties (most
#            steps inside a string body: the mask's fast path)
#   numbers  json_schema: an array of at least 10000 integers (every step
#            outside strings: a trie walk per step)
# Neither schema can complete within GEN tokens, so every step is masked.
# The table gives the mean aggregate decode tok/s (wall time) and the
# ratio to none, then the ratio of generated tokens per engine CPU second
# (user + system, prefill included), which follows the machine's load
# much less on a shared machine.
# At temperature 0 the sampler does the same argmax either way, so the
# ratio is the mask's cost alone; above 0 the sampler skips masked tokens,
# which makes a constrained step cheaper where sampling weighs (tiny).
#
# The synthetic vocabulary is 32768 learned merges + byte tokens, the rest
# [PADn] fillers the mask never allows; llm-maskbench then times the mask
# step by step on the real vocabularies in $LLM_SHARED/vocab (deepseek-llm,
# 102400 tokens, is the largest), skipped with a message when absent.
#
# Env: BUILD, REPO, LLM_SHARED (set by build.sh), SHAPES, CLIENTS, GEN,
# TEMPS, REPS, THREADS (2), TYPE (Q4_0).

set -euo pipefail

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
LLM_SHARED=${LLM_SHARED:-$REPO/../shared}
SHAPES=${SHAPES:-"tiny bench-moe"}
CLIENTS=${CLIENTS:-"1 8"}
GEN=${GEN:-256}
REPS=${REPS:-2}
TEMPS=${TEMPS:-"0 0.7"}
THREADS=${THREADS:-2}
TYPE=${TYPE:-Q4_0}
ENGINE=$BUILD/bin/llm-engine
CLIENT=$BUILD/bin/llm-client
MASKBENCH=$BUILD/bin/llm-maskbench

for f in "$ENGINE" "$CLIENT" "$MASKBENCH" "$BUILD/bin/llm-mkmodel"; do
    [ -x "$f" ] || { echo "bench/json: $f is missing (./build.sh first)" >&2; exit 1; }
done

D=$(mktemp -d "${TMPDIR:-/tmp}/llm-bench-json-XXXXXX")
EPID=
cleanup() {
    [ -n "$EPID" ] && kill "$EPID" 2>/dev/null && wait "$EPID" 2>/dev/null
    rm -rf "$D"
}
trap cleanup EXIT

STRINGS='{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"},"d":{"type":"string"},"e":{"type":"string"},"f":{"type":"string"},"g":{"type":"string"},"h":{"type":"string"}},"required":["a","b","c","d","e","f","g","h"],"additionalProperties":false}'
NUMBERS='{"type":"object","properties":{"v":{"type":"array","items":{"type":"integer"},"minItems":10000}},"required":["v"],"additionalProperties":false}'

req() {
    KIND=$1 TEMP=$2 GEN=$GEN STRINGS=$STRINGS NUMBERS=$NUMBERS python3 -c '
import json, os
kind, gen = os.environ["KIND"], int(os.environ["GEN"])
r = {"prompt": "Write the record as JSON:", "max_tokens": gen,
     "temperature": float(os.environ["TEMP"]), "seed": 7,
     "ignore_eos": True}
if kind != "none":
    r["response_format"] = {"type": "json_schema", "json_schema": {
        "name": kind, "schema": json.loads(os.environ[kind.upper()])}}
print(json.dumps(r))'
}

echo "# bench json: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $GEN tokens per request, ignore_eos, threads $THREADS, $TYPE, $REPS runs each in turn"
echo
printf '| shape | clients | temperature | none tok/s | strings tok/s | numbers tok/s | strings / none | numbers / none | per engine CPU s: strings / none | numbers / none |\n'
printf '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n'

for SHAPE in $SHAPES; do
    MODEL=$BUILD/models/json-$SHAPE-v151936-$(echo "$TYPE" | tr 'A-Z' 'a-z').gguf
    if [ ! -f "$MODEL" ]; then
        echo "# making $MODEL" >&2
        mkdir -p "$(dirname "$MODEL")"
        "$BUILD/bin/llm-mkmodel" --preset "$SHAPE" --vocab 151936 \
            --type "$TYPE" --seed 1 -q -o "$MODEL.tmp" >&2
        mv "$MODEL.tmp" "$MODEL"
    fi
    SOCK=$D/engine.sock
    "$ENGINE" --model "$MODEL" --socket "$SOCK" --threads "$THREADS" \
        --max-batch 16 2> "$D/engine.log" &
    EPID=$!
    for _ in $(seq 1200); do
        [ -S "$SOCK" ] && "$CLIENT" --socket "$SOCK" --info >/dev/null 2>&1 && break
        kill -0 "$EPID" 2>/dev/null || { cat "$D/engine.log" >&2; exit 1; }
        sleep 0.1
    done
    "$CLIENT" --socket "$SOCK" --bench 8 "$(req none 0.7)" >/dev/null  # warm up
    for N in $CLIENTS; do
    for T in $TEMPS; do
        declare -A SUM=([none]=0 [strings]=0 [numbers]=0)
        declare -A TOK=([none]=0 [strings]=0 [numbers]=0)
        declare -A CPU=([none]=0 [strings]=0 [numbers]=0)
        for _ in $(seq "$REPS"); do
            for K in none strings numbers; do
                C0=$(awk '{ print $14 + $15 }' "/proc/$EPID/stat")
                OUT=$("$CLIENT" --socket "$SOCK" --bench "$N" --timeout 3600 "$(req $K $T)")
                C1=$(awk '{ print $14 + $15 }' "/proc/$EPID/stat")
                read -r V NT <<<"$(echo "$OUT" | python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["errors"] == 0, r; print(r["agg_decode_tok_s"], r["completion_tokens"])')"
                SUM[$K]=$(python3 -c "print(${SUM[$K]} + $V)")
                TOK[$K]=$((TOK[$K] + NT))
                CPU[$K]=$((CPU[$K] + C1 - C0))
            done
        done
        python3 - "$SHAPE" "$N" "$T" "$REPS" "${SUM[none]}" "${SUM[strings]}" "${SUM[numbers]}" \
            "${TOK[none]}" "${TOK[strings]}" "${TOK[numbers]}" \
            "${CPU[none]}" "${CPU[strings]}" "${CPU[numbers]}" <<'PY'
import sys
shape, n, t, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
a, s, m = (float(x) / reps for x in sys.argv[5:8])
ta, ts, tm = (int(x) for x in sys.argv[8:11])
ca, cs, cm = (max(int(x), 1) for x in sys.argv[11:14])
pa, ps, pm = ta / ca, ts / cs, tm / cm
print("| %s | %d | %s | %.1f | %.1f | %.1f | %.1f%% | %.1f%% | %.1f%% | %.1f%% |" % (
    shape, n, t, a, s, m, 100 * s / a, 100 * m / a, 100 * ps / pa,
    100 * pm / pa))
PY
    done
    done
    kill "$EPID"
    wait "$EPID" 2>/dev/null || true
    EPID=
done

echo
echo "# the mask alone (llm-maskbench), a 495-byte document under an 8-property schema"
DOC=$D/doc.json
cat > "$DOC" <<'EOF'
{"name": "Ada Lovelace, Countess of Lovelace", "age": 36, "role": "admin", "tags": ["a", "c"], "email": "ada@example.org", "bio": "English mathematician and writer, chiefly known for her work on Charles Babbage's proposed mechanical general-purpose computer, the Analytical Engine. She was the first to recognise that the machine had applications beyond pure calculation.", "scores": [12.5, 99, -3.25e2, 0.001], "address": {"street": "12 St James's Square", "city": "London", "zip": "SW1Y 4JH"}}
EOF
SCHEMA='{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"role":{"enum":["admin","user","guest"]},"tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":3},"email":{"type":["string","null"]},"bio":{"type":"string"},"scores":{"type":"array","items":{"type":"number"}},"address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},"zip":{"type":"string"}},"required":["street","city","zip"],"additionalProperties":false}},"required":["name","age","role","tags","email","bio","scores","address"],"additionalProperties":false}'
for V in "$LLM_SHARED/vocab/deepseek-llm.gguf" "$LLM_SHARED/vocab/gpt-2.gguf" \
         "$BUILD/models/json-tiny-v151936-$(echo "$TYPE" | tr 'A-Z' 'a-z').gguf"; do
    if [ ! -f "$V" ]; then
        echo "# $V: absent, skipped"
        continue
    fi
    echo
    "$MASKBENCH" -m "$V" --schema "$SCHEMA" --repeat 5 < "$DOC" | sed 's/^/    /'
done

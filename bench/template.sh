#!/bin/sh
# Chat templates: compile (once per model load) and render (once per
# request) cost of the C Jinja renderer for the required model families,
# with the six-message tool conversation (Mistral, which wants 9-character
# tool call ids: the parallel-call one), via llm-template --bench.
#
#   ./build.sh bench template        (env BUILD, REPO; RUNS=500)
#
# Columns: template bytes, prompt bytes, mean microseconds per compile and
# per render, wall and process CPU time (on a shared machine the wall time
# mostly measures waiting for a CPU; the CPU column is the cost).
set -eu

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
RUNS=${RUNS:-500}
BIN="$BUILD/bin/llm-template"
D="$REPO/engine/tests/data/templates"

if [ ! -x "$BIN" ]; then
    echo "template bench: $BIN not built (./build.sh)" >&2
    exit 1
fi
echo "settings: RUNS=$RUNS conversation=convs/tools.json (6 messages, 1 tool; Mistral: convs/parallel.json)"
echo "host: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"
printf '%-40s %7s %7s %11s %11s %10s %10s\n' template tmpl_B prompt_B \
    compile_wall compile_cpu render_wall render_cpu
for t in MiniMax-M2 Qwen-Qwen3-0.6B deepseek-ai-DeepSeek-V3.1 \
         meta-llama-Llama-3.1-8B-Instruct mistralai-Mistral-Nemo-Instruct-2407 \
         openai-gpt-oss-120b; do
    conv=tools
    case $t in mistralai-*) conv=parallel ;; esac
    line=$("$BIN" --template "$D/$t.jinja" --messages "$D/convs/$conv.json" \
           --now 1768473000 --bench "$RUNS" 2>&1 >/dev/null | grep '^bench:' \
           || true)
    if [ -z "$line" ]; then
        printf '%-40s %s\n' "$t" "(raised: see llm-template)"
        continue
    fi
    echo "$line" | sed -E 's/.*template ([0-9]+) bytes, prompt ([0-9]+) bytes: compile ([0-9.]+) us wall \/ ([0-9.]+) us cpu, render ([0-9.]+) us wall \/ ([0-9.]+) us cpu/\1 \2 \3 \4 \5 \6/' |
    { read a b c d e f; printf '%-40s %7s %7s %9sus %9sus %8sus %8sus\n' "$t" "$a" "$b" "$c" "$d" "$e" "$f"; }
done

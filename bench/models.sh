#!/bin/sh
# Model tools: llm-mkmodel and llm-quantize on the bench-moe shape of
# ../shared/ANCHORS.md (qwen3moe 2048, 64 experts of 768, vocab 4096):
# wall and CPU time, peak RSS, and output throughput per step.  Peak RSS
# shows the streaming: it stays near one tensor whatever the file size.
#
#   ./build.sh bench models          (env BUILD, REPO)
#   LAYERS=16 THREADS=2 ./build.sh bench models   (the full 10 GB model)
#
# LAYERS defaults to 2 (1.3 GB at F16) so the run takes minutes, not an
# hour; per-layer cost is constant, so figures scale by LAYERS/16.
set -eu

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
LAYERS=${LAYERS:-2}
THREADS=${THREADS:-2}
OUT=${OUT:-$BUILD/bench-models}
MK="$BUILD/bin/llm-mkmodel"
QZ="$BUILD/bin/llm-quantize"

if [ ! -x "$MK" ] || [ ! -x "$QZ" ]; then
    echo "bench/models: build llm-mkmodel and llm-quantize first" >&2
    exit 1
fi
if [ ! -x /usr/bin/time ]; then
    echo "bench/models: needs /usr/bin/time (Debian package 'time')" >&2
    exit 1
fi
mkdir -p "$OUT"

# run LABEL OUTFILE CMD...: one table row
run() {
    label=$1; file=$2; shift 2
    /usr/bin/time -f "%e %U %S %M" -o "$OUT/time" "$@" >/dev/null
    set -- $(cat "$OUT/time")
    bytes=$(stat -c %s "$file")
    awk -v l="$label" -v w="$1" -v u="$2" -v s="$3" -v m="$4" -v b="$bytes" \
        'BEGIN { printf "| %-26s | %8.1f | %7.1f | %6.1f | %8.0f | %9.0f | %7.1f |\n",
                 l, w, u, s, m / 1024, b / 1e6, b / 1e6 / w }'
}

echo "# model tools benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
echo "# shape: bench-moe with $LAYERS of 16 layers; threads: $THREADS; out: $OUT"
echo
echo "| step                       | wall s   | user s  | sys s  | RSS MiB  | output MB | MB/s    |"
echo "| -------------------------- | -------- | ------- | ------ | -------- | --------- | ------- |"
run "mkmodel F16" "$OUT/f16.gguf" \
    "$MK" -q --preset bench-moe --layers "$LAYERS" --type F16 \
    --threads "$THREADS" -o "$OUT/f16.gguf"
run "mkmodel Q4_0 (direct)" "$OUT/q4_0d.gguf" \
    "$MK" -q --preset bench-moe --layers "$LAYERS" --type Q4_0 \
    --threads "$THREADS" -o "$OUT/q4_0d.gguf"
for q in Q4_0 Q8_0 Q4_K_M; do
    run "quantize F16 -> $q" "$OUT/$q.gguf" \
        "$QZ" -q --threads "$THREADS" "$OUT/f16.gguf" "$OUT/$q.gguf" "$q"
done
rm -f "$OUT/time"

#!/bin/sh
# Kernel throughput: llm_gemm per weight type, SIMD level, thread count and
# number of activation columns (1 = batch-1 decode, 8 = batched decode,
# 64 = prefill tile), on a weight matrix larger than the caches, beside a
# plain read of the same bytes (READ, the bandwidth bound) measured in the
# same run.  Prints a table; figures go to docs/BENCHMARKS.md "Kernels".
#
#   ./build.sh bench kernels      (env BUILD, REPO; MB=256 PASSES=15
#                                  TYPES=... SIMD=... COLS=1,8,64)
set -eu

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
TOOL="$BUILD/bin/llm-kbench"
MB=${MB:-256}
PASSES=${PASSES:-15}
TYPES=${TYPES:-Q4_0,Q8_0,Q4_K,Q5_K,Q6_K,F16}
COLS=${COLS:-1,8,64}

if [ ! -x "$TOOL" ]; then
    echo "bench/kernels: build llm-kbench first (./build.sh build)" >&2
    exit 1
fi

echo "# kernels benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'),"\
     "$(nproc) cpus, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# settings: matrix ${MB} MB, n=2048, best of ${PASSES} passes," \
     "types ${TYPES}, cols ${COLS}, threads 1,2"
if [ -n "${SIMD:-}" ]; then
    exec "$TOOL" -b -m "$MB" -p "$PASSES" -t "$TYPES" -c "$COLS" -j 1,2 \
        -s "$SIMD"
fi
exec "$TOOL" -b -m "$MB" -p "$PASSES" -t "$TYPES" -c "$COLS" -j 1,2

#!/bin/sh
# Long context: prefill of a 512-token chunk and decode with DEPTH tokens
# already in the KV cache, per KV cache type, on the bench model (Q4_0,
# 2 threads), against the same at depth 0 and against the memory bound
# (weights + the KV one decode step reads, at llm-kbench's READ).
#
#   ./build.sh bench ctx        (env BUILD, REPO; DEPTHS="0 4096 16384
#                                32768", TYPES="f16 q8_0 q4_0", P=512 N=32
#                                R=1, MODEL=the .gguf, MODELS=cache dir)
#
# llm-bench -d fills the cache once per run (not timed) in 512-token
# batches, so a 32k row costs minutes.  Columns: tokens/s and per
# CPU-second of each thread (less hurt by a busy machine), the share of
# depth 0's rate for the same type, KV bytes per token, the bytes one
# decode step reads at that depth (weights + KV), and the decode bound
# READ / those bytes.  Issue 38's targets: decode at 16k >= 70% of depth
# 0 with f16, prefill at 16k >= 60%.
set -eu

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
DEPTHS=${DEPTHS:-0 4096 16384 32768}
TYPES=${TYPES:-f16 q8_0 q4_0}
P=${P:-512}
N=${N:-32}
R=${R:-1}
M=${MODELS:-$BUILD/models}
BIN="$BUILD/bin"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

for t in llm-mkmodel llm-quantize llm-bench llm-kbench; do
    if [ ! -x "$BIN/$t" ]; then
        echo "bench/ctx: build $t first (./build.sh)" >&2
        exit 1
    fi
done
MODEL=${MODEL:-$M/bench-moe-q4_0.gguf}
if [ ! -f "$MODEL" ]; then
    mkdir -p "$M"
    echo "# making $MODEL (once)" >&2
    "$BIN/llm-mkmodel" --preset bench-moe --type F16 -q -o "$MODEL.f16.tmp"
    "$BIN/llm-quantize" -q "$MODEL.f16.tmp" "$MODEL.tmp" Q4_0
    rm -f "$MODEL.f16.tmp"
    mv "$MODEL.tmp" "$MODEL"
fi

OUT=$(mktemp)
BW=$(mktemp)
trap 'rm -f "$OUT" "$BW"' EXIT
echo "# context-depth benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# llm-bench -m $(basename "$MODEL") -t 2 -p $P -n $N -r $R -d DEPTH" \
     "--kv-type TYPE; llm-kbench -b; $(nproc) CPUs; load average" \
     "$(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN/llm-kbench" -t Q4_0 -j 2 -c 1 -m 1024 -p 5 -b > "$BW"
for k in $TYPES; do
    for d in $DEPTHS; do
        "$BIN/llm-bench" -m "$MODEL" -t 2 -p "$P" -n "$N" -r "$R" -d "$d" \
            --kv-type "$k" --json >> "$OUT"
    done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PY" - "$OUT" "$BW" <<'EOF'
import json, sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
read = None
for l in open(sys.argv[2]):
    c = [x.strip() for x in l.split('|')]
    if len(c) > 5 and c[1] == 'READ' and c[3] == '2':
        read = float(c[5]) * 1e9
print('READ, 2 threads: %.1f GB/s' % (read / 1e9))
print()
print('| KV | depth | pp%d t/s (per CPU-s) | vs depth 0 | tg t/s (per CPU-s) '
      '| vs depth 0 | KV B/token | MB per decode step | bound t/s | share '
      '| peak RSS GiB |' % rows[0]['n_prompt'])
print('| --- |' + ' ---: |' * 10)
base = {}
for r in rows:
    if r['depth'] == 0:
        base[r['kv_type']] = r
for r in rows:
    b = base.get(r['kv_type'], r)
    # llm-bench's cache: blocks of 16 for depth + max(p, n) + 1 positions
    pos = r['depth'] + max(r['n_prompt'], r['n_gen']) + 1
    per_tok = r['kv_bytes'] / ((pos + 15) // 16 * 16)
    step = r['active_bytes_per_token'] + per_tok * r['depth']
    bound = read / step
    print('| %s | %d | %.1f (%.1f) | %.0f%% | %.1f (%.1f) | %.0f%% | %.0f '
          '| %.0f | %.0f | %.0f%% (%.0f%%) | %.2f |'
          % (r['kv_type'].lower(), r['depth'], r['pp_tps'], r['pp_tps_cpu'],
             100 * r['pp_tps_cpu'] / b['pp_tps_cpu'], r['tg_tps'],
             r['tg_tps_cpu'], 100 * r['tg_tps_cpu'] / b['tg_tps_cpu'],
             per_tok, step / 1e6, bound, 100 * r['tg_tps'] / bound,
             100 * r['tg_tps_cpu'] / bound, r['peak_rss_bytes'] / 1024.0**3))
EOF

#!/bin/sh
# Engine core: prefill and decode of the bench model (ANCHORS.md: synthetic
# qwen3moe, 2048 embd, 16 layers, 32/4 heads of 64, 64 experts, 8 used, FFN
# 768, vocab 4096) at Q4_0, Q4_K_M and Q8_0, with llm-bench -t 2 -p 512
# -n 128 -r 3, beside llama.cpp's figures from ANCHORS.md.
#
#   ./build.sh bench core        (env BUILD, REPO; THREADS=2 P=512 N=128 R=3)
#
# The F16 model (10 GB) and its quantizations are made once and cached in
# $BUILD/models.  Columns: our tokens/s (wall), llama.cpp's, the ratio; the
# per-CPU-second rate (tokens per CPU-second of each thread: on a shared,
# oversubscribed machine the wall rate mostly measures waiting for a CPU);
# decode's share of the memory-bandwidth bound (weight bytes per decode
# step / 59.3 GB/s, the 2-thread read bandwidth in ANCHORS.md), and its
# share of this run's bound: READ (`llm-kbench -b`, a plain read of a
# 1 GB matrix with THREADS threads) taken right before and right after
# each file's llm-bench, their mean (this host's bandwidth moves by a
# factor of two within minutes: a READ from another minute is no bound);
# peak RSS against file + KV cache.
set -eu

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
THREADS=${THREADS:-2}
P=${P:-512}
N=${N:-128}
R=${R:-3}
M="$BUILD/models"
BIN="$BUILD/bin"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

for t in llm-mkmodel llm-quantize llm-bench llm-kbench; do
    if [ ! -x "$BIN/$t" ]; then
        echo "bench/core: build $t first (./build.sh)" >&2
        exit 1
    fi
done
mkdir -p "$M"

F16="$M/bench-moe-f16.gguf"
if [ ! -f "$F16" ]; then
    echo "# making $F16 (10 GB, once)" >&2
    "$BIN/llm-mkmodel" --preset bench-moe --type F16 -q -o "$F16.tmp"
    mv "$F16.tmp" "$F16"
fi
for q in Q4_0 Q4_K_M Q8_0; do
    f="$M/bench-moe-$(echo $q | tr 'A-Z' 'a-z').gguf"
    if [ ! -f "$f" ]; then
        echo "# quantizing to $q (once)" >&2
        "$BIN/llm-quantize" -q "$F16" "$f.tmp" "$q"
        mv "$f.tmp" "$f"
    fi
done

echo "# engine core benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# llm-bench -t $THREADS -p $P -n $N -r $R; $(nproc) CPUs;" \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"
OUT=$(mktemp)
READS=$(mktemp)
trap 'rm -f "$OUT" "$READS"' EXIT
# READ GB/s (wall) with $THREADS threads, now
read_bw() {
    "$BIN/llm-kbench" -t Q4_0 -j "$THREADS" -c 1 -m 1024 -p 5 -b \
        | awk -F'|' '$2 ~ /READ/ { gsub(/ /, "", $6); print $6; exit }'
}
for q in q4_0 q4_k_m q8_0; do
    R0=$(read_bw)
    "$BIN/llm-bench" -m "$M/bench-moe-$q.gguf" -t "$THREADS" -p "$P" \
        -n "$N" -r "$R" --json >> "$OUT"
    echo "$R0 $(read_bw)" >> "$READS"
done

"$PY" - "$OUT" "$READS" <<'EOF'
import json, sys

# llama.cpp on the same shape, 2 threads (ANCHORS.md): pp512, tg128, RSS GiB
CPP = {'Q4_0': (75.8, 52.4, 5.42), 'Q4_K_M': (89.1, 40.6, 5.19),
       'Q8_0': (71.9, 30.0, 5.18)}
BW = 59.3e9
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
reads = [[float(x) for x in l.split()] for l in open(sys.argv[2])
         if l.strip()]
print('| file | size GiB | pp%d t/s | llama.cpp | x | pp per CPU-s | '
      'tg%d t/s | llama.cpp | x | tg per CPU-s | bound t/s | share of '
      'bound (wall / CPU-s) | READ before / after GB/s | this run\'s bound '
      't/s | share of it | peak RSS GiB | file+KV GiB | llama.cpp RSS |'
      % (rows[0]['n_prompt'], rows[0]['n_gen']))
print('| --- |' + ' ---: |' * 18)
for r, rd in zip(rows, reads):
    q = r['quant']
    cpp = CPP.get(q, (float('nan'),) * 3)
    gib = 1024.0 ** 3
    bound = BW / r['active_bytes_per_token']
    fkv = (r['model_bytes'] + r['kv_bytes']) / gib
    here = (rd[0] + rd[1]) / 2 * 1e9 / r['active_bytes_per_token']
    print('| %s | %.2f | %.1f ± %.1f | %.1f | %.2f | %.1f | %.1f ± %.1f | '
          '%.1f | %.2f | %.1f | %.0f | %.0f%% / %.0f%% | %.1f / %.1f | %.0f '
          '| %.0f%% | %.2f | %.2f | %.2f |'
          % (q, r['model_bytes'] / gib, r['pp_tps'], r['pp_tps_std'],
             cpp[0], r['pp_tps'] / cpp[0], r['pp_tps_cpu'], r['tg_tps'],
             r['tg_tps_std'], cpp[1], r['tg_tps'] / cpp[1], r['tg_tps_cpu'],
             bound, 100 * r['tg_tps'] / bound, 100 * r['tg_tps_cpu'] / bound,
             rd[0], rd[1], here, 100 * r['tg_tps'] / here,
             r['peak_rss_bytes'] / gib, fkv, cpp[2]))
print()
print('weights read per decode step: ' + ', '.join(
    '%s %.0f MB' % (r['quant'], r['active_bytes_per_token'] / 1e6)
    for r in rows))
EOF

#!/bin/sh
# Tensor types: decode and prefill of the bench model (ANCHORS.md shape:
# synthetic qwen3moe, 2048 embd, 16 layers, 64 experts, 8 used) quantized
# by llm-quantize to each of TYPES, at 1 and 2 threads, against the memory
# bandwidth bound measured in the same run (llm-kbench -b READ).
#
#   ./build.sh bench types       (env BUILD, REPO; TYPES="Q4_0 Q4_K_M ..."
#                                 P=512 N=64 R=2 MB=1024)
#
# The F16 model (10 GB) and its quantizations are made once and cached in
# $BUILD/models (MODELS=DIR to use another cache).  A type llm-quantize
# does not write yet is listed as skipped, not an error.
#
# Columns: the file's size and the weight bytes one decode step reads
# (attention, router, the 8 routed experts of every layer, output); the
# bound is READ GB/s / those bytes, with READ the best plain read of a
# 1 GiB buffer at that thread count; share = decode tokens/s / bound
# (issue 32's target: 80%); prefill relative to Q4_K_M's in the same run.
# In brackets the same per CPU-second of each thread (llm-bench's *_cpu):
# on a shared machine the wall rate mostly measures waiting for a CPU.
set -eu

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
TYPES=${TYPES:-"Q4_0 Q4_K_M Q3_K_M Q2_K IQ4_XS MXFP4_MOE IQ3_XXS"}
P=${P:-512}
N=${N:-64}
R=${R:-2}
MB=${MB:-1024}
M=${MODELS:-$BUILD/models}
BIN="$BUILD/bin"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

for t in llm-mkmodel llm-quantize llm-bench llm-kbench; do
    if [ ! -x "$BIN/$t" ]; then
        echo "bench/types: build $t first (./build.sh)" >&2
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

OUT=$(mktemp)
BW=$(mktemp)
trap 'rm -f "$OUT" "$BW"' EXIT
RAN=""
SKIPPED=""
for q in $TYPES; do
    f="$M/bench-moe-$(echo "$q" | tr 'A-Z' 'a-z').gguf"
    if [ ! -f "$f" ]; then
        echo "# quantizing to $q (once)" >&2
        if ! "$BIN/llm-quantize" -q "$F16" "$f.tmp" "$q" 2>"$f.err"; then
            echo "# $q: llm-quantize refused: $(tail -1 "$f.err")" >&2
            SKIPPED="$SKIPPED $q"
            rm -f "$f.tmp" "$f.err"
            continue
        fi
        rm -f "$f.err"
        mv "$f.tmp" "$f"
    fi
    RAN="$RAN $q"
done

echo "# tensor types benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# llm-bench -p $P -n $N -r $R at -t 1 and -t 2; llm-kbench -b" \
     "-m $MB; $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN/llm-kbench" -t Q4_0 -j 1,2 -c 1 -m "$MB" -p 5 -b > "$BW"
for q in $RAN; do
    f="$M/bench-moe-$(echo "$q" | tr 'A-Z' 'a-z').gguf"
    for t in 1 2; do
        "$BIN/llm-bench" -m "$f" -t "$t" -p "$P" -n "$N" -r "$R" --json |
            sed "s/^{/{\"file_type\": \"$q\", /" >> "$OUT"
    done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PY" - "$OUT" "$BW" "$SKIPPED" <<'EOF'
import json, sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
read = {}
for l in open(sys.argv[2]):
    c = [x.strip() for x in l.split('|')]
    if len(c) > 5 and c[1] == 'READ':
        read[int(c[3])] = float(c[5]) * 1e9
by = {}
for r in rows:
    by.setdefault(r['file_type'], {})[r['threads']] = r
ref = by.get('Q4_K_M', {}).get(2)
gib = 1024.0 ** 3
print('READ: %s' % ', '.join('%d thread%s %.1f GB/s' % (t, 's' * (t > 1),
                                                        read[t] / 1e9)
                            for t in sorted(read)))
print()
print('| file type | size GiB | MB per decode step | tg t/s, 1 thread '
      '(per CPU-s) | bound | share | tg t/s, 2 threads (per CPU-s) | bound '
      '| share | pp%d t/s, 2 threads (per CPU-s) | vs Q4_K_M |'
      % rows[0]['n_prompt'])
print('| --- |' + ' ---: |' * 10)
for q, t in by.items():
    r1, r2 = t[1], t[2]
    step = r2['active_bytes_per_token']
    b1, b2 = read[1] / step, read[2] / step
    print('| %s | %.2f | %.0f | %.1f (%.1f) | %.0f | %.0f%% (%.0f%%) | '
          '%.1f (%.1f) | %.0f | %.0f%% (%.0f%%) | %.1f (%.1f) | %s |'
          % (q, r2['model_bytes'] / gib, step / 1e6,
             r1['tg_tps'], r1['tg_tps_cpu'], b1, 100 * r1['tg_tps'] / b1,
             100 * r1['tg_tps_cpu'] / b1,
             r2['tg_tps'], r2['tg_tps_cpu'], b2, 100 * r2['tg_tps'] / b2,
             100 * r2['tg_tps_cpu'] / b2,
             r2['pp_tps'], r2['pp_tps_cpu'],
             '%.0f%%' % (100 * r2['pp_tps'] / ref['pp_tps']) if ref else '-'))
if sys.argv[3].strip():
    print()
    print('skipped (llm-quantize does not write them yet):' + sys.argv[3])
EOF

#!/bin/sh
# Architectures: decode and prefill of bench-sized gpt-oss and glm4moe
# models (llm-mkmodel presets bench-gpt-oss: gpt-oss-20b's widths at 6
# layers, MXFP4 experts; bench-glm4moe: ANCHORS.md's bench shape laid out
# as GLM-4.5, Q4_K_M) beside the same shapes without what each
# architecture adds (the same presets written as qwen3moe: no sinks,
# biases or window; no dense layer or shared expert), and of deepseek2
# (bench-deepseek2: the bench shape as DeepSeek-V3 with MLA) and
# qwen35moe (bench-qwen35moe: Qwen3.5-35B-A3B's widths at 16 layers), both
# Q4_K_M without a twin, at 2 threads, against the memory bandwidth bound
# measured in the same run.
#
#   ./build.sh bench arch        (env BUILD, REPO; P=512 N=64 R=2 MB=1024,
#                                 MODELS=dir of the cached files,
#                                 ARCHS="gpt-oss glm4moe deepseek2
#                                 qwen35moe": the ones to run)
#
# Each F16 file (~10 GB) is made, quantized and removed (KEEP_F16=1 keeps
# it); the quantized files stay cached in $MODELS.  Columns as in
# bench/types.sh: the weight bytes one decode step reads, the bound READ
# GB/s / those bytes, share = decode tokens/s / bound (issue 34's target:
# 80%), and the cost of the architecture's extras against its plain twin.
set -eu

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
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
        echo "bench/arch: build $t first (./build.sh)" >&2
        exit 1
    fi
done
mkdir -p "$M"

# make NAME PRESET ARCH TYPE: $M/NAME.gguf from PRESET (as ARCH if set)
make_model() {
    f="$M/$1.gguf"
    [ -f "$f" ] && return 0
    echo "# making $f (once)" >&2
    "$BIN/llm-mkmodel" --preset "$2" ${3:+--arch "$3"} --type F16 -q \
        -o "$M/$1-f16.gguf.tmp"
    "$BIN/llm-quantize" -q "$M/$1-f16.gguf.tmp" "$f.tmp" "$4"
    mv "$f.tmp" "$f"
    if [ "${KEEP_F16:-0}" = 1 ]; then
        mv "$M/$1-f16.gguf.tmp" "$M/$1-f16.gguf"
    else
        rm -f "$M/$1-f16.gguf.tmp"
    fi
}

ARCHS=${ARCHS:-gpt-oss glm4moe deepseek2 qwen35moe}
NAMES=
for a in $ARCHS; do
    case $a in
    gpt-oss)
        make_model bench-gpt-oss-mxfp4_moe bench-gpt-oss "" MXFP4_MOE
        make_model bench-gpt-oss-plain-mxfp4_moe bench-gpt-oss qwen3moe \
            MXFP4_MOE
        NAMES="$NAMES bench-gpt-oss-mxfp4_moe bench-gpt-oss-plain-mxfp4_moe"
        ;;
    glm4moe)
        make_model bench-glm4moe-q4_k_m bench-glm4moe "" Q4_K_M
        make_model bench-glm4moe-plain-q4_k_m bench-glm4moe qwen3moe Q4_K_M
        NAMES="$NAMES bench-glm4moe-q4_k_m bench-glm4moe-plain-q4_k_m"
        ;;
    deepseek2|qwen35moe)
        make_model "bench-$a-q4_k_m" "bench-$a" "" Q4_K_M
        NAMES="$NAMES bench-$a-q4_k_m"
        ;;
    *)
        echo "bench/arch: unknown architecture $a" >&2
        exit 1
        ;;
    esac
done

OUT=$(mktemp)
BW=$(mktemp)
trap 'rm -f "$OUT" "$BW"' EXIT
echo "# architectures benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# llm-bench -t 2 -p $P -n $N -r $R; llm-kbench -b -m $MB;" \
     "$(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN/llm-kbench" -t Q4_0 -j 2 -c 1 -m "$MB" -p 5 -b > "$BW"
for n in $NAMES; do
    "$BIN/llm-bench" -m "$M/$n.gguf" -t 2 -p "$P" -n "$N" -r "$R" --json |
        sed "s/^{/{\"name\": \"$n\", /" >> "$OUT"
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PY" - "$OUT" "$BW" <<'EOF'
import json, sys

rows = {}
for l in open(sys.argv[1]):
    if l.strip():
        r = json.loads(l)
        rows[r['name']] = r
read = None
for l in open(sys.argv[2]):
    c = [x.strip() for x in l.split('|')]
    if len(c) > 5 and c[1] == 'READ' and c[3] == '2':
        read = float(c[5]) * 1e9
gib = 1024.0 ** 3
print('READ, 2 threads: %.1f GB/s' % (read / 1e9))
print()
print('| model | size GiB | MB per decode step | tg t/s (per CPU-s) | bound '
      '| share | pp%d t/s (per CPU-s) | tg vs plain | pp vs plain |'
      % next(iter(rows.values()))['n_prompt'])
print('| --- |' + ' ---: |' * 8)
for n, r in rows.items():
    plain = rows.get(n.replace('-mxfp4', '-plain-mxfp4')
                      .replace('-q4_k_m', '-plain-q4_k_m'))
    if plain is r:
        plain = None
    step = r['active_bytes_per_token']
    bound = read / step
    vs = ('%.0f%% | %.0f%%' % (100 * r['tg_tps'] / plain['tg_tps'],
                               100 * r['pp_tps'] / plain['pp_tps'])
          if plain is not None else '- | -')
    print('| %s | %.2f | %.0f | %.1f (%.1f) | %.0f | %.0f%% (%.0f%%) | '
          '%.1f (%.1f) | %s |'
          % (n, r['model_bytes'] / gib, step / 1e6, r['tg_tps'],
             r['tg_tps_cpu'], bound, 100 * r['tg_tps'] / bound,
             100 * r['tg_tps_cpu'] / bound, r['pp_tps'], r['pp_tps_cpu'],
             vs))
EOF

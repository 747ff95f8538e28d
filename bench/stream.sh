#!/bin/sh
# Streamed experts (issue 7, docs/STREAMING.md): the bench model (Q4_0,
# 2.8 GB, ANCHORS.md shape) decoding with an expert cache of a third of
# its experts, against the same file mapped with mmap inside a cgroup
# memory limit of the same total memory (the way llama.cpp runs a model
# bigger than RAM), and against the disk's bound.
#
#   ./build.sh bench stream   (env BUILD, REPO; THREADS=2 N=64 R=2
#                              NMMAP=8 FRAC=3 MODEL=path)
#
# Steps: fio sequential and random 1 MiB O_DIRECT reads at queue depth 32
# on the model file (the disk's own figures); drop the page cache; llm-bench
# -p 0 -n N -r R --expert-cache-mb (experts / FRAC); drop the page cache;
# llm-bench --no-prefault --no-regroup (the file mapped as it is, as
# llama.cpp maps it: a regrouped copy is anonymous memory, which the limit
# would OOM-kill) in a child of this shell's memory cgroup (v1 memory
# controller or v2) limited to the streamed run's peak RSS; the disk bound = random-read bandwidth /
# bytes missed per token; and the resident run (whole file in RAM, no
# I/O), which bounds what streaming can reach on the same CPUs.  Needs root (drop_caches, cgroups) and fio.
# Prints one table with the settings; the load average is in the header:
# on a shared machine compare ratios from one run, not absolute times.
set -eu

REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
THREADS=${THREADS:-2}
N=${N:-64}
R=${R:-2}
NMMAP=${NMMAP:-8}
FRAC=${FRAC:-3}
BIN="$BUILD/bin"
MODEL=${MODEL:-$BUILD/models/bench-moe-q4_0.gguf}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

for t in llm-mkmodel llm-bench; do
    if [ ! -x "$BIN/$t" ]; then
        echo "bench/stream: build $t first (./build.sh)" >&2
        exit 1
    fi
done
if ! command -v fio >/dev/null; then
    echo "bench/stream: needs fio (Debian package 'fio')" >&2
    exit 1
fi
if [ ! -w /proc/sys/vm/drop_caches ]; then
    echo "bench/stream: needs root (drop_caches, cgroup limits)" >&2
    exit 1
fi
if [ ! -f "$MODEL" ]; then
    echo "# making $MODEL (2.8 GB, once)" >&2
    mkdir -p "$(dirname "$MODEL")"
    "$BIN/llm-mkmodel" --preset bench-moe --type Q4_0 -q -o "$MODEL.tmp"
    mv "$MODEL.tmp" "$MODEL"
fi

OUT=$(mktemp -d "${TMPDIR:-/tmp}/bench-stream.XXXXXX")
CG=""
cleanup() {
    if [ -n "$CG" ] && [ -d "$CG" ]; then
        rmdir "$CG" 2>/dev/null || true
    fi
    rm -rf "$OUT"
}
trap cleanup EXIT

drop() {
    sync
    echo 3 > /proc/sys/vm/drop_caches
}

echo "# streamed experts benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# model $MODEL; llm-bench -t $THREADS -p 0 -n $N -r $R (streamed), -n $NMMAP -r 1 (mmap)"

# the disk: 1 MiB O_DIRECT reads at QD 32 over the model file (read-only)
for rw in read randread; do
    fio --name="$rw" --filename="$MODEL" --readonly --rw="$rw" --bs=1M \
        --iodepth=32 --direct=1 --ioengine=io_uring --runtime=10 \
        --time_based --output-format=json > "$OUT/fio-$rw.json" 2>/dev/null
done

# the experts' size, for the budget: a one-token run with a small cache
"$BIN/llm-bench" -m "$MODEL" -t "$THREADS" -p 0 -n 1 -r 1 \
    --expert-cache-mb 256 --json > "$OUT/probe.json"
MB=$("$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(int(r["xc_experts_bytes"] / int(sys.argv[2]) / 1048576))' "$OUT/probe.json" "$FRAC")

drop
"$BIN/llm-bench" -m "$MODEL" -t "$THREADS" -p 0 -n "$N" -r "$R" \
    --expert-cache-mb "$MB" --json > "$OUT/stream.json"
LIMIT=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak_rss_bytes"])' "$OUT/stream.json")

# the compute side: the whole file mapped and resident (it fits this
# machine), so decode pays no I/O
"$BIN/llm-bench" -m "$MODEL" -t "$THREADS" -p 0 -n "$N" -r "$R" \
    --json > "$OUT/resident.json"

# mmap under a memory limit of the streamed run's peak RSS
drop
# a child of our own cgroup: the limit nests inside whatever limits us
V1=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
V2=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)
if [ -d /sys/fs/cgroup/memory ] && [ -w "/sys/fs/cgroup/memory$V1" ]; then
    CG=/sys/fs/cgroup/memory${V1%/}/llm-bench-stream.$$
    mkdir "$CG"
    echo "$LIMIT" > "$CG/memory.limit_in_bytes"
    CGKIND=v1
elif [ -f /sys/fs/cgroup/cgroup.controllers ] \
     && mkdir "/sys/fs/cgroup${V2%/}/llm-bench-stream.$$" 2>/dev/null; then
    CG=/sys/fs/cgroup${V2%/}/llm-bench-stream.$$
    if ! echo "$LIMIT" > "$CG/memory.max"; then
        echo "bench/stream: no memory controller in $CG" >&2
        exit 1
    fi
    CGKIND=v2
else
    echo "bench/stream: no writable memory cgroup" >&2
    exit 1
fi
sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$CG" \
    "$BIN/llm-bench" -m "$MODEL" -t "$THREADS" -p 0 -n "$NMMAP" -r 1 \
    --no-prefault --no-regroup --json > "$OUT/mmap.json"

echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg); memory cgroup $CGKIND, limit $LIMIT bytes"
echo
"$PY" - "$OUT" "$MB" "$LIMIT" <<'EOF'
import json, sys

out, mb, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ld = lambda f: json.load(open('%s/%s' % (out, f)))
fio = {rw: ld('fio-%s.json' % rw)['jobs'][0]['read']
       for rw in ('read', 'randread')}
s, m, r = ld('stream.json'), ld('mmap.json'), ld('resident.json')
LLAMA = 0.50        # ANCHORS.md: llama.cpp, mmap in a cgroup of ~1/3 file
seq, rnd = fio['read']['bw_bytes'], fio['randread']['bw_bytes']
miss = s['xc_miss_bytes_per_token']
bound = rnd / miss if miss else float('inf')
resident = s['model_bytes'] - s['xc_experts_bytes']
budget = mb * 1048576 + resident + s['kv_bytes']
mib = 1048576.0

print('disk (fio, 1 MiB O_DIRECT, QD 32, io_uring): sequential %.0f MB/s, '
      'random %.0f MB/s (%.0f IOPS)' % (seq / 1e6, rnd / 1e6,
                                          fio['randread']['iops']))
print('experts %.0f MiB in %d slots of %.2f MiB; cache %d MiB (1/%s of '
      'the experts); resident weights %.0f MiB; KV %.1f MiB'
      % (s['xc_experts_bytes'] / mib, s['xc_slots'],
         s['xc_slot_bytes'] / mib, mb, sys.argv[2] and
         '%.1f' % (s['xc_experts_bytes'] / mib / mb), resident / mib,
         s['kv_bytes'] / mib))
print()
print('| run | memory | decode tok/s | per CPU-s | p50 ms | p95 ms | '
      'peak RSS MiB | hit rate | MB missed/token | read MB/s | stall '
      'ms/token | prefetch accuracy |')
print('| --- |' + ' ---: |' * 11)
hits, misses = s['xc_hits'], s['xc_misses']
print('| streamed (io_uring, O_DIRECT=%d) | cache %d MiB | %.2f | %.2f | '
      '%.1f | %.1f | %.0f | %.1f%% | %.1f | %.0f | %.1f | %.1f%% |'
      % (s['xc_direct'], mb, s['tg_tps'], s['tg_tps_cpu'], s['tg_p50_ms'],
         s['tg_p95_ms'], s['peak_rss_bytes'] / mib,
         100.0 * hits / max(1, hits + misses), miss / 1e6,
         s['xc_read_mbps'], s['xc_stall_ms_per_token'],
         100.0 * s['xc_prefetch_accuracy']))
print('| mmap in a memory cgroup | limit %.0f MiB | %.2f | %.2f | %.1f | '
      '%.1f | %.0f | | | | | |'
      % (limit / mib, m['tg_tps'], m['tg_tps_cpu'], m['tg_p50_ms'],
         m['tg_p95_ms'], m['peak_rss_bytes'] / mib))
print('| resident (whole file mapped, no limit) | file %.0f MiB | %.2f | %.2f | '
      '%.1f | %.1f | %.0f | | | | | |'
      % (r['model_bytes'] / mib, r['tg_tps'], r['tg_tps_cpu'],
         r['tg_p50_ms'], r['tg_p95_ms'], r['peak_rss_bytes'] / mib))
print()
print('streamed / mmap here: %.1fx; streamed / llama.cpp mmap (ANCHORS.md '
      '%.2f tok/s): %.1fx (target 3x)'
      % (s['tg_tps'] / m['tg_tps'] if m['tg_tps'] else float('inf'), LLAMA,
         s['tg_tps'] / LLAMA))
print('disk bound: %.0f MB/s random / %.1f MB missed per token = %.2f '
      'tok/s; streamed reaches %.0f%% of it (target 60%%)'
      % (rnd / 1e6, miss / 1e6, bound, 100.0 * s['tg_tps'] / bound))
print('streamed / resident: %.0f%% (the compute side of the bound: 1 / '
      '(1 / disk bound + 1 / resident) = %.2f tok/s, streamed reaches %.0f%% '
      'of it)' % (100.0 * s['tg_tps'] / r['tg_tps'],
                  1.0 / (1.0 / bound + 1.0 / r['tg_tps']),
                  100.0 * s['tg_tps'] * (1.0 / bound + 1.0 / r['tg_tps'])))
print('RSS: peak %.0f MiB vs budget %.0f MiB (cache + resident + KV) + '
      '10%% = %.0f MiB: %s'
      % (s['peak_rss_bytes'] / mib, budget / mib, budget * 1.1 / mib,
         'within' if s['peak_rss_bytes'] <= budget * 1.1 else 'OVER'))
EOF

#!/usr/bin/env bash
#
# Runs the fuzz targets built in BUILD_DIR/bin, one at a time, each for
# SECONDS on its corpus, and prints one line per target: executions,
# coverage (cov: edges, ft: features), corpus (inputs/bytes), crashes.
#
#   fuzz/run.sh BUILD_DIR [TARGET|all] [SECONDS]
#
# The reproducers in fuzz/crashes/TARGET-* run first and must pass.
# Each target starts from the committed seeds (fuzz/corpus/TARGET) and
# what earlier runs found (BUILD_DIR/corpus/TARGET, kept between runs);
# the committed corpus is never written.  A crash, leak, UBSan report or
# timeout leaves its input in BUILD_DIR/crashes/ and the log in
# BUILD_DIR/logs/TARGET.log; the exit status is then 1.

set -uo pipefail

FUZZ=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=${1:?usage: run.sh BUILD_DIR [TARGET|all] [SECONDS]}
WHICH=${2:-all}
SECS=${3:-60}
TARGETS=(engine_frame gguf tokenizer textout template grammar module_request
         module_events)

if [ "$WHICH" != all ]; then
    TARGETS=("${WHICH#fuzz_}")
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# defects reported and not fixed yet: see the targets and known-ubsan.supp
if [ -n "${FUZZ_SKIP_KNOWN:-}" ]; then
    UBSAN_OPTIONS="$UBSAN_OPTIONS:suppressions=$FUZZ/known-ubsan.supp"
fi

mkdir -p "$BUILD/logs" "$BUILD/crashes"
printf '%-15s %10s %8s %7s %7s %12s %s\n' target execs exec/s cov ft \
    corpus result
fails=0
for t in "${TARGETS[@]}"; do
    bin=$BUILD/bin/fuzz_$t
    [ -x "$bin" ] || { echo "no target $bin" >&2; fails=1; continue; }
    work=$BUILD/corpus/$t
    mkdir -p "$work"
    dict=()
    [ -f "$FUZZ/dict/$t.dict" ] && dict=(-dict="$FUZZ/dict/$t.dict")
    log=$BUILD/logs/$t.log
    # the reproducers of defects found (and fixed) first: each runs clean
    repro=("$FUZZ/crashes/$t"-*)
    if [ -e "${repro[0]}" ] && ! "$bin" "${repro[@]}" >"$log" 2>&1; then
        printf '%-15s a reproducer in fuzz/crashes fails again, see %s\n' \
            "$t" "$log"
        fails=1
        continue
    fi
    nice -n 10 "$bin" -max_total_time="$SECS" -timeout=30 \
        -rss_limit_mb=2560 -malloc_limit_mb=1024 -print_final_stats=1 \
        -artifact_prefix="$BUILD/crashes/$t-" "${dict[@]}" \
        "$work" "$FUZZ/corpus/$t" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    last=$(grep -E '^#[0-9]+' "$log" | tail -1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[A-Za-z]*\).*/\1/p' <<<"$last")
    if [ $rc -eq 0 ]; then
        result=ok
    else
        result="FAILED (exit $rc, see $log)"
        fails=1
    fi
    printf '%-15s %10s %8s %7s %7s %12s %s\n' "$t" "${execs:-?}" \
        "${speed:-?}" "${cov:-?}" "${ft:-?}" "$corp" "$result"
done
exit $fails

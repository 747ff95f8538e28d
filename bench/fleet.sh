#!/usr/bin/env bash
#
# ./build.sh bench fleet: the latency a provider hop and a Redis-backed
# limit check add (bench/fleet.pl says how).  Env: N (400).
set -euo pipefail
REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-$REPO/build}
export LLM_BUILD=$BUILD
command -v redis-server >/dev/null \
    || { echo "bench/fleet: redis-server is needed" >&2; exit 1; }
exec perl "$REPO/bench/fleet.pl"

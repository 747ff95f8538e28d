#!/bin/sh
# Client tests with the official openai npm package.
#   tests/client/run.sh              starts engine + nginx via the Perl
#                                    harness (tests/client/server.pl)
#   LLM_URL=http://host/v1 LLM_KEY=sk-... tests/client/run.sh
#                                    runs against a server you started
# Env: LLM_BUILD (build dir for the harness), LLM_LIMITED (a key allowed
# one request per minute, for the RateLimitError test), LLM_MODEL.
# Exits non-zero when a test fails.
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$HERE"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "tests/client: FAIL: node and npm are needed" >&2
    exit 1
fi
if [ ! -d node_modules/openai ] || [ package-lock.json -nt node_modules ]; then
    npm ci --no-audit --no-fund --prefer-offline >/dev/null
fi

if [ -n "${LLM_URL:-}" ]; then
    exec node --test client.test.mjs
fi

FIFO=$(mktemp -u)
mkfifo "$FIFO"
OUT=$(mktemp)
trap 'exec 3>&-; wait 2>/dev/null; rm -f "$FIFO" "$OUT"' EXIT
(cd "$REPO" && perl "$HERE/server.pl" <"$FIFO" >"$OUT") &
exec 3>"$FIFO"
i=0
until grep -q READY "$OUT" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 600 ]; then
        echo "tests/client: the server did not start" >&2
        exit 1
    fi
    sleep 0.1
done
LLM_URL=$(sed -n 's/^URL=//p' "$OUT")
LLM_KEY=$(sed -n 's/^KEY=//p' "$OUT")
LLM_LIMITED=$(sed -n 's/^LIMITED=//p' "$OUT")
export LLM_URL LLM_KEY LLM_LIMITED
node --test client.test.mjs

#!/bin/sh
# Client tests with the official openai npm package.
#   tests/client/run.sh              starts engine + nginx via the Perl
#                                    harness (tests/client/server.pl)
#   LLM_URL=http://host/v1 LLM_KEY=sk-... tests/client/run.sh
#                                    runs against a server you started
# Env: LLM_BUILD (build dir for the harness), LLM_LIMITED (a key allowed
# one request per minute, for the RateLimitError test), LLM_MODEL.
# Exits 1 when a test fails, 77 when the SDK tests were skipped (npm
# could not reach its registry; LLM_NPM_REQUIRED=1 makes that a failure).
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$HERE"

# The SDK tests need the npm packages (npm ci from package-lock.json, see
# t/lib/LlmNpm.pm): with the registry unreachable they are skipped with one
# line saying why, the curl checks still run, and the exit status is 77.
npm_rc=0
perl -I"$REPO/t/lib" -MLlmNpm -e 'exit LlmNpm::cli(@ARGV)' \
    tests/client/run.sh "$HERE" openai ajv || npm_rc=$?
[ "$npm_rc" -eq 1 ] && exit 1

sdk_checks() {
    if [ "$npm_rc" -eq 0 ]; then
        node --test client.test.mjs
    else
        echo "tests/client: SKIP: client.test.mjs (the openai SDK), see above"
    fi
}

# curl, as the README shows it: JSON and a stream
curl_checks() {
    command -v curl >/dev/null 2>&1 || { echo "tests/client: curl skipped (no curl)"; return 0; }
    local body out
    body='{"model":"'"${LLM_MODEL:-tiny}"'","max_tokens":4,"messages":[{"role":"user","content":"Hi"}]}'
    out=$(curl -sS "$LLM_URL/chat/completions" -H "Authorization: Bearer $LLM_KEY" \
          -H 'Content-Type: application/json' -d "$body")
    case $out in
    *'"object":"chat.completion"'*'"usage"'*) echo "ok - curl: chat completion" ;;
    *) echo "not ok - curl: chat completion: $out"; return 1 ;;
    esac
    out=$(curl -sSN "$LLM_URL/chat/completions" -H "Authorization: Bearer $LLM_KEY" \
          -H 'Content-Type: application/json' \
          -d "${body%\}},\"stream\":true}")
    case $out in
    *'data: {"id":"chatcmpl-'*'data: [DONE]'*) echo "ok - curl: stream ends with [DONE]" ;;
    *) echo "not ok - curl: stream: $out"; return 1 ;;
    esac
    out=$(curl -sS -o /dev/null -w '%{http_code}' "$LLM_URL/chat/completions" \
          -H 'Authorization: Bearer sk-llm-wrong' -d "$body")
    [ "$out" = 401 ] && echo "ok - curl: wrong key 401" \
        || { echo "not ok - curl: wrong key gave $out"; return 1; }
}

if [ -n "${LLM_URL:-}" ]; then
    sdk_checks
    curl_checks
    exit "$npm_rc"
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
sdk_checks
curl_checks
exit "$npm_rc"

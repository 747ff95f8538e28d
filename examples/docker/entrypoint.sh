#!/bin/sh
# Container entry point: starts llm-engine on a Unix socket, waits for it,
# then runs nginx in the foreground.  SIGTERM (docker stop) reaches both
# through tini: nginx quits gracefully, the engine drains.
set -eu

model=${LLM_MODEL:?set LLM_MODEL to a GGUF file}
threads=${LLM_THREADS:-0}
[ "$threads" = 0 ] && threads=$(nproc)
mkdir -p /run/llm
chmod 0750 /run/llm

if [ ! -f "$LLM_KEYS" ]; then
    echo "llm-entrypoint: no keys file at $LLM_KEYS; creating one key:" >&2
    llm-keygen --name default --key-file /run/llm/api-key >"$LLM_KEYS"
    echo "llm-entrypoint: the key is in /run/llm/api-key" >&2
fi

llm-engine --model "$model" --socket /run/llm/engine.sock \
    --threads "$threads" --alias default &
engine=$!

i=0
while [ ! -S /run/llm/engine.sock ]; do
    kill -0 "$engine" 2>/dev/null || { echo "llm-engine exited" >&2; exit 1; }
    i=$((i + 1)); [ $i -gt 600 ] && { echo "engine start timeout" >&2; exit 1; }
    sleep 0.5
done

# The socket is the trust boundary (mode 0660): nginx's workers (nobody,
# group nogroup) get in through the group.
chgrp nogroup /run/llm /run/llm/engine.sock

nginx -c /etc/llm/nginx.conf -g 'daemon off;' &
nginx=$!

trap 'kill -QUIT $nginx 2>/dev/null; kill -TERM $engine 2>/dev/null' TERM INT
wait $nginx || true
kill -TERM "$engine" 2>/dev/null || true
wait "$engine" || true

#!/bin/bash
# Container entry point (Dockerfile, docs/DEPLOY.md): starts llm-engine on
# a Unix socket, waits for it, then runs nginx in the foreground with the
# module.  `docker stop` (SIGTERM, forwarded by tini) quits nginx
# gracefully (running streams finish), then the engine drains.  When
# either process dies on its own, the other is stopped and the container
# exits non-zero, so a restart policy can act.
#
# Environment (the defaults are the image's paths; tests run this script
# outside a container by pointing them at a build tree):
#   LLM_MODEL        the GGUF file to serve (default: the bundled demo
#                    model, /usr/share/llm/demo-q8_0.gguf)
#   LLM_THREADS      engine threads, 0 = every CPU the container may use
#   LLM_ENGINE_ARGS  more llm-engine options (e.g. --expert-cache-mb 4096)
#   LLM_KEYS         the llm_keys file to use; when unset, the first of
#                    LLM_KEYS_SECRET (/run/secrets/llm-keys, a mounted
#                    secret) and /etc/llm/keys that exists
#   LLM_API_KEY      or one key (sk-...) allowed without limits
#   (none of these:  a key is made once, kept in LLM_STATE_DIR, and the
#                    log says where it is and how to read it)
#   LLM_STATE_DIR    /var/lib/llm: the made key (mount a volume to keep it)
#   LLM_RUN_DIR      /run/llm: the engine's socket, the nginx.conf in use
#   LLM_NGINX_CONF   /etc/llm/nginx.conf: the nginx.conf template; @RUN@,
#                    @KEYS@, @MODULE@ and @LISTEN@ are filled in
#   LLM_MODULE       /usr/lib/nginx/modules/ngx_http_llm_module.so
#   LLM_LISTEN       8080: nginx's listen parameter
set -euo pipefail

model=${LLM_MODEL:-/usr/share/llm/demo-q8_0.gguf}
threads=${LLM_THREADS:-0}
state=${LLM_STATE_DIR:-/var/lib/llm}
run=${LLM_RUN_DIR:-/run/llm}
template=${LLM_NGINX_CONF:-/etc/llm/nginx.conf}
module=${LLM_MODULE:-/usr/lib/nginx/modules/ngx_http_llm_module.so}
listen=${LLM_LISTEN:-8080}
secret=${LLM_KEYS_SECRET:-/run/secrets/llm-keys}

say() { printf 'llm-entrypoint: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[ "$threads" = 0 ] && threads=$(nproc)
if [ ! -f "$model" ]; then
    die "no model file at $model (LLM_MODEL): mount one, e.g. -v /srv/models:/models:ro -e LLM_MODEL=/models/model.gguf, or leave LLM_MODEL unset for the bundled demo model"
fi

# The socket is the trust boundary (mode 0660): nginx's workers (nobody,
# group nogroup) get in through the group of the directory and socket.
# (Not root, outside a container: the workers run as this user.)
root=0
[ "$(id -u)" = 0 ] && root=1
mkdir -p "$run"
chmod 0750 "$run"
[ $root = 0 ] || chgrp nogroup "$run"


# Keys: a file given, a secret mounted, one key in the environment, or a
# key made here (kept across restarts of the container).
keys=${LLM_KEYS:-}
if [ -n "$keys" ]; then
    [ -f "$keys" ] || die "LLM_KEYS=$keys: no such file"
    say "keys: $keys"
elif [ -f "$secret" ]; then
    keys=$secret
    say "keys: $keys (a mounted secret)"
elif [ -f /etc/llm/keys ]; then
    keys=/etc/llm/keys
    say "keys: $keys"
elif [ -n "${LLM_API_KEY:-}" ]; then
    keys=$run/keys
    (umask 077
     printf '%s env\n' "$(printf '%s' "$LLM_API_KEY" | llm-keygen --hash)" \
         >"$keys")
    say "keys: the one key in LLM_API_KEY, without limits"
else
    mkdir -p "$state"
    chmod 0700 "$state"
    if [ ! -s "$state/keys" ] || [ ! -s "$state/api-key" ]; then
        llm-keygen --name demo --rpm 600 --tpm 1000000 \
            --key-file "$state/api-key" >"$state/keys.tmp"
        chmod 0600 "$state/keys.tmp"
        mv "$state/keys.tmp" "$state/keys"
        say "no keys given (LLM_KEYS, $secret, /etc/llm/keys or LLM_API_KEY): made a demo key (600 requests, 1M tokens a minute)"
    fi
    keys=$state/keys
    say "the API key is in $state/api-key inside the container; read it with:"
    say "    docker exec CONTAINER cat $state/api-key"
fi


rm -f "$run/engine.sock"
# shellcheck disable=SC2086  # LLM_ENGINE_ARGS is a list of options
llm-engine --model "$model" --socket "$run/engine.sock" \
    --threads "$threads" --alias default ${LLM_ENGINE_ARGS:-} &
engine=$!

i=0
while [ ! -S "$run/engine.sock" ]; do
    if ! kill -0 "$engine" 2>/dev/null; then
        wait "$engine" && rc=0 || rc=$?
        die "llm-engine exited (status $rc) before it listened; see its log above"
    fi
    i=$((i + 1))
    [ $i -gt 3000 ] && { kill -TERM "$engine"; die "llm-engine did not listen within 300 s"; }
    sleep 0.1
done
[ $root = 0 ] || chgrp nogroup "$run/engine.sock"

sed -e "s|@RUN@|$run|g" -e "s|@KEYS@|$keys|g" -e "s|@MODULE@|$module|g" \
    -e "s|@LISTEN@|$listen|g" "$template" >"$run/nginx.conf"

nginx -e stderr -c "$run/nginx.conf" -g 'daemon off;' &
nginx=$!
say "serving $model on $listen (model name: default)"

stopping=0
# shellcheck disable=SC2317  # called by the trap
stop() {
    stopping=1
    trap - TERM INT          # a second signal ends everything at once
    kill -QUIT "$nginx" 2>/dev/null || true
}
trap stop TERM INT

# Until a signal, or until one of the two exits.
rc=0
wait -n "$engine" "$nginx" || rc=$?
if kill -0 "$nginx" 2>/dev/null; then
    [ $stopping = 1 ] || { say "llm-engine exited (status $rc): stopping nginx"; kill -QUIT "$nginx" 2>/dev/null || true; }
    while kill -0 "$nginx" 2>/dev/null; do wait "$nginx" || true; done
elif [ $stopping = 0 ]; then
    say "nginx exited (status $rc): stopping llm-engine"
fi
if kill -0 "$engine" 2>/dev/null; then
    kill -TERM "$engine" 2>/dev/null || true
    while kill -0 "$engine" 2>/dev/null; do wait "$engine" || true; done
fi
[ $stopping = 1 ] && exit 0
exit 1

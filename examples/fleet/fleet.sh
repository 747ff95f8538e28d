#!/usr/bin/env bash
#
# A fleet on one machine, each part in its own network namespace:
#
#   10.77.N.1   the host: an L4 balancer (nginx's stream module) on :8080
#   10.77.N.5   redis-server (the gateways' shared limits)
#   10.77.N.11  llm-engine 1, TCP :7070 with a shared secret
#   10.77.N.12  llm-engine 2
#   10.77.N.21  gateway 1 (nginx + ngx_http_llm_module) on :8080
#   10.77.N.22  gateway 2
#
# all on a bridge (llmbrN) with veth pairs.  Run as root (namespaces).
#
#   examples/fleet/fleet.sh up DIR      start everything, state in DIR
#   examples/fleet/fleet.sh down DIR    stop everything, remove the links
#
# Then: curl http://10.77.N.1:8080/v1/chat/completions -H "Authorization:
# Bearer $(cat DIR/client.key)" -d '{"model":"tiny","messages":[...]}'.
#
# Env: BUILD (the build directory, ./build), MODEL (a GGUF file; default
# the tiny test model, made with llm-mkmodel), FLEET_NET (N above, 77),
# QUOTA (the client key's token quota, 0: none), NGINX_PRELOAD (LD_PRELOAD
# for the gateways' nginx: a sanitizer build's runtime).

set -euo pipefail

cmd=${1:-}
DIR=${2:-}
[ -n "$cmd" ] && [ -n "$DIR" ] || { sed -n '3,22p' "$0"; exit 2; }

REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
N=${FLEET_NET:-77}
NET=10.77.$N
BR=llmbr$N
NS_PREFIX=llm$N
NGINX=${NGINX:-/usr/sbin/nginx}
STREAM_SO=/usr/lib/nginx/modules/ngx_stream_module.so

ns() { echo "$NS_PREFIX-$1"; }

down() {
    # nginx (the gateways, the balancer) ends gracefully on QUIT, the
    # engines and Redis on TERM
    for f in "$DIR"/*.pid; do
        [ -f "$f" ] || continue
        case $f in
        */gw?.pid|*/lb.pid) kill -QUIT "$(cat "$f")" 2>/dev/null || true ;;
        *) kill "$(cat "$f")" 2>/dev/null || true ;;
        esac
    done
    for i in $(seq 1 50); do
        alive=0
        for f in "$DIR"/*.pid; do
            [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && alive=1
        done
        [ $alive = 0 ] && break
        sleep 0.1
    done
    for f in "$DIR"/*.pid; do
        [ -f "$f" ] || continue
        kill -9 "$(cat "$f")" 2>/dev/null || true
        rm -f "$f"
    done
    for n in redis eng1 eng2 gw1 gw2; do
        ip netns del "$(ns $n)" 2>/dev/null || true
    done
    ip link del "$BR" 2>/dev/null || true
}

# A namespace NAME with address ADDR on the bridge.
add_ns() {
    local name=$1 addr=$2 n v
    n=$(ns "$name")
    v=v$N$name
    ip netns add "$n"
    ip link add "$v" type veth peer name eth0 netns "$n"
    ip link set "$v" master "$BR" up
    ip -n "$n" link set lo up
    ip -n "$n" addr add "$addr/24" dev eth0
    ip -n "$n" link set eth0 up
}

# Starts a background process in namespace NAME; its pid in DIR/ID.pid.
run_in() {
    local name=$1 id=$2
    shift 2
    ip netns exec "$(ns "$name")" "$@" >"$DIR/$id.log" 2>&1 &
    echo $! >"$DIR/$id.pid"
}

wait_port() {
    local name=$1 addr=$2 port=$3 i
    for i in $(seq 1 600); do
        if ip netns exec "$(ns "$name")" bash -c \
               "exec 3<>/dev/tcp/$addr/$port" 2>/dev/null; then
            return 0
        fi
        sleep 0.05
    done
    echo "fleet: $addr:$port did not come up (see $DIR)" >&2
    return 1
}

gateway_conf() {
    local id=$1 addr=$2
    cat <<EOF
load_module $BUILD/modules/ngx_http_llm_module.so;
daemon off;
master_process on;
worker_processes 2;
user root;
pid $DIR/$id.nginx.pid;
error_log $DIR/$id.error.log info;
events { worker_connections 1024; }
http {
    client_body_temp_path $DIR/$id.body;
    log_format llm '\$status key=\$llm_key_name model=\$llm_model '
                   'prompt=\$llm_prompt_tokens completion=\$llm_completion_tokens '
                   'id=\$llm_request_id';
    access_log $DIR/$id.access.log llm;
    llm_zone llm 1m;
    llm_keys $DIR/keys;
    llm_limit_store redis://$NET.5:6379/0 on_error=local;
    llm_engine_auth_file $DIR/engine.secret;
    upstream engines {
        llm_balance least_load;
        server $NET.11:7070 max_fails=1 fail_timeout=10s;
        server $NET.12:7070 max_fails=1 fail_timeout=10s;
        keepalive 8;
    }
    llm_model tiny upstream=engines;
    server {
        listen $addr:8080;
        location /v1/ { llm_api on; }
        location = /healthz { llm_health on; }
        location = /metrics { llm_metrics; }
    }
}
EOF
}

balancer_conf() {
    cat <<EOF
load_module $STREAM_SO;
daemon off;
master_process on;
worker_processes 1;
pid $DIR/lb.nginx.pid;
error_log $DIR/lb.error.log info;
events { worker_connections 1024; }
stream {
    upstream gateways {
        server $NET.21:8080 max_fails=1 fail_timeout=10s;
        server $NET.22:8080 max_fails=1 fail_timeout=10s;
    }
    server {
        listen $NET.1:8080;
        proxy_pass gateways;
        proxy_connect_timeout 1s;
        proxy_next_upstream on;
    }
}
EOF
}

up() {
    local model=${MODEL:-$BUILD/models/test-tiny.gguf} key
    [ "$(id -u)" = 0 ] || { echo "fleet: run as root (namespaces)" >&2; exit 1; }
    [ -f "$STREAM_SO" ] || { echo "fleet: $STREAM_SO is missing (Debian: libnginx-mod-stream)" >&2; exit 1; }
    command -v redis-server >/dev/null || { echo "fleet: redis-server is missing" >&2; exit 1; }
    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd)
    if [ ! -f "$model" ]; then
        "$BUILD/bin/llm-mkmodel" --preset tiny --type Q8_0 --seed 1 -q -o "$model"
    fi

    # the secrets: the engines', and a client key (quota QUOTA)
    head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$DIR/engine.secret"
    "$BUILD/bin/llm-keygen" --name client \
        ${QUOTA:+--quota "$QUOTA"} --key-file "$DIR/client.key" >"$DIR/keys"

    down
    ip link add "$BR" type bridge
    ip addr add "$NET.1/24" dev "$BR"
    ip link set "$BR" up
    add_ns redis "$NET.5"
    add_ns eng1 "$NET.11"
    add_ns eng2 "$NET.12"
    add_ns gw1 "$NET.21"
    add_ns gw2 "$NET.22"

    run_in redis redis redis-server --bind "$NET.5" --port 6379 \
        --protected-mode no --save '' --appendonly no
    for i in 1 2; do
        run_in "eng$i" "eng$i" "$BUILD/bin/llm-engine" --model "$model" \
            --listen "$NET.1$i:7070" --auth-file "$DIR/engine.secret" \
            --threads 1
    done
    wait_port redis "$NET.5" 6379
    wait_port eng1 "$NET.11" 7070
    wait_port eng2 "$NET.12" 7070

    for i in 1 2; do
        gateway_conf "gw$i" "$NET.2$i" >"$DIR/gw$i.conf"
        # NGINX_PRELOAD: a sanitizer runtime the module was built with
        run_in "gw$i" "gw$i" env ${NGINX_PRELOAD:+"LD_PRELOAD=$NGINX_PRELOAD"} \
            "$NGINX" -p "$DIR" -c "$DIR/gw$i.conf" -e "$DIR/gw$i.error.log"
    done
    wait_port gw1 "$NET.21" 8080
    wait_port gw2 "$NET.22" 8080

    balancer_conf >"$DIR/lb.conf"
    "$NGINX" -p "$DIR" -c "$DIR/lb.conf" -e "$DIR/lb.error.log" \
        >"$DIR/lb.log" 2>&1 &
    echo $! >"$DIR/lb.pid"
    for key in $(seq 1 100); do
        bash -c "exec 3<>/dev/tcp/$NET.1/8080" 2>/dev/null && break
        sleep 0.05
    done
    echo "fleet up: http://$NET.1:8080/v1/ (key in $DIR/client.key)"
}

case $cmd in
up) up ;;
down) down; echo "fleet down" ;;
*) echo "fleet: up or down" >&2; exit 2 ;;
esac

# Pieces the benchmarks share; sourced (bash or sh).

# A free TCP port on 127.0.0.1.
bench_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# bench_gateway_conf DIR MOD SOCK PORT [HTTP_EXTRA] [LOCATION_EXTRA]:
# DIR/nginx.conf for one nginx worker with the module MOD that passes
# /v1/ on 127.0.0.1:PORT to the engine on the Unix socket SOCK (upstream
# keepalive 16), HTTP_EXTRA and LOCATION_EXTRA added to the http block and
# the location; as root, the worker runs as root (the engine's socket).
bench_gateway_conf() {
    _user=
    [ "$(id -u)" -eq 0 ] && _user="user root;"
    cat > "$1/nginx.conf" <<EOF2
load_module $2;
$_user
worker_processes 1;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $1/body;
    ${5:-}
    upstream engine { server unix:$3; keepalive 16; }
    server {
        listen 127.0.0.1:$4;
        location /v1/ { llm_pass engine; llm_api on; ${6:-} }
    }
}
EOF2
}

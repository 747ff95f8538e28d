# Multi-stage image: nginx with ngx_http_llm_module and llm-engine, serving
# the bundled demo model unless told otherwise.
#
#   docker build -t llm-gateway .
#   docker run -d --name llm -p 8080:8080 llm-gateway
#   docker exec llm cat /var/lib/llm/api-key       # the key it made
#
# Your model and keys: -v /srv/models:/models:ro -e LLM_MODEL=/models/m.gguf
# and a keys file as the secret /run/secrets/llm-keys (or -e LLM_KEYS=...).
# docs/DEPLOY.md explains the settings; examples/docker/entrypoint.sh lists
# them.
#
# The build stage runs the same ./build.sh as a developer machine (its
# packages are build.sh's PKGS_BUILD) and keeps every tool:
# `docker build --target build` for llm-quantize, llm-bench and the rest.
# The runtime stage holds the distro nginx, the module, llm-engine,
# llm-keygen and llm-client (stripped), their shared libraries and the
# demo model.

FROM debian:bookworm-slim AS build
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
        ca-certificates gcc make pkg-config nginx nginx-dev \
        libprotobuf-c-dev protobuf-c-compiler libjansson-dev libpcre2-dev \
        liburing-dev libssl-dev zlib1g-dev libhiredis-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# what ./build.sh compiles (the other files do not invalidate this layer)
COPY build.sh config ./
COPY proto proto
COPY engine engine
COPY ngx_http_llm_module ngx_http_llm_module
RUN ./build.sh \
    && mkdir -p /out/bin /out/modules \
    && cp build/bin/llm-engine build/bin/llm-keygen build/bin/llm-client \
        /out/bin/ \
    && cp build/modules/ngx_http_llm_module.so /out/modules/ \
    && strip --strip-unneeded /out/bin/* /out/modules/*

FROM debian:bookworm-slim
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
        nginx libprotobuf-c1 libjansson4 libpcre2-8-0 liburing2 libssl3 \
        libhiredis0.14 \
        tini \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build /out/modules/ngx_http_llm_module.so /usr/lib/nginx/modules/
COPY models/demo/demo-q8_0.gguf models/demo/MODEL_CARD.md /usr/share/llm/
COPY examples/docker/nginx.conf /etc/llm/nginx.conf
COPY examples/docker/entrypoint.sh /usr/local/bin/llm-entrypoint
ENV LLM_MODEL=/usr/share/llm/demo-q8_0.gguf LLM_THREADS=0
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/llm-entrypoint"]

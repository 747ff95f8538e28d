# Multi-stage image: nginx with ngx_http_llm_module, llm-engine and tools.
#
#   docker build -t llm-gateway .
#   docker run -p 8080:8080 -v /models:/models \
#       -e LLM_MODEL=/models/model.gguf llm-gateway
#
# The build stage runs the same ./build.sh as a developer machine; the
# runtime stage holds only the distro nginx, the module, the engine, the
# tools and their shared libraries.  docs/DEPLOY.md explains the settings.

FROM debian:bookworm-slim AS build
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
        ca-certificates gcc make pkg-config nginx nginx-dev \
        libprotobuf-c-dev protobuf-c-compiler libjansson-dev libpcre2-dev \
        liburing-dev libssl-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN ./build.sh

FROM debian:bookworm-slim
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
        nginx libprotobuf-c1 libjansson4 libpcre2-8-0 liburing2 libssl3 \
        tini \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/bin/ /usr/local/bin/
COPY --from=build /src/build/modules/ngx_http_llm_module.so \
        /usr/lib/nginx/modules/
COPY examples/docker/nginx.conf /etc/llm/nginx.conf
COPY examples/docker/entrypoint.sh /usr/local/bin/llm-entrypoint
ENV LLM_MODEL=/models/model.gguf LLM_THREADS=0 LLM_KEYS=/etc/llm/keys
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/llm-entrypoint"]

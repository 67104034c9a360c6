# mcp-progress-bridge container image. docs/deployment.md walks through running it.
#
# Build: docker build -t mcp-progress-bridge .        (or: podman build --format docker …)
# Run:   docker run -p 8080:8080 -e BRIDGE_MCP_TOKEN="$(openssl rand -hex 32)" \
#          --read-only --stop-timeout 970 mcp-progress-bridge
#        (on SIGTERM it drains: jobs.drain_secs, 900 s, plus up to 67 s: docs/deployment.md)
#        (on a non-loopback address the bridge refuses to start without an MCP token)
#
# The Rust stage caches the cargo registry and the target directory between builds
# (`RUN --mount=type=cache`, BuildKit and buildah): a second build compiles only what changed.
# `--build-arg PROFILE=dev` builds a debug binary, faster to compile (CI's kube play test).
#
# CI builds this file twice (.ci/image): with this Rust stage on a Rust image made from the
# host's toolchain (no registry is reachable there), and with the stage replaced by a directory
# holding a binary built on the host (`--build-context build=DIR`, DIR/out/mcp-progress-bridge).

FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# The workspace's member crates: the demo tool server is part of the binary, and cargo reads
# every member's manifest (and finds its targets) before it builds any.
COPY crates ./crates
COPY web ./web
COPY packages/client/dist ./packages/client/dist
# `release`, or `dev` for a debug build (its output directory is target/debug).
ARG PROFILE=release
# The registry and target/ are caches, not layers: the binary is copied out to /out, stripped
# (symbols are a quarter of a release binary, 26 MB to 19 MB, and no use in production).
RUN --mount=type=cache,id=mcp-progress-bridge-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=mcp-progress-bridge-target,target=/src/target \
    cargo build --profile "$PROFILE" --locked --bin mcp-progress-bridge \
    && out=$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE") \
    && mkdir /out && strip -o /out/mcp-progress-bridge "target/$out/mcp-progress-bridge"

FROM debian:bookworm-slim
# tini as PID 1: it forwards SIGTERM to the bridge (which then drains its jobs) and reaps
# orphans. bash runs the HEALTHCHECK below. The user has a fixed numeric ID so Kubernetes'
# runAsNonRoot can verify it without a runAsUser of its own.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates tini \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 bridge \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /app --shell /usr/sbin/nologin bridge
WORKDIR /app
COPY --from=build /out/mcp-progress-bridge /usr/local/bin/mcp-progress-bridge
COPY config ./config
# Nothing is written to disk: the image runs with a read-only root filesystem and no tmpfs.
USER 10001:10001
# Inside a container the bridge listens on all interfaces. BRIDGE_PUBLIC_URL is the address
# clients use (it goes into job handles' events_url, and its host is accepted on /mcp); set it
# to the published or proxied address. Agents call /mcp with `Authorization: Bearer
# $BRIDGE_MCP_TOKEN`; several replicas also need one auth.job_secret (docs/deployment.md).
ENV BRIDGE_LISTEN=0.0.0.0:8080 \
    BRIDGE_PUBLIC_URL=http://localhost:8080
EXPOSE 8080
# GET /healthz on the port of BRIDGE_LISTEN, with bash's /dev/tcp: the image needs no curl.
# Healthy means the HTTP server answers 200; readiness (store, upstreams) is /readyz.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["bash", "-c", "port=${BRIDGE_LISTEN##*:}; exec 3<>/dev/tcp/127.0.0.1/${port:-8080} || exit 1; printf 'GET /healthz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3; read -r -t 2 proto code rest <&3; [ \"$code\" = 200 ]"]
ENTRYPOINT ["/usr/bin/tini", "--", "mcp-progress-bridge"]
CMD ["--config", "/app/config/bridge.toml"]

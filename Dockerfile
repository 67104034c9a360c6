# Build: docker build -t mcp-progress-bridge .
# Run:   docker run -p 8080:8080 -e BRIDGE_MCP_TOKEN="$(openssl rand -hex 32)" mcp-progress-bridge
#        (on a non-loopback address the bridge refuses to start without an MCP token)
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY web ./web
COPY tests ./tests
COPY benches ./benches
RUN cargo build --release --locked --bin mcp-progress-bridge

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home /app bridge
WORKDIR /app
COPY --from=build /src/target/release/mcp-progress-bridge /usr/local/bin/mcp-progress-bridge
COPY config ./config
USER bridge
# Inside a container the bridge must listen on all interfaces; the public URL is what
# browsers use to reach it. Host checks on /mcp: set server.allowed_hosts in the config.
# Agents call /mcp with `Authorization: Bearer $BRIDGE_MCP_TOKEN`; several replicas also need
# one auth.job_secret (see README, "Security").
ENV BRIDGE_LISTEN=0.0.0.0:8080 \
    BRIDGE_PUBLIC_URL=http://localhost:8080
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "mcp-progress-bridge"]
CMD ["--config", "/app/config/bridge.toml"]

# Build: docker build -t mcp-progress-bridge .
# Run:   docker run -p 8080:8080 mcp-progress-bridge
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
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
ENV BRIDGE_LISTEN=0.0.0.0:8080 \
    BRIDGE_PUBLIC_URL=http://localhost:8080
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "mcp-progress-bridge"]
CMD ["--config", "/app/config/bridge.toml"]

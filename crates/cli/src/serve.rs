//! `folio serve`: runs the OpenAI-compatible server on an engine the caller built from
//! the CLI flags.

use anyhow::Context;
use std::net::{IpAddr, SocketAddr};

/// The KV-event publisher's settings and the engine's event stream.
pub type KvEvents = (
    folio_server::kv_events::KvEventsConfig,
    folio_engine::KvEventReceiver,
);

/// Serves `handle` on `host:port` until SIGINT/SIGTERM. Builds its own multi-threaded
/// tokio runtime (the engine runs on its own thread; the runtime does HTTP and, with
/// `events`, publishes KV-cache events).
pub fn run(
    handle: folio_engine::EngineHandle,
    host: &str,
    port: u16,
    opts: folio_server::ServerOptions,
    events: Option<KvEvents>,
) -> anyhow::Result<()> {
    let addr = address(host, port)?;
    runtime()?.block_on(async move {
        if let Some((cfg, rx)) = events {
            let at = folio_server::kv_events::start(cfg, rx).await?;
            println!("folio: KV-cache events on {at}");
        }
        folio_server::serve(handle, opts, addr).await?;
        Ok(())
    })
}

/// Serves the models of `models`, loaded on demand, until SIGINT/SIGTERM.
pub fn run_models(
    models: std::sync::Arc<folio_server::models::Registry>,
    host: &str,
    port: u16,
    opts: folio_server::ServerOptions,
) -> anyhow::Result<()> {
    let addr = address(host, port)?;
    runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        folio_server::serve_models(models, opts, listener, folio_server::shutdown_signal()).await?;
        Ok(())
    })
}

fn address(host: &str, port: u16) -> anyhow::Result<SocketAddr> {
    let ip: IpAddr = match host {
        "localhost" => IpAddr::from([127, 0, 0, 1]),
        h => h
            .parse()
            .with_context(|| format!("--host: expected an IP address, got {h:?}"))?,
    };
    Ok(SocketAddr::new(ip, port))
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("folio-http")
        .build()
        .context("cannot start the tokio runtime")
}

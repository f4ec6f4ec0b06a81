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
    let ip: IpAddr = match host {
        "localhost" => IpAddr::from([127, 0, 0, 1]),
        h => h
            .parse()
            .with_context(|| format!("--host: expected an IP address, got {h:?}"))?,
    };
    let addr = SocketAddr::new(ip, port);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("folio-http")
        .build()
        .context("cannot start the tokio runtime")?;
    rt.block_on(async move {
        if let Some((cfg, rx)) = events {
            let at = folio_server::kv_events::start(cfg, rx).await?;
            println!("folio: KV-cache events on {at}");
        }
        folio_server::serve(handle, opts, addr).await?;
        Ok(())
    })
}

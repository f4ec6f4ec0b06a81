//! `folio serve`'s KV-event flags (vLLM's `--kv-events-config` fields as flags).

use anyhow::Result;
use folio_server::kv_events::{attach_mode, KvEventsConfig};

/// Publishing prefix-cache events for a KV-aware router.
#[derive(clap::Args, Debug, Clone)]
pub struct KvEventArgs {
    /// Publish KV-cache events (vLLM's BlockStored / BlockRemoved / AllBlocksCleared as
    /// msgpack over a ZMQ PUB socket) here, for `vllm-router --policy kv_aware
    /// --kv-event-source URL=tcp://HOST:PORT`. As in vLLM, a wildcard host binds
    /// (`tcp://*:5557`, an error at start if the port is taken); any other host connects
    /// (to a subscriber that binds), in the background and again whenever it is gone:
    /// events nobody receives are dropped and counted (folio_kv_events_dropped_total).
    /// Off by default: no events are recorded.
    #[arg(long)]
    pub kv_events_endpoint: Option<String>,
    /// Topic frame of every event message (vLLM's `topic`).
    #[arg(long, default_value = "")]
    pub kv_events_topic: String,
}

impl KvEventArgs {
    /// The publisher's settings, the endpoint checked before the model loads.
    pub fn config(&self) -> Result<Option<KvEventsConfig>> {
        let Some(endpoint) = &self.kv_events_endpoint else {
            return Ok(None);
        };
        attach_mode(endpoint)?;
        Ok(Some(KvEventsConfig {
            endpoint: endpoint.clone(),
            topic: self.kv_events_topic.clone(),
        }))
    }
}

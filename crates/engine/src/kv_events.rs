//! KV-cache events out of the engine, for a router that routes by cached prefix
//! (`vllm-router --policy kv_aware`, llm-d, Dynamo).
//!
//! The KV manager records prefix-cache changes ([`folio_core::kv::KvEvent`]) when the
//! engine enables it; once per loop iteration the engine drains them into one
//! [`KvEventBatch`] and sends it down a bounded channel. The receiving end (the server's
//! ZMQ publisher) encodes and sends on its own task, so a slow subscriber never delays a
//! step; when the channel is full (the publisher is behind) the batch is dropped and its
//! events counted in [`KvEventSender::dropped`] (`folio_kv_events_dropped_total`), so
//! telemetry never holds memory without bound or stalls serving. With no channel
//! configured, recording stays off and nothing here runs.
//!
//! A namespace (a request's adapter set, see `folio_core::kv::chain_salt`) becomes vLLM's
//! `lora_name` / `lora_id`: a router keys blocks under different adapters apart, as the
//! prefix cache does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use folio_core::kv::{KvEvent, KvManager};
use folio_model::LoraSet;
use tokio::sync::mpsc::{channel, error::TrySendError, Receiver, Sender};

/// Batches that may wait for the publisher; more are dropped (and counted).
pub const KV_EVENT_QUEUE: usize = 1024;

/// One event in vLLM's terms (`vllm/distributed/kv_events.py`); the wire encoding is the
/// publisher's.
#[derive(Debug, Clone, PartialEq)]
pub enum KvCacheEvent {
    /// Full blocks of one chain entered the prefix cache. `token_ids` holds
    /// `block_hashes.len() * block_size` ids; `parent_block_hash` is the hash of the block
    /// before the first one (`None`: the chain starts here).
    BlockStored {
        block_hashes: Vec<u64>,
        parent_block_hash: Option<u64>,
        token_ids: Vec<u32>,
        block_size: usize,
        /// Small per-process id of the adapter set (vLLM's `lora_int_id`).
        lora_id: Option<u32>,
        /// The adapter's served name; several adapters are `a+b`, scales other than 1 are
        /// written `a*0.5`.
        lora_name: Option<String>,
    },
    /// Cached blocks evicted.
    BlockRemoved { block_hashes: Vec<u64> },
    /// The whole prefix cache was emptied.
    AllBlocksCleared,
}

/// The events of one engine iteration, stamped with the wall clock (seconds since the Unix
/// epoch, vLLM's `ts`).
#[derive(Debug, Clone, PartialEq)]
pub struct KvEventBatch {
    pub ts: f64,
    pub events: Vec<KvCacheEvent>,
}

/// Where the engine sends its batches (`EngineConfig::kv_events`).
#[derive(Debug, Clone)]
pub struct KvEventSender {
    tx: Sender<KvEventBatch>,
    /// Events dropped so far, by the engine (queue full) or the publisher (no subscriber).
    pub dropped: Arc<AtomicU64>,
}

/// The publisher's end of [`kv_event_channel`].
#[derive(Debug)]
pub struct KvEventReceiver {
    pub rx: Receiver<KvEventBatch>,
    /// The same counter as the sender's: the publisher adds the events it cannot deliver.
    pub dropped: Arc<AtomicU64>,
}

/// Why a batch was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the KV-event publisher is gone")]
pub struct PublisherGone;

impl KvEventSender {
    /// Queues `batch`, or drops and counts its events when [`KV_EVENT_QUEUE`] batches
    /// already wait. Fails only when the publisher is gone for good.
    pub fn send(&self, batch: KvEventBatch) -> Result<(), PublisherGone> {
        match self.tx.try_send(batch) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(b)) => {
                self.dropped.fetch_add(b.events.len() as u64, Relaxed);
                Ok(())
            }
            Err(TrySendError::Closed(_)) => Err(PublisherGone),
        }
    }
}

/// A channel for [`EngineConfig::kv_events`](crate::EngineConfig::kv_events) and its
/// receiving end for the publisher, holding at most [`KV_EVENT_QUEUE`] batches.
pub fn kv_event_channel() -> (KvEventSender, KvEventReceiver) {
    let (tx, rx) = channel(KV_EVENT_QUEUE);
    let dropped = Arc::new(AtomicU64::new(0));
    (
        KvEventSender {
            tx,
            dropped: dropped.clone(),
        },
        KvEventReceiver { rx, dropped },
    )
}

/// The engine's side: namespace names, and the drain after each iteration.
pub(crate) struct KvEventTap {
    tx: KvEventSender,
    block_size: usize,
    /// Adapter set of each namespace seen: (id, name).
    names: HashMap<u64, (u32, String)>,
}

impl KvEventTap {
    pub(crate) fn new(tx: KvEventSender, block_size: usize) -> Self {
        Self {
            tx,
            block_size,
            names: HashMap::new(),
        }
    }

    /// Remembers the adapters behind namespace `ns` (0, the base model, has none). The map
    /// grows with distinct adapter sets only, a handful in practice.
    pub(crate) fn note(&mut self, ns: u64, lora: Option<&LoraSet>) {
        let Some(set) = lora.filter(|_| ns != 0) else {
            return;
        };
        let next = self.names.len() as u32 + 1;
        self.names.entry(ns).or_insert_with(|| {
            let name = set
                .items()
                .iter()
                .map(|(a, s)| {
                    if *s == 1.0 {
                        a.name.clone()
                    } else {
                        format!("{}*{s}", a.name)
                    }
                })
                .collect::<Vec<_>>()
                .join("+");
            (next, name)
        });
    }

    /// Sends what `kv` recorded since the last call, if anything. A closed channel (the
    /// publisher stopped) turns recording off for good.
    pub(crate) fn flush(&mut self, kv: &mut KvManager) {
        let events = kv.take_events();
        if events.is_empty() {
            return;
        }
        let events = events.into_iter().map(|e| self.convert(e)).collect();
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if self.tx.send(KvEventBatch { ts, events }).is_err() {
            tracing::warn!("kv events: the publisher is gone; no more events are recorded");
            kv.enable_events(false);
        }
    }

    fn convert(&self, e: KvEvent) -> KvCacheEvent {
        match e {
            KvEvent::Stored {
                hashes,
                parent,
                tokens,
                ns,
            } => {
                let lora = self.names.get(&ns);
                KvCacheEvent::BlockStored {
                    block_hashes: hashes,
                    parent_block_hash: parent,
                    token_ids: tokens,
                    block_size: self.block_size,
                    lora_id: lora.map(|l| l.0),
                    lora_name: lora.map(|l| l.1.clone()),
                }
            }
            KvEvent::Removed { hashes } => KvCacheEvent::BlockRemoved {
                block_hashes: hashes,
            },
            KvEvent::AllCleared => KvCacheEvent::AllBlocksCleared,
        }
    }
}

//! The KV-event publisher (`folio serve --kv-events-endpoint`): a ZMQ PUB socket that
//! sends each engine batch as vLLM's multipart message `[topic, seq, payload]`, where
//! `seq` is an 8-byte big-endian counter from 0 and `payload` the msgpack batch
//! ([`crate::kv_wire`]).
//!
//! The socket binds or connects by vLLM's rule, so deployment recipes written for vLLM
//! work unchanged: an endpoint with a wildcard host (`tcp://*:5557`, `tcp://[::]:5557`,
//! also `tcp://0.0.0.0:5557`) binds (subscribers such as `vllm-router --kv-event-source`
//! connect to it); any other (`tcp://router-host:5557`) connects to a subscriber that
//! binds (llm-d's centralized mode): that connection is made in the background, retried
//! with backoff until the subscriber listens and remade after it leaves, so a late or
//! departed consumer never stops or stalls the server; events nobody can receive meanwhile
//! are dropped and counted (`folio_kv_events_dropped_total`). Only TCP is offered: `inproc://` has no meaning
//! across processes, and `ipc://` is left out to keep the socket crate to one transport.
//! There is no replay socket: a subscriber that missed a sequence number resynchronizes
//! from the live stream (vllm-router purges the worker's ownership on a gap).

use crate::serve_error::KvEventsError;
use bytes::Bytes;
use folio_engine::{KvEventBatch, KvEventReceiver};
use futures::StreamExt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use zeromq::{Socket, SocketEvent, SocketSend, ZmqMessage};

/// One connect attempt's limit (the socket retries a refused port within it).
const CONNECT_ATTEMPT: Duration = Duration::from_secs(2);
/// First and longest pause between connect attempts: a subscriber that starts late is
/// reached within about [`RETRY_MAX`] + [`CONNECT_ATTEMPT`] of listening.
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// Where and under which topic batches go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvEventsConfig {
    /// vLLM's `endpoint` (`tcp://*:5557` binds, `tcp://host:port` connects).
    pub endpoint: String,
    /// vLLM's `topic`, the first frame of every message (`""` by default: subscribers
    /// subscribed to everything receive it).
    pub topic: String,
}

/// How the socket attaches to `endpoint`: `(bind, address for zeromq)`.
pub fn attach_mode(endpoint: &str) -> Result<(bool, String), KvEventsError> {
    if endpoint.starts_with("inproc://") {
        return Err(KvEventsError::Endpoint(format!(
            "inproc:// reaches only the same process; use tcp://HOST:PORT, got {endpoint:?}"
        )));
    }
    let Some(rest) = endpoint.strip_prefix("tcp://") else {
        return Err(KvEventsError::Endpoint(format!(
            "must be tcp://HOST:PORT (ipc:// is not offered), got {endpoint:?}"
        )));
    };
    let Some((host, port)) = rest.rsplit_once(':') else {
        return Err(KvEventsError::Endpoint(format!(
            "expected tcp://HOST:PORT, got {endpoint:?}"
        )));
    };
    if port.parse::<u16>().is_err() {
        return Err(KvEventsError::Endpoint(format!(
            "port must be a number in 0..=65535, got {port:?} in {endpoint:?}"
        )));
    }
    // vLLM's heuristic: "*" or "::" in the endpoint binds, anything else connects.
    match host {
        "*" | "0.0.0.0" => Ok((true, format!("tcp://0.0.0.0:{port}"))),
        "[::]" | "::" => Ok((true, format!("tcp://[::]:{port}"))),
        _ => Ok((false, endpoint.to_string())),
    }
}

/// Binds or connects the PUB socket and spawns the task that publishes every batch from
/// `events` until the engine drops its sender. Returns the resolved endpoint (with the
/// port the OS chose for port 0 when binding).
///
/// A bind address already in use is an error here, at start. A connect address is never
/// one: the subscriber (a router) may start later or restart, and a replica must keep
/// serving meanwhile, so the connection is made, and remade after a disconnect, in the
/// background with backoff. Events that find no subscriber are dropped and counted
/// (`folio_kv_events_dropped_total`); sequence numbers still advance, so a subscriber sees
/// the gap and resynchronizes.
pub async fn start(cfg: KvEventsConfig, events: KvEventReceiver) -> Result<String, KvEventsError> {
    let (bind, addr) = attach_mode(&cfg.endpoint)?;
    let mut opts = zeromq::SocketOptions::default();
    opts.connect_timeout(CONNECT_ATTEMPT);
    let mut socket = zeromq::PubSocket::with_options(opts);
    let monitor = socket.monitor();
    let mut p = Publisher {
        topic: Bytes::from(cfg.topic.clone().into_bytes()),
        seq: 0,
        dropped: events.dropped,
        rx: events.rx,
    };
    let resolved = if bind {
        let at = socket.bind(&addr).await.map_err(|e| KvEventsError::Bind {
            endpoint: cfg.endpoint.clone(),
            reason: e.to_string(),
        })?;
        tokio::spawn(async move { p.serve_bound(socket, monitor).await });
        at.to_string()
    } else {
        let a = addr.clone();
        tokio::spawn(async move { p.serve_connected(socket, monitor, &a).await });
        addr
    };
    tracing::info!(endpoint = %resolved, bind, topic = %cfg.topic, "publishing KV-cache events");
    Ok(resolved)
}

/// The publishing side: the engine's batches, the topic, the sequence counter and the
/// shared count of dropped events.
struct Publisher {
    rx: tokio::sync::mpsc::Receiver<KvEventBatch>,
    topic: Bytes,
    seq: u64,
    dropped: Arc<AtomicU64>,
}

type Monitor = futures::channel::mpsc::Receiver<SocketEvent>;

impl Publisher {
    /// One message per batch; a batch nobody can receive is counted as dropped. Every
    /// batch takes a sequence number, sent or not.
    async fn send(&mut self, socket: &mut zeromq::PubSocket, batch: KvEventBatch, live: bool) {
        let seq = self.seq;
        self.seq += 1;
        if !live {
            self.drop_batch(&batch);
            return;
        }
        let payload = crate::kv_wire::encode(&batch, 0);
        let frames = vec![
            self.topic.clone(),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            Bytes::from(payload),
        ];
        let msg = ZmqMessage::try_from(frames).expect("three frames are a message");
        if let Err(e) = socket.send(msg).await {
            tracing::warn!(seq, "kv events: send failed: {e}");
            self.drop_batch(&batch);
        }
    }

    fn drop_batch(&self, batch: &KvEventBatch) {
        self.dropped.fetch_add(batch.events.len() as u64, Relaxed);
    }

    /// Bound: subscribers come and go on their own; batches while none is connected are
    /// dropped.
    async fn serve_bound(&mut self, mut socket: zeromq::PubSocket, mut monitor: Monitor) {
        let mut peers: usize = 0;
        let mut watching = true;
        loop {
            tokio::select! {
                b = self.rx.recv() => match b {
                    // Without socket events any more, assume someone may listen (zeromq
                    // drops messages without subscribers itself).
                    Some(batch) => self.send(&mut socket, batch, peers > 0 || !watching).await,
                    None => return,
                },
                ev = monitor.next(), if watching => match ev {
                    Some(SocketEvent::Accepted(..)) => peers += 1,
                    Some(SocketEvent::Disconnected(_)) => peers = peers.saturating_sub(1),
                    Some(_) => {}
                    None => watching = false,
                },
            }
        }
    }

    /// Connecting: attempts with backoff until the subscriber listens, publishing while
    /// connected, and again after it goes away. Batches meanwhile are dropped.
    async fn serve_connected(
        &mut self,
        mut socket: zeromq::PubSocket,
        mut monitor: Monitor,
        addr: &str,
    ) {
        let mut delay = RETRY_FIRST;
        let mut warned = false;
        let mut watching = true;
        loop {
            let Some(attempt) = self.dropping_until(socket.connect(addr)).await else {
                return;
            };
            match attempt {
                Ok(()) => {
                    tracing::info!(endpoint = %addr, "kv events: connected to the subscriber");
                    delay = RETRY_FIRST;
                    warned = false;
                    loop {
                        tokio::select! {
                            b = self.rx.recv() => match b {
                                Some(batch) => self.send(&mut socket, batch, true).await,
                                None => return,
                            },
                            ev = monitor.next(), if watching => match ev {
                                Some(SocketEvent::Disconnected(_)) => break,
                                Some(_) => {}
                                None => watching = false,
                            },
                        }
                    }
                    tracing::warn!(endpoint = %addr, "kv events: the subscriber went away; reconnecting in the background");
                }
                Err(e) => {
                    if !warned {
                        tracing::warn!(endpoint = %addr, "kv events: no subscriber yet ({e}); retrying in the background, events are dropped meanwhile");
                        warned = true;
                    }
                    if !self.pause(delay).await {
                        return;
                    }
                    delay = (delay * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// Waits `d`, dropping batches meanwhile; false when the engine is gone.
    async fn pause(&mut self, d: Duration) -> bool {
        self.dropping_until(tokio::time::sleep(d)).await.is_some()
    }

    /// Runs `f` to its end while no subscriber listens: batches that arrive meanwhile are
    /// dropped (counted, their sequence numbers used). `None` when the engine is gone.
    async fn dropping_until<F: std::future::Future>(&mut self, f: F) -> Option<F::Output> {
        tokio::pin!(f);
        loop {
            tokio::select! {
                r = &mut f => return Some(r),
                b = self.rx.recv() => match b {
                    Some(batch) => {
                        self.seq += 1;
                        self.drop_batch(&batch);
                    }
                    None => return None,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::attach_mode;

    #[test]
    fn wildcards_bind_and_hosts_connect_as_in_vllm() {
        let ok = |e: &str| attach_mode(e).unwrap();
        assert_eq!(ok("tcp://*:5557"), (true, "tcp://0.0.0.0:5557".into()));
        assert_eq!(ok("tcp://[::]:5557"), (true, "tcp://[::]:5557".into()));
        assert_eq!(ok("tcp://0.0.0.0:0"), (true, "tcp://0.0.0.0:0".into()));
        assert_eq!(
            ok("tcp://10.0.0.5:5557"),
            (false, "tcp://10.0.0.5:5557".into())
        );
        for (bad, names) in [
            ("inproc://kv", "inproc://"),
            ("udp://*:5557", "tcp://HOST:PORT"),
            ("ipc:///tmp/kv", "ipc:// is not offered"),
            ("tcp://*", "tcp://HOST:PORT"),
            ("tcp://*:port", "\"port\""),
        ] {
            let e = attach_mode(bad).unwrap_err().to_string();
            assert!(
                e.contains("--kv-events-endpoint") && e.contains(names),
                "{e}"
            );
        }
    }
}

//! The KV-event publisher (`folio serve --kv-events-endpoint`): a ZMQ PUB socket that
//! sends each engine batch as vLLM's multipart message `[topic, seq, payload]`, where
//! `seq` is an 8-byte big-endian counter from 0 and `payload` the msgpack batch
//! ([`crate::kv_wire`]).
//!
//! The socket binds or connects by vLLM's rule, so deployment recipes written for vLLM
//! work unchanged: an endpoint with a wildcard host (`tcp://*:5557`, `tcp://[::]:5557`,
//! also `tcp://0.0.0.0:5557`) binds (subscribers such as `vllm-router --kv-event-source`
//! connect to it); any other (`tcp://router-host:5557`) connects to a subscriber that
//! binds (llm-d's centralized mode). Only TCP is offered: `inproc://` has no meaning
//! across processes, and `ipc://` is left out to keep the socket crate to one transport.
//! There is no replay socket: a subscriber that missed a sequence number resynchronizes
//! from the live stream (vllm-router purges the worker's ownership on a gap).

use anyhow::{bail, Context};
use bytes::Bytes;
use folio_engine::KvEventBatch;
use tokio::sync::mpsc::UnboundedReceiver;
use zeromq::{Socket, SocketSend, ZmqMessage};

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
pub fn attach_mode(endpoint: &str) -> anyhow::Result<(bool, String)> {
    if endpoint.starts_with("inproc://") {
        bail!("--kv-events-endpoint: inproc:// reaches only the same process; use tcp://HOST:PORT, got {endpoint:?}");
    }
    let Some(rest) = endpoint.strip_prefix("tcp://") else {
        bail!("--kv-events-endpoint: must be tcp://HOST:PORT (ipc:// is not offered), got {endpoint:?}");
    };
    let Some((host, port)) = rest.rsplit_once(':') else {
        bail!("--kv-events-endpoint: expected tcp://HOST:PORT, got {endpoint:?}");
    };
    if port.parse::<u16>().is_err() {
        bail!("--kv-events-endpoint: port must be a number in 0..=65535, got {port:?} in {endpoint:?}");
    }
    // vLLM's heuristic: "*" or "::" in the endpoint binds, anything else connects.
    match host {
        "*" | "0.0.0.0" => Ok((true, format!("tcp://0.0.0.0:{port}"))),
        "[::]" | "::" => Ok((true, format!("tcp://[::]:{port}"))),
        _ => Ok((false, endpoint.to_string())),
    }
}

/// Binds or connects the PUB socket and spawns the task that publishes every batch from
/// `rx` until the engine drops its sender. Returns the resolved endpoint (with the port
/// the OS chose for port 0 when binding).
pub async fn start(
    cfg: KvEventsConfig,
    rx: UnboundedReceiver<KvEventBatch>,
) -> anyhow::Result<String> {
    let (bind, addr) = attach_mode(&cfg.endpoint)?;
    let mut socket = zeromq::PubSocket::new();
    let resolved = if bind {
        socket
            .bind(&addr)
            .await
            .with_context(|| format!("--kv-events-endpoint: cannot bind {}", cfg.endpoint))?
            .to_string()
    } else {
        socket
            .connect(&addr)
            .await
            .with_context(|| format!("--kv-events-endpoint: cannot connect to {}", cfg.endpoint))?;
        addr
    };
    tracing::info!(endpoint = %resolved, bind, topic = %cfg.topic, "publishing KV-cache events");
    tokio::spawn(publish(socket, cfg.topic, rx));
    Ok(resolved)
}

/// The publishing loop: one message per batch, sequence numbers without gaps.
async fn publish(
    mut socket: zeromq::PubSocket,
    topic: String,
    mut rx: UnboundedReceiver<KvEventBatch>,
) {
    let topic = Bytes::from(topic.into_bytes());
    let mut seq: u64 = 0;
    while let Some(batch) = rx.recv().await {
        let payload = crate::kv_wire::encode(&batch, 0);
        let frames = vec![
            topic.clone(),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            Bytes::from(payload),
        ];
        let msg = ZmqMessage::try_from(frames).expect("three frames are a message");
        if let Err(e) = socket.send(msg).await {
            tracing::warn!(seq, "kv events: send failed: {e}");
        }
        seq += 1;
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

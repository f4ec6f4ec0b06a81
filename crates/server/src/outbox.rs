//! A stream's output waiting for its client: bounded in bytes.
//!
//! The engine generates at its own pace whatever the client reads. Before, the SSE task
//! stopped reading the engine's (unbounded) event channel while its client did not read,
//! so a stalled client's request kept running to `max_tokens`, holding its KV blocks and
//! queueing every event, and its memory came back only when the client left. Now the task
//! keeps taking the engine's events and holds the frames the client has not taken here;
//! when they pass `--stream-buffer-bytes` the stream is cut: its engine requests are
//! aborted at once (their KV blocks return to the pool), a last chunk with finish reason
//! `slow_reader` is queued after what is held, and the client gets the keep-alive timeout
//! to read it before the connection is closed. A client that keeps up never notices.

use axum::body::Bytes;
use std::collections::VecDeque;

/// Frames not yet taken by the client.
pub struct Outbox {
    frames: VecDeque<Bytes>,
    bytes: usize,
    limit: usize,
}

impl Outbox {
    pub fn new(limit: usize) -> Outbox {
        Outbox {
            frames: VecDeque::new(),
            bytes: 0,
            limit,
        }
    }

    /// Queues `frame`; false when the held bytes now pass the limit (the stream is to be
    /// cut). The frame is kept either way, so nothing the client was sent is lost.
    pub fn push(&mut self, frame: Bytes) -> bool {
        self.bytes += frame.len();
        self.frames.push_back(frame);
        self.bytes <= self.limit
    }

    pub fn pop(&mut self) -> Option<Bytes> {
        let f = self.frames.pop_front()?;
        self.bytes -= f.len();
        Some(f)
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_bytes_and_reports_overflow() {
        let mut o = Outbox::new(10);
        assert!(o.push(Bytes::from_static(b"12345")));
        assert!(o.push(Bytes::from_static(b"67890")));
        assert!(!o.push(Bytes::from_static(b"x")));
        assert_eq!(o.pop().as_deref(), Some(&b"12345"[..]));
        assert!(o.push(Bytes::from_static(b"abcd")));
        while o.pop().is_some() {}
        assert!(o.is_empty());
    }
}

//! A request body that must arrive within `--body-timeout-s` of its request's headers.
//!
//! The transport's header and idle timeouts stop once a request's headers are in (the
//! request is then being answered, and a long answer must not be cut), so a client that
//! sent headers and one byte of a body held its connection slot for as long as it liked:
//! 1,000 of them took every slot. The deadline is on the whole body, not between bytes,
//! so trickling a byte at a time does not extend it. When it passes, reading the body
//! fails with [`BodyTimeout`] (the handler answers 408) and the connection is closed.

use axum::body::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Reading a request body failed because it did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("request body: not received within {secs} s of its headers (--body-timeout-s)")]
pub struct BodyTimeout {
    pub secs: f64,
}

impl BodyTimeout {
    /// Whether `e` or an error it wraps is a [`BodyTimeout`].
    pub fn in_chain<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyTimeout> {
        let mut cur = Some(e);
        while let Some(e) = cur {
            if let Some(t) = e.downcast_ref::<BodyTimeout>() {
                return Some(t);
            }
            cur = e.source();
        }
        None
    }
}

/// `Incoming` with a deadline.
pub struct TimedBody {
    inner: Incoming,
    sleep: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
    /// Set when the deadline passed: the transport closes the connection after answering.
    expired: Arc<AtomicBool>,
}

impl TimedBody {
    /// The deadline starts now (the headers have just been read).
    pub fn new(inner: Incoming, limit: Duration, expired: Arc<AtomicBool>) -> TimedBody {
        TimedBody {
            inner,
            sleep: Box::pin(tokio::time::sleep(limit)),
            limit,
            expired,
        }
    }
}

impl http_body::Body for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(r) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(r.map(|r| r.map_err(Into::into)));
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            self.expired.store(true, Ordering::Relaxed);
            let secs = self.limit.as_secs_f64();
            return Poll::Ready(Some(Err(Box::new(BodyTimeout { secs }))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

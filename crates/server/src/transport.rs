//! The accept loop: what `axum::serve` does, plus the transport limits it lacks.
//!
//! - `TCP_NODELAY` on every accepted socket: SSE writes are small, and with Nagle's
//!   algorithm a stream on a reused keep-alive connection delivered its first tokens in one
//!   burst after the client's delayed ACK (~40 ms).
//! - `TCP_NOTSENT_LOWAT` of [`UNSENT_LOWAT`] on every accepted socket: the kernel then
//!   takes no more of a response while that much of it is unsent. Without it a client that
//!   stopped reading let the kernel soak up to `tcp_wmem`'s maximum (4 MB) of its stream,
//!   about 5,000 tokens during which the server could not tell it had stopped (see
//!   `outbox`); bytes in flight are not counted, so throughput on long links is unchanged.
//! - A connection cap: past it a connection gets a `503` and is closed at once, so the
//!   connections already open (and /health on them) keep working.
//! - A header timeout: a request's headers must arrive within `header_timeout` of its
//!   first byte (of the connection's start for the first request), so a client trickling
//!   a byte a second cannot hold a connection.
//! - An idle timeout: a keep-alive connection with no request for `idle_timeout` is closed.
//! - A body timeout: a request's body must arrive within `body_timeout` of its headers
//!   (see `body_deadline`); past it the request is answered 408 and the connection closed.
//! - Head checks before routing (see `framing`): a duplicate or malformed `Host`, an
//!   absolute-form target that disagrees with `Host` (400), a `Content-Length` above the
//!   body limit (413, without reading the body); the connection is closed after each.
//!
//! Each connection is hyper's HTTP/1.1 state machine over an I/O wrapper that notes when
//! bytes move; a service wrapper notes when a request is being answered (from its headers
//! until its response body is dropped). A watchdog next to the connection closes it when
//! a timeout passes while no request is being answered; a slow *response* (a long stream)
//! is never cut by these timeouts.

use axum::body::{Body, Bytes};
use axum::response::IntoResponse;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tower::ServiceExt;

/// Most unsent bytes of a response the kernel takes for one connection.
pub const UNSENT_LOWAT: u32 = 64 << 10;

/// The transport settings (from `ServerOptions`): connections, timeouts, body size. Not
/// `params::Limits`, which bounds one request's sampling parameters.
#[derive(Clone, Copy, Debug)]
pub struct TransportLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    pub max_body_bytes: usize,
}

/// Accepts until `stop` turns true, then closes the listener, asks every connection to
/// finish its current response and close, and returns when they all have.
pub async fn accept_loop(
    listener: TcpListener,
    app: Router,
    lim: TransportLimits,
    mut stop: watch::Receiver<bool>,
) {
    let open = Arc::new(AtomicUsize::new(0));
    // Every connection task holds a sender; `recv` returns None once all are dropped.
    let (alive_tx, mut alive_rx) = mpsc::channel::<()>(1);
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped(&mut stop) => break,
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, %peer, "cannot set TCP_NODELAY");
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Err(e) = socket2::SockRef::from(&tcp).set_tcp_notsent_lowat(UNSENT_LOWAT) {
            tracing::debug!(error = %e, %peer, "cannot set TCP_NOTSENT_LOWAT");
        }
        if open.load(Ordering::Relaxed) >= lim.max_connections {
            tracing::debug!(%peer, max = lim.max_connections, "connection refused: at the connection cap");
            refuse(tcp, lim.max_connections);
            continue;
        }
        open.fetch_add(1, Ordering::Relaxed);
        let slot = Slot {
            open: open.clone(),
            _alive: alive_tx.clone(),
        };
        tokio::spawn(connection(tcp, app.clone(), lim, stop.clone(), slot));
    }
    drop(listener);
    drop(alive_tx);
    let _ = alive_rx.recv().await;
}

/// Resolves once `stop` is true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// A connection past the cap: a best-effort 503 (without waiting for the socket), then
/// close.
fn refuse(tcp: TcpStream, max: usize) {
    let body = serde_json::json!({"error": {
        "message": format!("too many connections (the limit is {max}, --max-connections); retry later"),
        "type": "service_unavailable_error", "param": null, "code": "too_many_connections"}})
    .to_string();
    let resp = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tcp.try_write(resp.as_bytes());
}

/// `resp` with `Connection: close`: hyper closes the connection once it is written (the
/// request's body was not read to its end, so the next request's start is unknown).
fn closing(mut resp: axum::response::Response) -> axum::response::Response {
    resp.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    resp
}

/// One open connection, counted against the cap until dropped.
struct Slot {
    open: Arc<AtomicUsize>,
    _alive: mpsc::Sender<()>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn connection(
    tcp: TcpStream,
    app: Router,
    lim: TransportLimits,
    mut stop: watch::Receiver<bool>,
    _slot: Slot,
) {
    let w = Arc::new(ConnWatch::new());
    let io = TokioIo::new(Watched {
        inner: tcp,
        watch: w.clone(),
    });
    let ws = w.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let busy = ws.begin();
        let app = app.clone();
        async move {
            if let Err(e) =
                crate::framing::check(req.method(), req.uri(), req.headers(), lim.max_body_bytes)
            {
                tracing::debug!(error = %e, "request refused before routing");
                let resp = closing(e.into_response());
                return Ok(resp.map(|inner| Guarded { inner, _busy: busy }));
            }
            let expired = Arc::new(AtomicBool::new(false));
            let req = req.map(|b| {
                Body::new(crate::body_deadline::TimedBody::new(
                    b,
                    lim.body_timeout,
                    expired.clone(),
                ))
            });
            let mut resp = app.oneshot(req).await?;
            if expired.load(Ordering::Relaxed) {
                resp = closing(resp);
            }
            Ok::<_, Infallible>(resp.map(|inner| Guarded { inner, _busy: busy }))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        // hyper's own header timeout needs a timer and also runs while a keep-alive
        // connection is idle; the watchdog below does both, separately.
        .header_read_timeout(None)
        .serve_connection(io, svc);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            why = w.expired(lim) => {
                tracing::debug!(why, "closing connection");
                return;
            }
            () = stopped(&mut stop), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
        }
    }
}

/// "No request" in [`ConnWatch::head`].
const NONE: u64 = u64::MAX;

/// When bytes last moved on a connection and whether a request is being answered.
/// Times are milliseconds since the connection was accepted.
struct ConnWatch {
    start: Instant,
    /// Requests being answered (headers read, response body not yet dropped).
    busy: AtomicUsize,
    /// Last read or write of at least one byte, or the end of the last response.
    last_io: AtomicU64,
    /// First byte of a request whose headers have not all arrived; `NONE` if none.
    head: AtomicU64,
    /// Woken when a response ends (the idle clock starts).
    done: tokio::sync::Notify,
}

impl ConnWatch {
    fn new() -> ConnWatch {
        ConnWatch {
            start: Instant::now(),
            busy: AtomicUsize::new(0),
            last_io: AtomicU64::new(0),
            // A new connection is expected to send its first request's headers in time.
            head: AtomicU64::new(0),
            done: tokio::sync::Notify::new(),
        }
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn read(&self, n: usize) {
        if n == 0 {
            return;
        }
        let t = self.now();
        self.last_io.store(t, Ordering::Relaxed);
        if self.busy.load(Ordering::Relaxed) == 0 {
            let _ = self
                .head
                .compare_exchange(NONE, t, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    fn wrote(&self, n: usize) {
        if n > 0 {
            self.last_io.store(self.now(), Ordering::Relaxed);
        }
    }

    /// A request's headers were read: it is being answered until the guard drops.
    fn begin(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::Relaxed);
        self.head.store(NONE, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// Resolves when the connection should be closed, saying why.
    async fn expired(&self, lim: TransportLimits) -> &'static str {
        let header = lim.header_timeout.as_millis() as u64;
        let idle = lim.idle_timeout.as_millis() as u64;
        loop {
            if self.busy.load(Ordering::Relaxed) > 0 {
                // `notify_one` keeps a permit if the response ends before this waits.
                self.done.notified().await;
                continue;
            }
            let now = self.now();
            let (deadline, why) = match self.head.load(Ordering::Relaxed) {
                NONE => (
                    self.last_io.load(Ordering::Relaxed) + idle,
                    "idle keep-alive connection (--keep-alive-timeout-s)",
                ),
                first => (
                    first + header,
                    "request headers too slow (--header-timeout-s)",
                ),
            };
            if now >= deadline {
                return why;
            }
            // Rechecked on waking: bytes may have moved or a request begun meanwhile.
            tokio::time::sleep(Duration::from_millis(deadline - now)).await;
        }
    }
}

/// A request being answered; dropped with its response body.
struct Busy(Arc<ConnWatch>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.last_io.store(self.0.now(), Ordering::Relaxed);
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
        self.0.done.notify_one();
    }
}

/// A response body that holds its request's [`Busy`] until hyper drops it.
struct Guarded {
    inner: Body,
    _busy: Busy,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A socket that reports its reads and writes to the connection's [`ConnWatch`].
struct Watched {
    inner: TcpStream,
    watch: Arc<ConnWatch>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            this.watch.read(buf.filled().len() - before);
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            this.watch.wrote(n);
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            this.watch.wrote(n);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

//! Why the server could not start, or stopped with an error: typed, so the CLI (and any
//! embedder) can tell a bad option from a port in use. Request errors are `ApiError`.

/// A setting the server cannot run with; the message names the flag, what it must be and
/// the value given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidOption(pub String);

/// Why `serve` / `serve_listener` returned an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Option(#[from] InvalidOption),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("listener has no local address: {0}")]
    LocalAddr(std::io::Error),
    #[error("server task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Why the KV-cache event publisher could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvEventsError {
    /// `--kv-events-endpoint` is not a `tcp://HOST:PORT` this server can use.
    #[error("--kv-events-endpoint: {0}")]
    Endpoint(String),
    #[error("--kv-events-endpoint: cannot bind {endpoint} ({reason}); is another process using the port?")]
    Bind { endpoint: String, reason: String },
}

//! The bench crate's typed error: a server that answered wrongly, a file or socket operation
//! with what it was doing, a reply that is not the JSON it should be.

/// Why a benchmark, a request or a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A failure the message describes in full (a bad status line, a stream that ended
    /// early, a server error event, a flag's bad value).
    #[error("{0}")]
    Failed(String),
    /// An operation that failed: what was being done, and why.
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error(transparent)]
    Os(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("a benchmark task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error(transparent)]
    Model(#[from] folio_model::ModelError),
    #[error(transparent)]
    Gguf(#[from] folio_gguf::GgufError),
}

pub type Result<T> = std::result::Result<T, BenchError>;

impl BenchError {
    /// A failure whose message says it all.
    pub(crate) fn msg(message: impl Into<String>) -> BenchError {
        BenchError::Failed(message.into())
    }

    /// For `map_err`: wraps an error with what was being done when it happened.
    pub(crate) fn during<E>(what: impl Into<String>) -> impl FnOnce(E) -> BenchError
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let what = what.into();
        move |e| BenchError::Io {
            what,
            source: Box::new(e),
        }
    }
}

//! The fetch crate's typed error: a download or check that failed, or a file operation with
//! what it was doing. Messages name the package, file or flag and say what to do.

/// Why a model could not be fetched or resolved.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// A step that failed for a reason the message gives in full (pip missing, a size or
    /// checksum mismatch, an unknown model name).
    #[error("{0}")]
    Failed(String),
    /// A file, process or archive operation that failed: the step, and its cause.
    #[error("{step}: {cause}")]
    Step {
        step: String,
        cause: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file operation whose path the OS error already names, or needs no context.
    #[error(transparent)]
    Os(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, FetchError>;

/// Adds what was being done to an I/O or archive error.
pub(crate) trait Context<T> {
    fn with_context<F: FnOnce() -> String>(self, what: F) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for std::result::Result<T, E> {
    fn with_context<F: FnOnce() -> String>(self, what: F) -> Result<T> {
        self.map_err(|e| FetchError::Step {
            step: what(),
            cause: Box::new(e),
        })
    }
}

/// `return Err(FetchError::Failed(format!(...)))`.
macro_rules! bail {
    ($($t:tt)*) => {
        return Err($crate::error::FetchError::Failed(format!($($t)*)))
    };
}

/// `FetchError::Failed(format!(...))`.
macro_rules! failed {
    ($($t:tt)*) => {
        $crate::error::FetchError::Failed(format!($($t)*))
    };
}

pub(crate) use {bail, failed};

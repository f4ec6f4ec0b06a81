//! Why a request ended: the one `FinishReason` the scheduler, the engine and the server
//! share.
//!
//! The scheduler itself only ends requests with `Stop`, `Length` or `Aborted`; the engine
//! adds the ends the scheduler never sees (a refusal before admission, shutdown, a failed
//! step). One type for both means the engine forwards the scheduler's verdict as is
//! instead of translating it (a translation with a catch-all arm once turned every new
//! reason into `Length`).

use super::admission::RejectReason;

/// Why a request ended.
#[derive(Debug, Clone, PartialEq)]
pub enum FinishReason {
    /// End-of-sequence token, a stop token id or a stop string (decided by the engine).
    Stop,
    /// `max_tokens` outputs produced or the context is full (enforced by the scheduler too).
    Length,
    /// Cancelled by the caller (or its stream dropped).
    Aborted,
    /// Refused by admission control before its first token; the reason names the limit and
    /// the value, and the server maps it to an HTTP status at its edge.
    Rejected(RejectReason),
    /// The engine is shutting down: the request was refused, or its stream was cut.
    ShuttingDown,
    /// The request failed after admission (a forward pass or its constraint); the message
    /// says why.
    Error(String),
}

impl FinishReason {
    /// The OpenAI `finish_reason` string.
    pub fn as_openai(&self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Aborted => "abort",
            FinishReason::Rejected(_) => "rejected",
            FinishReason::ShuttingDown => "abort",
            FinishReason::Error(_) => "error",
        }
    }
}

//! What one API makes of a running request: the frames its stream sends and the body of
//! its non-streamed answer. `running::Running::drive` owns the loop (admission,
//! cutoffs, slow readers, disconnects, keep-alives); a sink only formats, so a new API
//! (Anthropic Messages, Ollama) is one new sink over the same loop.

use crate::choice_state::ChoiceState;
use crate::error::ApiError;
use crate::openai::Job;
use axum::body::Bytes;
use axum::response::Response;
use folio_tokenizer::Tokenizer;
use serde_json::Value;

/// One engine event of one choice, after the choice's state has applied it.
pub struct Update<'a> {
    pub index: usize,
    /// The event's new text (empty for a finish).
    pub text: &'a str,
    /// Tokens the event carried.
    pub tokens: usize,
    /// Their ids (Anthropic's sink finds the stop sequence in them).
    pub ids: &'a [u32],
    /// The chat/completions chunk of the event (streams only; `None` when there is
    /// nothing to say).
    pub chunk: Option<Value>,
    /// The choice after the event (finish and usage set by a `Finished`).
    pub state: &'a ChoiceState,
}

/// One output format. Every method but `answer` returns frames for a stream (empty
/// bytes: nothing to send); a non-streamed request still calls them, so a sink that
/// builds its answer as text arrives sees the same calls either way.
pub trait Sink: Send + 'static {
    /// Sent as soon as the stream opens, before the engine admitted the request.
    fn opened(&mut self, _job: &Job) -> Bytes {
        Bytes::new()
    }

    /// Sent once the engine admitted the request.
    fn admitted(&mut self, _job: &Job, _choices: usize) -> Bytes {
        Bytes::new()
    }

    /// What a stream sends while nothing else happens (queued, or a long prefill), so
    /// that proxies see bytes and a gone client is noticed; empty: nothing.
    fn keep_alive(&mut self) -> Bytes {
        crate::sse::keep_alive_frame()
    }

    /// The last frames of a stream the engine refused after its headers went out.
    fn refused(&mut self, e: &ApiError) -> Bytes;

    /// One engine event.
    fn event(&mut self, job: &Job, u: Update<'_>) -> Bytes;

    /// The server ended choice `index` (finish reason `reason`: a cutoff or a slow
    /// reader).
    fn cut(&mut self, _job: &Job, _index: usize, _reason: &'static str) -> Bytes {
        Bytes::new()
    }

    /// The stream's last frames; `unfinished` choices ended without a finish (the engine
    /// went away).
    fn closing(&mut self, job: &Job, states: &[ChoiceState], unfinished: &[usize]) -> Bytes;

    /// The whole answer of a request that was not streamed (no choice failed).
    fn answer(
        self,
        job: Job,
        states: Vec<ChoiceState>,
        tok: &Tokenizer,
    ) -> Result<Response, ApiError>;
}

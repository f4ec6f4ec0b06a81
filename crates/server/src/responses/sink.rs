//! The Responses API's output: named SSE events (`event: response.output_text.delta`,
//! `data: {…}`), no `[DONE]` (as OpenAI), or the `response` object. A request still
//! queued gets its headers, `response.created` and keep-alive comments at once; a refusal
//! then comes as `response.failed`, and a cutoff ends it as `response.incomplete`.

use super::build::{Build, End, Ev, Tokens};
use super::store::{Store, Stored};
use crate::choice_state::{usage_sum, ChoiceState};
use crate::error::ApiError;
use crate::openai::Job;
use crate::sink::{Sink, Update};
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use folio_engine::FinishReason;
use folio_tokenizer::Tokenizer;
use serde_json::Value;

/// The Responses sink of one request (one choice).
pub struct ResponsesSink {
    pub build: Build,
    /// `store: true`: where the finished response goes, with the input items it saw.
    pub keep: Option<(Store, Vec<Value>)>,
}

impl ResponsesSink {
    /// The last events; the first time, the finished response is also stored.
    fn finish(&mut self, end: &End, tokens: Tokens) -> Vec<Ev> {
        let evs = self.build.finish(end, tokens);
        if let (false, Some((store, context))) = (evs.is_empty(), self.keep.take()) {
            let response = self.build.response(end, tokens);
            store.put(self.build.id(), Stored { response, context });
        }
        evs
    }
}

/// The SSE frames of `evs`.
fn frames(evs: &[Ev]) -> Bytes {
    let mut out = String::new();
    for (kind, body) in evs {
        out.push_str(&format!("event: {kind}\ndata: {body}\n\n"));
    }
    Bytes::from(out)
}

/// How the choice ended, in Responses terms.
fn end_of(c: &ChoiceState) -> End {
    let error = match &c.finish {
        Some(FinishReason::Error(m)) => Some(m.clone()),
        Some(FinishReason::Rejected(r)) => Some(r.to_string()),
        _ => None,
    };
    End::of(c.finish_reason(), error)
}

fn tokens_of(job: &Job, c: &ChoiceState) -> Tokens {
    let u = usage_sum(job, std::slice::from_ref(c));
    Tokens {
        input: u.prompt_tokens,
        cached: u.cached_tokens,
        output: u.completion_tokens,
    }
}

impl Sink for ResponsesSink {
    fn opened(&mut self, _job: &Job) -> Bytes {
        frames(&self.build.start())
    }

    fn refused(&mut self, e: &ApiError) -> Bytes {
        frames(&self.build.refuse(e.code, &e.message))
    }

    fn event(&mut self, job: &Job, u: Update<'_>) -> Bytes {
        let mut out = self.build.text(u.text, u.tokens);
        if u.state.finish.is_some() {
            out.extend(self.finish(&end_of(u.state), tokens_of(job, u.state)));
        }
        frames(&out)
    }

    /// Timed out, cut, or the engine went away without a finish: the last events (none
    /// when the response finished already).
    fn closing(&mut self, job: &Job, states: &[ChoiceState], _unfinished: &[usize]) -> Bytes {
        let c = &states[0];
        frames(&self.finish(&end_of(c), tokens_of(job, c)))
    }

    fn answer(
        mut self,
        job: Job,
        states: Vec<ChoiceState>,
        _tok: &Tokenizer,
    ) -> Result<Response, ApiError> {
        let c = &states[0];
        let (end, tokens) = (end_of(c), tokens_of(&job, c));
        self.finish(&end, tokens);
        Ok(axum::Json(self.build.response(&end, tokens)).into_response())
    }
}

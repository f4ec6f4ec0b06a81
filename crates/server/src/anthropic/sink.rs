//! The Messages API's output: named SSE events (`event: content_block_delta`,
//! `data: {…}`), no `[DONE]`, or the `message` object. A request still queued gets its
//! headers, `message_start` and keep-alive comments at once; a refusal or a failure then
//! comes as an `error` event, the stream's last.

use super::build::{Build, Ev};
use crate::choice_state::{usage_sum, ChoiceState};
use crate::error::ApiError;
use crate::openai::Job;
use crate::sink::{Sink, Update};
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use folio_engine::FinishReason;
use folio_tokenizer::Tokenizer;

/// The Messages sink of one request (one choice).
pub struct MessagesSink {
    pub build: Build,
}

/// The SSE frames of `evs`.
fn frames(evs: &[Ev]) -> Bytes {
    let mut out = String::new();
    for (kind, body) in evs {
        out.push_str(&format!("event: {kind}\ndata: {body}\n\n"));
    }
    Bytes::from(out)
}

impl Sink for MessagesSink {
    fn opened(&mut self, job: &Job) -> Bytes {
        frames(&self.build.start(job.prompt_lens.iter().sum()))
    }

    fn refused(&mut self, e: &ApiError) -> Bytes {
        frames(&self.build.fail(e))
    }

    fn event(&mut self, job: &Job, u: Update<'_>) -> Bytes {
        self.build.tokens(u.ids);
        let c = u.state;
        let mut evs = self
            .build
            .text(job, u.text, c.finish.is_some().then(|| c.finish_reason()));
        if let Some(FinishReason::Error(m)) = &c.finish {
            evs.extend(self.build.fail(&ApiError::generation_failed(m)));
        }
        frames(&evs)
    }

    fn cut(&mut self, job: &Job, _index: usize, reason: &'static str) -> Bytes {
        frames(&self.build.text(job, "", Some(reason)))
    }

    /// `message_delta` and `message_stop` (a choice the engine left unfinished ends as
    /// `abort`).
    fn closing(&mut self, job: &Job, states: &[ChoiceState], _unfinished: &[usize]) -> Bytes {
        frames(&self.build.end(job, usage_sum(job, states)))
    }

    fn answer(
        mut self,
        job: Job,
        states: Vec<ChoiceState>,
        _tok: &Tokenizer,
    ) -> Result<Response, ApiError> {
        let m = self.build.message(&job, usage_sum(&job, &states));
        Ok(axum::Json(m).into_response())
    }
}

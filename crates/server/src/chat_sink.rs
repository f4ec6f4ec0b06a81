//! The chat and completions output: `data: {chunk}` frames ending in `data: [DONE]`, or
//! one `chat.completion` / `text_completion` object.

use crate::api::Api;
use crate::choice_state::{usage_sum, ChoiceState};
use crate::chunk_filter::ChunkFilter;
use crate::error::ApiError;
use crate::openai::Job;
use crate::sink::{Sink, Update};
use crate::sse::{done, frame};
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use folio_tokenizer::Tokenizer;
use serde_json::Value;

/// The chat/completions sink of one request.
pub struct ChatSink {
    /// A streamed chat's reasoning split and tool calls (see `chunk_filter`).
    filter: Option<ChunkFilter>,
}

impl ChatSink {
    pub fn new(job: &Job, choices: usize) -> ChatSink {
        ChatSink {
            filter: (job.api == Api::Chat && job.stream)
                .then(|| ChunkFilter::new(choices, job.reasoning, job.tools)),
        }
    }

    /// The frames of choice `i`'s chunk on its way out.
    fn frames(&mut self, i: usize, chunk: Value) -> Bytes {
        match self.filter.as_mut() {
            None => frame(&chunk),
            Some(f) => concat(f.apply(i, chunk).iter().map(frame)),
        }
    }
}

fn concat(frames: impl Iterator<Item = Bytes>) -> Bytes {
    Bytes::from(frames.flat_map(|f| f.to_vec()).collect::<Vec<u8>>())
}

impl Sink for ChatSink {
    fn admitted(&mut self, job: &Job, choices: usize) -> Bytes {
        match job.api {
            Api::Chat => concat((0..choices).map(|i| {
                let mut c = job.role_chunk(i);
                job.with_usage(&mut c, i, 0);
                frame(&c)
            })),
            Api::Completions => Bytes::new(),
        }
    }

    /// An error event, as vLLM sends.
    fn refused(&mut self, e: &ApiError) -> Bytes {
        concat([frame(&e.body()), done()].into_iter())
    }

    fn event(&mut self, job: &Job, u: Update<'_>) -> Bytes {
        match u.chunk {
            Some(mut chunk) => {
                let generated = u
                    .state
                    .usage
                    .map_or(u.state.generated, |x| x.completion_tokens);
                job.with_usage(&mut chunk, u.index, generated);
                self.frames(u.index, chunk)
            }
            None => Bytes::new(),
        }
    }

    fn cut(&mut self, job: &Job, index: usize, reason: &'static str) -> Bytes {
        self.frames(index, job.chunk(index, "", None, Some(reason)))
    }

    fn closing(&mut self, job: &Job, states: &[ChoiceState], unfinished: &[usize]) -> Bytes {
        let mut out: Vec<Bytes> = unfinished
            .iter()
            .map(|&i| self.frames(i, job.chunk(i, "", None, Some("abort"))))
            .collect();
        if job.include_usage {
            out.push(frame(&job.usage_chunk(usage_sum(job, states))));
        }
        out.push(done());
        concat(out.into_iter())
    }

    fn answer(
        self,
        job: Job,
        mut states: Vec<ChoiceState>,
        tok: &Tokenizer,
    ) -> Result<Response, ApiError> {
        let usage = usage_sum(&job, &states);
        let out = states
            .iter_mut()
            .enumerate()
            .map(|(i, c)| match job.echo.get(i / job.n) {
                Some(e) => {
                    let lp = job
                        .logprobs
                        .map(|_| crate::echo::logprobs(tok, e, &c.prompt_logprobs, &c.logprobs));
                    (crate::echo::text(e, &c.text), lp, c.finish_reason())
                }
                None => {
                    let lp = c.final_logprobs(&job, tok);
                    (std::mem::take(&mut c.text), lp, c.finish_reason())
                }
            })
            .collect();
        let mut v = job.response(out, usage);
        if let Some(p) = job.reasoning {
            crate::reasoning::split_response(&mut v, p);
        }
        if let Some(tc) = job.tools {
            crate::tools::rewrite_response(&mut v, tc);
        }
        Ok(axum::Json(v).into_response())
    }
}

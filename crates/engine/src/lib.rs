//! folio-engine: the loop that joins the scheduler, the model and the samplers.
//!
//! # Layout
//!
//! - [`api`]: what callers see: [`EngineHandle`], [`GenerateRequest`], [`Event`] streams.
//! - [`config`]: [`EngineConfig`], the scheduler settings plus KV memory and format.
//! - [`engine`]: the engine thread: schedule → forward → sample → update, one fused
//!   forward per iteration; [`spawn_engine`] starts it.
//! - [`sampler`]: logits → token, per-request seeded RNG, penalties, logprobs helpers.
//! - [`prompt_scoring`]: logprobs of the prompt's own tokens (`echo` + `logprobs`).
//! - [`logit_rules`]: `logit_bias`, `min_tokens`, `allowed_token_ids`, `bad_words`.
//! - `speculate`: drafts after a step (n-gram lookup, self-draft) and their verification.
//! - [`tier`]: the second KV tier: evicted prefix blocks on local disk, checksummed,
//!   bounded, reloaded after a restart.
//! - [`step_stats`]: the per-iteration step log (tokens by kind, bytes, FLOPs, wall time).

pub mod api;
pub mod config;
pub mod engine;
pub mod logit_rules;
pub mod prompt_scoring;
pub mod sampler;
mod speculate;
pub mod step_stats;
pub mod tier;

pub use api::{
    EngineHandle, EngineInfo, EngineMetrics, Event, FinishReason, GenerateRequest, RequestId,
    RequestStream, SubmitError, TokenLogprob, Usage,
};
pub use config::{EngineConfig, SpecMethod};
pub use engine::{spawn_engine, spawn_engine_with_draft};
pub use logit_rules::LogitRules;
pub use sampler::{Sampler, SamplingParams};
pub use step_stats::StepStats;

//! folio-engine: the loop that joins the scheduler, the model and the samplers.
//!
//! # Layout
//!
//! - [`api`]: what callers see: [`EngineHandle`], [`GenerateRequest`], [`Event`] streams.
//! - [`sampler`]: logits → token, per-request seeded RNG, penalties, logprobs helpers.

pub mod api;
pub mod sampler;

pub use api::{
    EngineHandle, EngineInfo, EngineMetrics, Event, FinishReason, GenerateRequest, RequestId,
    RequestStream, SubmitError, TokenLogprob, Usage,
};
pub use sampler::{Sampler, SamplingParams};

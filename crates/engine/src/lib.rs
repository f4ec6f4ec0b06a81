//! folio-engine: the loop that joins the scheduler, the model and the samplers.
//!
//! # Layout
//!
//! - [`api`]: what callers see: [`EngineHandle`], [`GenerateRequest`], [`Event`] streams.
//! - [`config`]: [`EngineConfig`], the scheduler settings plus KV memory and format.
//! - [`engine`]: the engine thread: schedule → forward → sample → update, one fused
//!   forward per iteration; [`spawn_engine`] starts it.
//! - [`lora`]: [`LoraRegistry`], the adapters served by name, resident within `--max-loras`
//!   slots; requests carry their adapters (`GenerateRequest::lora`) into every batch.
//! - [`constraint`]: structured output: a request's JSON schema, regex, choice or Lark
//!   grammar compiled by llguidance; token masks, commit, draft checks and rollback.
//! - [`grammar_limits`]: the size limits a constraint must meet before it is compiled (a
//!   rule chain or `$ref` chain deep enough would overflow llguidance's stack).
//! - [`gbnf`]: llama.cpp's GBNF grammars converted to Lark.
//! - [`tool_grammar`]: the lazily triggered grammar of tool calls under `tool_choice: auto`.
//! - [`sampler`]: logits → token, per-request seeded RNG, penalties, logprobs helpers.
//! - [`embed`]: embedding requests: hidden rows pooled (last token or mean) into one
//!   normalized vector instead of sampling.
//! - [`prompt_scoring`]: logprobs of the prompt's own tokens (`echo` + `logprobs`).
//! - [`logit_rules`]: `logit_bias`, `min_tokens`, `allowed_token_ids`, `bad_words`.
//! - `speculate`: a request's speculation state (proposer, draft control, n-gram index).
//! - [`kv_events`]: prefix-cache events (vLLM's BlockStored / BlockRemoved /
//!   AllBlocksCleared) drained after each iteration and sent to a publisher.
//! - [`model_key`]: a model file's identity by content (header, size, mtime, sampled
//!   weights), so KV kept on disk is never reused by another model at the same path.
//! - [`tier`]: the second KV tier: evicted prefix blocks on local disk, checksummed,
//!   bounded, reloaded after a restart.
//! - [`step_stats`]: the per-iteration step log (tokens by kind, bytes, FLOPs, wall time).

pub mod api;
pub mod config;
pub mod constraint;
pub mod embed;
pub mod engine;
pub mod gbnf;
pub mod grammar_limits;
pub mod kv_events;
pub mod kv_pool;
pub mod logit_rules;
pub mod lora;
pub mod model_key;
pub mod prompt_scoring;
pub mod sampler;
mod speculate;
pub mod step_stats;
pub mod tier;
pub mod tool_grammar;

pub use api::{
    EngineHandle, EngineInfo, EngineMetrics, Event, FinishReason, GenerateRequest, InvalidKind,
    RejectReason, RequestId, RequestStream, SubmitError, TokenLogprob, Usage,
};
pub use config::{EngineConfig, SpecMethod};
pub use constraint::{CompileError, Compiled, Constraint, Grammars};
pub use embed::Pooling;
pub use engine::{spawn_engine, spawn_engine_with_draft, SpawnError};
pub use folio_core::MaxTokens;
pub use folio_model::LoraSet;
pub use folio_spec::SpecStats;
pub use gbnf::{gbnf_to_lark, GbnfError};
pub use grammar_limits::{GrammarLimits, LimitError, COMPILE_STACK_BYTES};
pub use kv_events::{kv_event_channel, KvCacheEvent, KvEventBatch, KvEventReceiver, KvEventSender};
pub use logit_rules::LogitRules;
pub use lora::{LoraError, LoraInfo, LoraReader, LoraRegistry};
pub use sampler::{Sampler, SamplingParams};
pub use step_stats::StepStats;

//! folio-model: the transformer forward pass of the llama family on CPU.
//!
//! # Layout
//!
//! - [`config`]: hyper-parameters read from GGUF metadata (`general.architecture` picks the
//!   variant: `llama`, `qwen2` with QKV bias, `qwen3` with per-head QK RMSNorm, `gemma3`
//!   with post-norms, GeGLU and sliding-window layers, `phi3` with pre-fused QKV and
//!   gate-up, `glm4` with post-norms, fused gate-up and half-head RoPE, `cohere2` with a
//!   parallel block, LayerNorm ([`norm`]), window layers and RoPE-less global ones); every shape key bounded before anything is sized from it. Tensor shapes are
//!   checked against it for the whole file before loading.
//! - `rope`: the rotary embedding, with the file's frequency factors (`rope_freqs`, LongRoPE).
//! - [`weights`]: tensors loaded once and repacked into the kernels' layouts.
//! - [`batch`]: [`ForwardBatch`], the flat description of one engine iteration: the tokens of
//!   many sequences (prefill chunks and decode tokens mixed), their positions, block tables
//!   and slot mapping, and which rows need logits or (embeddings) their final hidden
//!   state ([`ForwardOutput`], from [`Model::forward_with_hidden`]).
//! - [`kv_cache`]: the paged KV storage the forward pass reads and writes through block
//!   tables. Which blocks belong to whom is decided elsewhere (folio-core); this only holds
//!   the bytes.
//! - [`attention`]: causal grouped-query attention over the paged cache.
//! - [`model`]: [`Model::forward`], one fused pass over the whole batch.
//! - [`mla`]: multi-head latent attention (`deepseek2`): the latent KV row in the cache and
//!   attention in the absorbed form.
//! - [`moe`]: the mixture-of-experts FFN (`qwen2moe`, `qwen3moe`, Mixtral), grouped by expert.
//! - [`lora`]: LoRA adapters (llama.cpp's adapter GGUF), applied per row after each base
//!   matmul, grouped by adapter, so one batch mixes any adapters over one read of the base.
//!
//! The model never allocates KV blocks or decides what to compute: it is handed a batch and
//! a cache and returns logits, so the scheduler stays pure and the same batch description
//! could drive a GPU runner later.

pub mod attention;
pub mod batch;
pub mod config;
pub mod error;
pub mod kv_cache;
pub mod kv_layout;
pub mod kv_stage;
pub mod lora;
pub mod mla;
pub mod model;
pub mod moe;
pub mod norm;
mod par;
mod rope;
mod shapes;
pub mod weights;

pub use batch::{ForwardBatch, ForwardOutput, SeqSpan};
pub use config::{Activation, Arch, ModelConfig, RopeYarn};
pub use error::ModelError;
pub use kv_cache::{ImportError, KvCache, KvFormat, KvFormats, KvRows};
pub use kv_layout::KvLayout;
pub use lora::{LoraAdapter, LoraSet};
pub use model::{AttnPrecision, ForwardStats, Model};
pub use moe::{MoeConfig, MoeStats};

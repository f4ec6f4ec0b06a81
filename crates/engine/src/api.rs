//! What callers (the server, `folio generate`, benchmarks) see of the engine.
//!
//! The engine runs on its own thread and owns all state; callers hold a cheap, cloneable
//! [`EngineHandle`]. `submit` validates a request once into the engine's queue and returns
//! a [`RequestStream`] of [`Event`]s. Dropping the stream aborts the request: the engine
//! notices the closed channel, stops scheduling it and frees its KV once no in-flight step
//! reads it.

use crate::SamplingParams;
use folio_core::MaxTokens;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// Engine-wide request id and why a request ended: folio-core's, so the scheduler's
/// verdict reaches callers untranslated.
pub use folio_core::sched::RejectReason;
pub use folio_core::{FinishReason, RequestId};

/// A generation request, already tokenized.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    /// Upper bound on generated tokens, or score only. [`EngineHandle::submit`] bounds it by
    /// the context left after the prompt; the engine and the scheduler trust it from there.
    pub max_tokens: MaxTokens,
    /// Strings that end generation; the matched text is not emitted and never split
    /// across events.
    pub stop: Vec<String>,
    /// Token ids that end generation (in addition to the model's end-of-generation ids).
    pub stop_token_ids: Vec<u32>,
    /// Keep going past end-of-generation tokens (benchmarks).
    pub ignore_eos: bool,
    /// Return the log-probability of each sampled token and this many top alternatives.
    pub logprobs: Option<usize>,
    /// When the answer is due; admission control rejects requests that cannot make it.
    pub deadline: Option<Instant>,
    /// When the request arrived (for TTFT); defaults to submit time.
    pub arrival: Option<Instant>,
    /// Per-request speculation override (method, fixed draft length).
    pub spec: Option<crate::SpecMethod>,
    pub spec_tokens: Option<usize>,
    /// LoRA adapters to run with (`None`: the base model). The request holds them until it
    /// ends, and its prefix-cache blocks are keyed by them.
    pub lora: Option<folio_model::LoraSet>,
    /// Structured output: what the generated text must match (masked at every sampled
    /// position; the request stops when the grammar is complete), compiled by
    /// [`crate::Grammars::compile`] before submit.
    pub constraint: Option<crate::Compiled>,
    /// Score the prompt: the log-probability of every prompt token after the first, with
    /// this many top alternatives (see `prompt_scoring`). The request then skips the
    /// prefix cache, and `max_tokens` may be 0 (score only, generate nothing).
    pub prompt_logprobs: Option<usize>,
    /// An embedding instead of a generation: the prompt is computed (batched with the
    /// other requests) and pooled into one normalized vector, sent as `Event::Embedding`
    /// before `Finished`; nothing is sampled (see `embed`).
    pub embed: Option<crate::Pooling>,
    /// Special tokens' text goes into the output (end-of-generation tokens still end it
    /// without text): for tool-call formats whose markers are special tokens (GPT-OSS
    /// harmony's `<|channel|>`, Kimi K2's `<|tool_call_begin|>`).
    pub special_text: bool,
}

impl GenerateRequest {
    pub fn new(prompt: Vec<u32>, max_tokens: impl Into<MaxTokens>) -> GenerateRequest {
        GenerateRequest {
            prompt,
            params: SamplingParams::default(),
            max_tokens: max_tokens.into(),
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            deadline: None,
            arrival: None,
            spec: None,
            spec_tokens: None,
            lora: None,
            constraint: None,
            prompt_logprobs: None,
            embed: None,
            special_text: false,
        }
    }

    /// An embedding request for `prompt` (see [`GenerateRequest::embed`]).
    pub fn embedding(prompt: Vec<u32>, pooling: crate::Pooling) -> GenerateRequest {
        GenerateRequest {
            embed: Some(pooling),
            ..GenerateRequest::new(prompt, 1)
        }
    }
}

/// Log-probability of one sampled token with its top alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// Token counts of a finished request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
}

/// What a request's stream carries.
#[derive(Clone, Debug)]
pub enum Event {
    /// Newly generated tokens and the text they complete (may be empty while a UTF-8
    /// sequence or a possible stop string is pending).
    Tokens {
        ids: Vec<u32>,
        text: String,
        logprobs: Vec<TokenLogprob>,
        /// With `prompt_logprobs`: once, on the first event, the scores of prompt tokens
        /// 1.. (the first prompt token has none). Empty otherwise.
        prompt_logprobs: Vec<TokenLogprob>,
        at: Instant,
    },
    /// An embedding request's vector (L2-normalized, `EngineInfo::hidden_size` long),
    /// once, before `Finished`.
    Embedding { vector: Vec<f32>, at: Instant },
    /// The last event of every stream.
    Finished {
        reason: FinishReason,
        usage: Usage,
        at: Instant,
    },
}

/// The receiving end of one request. Dropping it aborts the request.
pub struct RequestStream {
    pub id: RequestId,
    pub rx: mpsc::UnboundedReceiver<Event>,
}

impl RequestStream {
    /// Next event, or `None` after `Finished`.
    pub async fn next(&mut self) -> Option<Event> {
        self.rx.recv().await
    }

    /// Blocking variant for synchronous callers (CLI, tests).
    pub fn next_blocking(&mut self) -> Option<Event> {
        self.rx.blocking_recv()
    }
}

/// Why a request was refused at submit time.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SubmitError {
    /// Bad input: `field` is the request field at fault, `message` names the limit and the
    /// value received.
    #[error("{message}")]
    Invalid {
        field: &'static str,
        message: String,
        kind: InvalidKind,
    },
    /// The engine is shutting down.
    #[error("engine is shutting down")]
    ShuttingDown,
}

/// What kind of limit an invalid request broke (servers pick their error code by it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidKind {
    /// The prompt (plus output) does not fit the context length.
    ContextLength,
    /// Any other field out of its range.
    Parameter,
}

impl SubmitError {
    fn invalid(field: &'static str, kind: InvalidKind, message: String) -> SubmitError {
        SubmitError::Invalid {
            field,
            message,
            kind,
        }
    }
}

/// Static facts about the running engine.
#[derive(Clone, Debug)]
pub struct EngineInfo {
    pub model_name: String,
    pub model_path: String,
    pub context_length: usize,
    pub vocab_size: usize,
    pub block_size: usize,
    pub num_blocks: usize,
    /// Longest sequence the KV pool holds (num_blocks × block_size in the single layout;
    /// more with sliding-window layers, whose pages behind the window are released).
    pub kv_capacity_tokens: usize,
    /// Layers whose K/V one block (page) holds: every layer, or for a model with
    /// sliding-window layers, as many as it has full-attention layers.
    pub kv_layers_per_block: usize,
    /// Bytes of one block (page).
    pub kv_block_bytes: usize,
    /// KV bytes one token takes in the cache, all layers (MLA: the latent row).
    pub kv_bytes_per_token: usize,
    /// KV bytes per token of the uncompressed K and V (MLA: every head's decompressed K and
    /// V, what the latent row saves against; otherwise equal to `kv_bytes_per_token`).
    pub kv_bytes_per_token_uncompressed: usize,
    /// K's and V's formats: `"q8_0"`, or `"k=q4h,v=q4_0"` when they differ.
    pub kv_format: String,
    /// Bytes of one token's K, all layers and KV heads, as the cache stores them.
    pub kv_k_bytes_per_token: usize,
    /// Bytes of one token's V, likewise.
    pub kv_v_bytes_per_token: usize,
    /// Matmul arithmetic: "fast" (block sums) or "llama" (llama.cpp's exact order).
    pub numerics: String,
    /// Width of the final hidden state: the length of an embedding.
    pub hidden_size: usize,
    /// The embedding pooling the model file asks for (`pooling_type`), if any.
    pub gguf_pooling: Option<crate::Pooling>,
}

/// Live counters and gauges the engine publishes after every step; read by /metrics.
#[derive(Debug, Default)]
pub struct EngineMetrics {
    pub num_running: std::sync::atomic::AtomicUsize,
    pub num_waiting: std::sync::atomic::AtomicUsize,
    pub kv_blocks_used: std::sync::atomic::AtomicUsize,
    pub kv_blocks_cached: std::sync::atomic::AtomicUsize,
    pub prefix_queries_tokens: std::sync::atomic::AtomicU64,
    pub prefix_hits_tokens: std::sync::atomic::AtomicU64,
    pub preemptions: std::sync::atomic::AtomicU64,
    pub rejected: std::sync::atomic::AtomicU64,
    pub steps: std::sync::atomic::AtomicU64,
    pub prompt_tokens: std::sync::atomic::AtomicU64,
    pub generation_tokens: std::sync::atomic::AtomicU64,
    pub recomputed_tokens: std::sync::atomic::AtomicU64,
    pub kv_blocks_total: std::sync::atomic::AtomicUsize,
    pub cow_copies: std::sync::atomic::AtomicU64,
    /// Blocks written to / read back from the second KV tier.
    pub tier_spills: std::sync::atomic::AtomicU64,
    pub tier_fetches: std::sync::atomic::AtomicU64,
    /// Prompt tokens served from blocks fetched back from the second tier.
    pub tier_hit_tokens: std::sync::atomic::AtomicU64,
    /// KV-cache events not delivered: queue full, or no subscriber connected (shared with
    /// the publisher through [`crate::KvEventSender::dropped`]).
    pub kv_events_dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
    pub evictions: std::sync::atomic::AtomicU64,
    /// Logical blocks whose sliding-window pages were released behind the window.
    pub kv_window_released_blocks: std::sync::atomic::AtomicU64,
    /// Speculative decoding counters (drafted, accepted, by position, ΣT/ΣN).
    pub spec: std::sync::Mutex<folio_spec::SpecStats>,
    /// Names of the adapters of running and of waiting requests (`vllm:lora_requests_info`).
    pub lora_running: std::sync::Mutex<Vec<String>>,
    pub lora_waiting: std::sync::Mutex<Vec<String>>,
    /// Structured output: nanoseconds spent computing and applying token masks, and how
    /// many masks (sampled, drafted or verified positions under a grammar).
    pub constraint_mask_ns: std::sync::atomic::AtomicU64,
    pub constraint_masks: std::sync::atomic::AtomicU64,
    /// Nanoseconds spent committing tokens to the matchers (sampled and drafted ones).
    pub constraint_commit_ns: std::sync::atomic::AtomicU64,
    /// The most recent steps (bounded), for profiling and benchmarks.
    pub step_log: std::sync::Mutex<std::collections::VecDeque<crate::StepStats>>,
}

pub(crate) enum Command {
    Add {
        id: RequestId,
        req: Box<GenerateRequest>,
        tx: mpsc::UnboundedSender<Event>,
    },
    /// n samples of one prompt: the first request computes the prompt; the others are
    /// forked from it (sharing its KV blocks) when its prefill completes.
    AddGroup {
        ids: Vec<RequestId>,
        req: Box<GenerateRequest>,
        params: Vec<SamplingParams>,
        txs: Vec<mpsc::UnboundedSender<Event>>,
    },
    Abort(RequestId),
    Shutdown,
}

/// A cheap, cloneable handle to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    pub(crate) tx: std::sync::mpsc::Sender<Command>,
    pub(crate) next_id: Arc<std::sync::atomic::AtomicU64>,
    pub info: Arc<EngineInfo>,
    pub metrics: Arc<EngineMetrics>,
    pub tokenizer: Arc<folio_tokenizer::Tokenizer>,
    /// The LoRA adapters served by name.
    pub lora: Arc<std::sync::Mutex<crate::LoraRegistry>>,
    /// The vocabulary as the constraint compiler sees it (built on first use).
    pub grammars: Arc<crate::Grammars>,
    /// The engine thread, joined by [`EngineHandle::shutdown_and_join`] (the first caller
    /// takes it).
    pub(crate) thread: Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl EngineHandle {
    /// Queues a request. Validation that needs no engine state happens here, so a bad
    /// request never reaches the loop.
    pub fn submit(&self, mut req: GenerateRequest) -> Result<RequestStream, SubmitError> {
        self.validate(&mut req)?;
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        self.tx
            .send(Command::Add {
                id,
                req: Box::new(req),
                tx,
            })
            .map_err(|_| SubmitError::ShuttingDown)?;
        Ok(RequestStream { id, rx })
    }

    /// Checks `req` and bounds its `max_tokens` by the context left after its prompt (the
    /// server's are already within it; library callers may ask for more).
    fn validate(&self, req: &mut GenerateRequest) -> Result<(), SubmitError> {
        let ctx = self.info.context_length;
        if req.prompt.is_empty() {
            return Err(SubmitError::invalid(
                "prompt",
                InvalidKind::Parameter,
                "prompt: must contain at least 1 token, got 0".into(),
            ));
        }
        if req.prompt.len() >= ctx {
            return Err(SubmitError::invalid(
                "prompt",
                InvalidKind::ContextLength,
                format!(
                "prompt: {} tokens; the context length is {ctx}, so at most {} prompt tokens fit",
                req.prompt.len(),
                ctx - 1
            ),
            ));
        }
        if let Some(&t) = req
            .prompt
            .iter()
            .find(|&&t| t as usize >= self.info.vocab_size)
        {
            return Err(SubmitError::invalid(
                "prompt",
                InvalidKind::Parameter,
                format!(
                    "prompt: token id {t} >= vocab size {}",
                    self.info.vocab_size
                ),
            ));
        }
        if req.max_tokens.is_score_only() && req.prompt_logprobs.is_none() {
            return Err(SubmitError::invalid(
                "max_tokens",
                InvalidKind::Parameter,
                "max_tokens: must be >= 1 unless prompt_logprobs is set, got 0".into(),
            ));
        }
        req.max_tokens = req.max_tokens.within(ctx - req.prompt.len());
        Ok(())
    }

    /// Queues an embedding of `prompt` (see [`GenerateRequest::embed`]): the stream
    /// carries `Event::Embedding`, then `Finished` with the prompt's usage.
    pub fn embed(
        &self,
        prompt: Vec<u32>,
        pooling: crate::Pooling,
        arrival: Option<Instant>,
    ) -> Result<RequestStream, SubmitError> {
        let mut req = GenerateRequest::embedding(prompt, pooling);
        req.arrival = arrival;
        self.submit(req)
    }

    /// Queues `params.len()` samples of one prompt (OpenAI `n`): one stream each. The prompt
    /// is computed once and its KV shared by all samples (copy-on-write).
    pub fn submit_n(
        &self,
        req: GenerateRequest,
        params: Vec<SamplingParams>,
    ) -> Result<Vec<RequestStream>, SubmitError> {
        if params.len() <= 1 {
            let mut req = req;
            if let Some(p) = params.into_iter().next() {
                req.params = p;
            }
            return Ok(vec![self.submit(req)?]);
        }
        let mut req = req;
        self.validate(&mut req)?;
        let n = params.len() as u64;
        let first = self
            .next_id
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        let ids: Vec<RequestId> = (first..first + n).collect();
        let (txs, streams): (Vec<_>, Vec<_>) = ids
            .iter()
            .map(|&id| {
                let (tx, rx) = mpsc::unbounded_channel();
                (tx, RequestStream { id, rx })
            })
            .unzip();
        self.tx
            .send(Command::AddGroup {
                ids,
                req: Box::new(req),
                params,
                txs,
            })
            .map_err(|_| SubmitError::ShuttingDown)?;
        Ok(streams)
    }

    /// The adapters `names` (with scales) as one request's set; an unknown name is an error.
    pub fn lora_set(
        &self,
        names: &[(String, f32)],
    ) -> Result<folio_model::LoraSet, crate::LoraError> {
        let mut reg = self.lora.lock().unwrap_or_else(|e| e.into_inner());
        let items = names
            .iter()
            .map(|(n, s)| Ok((reg.resolve(n)?, *s)))
            .collect::<Result<Vec<_>, crate::LoraError>>()?;
        Ok(folio_model::LoraSet::new(items))
    }

    /// Aborts a request (also happens when its stream is dropped).
    pub fn abort(&self, id: RequestId) {
        let _ = self.tx.send(Command::Abort(id));
    }

    /// Asks the engine to finish: new submits fail, running requests are cancelled.
    pub fn shutdown(&self) {
        let _ = self.tx.send(Command::Shutdown);
    }

    /// Shuts the engine down and waits for its thread to end: when this returns, the
    /// thread has dropped the model's weights and the KV pool (what a server unloading a
    /// model needs before it counts that memory free). Blocking: call it off the async
    /// threads. Running requests end as in [`EngineHandle::shutdown`].
    pub fn shutdown_and_join(&self) {
        self.shutdown();
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }
}

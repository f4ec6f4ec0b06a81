//! Engine settings: the scheduler's, plus how much memory KV gets and in what format.

use folio_core::kv::EvictionPolicy;
use folio_core::sched::{BatchPolicy, KvReservation};
use folio_model::{KvFormat, KvFormats};

/// Where speculative drafts come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecMethod {
    Off,
    /// Context lookup: n-gram matches in the request's own prompt and output.
    Ngram,
    /// Self-drafting with the target's first layers (reads the target's KV for them).
    SelfDraft,
}

impl SpecMethod {
    pub fn parse(s: &str) -> Option<SpecMethod> {
        match s {
            "off" | "none" => Some(SpecMethod::Off),
            "ngram" => Some(SpecMethod::Ngram),
            "self" => Some(SpecMethod::SelfDraft),
            _ => None,
        }
    }
}

/// The default most tokens a step computes (decodes + prefill chunks). On a CPU a step is
/// compute-bound from a few dozen rows on, so a bigger step gains no throughput, while every
/// prompt in a step gets its first token only when the step ends. Measured the same day on
/// 2 cores, 16 prompts of 256 tokens sent at once to the Qwen2.5-1.5B, no ITL target:
/// 512-token steps 53.4–54.9 output tok/s at a mean TTFT of 11.0–11.5 s, 256-token steps
/// 50.5–52.4 tok/s at 11.9–12.0 s (docs/BENCHMARKS.md, "Serving defaults and the tile
/// pipeline").
pub const DEFAULT_TOKEN_BUDGET: usize = 512;

/// The default target step time while requests decode (`EngineConfig::max_itl_ms`): none.
/// A target below the step time of the running decodes throttles the prompts waiting
/// behind them: at 120 ms (reading speed) the same 16-prompt load ran at 40 output tok/s
/// with a 20.6 s mean time to first token, against 54.9 tok/s and 11.0 s without a target,
/// while the decode steps alone took ~145 ms (docs/BENCHMARKS.md). Interactive deployments
/// that would rather bound the inter-token latency set one (`--max-itl-ms`).
pub const DEFAULT_MAX_ITL_MS: Option<f64> = None;

/// Everything `spawn_engine` needs besides the model.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub policy: BatchPolicy,
    /// Most tokens computed in one step (decodes + prefill chunks).
    pub token_budget: usize,
    /// Most prompt tokens one request computes in one step.
    pub max_chunk: usize,
    /// Most requests running at once.
    pub max_running: usize,
    pub reservation: KvReservation,
    /// Tokens per KV block.
    pub block_size: usize,
    /// KV memory budget in bytes; the block count follows from the format's bytes/token.
    pub kv_cache_bytes: usize,
    /// K's and V's storage formats (`--kv-format-k`, `--kv-format-v`).
    pub kv_format: KvFormats,
    pub prefix_cache: bool,
    pub eviction: EvictionPolicy,
    /// Name reported by the API (`model` field).
    pub served_name: Option<String>,
    /// Default speculation for requests that do not choose.
    pub spec: SpecMethod,
    /// Fixed draft length; `None` = adaptive (marginal rule).
    pub spec_tokens: Option<usize>,
    /// Longest draft the adaptive controller may choose.
    pub spec_max_tokens: usize,
    /// Directory of the second KV tier (evicted prefix blocks on disk, kept across
    /// restarts); `None` = no second tier.
    pub kv_disk_dir: Option<std::path::PathBuf>,
    /// Byte cap of the second tier.
    pub kv_disk_bytes: u64,
    /// Layers of the self-draft (0 = three quarters of the model: earlier exits of small
    /// models rarely agree with the full model).
    pub spec_draft_layers: usize,
    /// Target step time while requests decode: each such step's token budget is the most
    /// tokens whose measured cost fits it, so prefill chunks do not stretch the inter-token
    /// latency of running requests past it; where the decodes alone take longer, prompt
    /// tokens may lengthen a step by half its decode-only time (the rule and its floor are
    /// `folio_core::cost::step_budget`). With nothing decoding the whole `token_budget` is
    /// used. `None`: always the whole budget. Default [`DEFAULT_MAX_ITL_MS`].
    pub max_itl_ms: Option<f64>,
    /// Keep every sliding-window layer's KV for the whole context, as llama.cpp's
    /// `--swa-full` (same page layout, nothing released): for comparison and debugging.
    pub swa_full: bool,
    /// LoRA adapters registered at start (`--lora NAME=PATH`).
    pub lora: Vec<(String, std::path::PathBuf)>,
    /// Adapters resident at once (`--max-loras`), apart from KV memory.
    pub max_loras: usize,
    /// Largest adapter rank accepted (`--max-lora-rank`).
    pub max_lora_rank: usize,
    /// Where to send prefix-cache events (`--kv-events-endpoint`); `None`: none are
    /// recorded (see [`crate::kv_events`]).
    pub kv_events: Option<crate::kv_events::KvEventSender>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            policy: BatchPolicy::Continuous,
            token_budget: DEFAULT_TOKEN_BUDGET,
            max_chunk: 512,
            max_running: 64,
            reservation: KvReservation::OnDemand,
            block_size: 16,
            kv_cache_bytes: 1 << 30,
            kv_format: KvFormats::same(KvFormat::F16),
            prefix_cache: true,
            eviction: EvictionPolicy::ValuePerByte,
            served_name: None,
            spec: SpecMethod::Off,
            spec_tokens: None,
            spec_max_tokens: 8,
            max_itl_ms: DEFAULT_MAX_ITL_MS,
            swa_full: false,
            lora: Vec::new(),
            // vLLM's --max-loras default is 1 GPU slot; adapters here live in host
            // memory, 8 of SmolLM2's rank-8 adapters take ~80 MB.
            max_loras: 8,
            // vLLM's default --max-lora-rank.
            max_lora_rank: 16,
            spec_draft_layers: 0,
            kv_disk_dir: None,
            kv_disk_bytes: 4 << 30,
            kv_events: None,
        }
    }
}

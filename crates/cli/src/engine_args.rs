//! Engine flags shared by `serve`, `generate` and `bench`: parsed flags here, settings in
//! [`folio_engine::EngineConfig`].

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use folio_core::kv::EvictionPolicy;
use folio_core::sched::{BatchPolicy, KvReservation};
use folio_engine::{EngineConfig, EngineHandle, SpecMethod};
use folio_model::KvFormat;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum PolicyArg {
    /// Iteration-level batching, decodes first, chunked prefill under the token budget.
    Continuous,
    /// Admit a group, retire it whole.
    Fixed,
    /// One request at a time.
    Serial,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum ReserveArg {
    /// Admit only when KV for prompt + max_tokens − 1 fits.
    ReserveFinal,
    /// Allocate as needed; preempt the newest request (recompute) when blocks run out.
    OnDemand,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum EvictionArg {
    /// Rank cached prefixes by expected saving per byte (V_h = p_h(T_r − T_f) − T_m).
    Value,
    /// Least recently used.
    Lru,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum SpecArg {
    Off,
    /// Context lookup: drafts copied from n-gram matches in the prompt and output.
    Ngram,
    /// Self-drafting with the model's first layers.
    #[value(name = "self")]
    SelfDraft,
}

pub use crate::bench_cmd::NumericsArg;

/// The clap parser of `--kv-format`: [`KvFormat`]'s own names, listed in `--help`. The type
/// is folio-gguf's, so the CLI parses it here instead of keeping an enum of its own.
pub fn kv_format_parser() -> impl clap::builder::TypedValueParser<Value = KvFormat> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(KvFormat::EVERY.map(KvFormat::name))
        .map(|s| KvFormat::parse(&s).expect("a listed KvFormat name"))
}

/// One `--kv-format` entry of `bench quality`, `bench model` and `plan`: a format for K
/// and V, or `K:V` apart.
pub fn kv_formats_parser(s: &str) -> Result<folio_model::KvFormats, String> {
    folio_model::KvFormats::parse(s).ok_or_else(|| {
        let names: Vec<&str> = KvFormat::EVERY.map(|f| f.name()).to_vec();
        format!(
            "{s:?}: expected a format or K:V, formats {}",
            names.join(", ")
        )
    })
}

/// llama.cpp's single-dash spellings of the KV cache types, `-ctk` and `-ctv` (with or
/// without `=value`), as the long flags clap knows; every other argument as it is.
pub fn llama_spelling(arg: std::ffi::OsString) -> std::ffi::OsString {
    let Some(s) = arg.to_str() else { return arg };
    for (short, long) in [("-ctk", "--cache-type-k"), ("-ctv", "--cache-type-v")] {
        if s == short {
            return long.into();
        }
        if let Some(v) = s.strip_prefix(short).and_then(|r| r.strip_prefix('=')) {
            return format!("{long}={v}").into();
        }
    }
    arg
}

impl EngineArgs {
    /// K's and V's formats: `--kv-format` for both, each overridden by its own flag.
    pub fn kv_formats(&self) -> folio_model::KvFormats {
        folio_model::KvFormats {
            k: self.kv_format_k.unwrap_or(self.kv_format),
            v: self.kv_format_v.unwrap_or(self.kv_format),
        }
    }
}

/// `--attn-precision`: what the queries are rounded to before attention.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum AttnPrecisionArg {
    /// f16 whatever the KV format (llama.cpp's rounding against an f16 cache; default).
    F16,
    /// f32 queries: only the KV storage format rounds.
    F32,
    /// The KV format's precision: bf16 for bf16, q8_0 groups for q8_0 and q4_0.
    Kv,
}

impl AttnPrecisionArg {
    pub fn precision(self) -> folio_model::AttnPrecision {
        match self {
            AttnPrecisionArg::F16 => folio_model::AttnPrecision::F16,
            AttnPrecisionArg::F32 => folio_model::AttnPrecision::F32,
            AttnPrecisionArg::Kv => folio_model::AttnPrecision::Kv,
        }
    }
}

/// Model and engine settings.
#[derive(Args, Clone, Debug)]
pub struct EngineArgs {
    /// A local GGUF file, or a catalogue model fetched on first use (`folio models` lists
    /// them; `--model list` too); default: smollm2-135m (SmolLM2-135M-Instruct Q4_1).
    /// `folio serve` takes it repeatedly, also as `NAME=PATH|catalogue-name`: each is one
    /// model, loaded on first use (the first is the default model).
    #[arg(long, value_name = "PATH|NAME|NAME=PATH")]
    pub model: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "continuous")]
    pub policy: PolicyArg,
    /// Compute threads (the matmul pool, the caller included); default: `FOLIO_THREADS`,
    /// else every core. Replicas sharing a machine should split its cores.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Most tokens (decodes + prefill chunks) in one iteration.
    #[arg(long, default_value_t = folio_engine::config::DEFAULT_TOKEN_BUDGET)]
    pub token_budget: usize,
    /// Target inter-token latency while requests decode: each such step's token budget
    /// shrinks to what the measured step costs fit in this many milliseconds, or in 1.5x the
    /// decode-only step where that is longer (prefill chunks wait instead, but at least 16
    /// prompt tokens run per step). 0 = off (every step may use the whole --token-budget),
    /// the default: a target below the decodes' own step time throttles waiting prompts.
    #[arg(long, default_value_t = folio_engine::config::DEFAULT_MAX_ITL_MS.unwrap_or(0.0))]
    pub max_itl_ms: f64,
    /// Keep the sliding-window layers' KV for the whole context (as llama.cpp's
    /// `--swa-full`); by default it is released behind the window.
    #[arg(long)]
    pub swa_full: bool,
    /// Most prompt tokens of one request per iteration (chunked prefill).
    #[arg(long, default_value_t = 512)]
    pub max_chunk: usize,
    /// Most requests running at once.
    #[arg(long, default_value_t = 64)]
    pub max_running: usize,
    #[arg(long, value_enum, default_value = "on-demand")]
    pub kv_reservation: ReserveArg,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// KV cache memory in bytes (suffixes k, m, g allowed: 512m, 2g).
    #[arg(long, default_value = "1g")]
    pub kv_cache_bytes: String,
    /// KV cache memory as a fraction of this machine's RAM (overrides --kv-cache-bytes).
    #[arg(long)]
    pub kv_cache_fraction: Option<f64>,
    /// KV cache storage format of K and V: f16, bf16, q8_0 (8.5 bits/value), q4_0 and
    /// iq4_nl (4.5), q4h (Walsh–Hadamard rotated iq4_nl, 4.5) and q8h (rotated q8_0, 8.5;
    /// the rotated ones need a power-of-two head_dim). --kv-format-k/-v override a side.
    #[arg(long, value_parser = kv_format_parser(), default_value = "f16")]
    pub kv_format: KvFormat,
    /// K's storage format (default: --kv-format); llama.cpp's -ctk/--cache-type-k.
    #[arg(long, visible_alias = "cache-type-k", value_parser = kv_format_parser())]
    pub kv_format_k: Option<KvFormat>,
    /// V's storage format (default: --kv-format); llama.cpp's -ctv/--cache-type-v.
    #[arg(long, visible_alias = "cache-type-v", value_parser = kv_format_parser())]
    pub kv_format_v: Option<KvFormat>,
    /// Compute precision of attention, apart from the storage format: the queries are
    /// rounded to f16 (default), kept f32, or rounded to the KV format's precision (kv).
    #[arg(long, value_enum, default_value = "f16")]
    pub attn_precision: AttnPrecisionArg,
    /// Matmul arithmetic: `fast`, or `llama` for llama.cpp's exact outputs.
    #[arg(long, value_enum, default_value = "fast")]
    pub numerics: NumericsArg,
    /// Disable prefix caching across requests.
    #[arg(long)]
    pub no_prefix_cache: bool,
    #[arg(long, value_enum, default_value = "value")]
    pub eviction: EvictionArg,
    /// Second KV tier: evicted prefix blocks spilled to this directory and fetched back
    /// instead of recomputed (kept across restarts).
    #[arg(long)]
    pub kv_disk_dir: Option<PathBuf>,
    /// Byte cap of the second KV tier (suffixes k, m, g).
    #[arg(long, default_value = "4g")]
    pub kv_disk_bytes: String,
    /// Speculative decoding proposer.
    #[arg(long, value_enum, default_value = "off")]
    pub spec: SpecArg,
    /// Fixed draft length; adaptive (marginal rule) when omitted.
    #[arg(long)]
    pub spec_tokens: Option<usize>,
    /// A separate draft GGUF or catalogue model (same vocabulary) for `--spec self`, instead
    /// of the target's first layers. Its KV cache is extra memory (the same blocks, its bytes per token).
    #[arg(long)]
    pub draft_model: Option<PathBuf>,
    /// Layers of the self-draft (default: three quarters of the model).
    #[arg(long, default_value_t = 0)]
    pub spec_draft_layers: usize,
    /// A Jinja chat template file used instead of the model's `tokenizer.chat_template`.
    #[arg(long)]
    pub chat_template: Option<PathBuf>,
    /// A LoRA adapter (llama.cpp's adapter GGUF) served as model NAME; repeatable. More can
    /// be loaded at runtime (`POST /v1/load_lora_adapter`).
    #[arg(long = "lora", value_name = "NAME=PATH", value_parser = parse_lora)]
    pub lora: Vec<(String, PathBuf)>,
    /// Adapters held in memory at once (slots apart from KV memory); loading past it
    /// evicts the least recently used idle adapter.
    #[arg(long, default_value_t = EngineConfig::default().max_loras)]
    pub max_loras: usize,
    /// Largest adapter rank accepted.
    #[arg(long, default_value_t = EngineConfig::default().max_lora_rank)]
    pub max_lora_rank: usize,
}

/// `--lora NAME=PATH`.
fn parse_lora(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((n, p)) if !n.is_empty() && !p.is_empty() => Ok((n.to_string(), PathBuf::from(p))),
        _ => Err(format!("expected NAME=PATH, got {s:?}")),
    }
}

/// `--model PATH|NAME|list`: an existing file, else a catalogue model (fetched on first
/// use), else the default model; `list` prints the catalogue and exits.
pub fn resolve_model(arg: Option<&Path>) -> Result<PathBuf> {
    Ok(folio_fetch::resolve_model_or_list(arg)?)
}

/// "512m" → 536870912.
pub fn parse_bytes(flag: &str, s: &str) -> Result<usize> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mul) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1usize << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        _ => (&t[..], 1),
    };
    let v: f64 = num
        .parse()
        .with_context(|| format!("{flag}: expected a size like 512m or 2g, got {s:?}"))?;
    if v.is_nan() || v <= 0.0 || v * mul as f64 > 1e13 {
        bail!("{flag}: must be in (0, 10 TB], got {s:?}");
    }
    Ok((v * mul as f64) as usize)
}

/// `f` × MemTotal from /proc/meminfo.
fn fraction_of_ram(f: f64) -> Result<usize> {
    if !(f > 0.0 && f <= 0.9) {
        bail!("--kv-cache-fraction: must be in (0, 0.9], got {f}");
    }
    let info = std::fs::read_to_string("/proc/meminfo")
        .context("--kv-cache-fraction: reading /proc/meminfo")?;
    let kb: f64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("--kv-cache-fraction: no MemTotal in /proc/meminfo")?;
    Ok((kb * 1024.0 * f) as usize)
}

impl EngineArgs {
    pub fn config(&self) -> Result<EngineConfig> {
        Ok(EngineConfig {
            policy: match self.policy {
                PolicyArg::Continuous => BatchPolicy::Continuous,
                PolicyArg::Fixed => BatchPolicy::Fixed,
                PolicyArg::Serial => BatchPolicy::Serial,
            },
            token_budget: self.token_budget,
            max_itl_ms: (self.max_itl_ms > 0.0).then_some(self.max_itl_ms),
            swa_full: self.swa_full,
            max_chunk: self.max_chunk,
            max_running: self.max_running,
            reservation: match self.kv_reservation {
                ReserveArg::ReserveFinal => KvReservation::ReserveFinal,
                ReserveArg::OnDemand => KvReservation::OnDemand,
            },
            block_size: self.block_size,
            kv_cache_bytes: match self.kv_cache_fraction {
                Some(f) => fraction_of_ram(f)?,
                None => parse_bytes("--kv-cache-bytes", &self.kv_cache_bytes)?,
            },
            kv_format: self.kv_formats(),
            prefix_cache: !self.no_prefix_cache,
            eviction: match self.eviction {
                EvictionArg::Value => EvictionPolicy::ValuePerByte,
                EvictionArg::Lru => EvictionPolicy::Lru,
            },
            served_name: None,
            spec: match self.spec {
                SpecArg::Off => SpecMethod::Off,
                SpecArg::Ngram => SpecMethod::Ngram,
                SpecArg::SelfDraft => SpecMethod::SelfDraft,
            },
            spec_tokens: self.spec_tokens,
            spec_max_tokens: self.spec_tokens.unwrap_or(8).max(1),
            spec_draft_layers: self.spec_draft_layers,
            kv_disk_dir: self.kv_disk_dir.clone(),
            kv_disk_bytes: parse_bytes("--kv-disk-bytes", &self.kv_disk_bytes)? as u64,
            lora: self.lora.clone(),
            max_loras: self.max_loras,
            max_lora_rank: self.max_lora_rank,
            // `folio serve --kv-events-endpoint` sets it.
            kv_events: None,
        })
    }

    /// Loads the model (fetching the default on first use) and starts the engine.
    pub fn start(&self) -> Result<EngineHandle> {
        start_with(self, self.config()?)
    }
}

/// Sizes the process's compute pool (`--threads`; `None` leaves the default: `FOLIO_THREADS`,
/// else every core).
pub fn apply_threads(threads: Option<usize>) -> Result<()> {
    if let Some(n) = threads {
        if n == 0 {
            bail!("--threads: must be at least 1, got 0");
        }
        if let Err(have) = folio_kernels::pool::ThreadPool::configure_global(n) {
            bail!("--threads {n}: the compute pool already runs {have} threads");
        }
    }
    Ok(())
}

/// Starts the engine on `args`' model with an explicit config.
pub fn start_with(args: &EngineArgs, cfg: EngineConfig) -> Result<EngineHandle> {
    apply_threads(args.threads)?;
    let path = resolve_model(args.model.first().map(PathBuf::as_path))?;
    let draft_path = match &args.draft_model {
        Some(p) => Some(resolve_model(Some(p))?),
        None => None,
    };
    let (gguf, model) = load_model(args, &path, "")?;
    let draft = match &draft_path {
        Some(p) => Some(load_model(args, p, "draft model ")?.1),
        None => None,
    };
    let mut tok = folio_tokenizer::Tokenizer::from_gguf(&gguf)
        .with_context(|| format!("tokenizer of {}", path.display()))?;
    if let Some(file) = &args.chat_template {
        let source = std::fs::read_to_string(file)
            .with_context(|| format!("--chat-template: reading {}", file.display()))?;
        tok.set_chat_template(&source)
            .with_context(|| format!("--chat-template {}", file.display()))?;
    }
    Ok(folio_engine::spawn_engine_with_draft(
        model,
        draft,
        Arc::new(tok),
        &path,
        cfg,
    )?)
}

/// Opens and loads one GGUF model (`what` names it in errors: "" or "draft model ") with
/// `args`' numerics and attention precision.
fn load_model(
    args: &EngineArgs,
    path: &std::path::Path,
    what: &str,
) -> Result<(folio_gguf::GgufFile, folio_model::Model)> {
    let gguf = folio_gguf::GgufFile::open(path)
        .with_context(|| format!("opening {what}{}", path.display()))?;
    let mut model = folio_model::Model::from_gguf(&gguf)
        .with_context(|| format!("loading {what}{}", path.display()))?;
    model.set_sums(args.numerics.sums());
    model.set_attn_precision(args.attn_precision.precision());
    Ok((gguf, model))
}

/// Starts an engine on the GGUF at `path` (a model of a server of several: no draft model),
/// serving it as `name`.
pub fn start_named(
    args: &EngineArgs,
    mut cfg: EngineConfig,
    path: &Path,
    name: &str,
) -> Result<EngineHandle> {
    let (gguf, model) = load_model(args, path, "")?;
    let mut tok = folio_tokenizer::Tokenizer::from_gguf(&gguf)
        .with_context(|| format!("tokenizer of {}", path.display()))?;
    if let Some(file) = &args.chat_template {
        let source = std::fs::read_to_string(file)
            .with_context(|| format!("--chat-template: reading {}", file.display()))?;
        tok.set_chat_template(&source)
            .with_context(|| format!("--chat-template {}", file.display()))?;
    }
    drop(gguf);
    cfg.served_name = Some(name.to_string());
    Ok(folio_engine::spawn_engine(model, Arc::new(tok), path, cfg)?)
}

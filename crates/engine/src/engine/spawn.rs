//! Building an engine from a model and an `EngineConfig`: the KV pool sized from the
//! memory given, the scheduler, the disk tier, the adapters named at start, and the thread.

use super::drafter::Drafter;
use super::runner::{DraftModel, Runner};
use super::Engine;
use crate::api::{EngineHandle, EngineInfo, EngineMetrics};
use crate::constraint::Grammars;
use crate::kv_pool::KvPool;
use crate::tier::DiskTier;
use crate::EngineConfig;
use folio_core::cost::StepCurve;
use folio_core::Scheduler;
use folio_kernels::pool::ThreadPool;
use folio_model::Model;
use folio_tokenizer::Tokenizer;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

/// Why an engine could not be built; the message names the setting and the value.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("draft model: vocab_size {draft} differs from the target's {target} (the draft must share the target's vocabulary)")]
    DraftVocab { draft: usize, target: usize },
    #[error("kv_cache_bytes: {bytes} bytes hold {blocks} blocks of {block_size} tokens ({block_bytes} bytes each); at least 2 are needed")]
    KvTooSmall {
        bytes: u64,
        blocks: usize,
        block_size: usize,
        block_bytes: f64,
    },
    #[error("--kv-format: {0}")]
    KvFormat(#[from] folio_model::kv_cache::KvFormatRefused),
    #[error("scheduler config: {0}")]
    Scheduler(#[from] folio_core::sched::SchedulerError),
    #[error("kv_disk_dir {dir}: {source}")]
    DiskTier {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("--lora: {given} adapters given, --max-loras is {max}")]
    TooManyLoras { given: usize, max: usize },
    #[error(transparent)]
    Lora(#[from] crate::lora::LoraError),
    #[error("starting the engine thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// Builds the engine and starts its thread.
pub fn spawn_engine(
    model: Model,
    tokenizer: Arc<Tokenizer>,
    model_path: &std::path::Path,
    cfg: EngineConfig,
) -> Result<EngineHandle, SpawnError> {
    spawn_engine_with_draft(model, None, tokenizer, model_path, cfg)
}

/// [`spawn_engine`] with a separate draft model: the model-based proposer (`--spec self`)
/// then drafts with it instead of the target's first layers. It must share the target's
/// vocabulary. Its KV is extra memory beside the target's.
pub fn spawn_engine_with_draft(
    model: Model,
    draft: Option<Model>,
    tokenizer: Arc<Tokenizer>,
    model_path: &std::path::Path,
    cfg: EngineConfig,
) -> Result<EngineHandle, SpawnError> {
    if let Some(d) = &draft {
        if d.config.vocab_size != model.config.vocab_size {
            return Err(SpawnError::DraftVocab {
                draft: d.config.vocab_size,
                target: model.config.vocab_size,
            });
        }
    }
    let c = &model.config;
    // A rotated format needs a power-of-two head_dim (refused here, naming it).
    cfg.kv_format.check_head_dim(c.head_dim)?;
    cfg.kv_format.check_pages(cfg.block_size, c.mla.is_some())?;
    if let Some(d) = &draft {
        cfg.kv_format.check_head_dim(d.config.head_dim)?;
        cfg.kv_format
            .check_pages(cfg.block_size, d.config.mla.is_some())?;
    }
    let pool = KvPool::new(&model, &cfg);
    let (layout, block_bytes, num_blocks) =
        (pool.layout.clone(), pool.block_bytes, pool.num_blocks);
    if num_blocks < 2 {
        return Err(SpawnError::KvTooSmall {
            bytes: cfg.kv_cache_bytes as u64,
            blocks: num_blocks,
            block_size: cfg.block_size,
            block_bytes,
        });
    }
    // Blocks match only under the same model contents, KV format and numerics (the disk
    // tier keeps blocks across restarts: a file replaced at the same path, or a `llama`
    // server after a `fast` one, must not reuse the old KV).
    let numerics = match model.weights.head().sums() {
        folio_kernels::matmul::Sums::Ggml => "llama",
        folio_kernels::matmul::Sums::Block => "fast",
    };
    let model_id = match crate::model_key::model_key(model_path) {
        Some(k) => format!("content:{k:016x}"),
        // Unreadable as a GGUF (a model built in memory): this process's blocks only.
        None => format!(
            "unkeyed:{}:{}:{:?}",
            model_path.to_string_lossy(),
            std::process::id(),
            std::time::SystemTime::now()
        ),
    };
    let salt = folio_core::kv::fnv1a(
        format!("{model_id}\0{}\0{numerics}", cfg.kv_format.name()).as_bytes(),
    );
    let sched_cfg = pool.scheduler_config(&model, &cfg, salt);
    let mut sched = Scheduler::new(sched_cfg)?;
    sched.kv_mut().enable_events(cfg.kv_events.is_some());
    let kv = model.new_kv_cache_with(layout, cfg.block_size, num_blocks, cfg.kv_format);
    let draft = draft.map(|d| {
        let kv = d.new_kv_cache(cfg.block_size, kv.num_blocks, cfg.kv_format);
        DraftModel { model: d, kv }
    });
    let tier = match &cfg.kv_disk_dir {
        Some(dir) => Some(
            DiskTier::open(
                dir,
                cfg.kv_disk_bytes,
                salt,
                kv.block_payload_bytes(),
                cfg.block_size,
            )
            .map_err(|source| SpawnError::DiskTier {
                dir: dir.clone(),
                source,
            })?,
        ),
        None => None,
    };
    let draft_layers = if cfg.spec_draft_layers == 0 {
        (c.n_layers * 3 / 4).max(1)
    } else {
        cfg.spec_draft_layers.min(c.n_layers)
    };
    let name = cfg.served_name.clone().unwrap_or_else(|| {
        model_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into())
    });
    let info = Arc::new(EngineInfo {
        model_name: name,
        model_path: model_path.display().to_string(),
        context_length: c.context_length,
        vocab_size: c.vocab_size,
        block_size: cfg.block_size,
        num_blocks,
        kv_capacity_tokens: sched.kv().max_seq_tokens(cfg.max_chunk),
        kv_layers_per_block: kv.layout.slots(),
        kv_block_bytes: block_bytes.round() as usize,
        kv_bytes_per_token: kv.bytes_per_token(),
        kv_bytes_per_token_uncompressed: c
            .kv_bytes_per_token_uncompressed(cfg.kv_format.bytes_per_value())
            .round() as usize,
        kv_format: cfg.kv_format.name(),
        kv_k_bytes_per_token: kv.k_bytes_per_token(),
        kv_v_bytes_per_token: kv.v_bytes_per_token(),
        numerics: numerics.into(),
        hidden_size: c.d_model,
        gguf_pooling: crate::Pooling::from_gguf(c.pooling_type),
    });
    let mut lora = crate::LoraRegistry::new(
        model.config.clone(),
        &info.model_name,
        cfg.max_loras,
        cfg.max_lora_rank,
    );
    if cfg.lora.len() > cfg.max_loras {
        return Err(SpawnError::TooManyLoras {
            given: cfg.lora.len(),
            max: cfg.max_loras,
        });
    }
    for (name, path) in &cfg.lora {
        lora.load(name, path)?;
    }
    let metrics = Arc::new(EngineMetrics {
        kv_events_dropped: cfg
            .kv_events
            .as_ref()
            .map(|tx| tx.dropped.clone())
            .unwrap_or_default(),
        ..EngineMetrics::default()
    });
    metrics.kv_blocks_total.store(num_blocks, Relaxed);
    let (tx, rx) = std::sync::mpsc::channel();
    let eog = tokenizer.eog_ids().to_vec();
    let grammars = Arc::new(Grammars::new(tokenizer.clone(), c.vocab_size));
    let mut engine = Engine {
        runner: Runner {
            model,
            kv,
            draft,
            pool: ThreadPool::global(),
            tier,
        },
        sched,
        live: HashMap::new(),
        tokenizer: tokenizer.clone(),
        eog,
        grammars: grammars.clone(),
        metrics: metrics.clone(),
        epoch: Instant::now(),
        shutting_down: false,
        drafter: Drafter::new(cfg.spec, cfg.spec_tokens, cfg.spec_max_tokens, draft_layers),
        step_curve: StepCurve::new(),
        max_itl_ms: cfg.max_itl_ms,
        token_budget: cfg.token_budget,
        forks: HashMap::new(),
        salt,
        kv_events: cfg
            .kv_events
            .clone()
            .map(|tx| crate::kv_events::KvEventTap::new(tx, cfg.block_size)),
    };
    let thread = std::thread::Builder::new()
        .name("folio-engine".into())
        .spawn(move || {
            engine.learn_costs();
            engine.run(rx)
        })?;
    Ok(EngineHandle {
        tx,
        next_id: Arc::new(std::sync::atomic::AtomicU64::new(1)),
        info,
        metrics,
        tokenizer,
        lora: Arc::new(std::sync::Mutex::new(lora)),
        grammars,
        thread: Arc::new(std::sync::Mutex::new(Some(thread))),
    })
}

//! One loaded model: what a request needs of it (the engine, the name clients use, its
//! request metrics), apart from the server-wide state in `state::Shared`.

use crate::capacity::Capacity;
use crate::metrics::ServerMetrics;
use crate::params::Limits;
use folio_engine::EngineHandle;

/// A model being served. Handlers reach it only through a [`super::Lease`].
pub struct Served {
    pub engine: EngineHandle,
    /// The name clients put in `model` (the engine's served name).
    pub name: String,
    /// This model's request histograms and finish counters (`/metrics` labels them with
    /// `model_name`).
    pub metrics: ServerMetrics,
    /// What it holds in memory, counted against `--models-memory`: the GGUF file's size
    /// (the weights) plus the KV pool the engine allocated.
    pub memory_bytes: u64,
}

impl Served {
    /// `file_bytes`: the GGUF file's size (0 when unknown).
    pub fn new(engine: EngineHandle, file_bytes: u64) -> Served {
        let info = &engine.info;
        Served {
            name: info.model_name.clone(),
            metrics: ServerMetrics::new(info.context_length),
            memory_bytes: file_bytes + (info.num_blocks as u64) * (info.kv_block_bytes as u64),
            engine,
        }
    }

    /// What one request can use (context vs. KV pool).
    pub fn capacity(&self) -> Capacity {
        Capacity::of(&self.engine.info)
    }

    pub fn limits(&self, max_n: usize) -> Limits {
        let info = &self.engine.info;
        Limits {
            context_length: info.context_length,
            vocab_size: info.vocab_size,
            max_n,
        }
    }

    /// Whether `name` is one of this model's LoRA adapters (a request naming it runs here).
    pub fn has_adapter(&self, name: &str) -> bool {
        self.engine
            .lora
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .list()
            .iter()
            .any(|l| l.name == name)
    }
}

//! The KV pool an `EngineConfig` buys: its page layout, how many pages the memory holds,
//! and the scheduler that hands them out.
//!
//! The engine builds itself from these ([`crate::spawn_engine`]), and `folio bench model
//! --capacity` drives the same scheduler over the same pool without a forward pass, so a
//! measured capacity is the engine's own.

use crate::EngineConfig;
use folio_core::kv::{KvConfig, WindowKv};
use folio_core::SchedulerConfig;
use folio_model::{KvLayout, Model};

/// The paged pool of one engine: its layout and page count.
#[derive(Debug, Clone, PartialEq)]
pub struct KvPool {
    pub layout: KvLayout,
    /// Bytes of one block (every layer's `block_size` positions, K and V).
    pub block_bytes: f64,
    /// Pages that fit `kv_cache_bytes`.
    pub num_blocks: usize,
}

impl KvPool {
    /// The pool `cfg` gives `model`: sliding-window layers in page groups of their own
    /// (released behind the window) unless the disk tier is on, which spills whole pages of
    /// one chain hash while a hybrid block spans several; block bytes from the cache's own
    /// row sizes ([`folio_model::ModelConfig::kv_rows`], MLA's latent row once, K and V each
    /// in its format).
    pub fn new(model: &Model, cfg: &EngineConfig) -> KvPool {
        let c = &model.config;
        let layout = match (model.hybrid_kv_layout(), &cfg.kv_disk_dir) {
            (Some(l), None) => l,
            (Some(_), Some(_)) => {
                tracing::info!("kv: the disk tier keeps sliding-window layers' KV whole");
                KvLayout::single(c.n_layers)
            }
            (None, _) => KvLayout::single(c.n_layers),
        };
        let bytes_per_token = c.kv_rows().bytes_per_token(cfg.kv_format) as f64;
        let block_bytes =
            bytes_per_token * cfg.block_size as f64 * layout.slots() as f64 / c.n_layers as f64;
        let num_blocks = (cfg.kv_cache_bytes as f64 / block_bytes).floor() as usize;
        KvPool {
            layout,
            block_bytes,
            num_blocks,
        }
    }

    /// The scheduler's settings over this pool: `cfg`'s batching and reservation, the
    /// prefix cache keyed by `salt`, and the window pages of a hybrid layout.
    pub fn scheduler_config(
        &self,
        model: &Model,
        cfg: &EngineConfig,
        salt: u64,
    ) -> SchedulerConfig {
        SchedulerConfig {
            policy: cfg.policy,
            token_budget: cfg.token_budget,
            max_chunk: cfg.max_chunk,
            max_running: cfg.max_running,
            reservation: cfg.reservation,
            kv: KvConfig {
                num_blocks: self.num_blocks,
                block_size: cfg.block_size,
                prefix_cache: cfg.prefix_cache,
                eviction: cfg.eviction,
                salt,
                // Block values use the measured step and tier costs (`Engine::learn_costs`,
                // from the first step on; the tier's from its probe at open).
                window: (self.layout.n_groups() > 1).then(|| WindowKv {
                    tokens: match (cfg.swa_full, model.config.sliding_window) {
                        (false, Some(w)) => w,
                        _ => usize::MAX,
                    },
                    pages: self.layout.window_pages(),
                }),
                ..KvConfig::default()
            },
        }
    }
}

//! Paged KV memory: blocks, tables, sharing, copy-on-write, prefix cache, eviction.

pub mod block_pool;
pub mod block_table;
pub mod error;
pub mod events;
pub mod eviction;
pub mod hash;
mod invariants;
pub use invariants::InvariantViolation;
pub mod manager;
pub mod prefix_cache;
mod seq_growth;
pub mod stats;
pub mod window;
mod window_pages;

pub use block_pool::{BlockPool, BlockRefs};
pub use block_table::{page, slot, BlockTable};
pub use error::KvError;
pub use events::KvEvent;
pub use eviction::EvictionPolicy;
pub use hash::{block_hash, chain_hashes, chain_salt, fnv1a, BlockHash};
pub use manager::{CopyOp, EvictedBlock, KvConfig, KvManager, PrefixMatch, StepId};
pub use prefix_cache::{CachedBlock, PrefixCache};
pub use stats::KvStats;
pub use window::{WindowCache, WindowKv, RELEASED};

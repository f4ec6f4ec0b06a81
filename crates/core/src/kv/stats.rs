//! KV occupancy and counters, for metrics and tests.

/// Snapshot of the KV manager. `free + used + evictable == total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KvStats {
    /// Tokens per block.
    pub block_size: usize,
    /// Blocks in the pool.
    pub total_blocks: usize,
    /// Blocks in the free list.
    pub free_blocks: usize,
    /// Blocks referenced by a table or an in-flight step.
    pub used_blocks: usize,
    /// Blocks registered in the prefix cache (referenced or not).
    pub cached_blocks: usize,
    /// Cached blocks nobody references: still hittable, reclaimable on demand.
    pub evictable_blocks: usize,
    /// Tokens looked up in the prefix cache (whole known length of each new sequence).
    pub prefix_query_tokens: u64,
    /// Tokens served from the prefix cache (device tier, including restored blocks).
    pub prefix_hit_tokens: u64,
    /// Of the hit tokens, those whose block had been restored from the second tier.
    pub tier_hit_tokens: u64,
    /// Cached blocks evicted (each reported once for spilling).
    pub evictions: u64,
    /// Blocks re-registered from the second tier (`restore_block`).
    pub restores: u64,
    /// Copy-on-write block copies ordered.
    pub cow_copies: u64,
    /// Window pages per logical block beside its full block (0: no window layers). Every
    /// block count above counts pages: one page holds as many layers as the full layers.
    pub window_pages_per_block: usize,
    /// Logical blocks whose window pages were released behind the window.
    pub window_released_blocks: u64,
}

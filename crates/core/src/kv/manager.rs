//! The KV manager: the only writer of reference counts, block tables and cache entries.
//!
//! Ownership: it owns the block pool, the prefix cache, one [`BlockTable`] per sequence and
//! the holds of in-flight steps. The scheduler asks it (check, then commit); the executor
//! only reads block tables and slot numbers, and performs the copy and spill orders the
//! manager hands out ([`CopyOp`], [`EvictedBlock`]) before running the step.
//!
//! Life of a block: free list → table reference(s) → (full and computed) committed to the
//! prefix cache → last table reference dropped and no step holds it → back to the free
//! list if not cached, otherwise *unreferenced cached* (evictable, still hittable) → evicted
//! (reported for spilling) and reused.
//!
//! Hybrid models (sliding-window layers beside full ones, see [`super::window`]) give each
//! sequence a second table: `m` window pages per logical block, released from the front as
//! the window moves on, cached beside the full pages under the same chain hashes.

use std::collections::HashMap;

use super::block_pool::BlockPool;
use super::block_table::BlockTable;
use super::error::KvError;
use super::events::EventLog;
use super::eviction::EvictionPolicy;
use super::hash::BlockHash;
use super::prefix_cache::PrefixCache;
use super::stats::KvStats;
use super::window::{WindowCache, WindowKv, RELEASED};
use crate::cost::{CostModel, TierCost};

/// Identity of one scheduled step; its holds are released by [`KvManager::release_step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct StepId(pub u64);

/// Settings of the KV manager.
#[derive(Debug, Clone, PartialEq)]
pub struct KvConfig {
    /// Number of physical blocks in the pool.
    pub num_blocks: usize,
    /// Tokens per block (`p`).
    pub block_size: usize,
    /// Reuse identical prefixes across requests.
    pub prefix_cache: bool,
    /// Which unreferenced cached block to evict first.
    pub eviction: EvictionPolicy,
    /// Recompute cost used to value cached blocks.
    pub cost: CostModel,
    /// Second tier costs, if the executor spills evicted blocks somewhere.
    pub tier: Option<TierCost>,
    /// Identifies model and KV format: blocks only match under the same salt (a request's
    /// adapters add a per-sequence namespace on top, see `create_seq_in`).
    pub salt: u64,
    /// The sliding-window layers' pages, for hybrid models; `None`: every page is a full
    /// block (one table per sequence).
    pub window: Option<WindowKv>,
}

impl Default for KvConfig {
    fn default() -> Self {
        Self {
            num_blocks: 1024,
            block_size: 16,
            prefix_cache: true,
            eviction: EvictionPolicy::ValuePerByte,
            cost: CostModel::REFERENCE,
            tier: None,
            salt: 0,
            window: None,
        }
    }
}

/// Order to copy the first `num_tokens` slots of block `src` into block `dst` before the
/// step runs (copy-on-write of a shared, partially filled tail block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyOp {
    pub src: u32,
    pub dst: u32,
    pub num_tokens: usize,
}

/// A cached block that was evicted and whose physical block is about to be reused: the
/// executor may spill its KV to a second tier (keyed by `hash`) before running the step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictedBlock {
    pub hash: BlockHash,
    pub parent: Option<BlockHash>,
    pub block: u32,
    pub tokens: Vec<u32>,
    /// Logical block index of the block in its chain.
    pub depth: usize,
}

/// Result of a side-effect-free prefix probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PrefixMatch {
    /// Full blocks that would be reused.
    pub num_blocks: usize,
    /// Tokens that would come from cache (`num_blocks * block_size`).
    pub num_tokens: usize,
    /// How many of the pages attached by the hit are currently unreferenced (they stop
    /// counting as available capacity once attached).
    pub num_unreferenced: usize,
    /// Pages the hit attaches: its full blocks plus, for hybrid models, the window pages of
    /// the blocks the next query still sees.
    pub num_pages: usize,
}

#[derive(Debug, Clone)]
pub(super) struct SeqKv {
    pub(super) table: BlockTable,
    /// Leading table blocks that are registered in the cache as this chain.
    pub(super) committed: usize,
    /// False after a duplicate block: later blocks are not cached, so a referenced cached
    /// block always has a referenced parent (keeps every unreferenced block evictable).
    cache_open: bool,
    /// Window pages, `m` per logical block (hybrid models; empty otherwise); the first
    /// `win_released` blocks' entries are [`RELEASED`].
    pub(super) win: Vec<u32>,
    pub(super) win_released: usize,
    /// Namespace of its prefix chain (see [`super::hash::chain_salt`]).
    ns: u64,
}

impl SeqKv {
    fn new(ns: u64) -> Self {
        Self {
            ns,
            table: BlockTable::default(),
            committed: 0,
            cache_open: true,
            win: Vec::new(),
            win_released: 0,
        }
    }

    /// Every page the sequence references: full blocks, then window pages still held.
    pub(super) fn pages(&self) -> impl Iterator<Item = u32> + '_ {
        let live = self.win.iter().copied().filter(|&b| b != RELEASED);
        self.table.blocks.iter().copied().chain(live)
    }
}

/// Counters since creation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counters {
    query_tokens: u64,
    hit_tokens: u64,
    tier_hit_tokens: u64,
    evictions: u64,
    restores: u64,
    pub(super) cow_copies: u64,
    pub(super) window_released: u64,
}

/// Paged KV memory manager. See the module docs.
#[derive(Debug, Clone)]
pub struct KvManager {
    pub(super) cfg: KvConfig,
    pub(super) pool: BlockPool,
    pub(super) cache: PrefixCache,
    pub(super) wcache: WindowCache,
    pub(super) seqs: HashMap<u64, SeqKv>,
    pub(super) steps: HashMap<StepId, Vec<u32>>,
    pub(super) copies: Vec<CopyOp>,
    evicted: Vec<EvictedBlock>,
    /// Holds on copy-on-write sources not yet attached to a step.
    pub(super) pending_holds: Vec<u32>,
    pub(super) counters: Counters,
    /// Prefix-cache changes for an outside router (off unless `enable_events`).
    pub(super) events: EventLog,
}

impl KvManager {
    /// A manager with every block free.
    pub fn new(cfg: KvConfig) -> Result<Self, KvError> {
        if cfg.block_size == 0 {
            return Err(KvError::BadConfig {
                field: "block_size",
                value: 0,
                why: "must be > 0",
            });
        }
        if cfg.num_blocks == 0 || cfg.num_blocks >= RELEASED as usize {
            return Err(KvError::BadConfig {
                field: "num_blocks",
                value: cfg.num_blocks,
                why: "must be in 1..u32::MAX",
            });
        }
        if let Some(w) = cfg.window {
            for (field, value) in [("window.tokens", w.tokens), ("window.pages", w.pages)] {
                if value == 0 {
                    return Err(KvError::BadConfig {
                        field,
                        value,
                        why: "must be > 0",
                    });
                }
            }
        }
        Ok(Self {
            pool: BlockPool::new(cfg.num_blocks, cfg.block_size),
            cache: PrefixCache::new(cfg.salt),
            wcache: WindowCache::default(),
            cfg,
            seqs: HashMap::new(),
            steps: HashMap::new(),
            copies: Vec::new(),
            evicted: Vec::new(),
            pending_holds: Vec::new(),
            counters: Counters::default(),
            events: EventLog::default(),
        })
    }

    /// Replaces the costs blocks are valued with for eviction: the engine passes its
    /// measured step cost and the second tier's measured times as it learns them (the
    /// configured ones are only a seed).
    pub fn set_costs(&mut self, cost: CostModel, tier: Option<TierCost>) {
        self.cfg.cost = cost;
        if tier.is_some() {
            self.cfg.tier = tier;
        }
    }

    /// The configuration.
    pub fn config(&self) -> &KvConfig {
        &self.cfg
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.cfg.block_size
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.cfg.num_blocks
    }

    /// Blocks in the free list.
    pub fn num_free(&self) -> usize {
        self.pool.num_free()
    }

    /// Blocks obtainable right now: free plus unreferenced cached (evictable).
    pub fn num_available(&self) -> usize {
        self.pool.num_free() + self.num_evictable()
    }

    /// Unreferenced cached pages: full blocks plus window page sets.
    fn num_evictable(&self) -> usize {
        self.cache.num_unreferenced() + self.win_pages() * self.wcache.num_unreferenced()
    }

    /// Blocks needed for `tokens` positions.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        BlockTable::blocks_for(tokens, self.cfg.block_size)
    }

    /// Whether `id` has a block table.
    pub fn has_seq(&self, id: u64) -> bool {
        self.seqs.contains_key(&id)
    }

    /// The block table of `id`.
    pub fn table(&self, id: u64) -> Option<&BlockTable> {
        self.seqs.get(&id).map(|s| &s.table)
    }

    /// Slot of token position `pos` of sequence `id`.
    pub fn slot(&self, id: u64, pos: usize) -> Option<usize> {
        self.table(id)?.slot(pos, self.cfg.block_size)
    }

    /// The pool (read-only: reference counts and free list, for tests and metrics).
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// The prefix cache index (read-only).
    pub fn cache(&self) -> &PrefixCache {
        &self.cache
    }

    /// Ids of all sequences with a table.
    pub fn seq_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.seqs.keys().copied()
    }

    /// Probes the prefix cache for `tokens` without side effects. The hit is capped so the
    /// last token is always recomputed (it must produce logits): at most `len − 1` tokens,
    /// rounded down to whole blocks.
    pub fn match_prefix(&self, tokens: &[u32]) -> PrefixMatch {
        self.match_prefix_in(tokens, 0)
    }

    /// [`KvManager::match_prefix`] among the chains of namespace `ns` (0: the base model).
    pub fn match_prefix_in(&self, tokens: &[u32], ns: u64) -> PrefixMatch {
        if !self.cfg.prefix_cache {
            return PrefixMatch::default();
        }
        let p = self.cfg.block_size;
        let max_blocks = tokens.len().saturating_sub(1) / p;
        let chain = self.cache.match_chain(tokens, p, max_blocks, ns);
        let hashes: Vec<BlockHash> = chain.iter().map(|e| e.hash).collect();
        let (k, lo) = self.window_hit(&hashes);
        let m = self.win_pages();
        let win_unref = hashes[lo..k]
            .iter()
            .filter(|&&h| self.wcache.is_unreferenced(h))
            .count();
        PrefixMatch {
            num_blocks: k,
            num_tokens: k * p,
            num_unreferenced: chain[..k]
                .iter()
                .filter(|e| self.cache.is_unreferenced(e.block))
                .count()
                + m * win_unref,
            num_pages: k + m * (k - lo),
        }
    }

    /// Creates the table of a new sequence whose known tokens are `tokens`, attaching the
    /// cached prefix. Returns the number of tokens that come from cache (their KV is valid).
    pub fn create_seq(&mut self, id: u64, tokens: &[u32]) -> Result<usize, KvError> {
        self.create_seq_in(id, tokens, 0)
    }

    /// [`KvManager::create_seq`] in namespace `ns`: only a cached prefix of the same
    /// namespace attaches, and its blocks are committed under it.
    pub fn create_seq_in(&mut self, id: u64, tokens: &[u32], ns: u64) -> Result<usize, KvError> {
        if self.seqs.contains_key(&id) {
            return Err(KvError::SequenceExists(id));
        }
        let mut seq = SeqKv::new(ns);
        if self.cfg.prefix_cache {
            let p = self.cfg.block_size;
            let max_blocks = tokens.len().saturating_sub(1) / p;
            let mut hits: Vec<(BlockHash, u32)> = self
                .cache
                .match_chain(tokens, p, max_blocks, ns)
                .into_iter()
                .map(|e| (e.hash, e.block))
                .collect();
            let hashes: Vec<BlockHash> = hits.iter().map(|h| h.0).collect();
            let (k, lo) = self.window_hit(&hashes);
            hits.truncate(k);
            self.cache.note_lookup();
            self.counters.query_tokens += tokens.len() as u64;
            for &(h, b) in &hits {
                if self.cache.record_hit(h) {
                    self.counters.tier_hit_tokens += p as u64;
                }
                self.acquire(b);
                seq.table.blocks.push(b);
            }
            seq.table.num_tokens = hits.len() * p;
            seq.committed = hits.len();
            self.counters.hit_tokens += seq.table.num_tokens as u64;
            let m = self.win_pages();
            if m > 0 {
                seq.win = vec![RELEASED; lo * m];
                seq.win_released = lo;
                for &(h, _) in &hits[lo..] {
                    let pages = self
                        .wcache
                        .get(h)
                        .expect("window_hit checked")
                        .pages
                        .clone();
                    self.acquire_window_set(h, &pages);
                    seq.win.extend_from_slice(&pages);
                }
            }
        }
        let cached = seq.table.num_tokens;
        self.seqs.insert(id, seq);
        Ok(cached)
    }

    /// Commits the full blocks of sequence `id` whose KV is computed (`num_computed` tokens
    /// of `tokens`, the sequence's known tokens) to the prefix cache. A block whose content
    /// is already cached under another physical block stays private, and so do all later
    /// blocks of this sequence.
    pub fn commit(&mut self, id: u64, tokens: &[u32], num_computed: usize) -> Result<(), KvError> {
        if !self.cfg.prefix_cache {
            return Ok(());
        }
        let p = self.cfg.block_size;
        let seq = self.seqs.get_mut(&id).ok_or(KvError::UnknownSequence(id))?;
        let full = (num_computed.min(tokens.len()) / p).min(seq.table.blocks.len());
        while seq.cache_open && seq.committed < full {
            let i = seq.committed;
            let block = seq.table.blocks[i];
            let chunk = &tokens[i * p..(i + 1) * p];
            let parent = if i == 0 {
                None
            } else {
                let prev = seq.table.blocks[i - 1];
                Some(
                    self.cache
                        .hash_of_block(prev)
                        .expect("committed block is cached"),
                )
            };
            if self.cache.hash_of_block(block).is_some() {
                // Already cached as this very block (shared through a fork).
                seq.committed += 1;
                continue;
            }
            match self.cache.insert(parent, block, chunk, i, false, seq.ns) {
                Some(hash) => {
                    seq.committed += 1;
                    self.events.stored(parent, hash, chunk, seq.ns);
                    // NOTE: a just-committed block is referenced by this table. Its window
                    // pages are cached with it unless already released (then no hit can
                    // end within the window that needed them).
                    let m = self.cfg.window.map_or(0, |w| w.pages);
                    if m > 0 && i >= seq.win_released {
                        self.wcache.insert(hash, &seq.win[i * m..(i + 1) * m]);
                    }
                }
                None => seq.cache_open = false,
            }
        }
        Ok(())
    }

    /// Registers step `step` as reading every block of `seq_ids` (and the sources of copy
    /// orders issued since the last step): none of them is reused before `release_step`.
    pub fn hold_step(&mut self, step: StepId, seq_ids: &[u64]) {
        let mut held = std::mem::take(&mut self.pending_holds);
        for id in seq_ids {
            if let Some(seq) = self.seqs.get(id) {
                for b in seq.pages() {
                    self.pool.inc_hold(b);
                    held.push(b);
                }
            }
        }
        self.steps.entry(step).or_default().extend(held);
    }

    /// Releases the holds of `step`; blocks whose last reference this was become free or
    /// evictable. Returns false if the step held nothing or was already released.
    pub fn release_step(&mut self, step: StepId) -> bool {
        let Some(held) = self.steps.remove(&step) else {
            return false;
        };
        for b in held {
            if self.pool.dec_hold(b) {
                self.on_unreferenced(b);
            }
        }
        true
    }

    /// Number of steps currently holding blocks.
    pub fn num_steps_in_flight(&self) -> usize {
        self.steps.len()
    }

    /// Re-registers a block whose content the executor fetched back from the second tier:
    /// allocates a block, caches it under `parent` (which must be cached, or `None` for a
    /// first block) with `tokens`, unreferenced, and returns its id. The executor must write
    /// the fetched KV into it before the next step. It counts as a tier hit when first reused.
    pub fn restore_block(
        &mut self,
        parent: Option<BlockHash>,
        tokens: &[u32],
    ) -> Result<u32, KvError> {
        self.restore_block_in(parent, tokens, 0)
    }

    /// [`KvManager::restore_block`] for a chain of namespace `ns`.
    pub fn restore_block_in(
        &mut self,
        parent: Option<BlockHash>,
        tokens: &[u32],
        ns: u64,
    ) -> Result<u32, KvError> {
        if !self.cfg.prefix_cache {
            return Err(KvError::CacheDisabled);
        }
        let p = self.cfg.block_size;
        if tokens.len() != p {
            return Err(KvError::BadBlockLen {
                got: tokens.len(),
                block_size: p,
            });
        }
        let hash = super::hash::block_hash(
            parent,
            super::hash::chain_salt(self.cache.salt(), ns),
            tokens,
        );
        if self.cache.get(hash).is_some() {
            return Err(KvError::AlreadyCached(hash));
        }
        let (depth, pin) = match parent {
            None => (0, None),
            Some(ph) => {
                let e = self.cache.get(ph).ok_or(KvError::MissingParent(ph))?;
                (e.depth + 1, Some(e.block))
            }
        };
        // Pin the parent so allocating the new block cannot evict it.
        if let Some(pb) = pin {
            self.pool.inc_hold(pb);
            self.cache.set_unreferenced(pb, false);
        }
        let block = self.alloc_block();
        if let Some(pb) = pin {
            if self.pool.dec_hold(pb) {
                self.on_unreferenced(pb);
            }
        }
        let block = block.ok_or(KvError::OutOfBlocks {
            needed: 1,
            available: 0,
        })?;
        self.cache
            .insert(parent, block, tokens, depth, true, ns)
            .expect("checked: new hash, parent cached");
        self.events.stored(parent, hash, tokens, ns);
        self.counters.restores += 1;
        if self.pool.dec_table(block) {
            self.on_unreferenced(block);
        }
        Ok(block)
    }

    /// Evicts every unreferenced cached block (reported through `take_evicted`); returns how
    /// many. With no sequences and no steps left, the whole pool is free afterwards.
    pub fn evict_all(&mut self) -> usize {
        let mut n = 0;
        while let Some((_, h)) = self.wcache.oldest_unreferenced() {
            self.evict_window_set(h);
            n += 1;
        }
        while self.cache.num_unreferenced() > 0 {
            let p = self.cfg.block_size;
            let Some(h) = self
                .cache
                .pick_victim(EvictionPolicy::Lru, p, &self.cfg.cost, None)
            else {
                break;
            };
            let block = self.evict(h);
            self.pool.push_free(block);
            n += 1;
        }
        n
    }

    /// Copy orders issued since the last call (perform before running the step).
    pub fn take_copy_ops(&mut self) -> Vec<CopyOp> {
        std::mem::take(&mut self.copies)
    }

    /// Evicted blocks since the last call (spill before their blocks are overwritten).
    pub fn take_evicted(&mut self) -> Vec<EvictedBlock> {
        std::mem::take(&mut self.evicted)
    }

    /// Current occupancy and counters.
    pub fn stats(&self) -> KvStats {
        let cached = self.cache.len() + self.win_pages() * self.wcache.len();
        let evictable = self.num_evictable();
        let free = self.pool.num_free();
        KvStats {
            block_size: self.cfg.block_size,
            total_blocks: self.cfg.num_blocks,
            free_blocks: free,
            used_blocks: self.cfg.num_blocks - free - evictable,
            cached_blocks: cached,
            evictable_blocks: evictable,
            prefix_query_tokens: self.counters.query_tokens,
            prefix_hit_tokens: self.counters.hit_tokens,
            tier_hit_tokens: self.counters.tier_hit_tokens,
            evictions: self.counters.evictions,
            restores: self.counters.restores,
            cow_copies: self.counters.cow_copies,
            window_pages_per_block: self.win_pages(),
            window_released_blocks: self.counters.window_released,
        }
    }

    /// Total table references over all sequences (counts a shared block once per table).
    pub fn num_table_refs(&self) -> usize {
        self.seqs.values().map(|s| s.pages().count()).sum()
    }

    // ---- internals ----

    /// Drops cached block `h` from the cache, counts the eviction and reports it (so the
    /// executor can spill it); returns its block id for the caller to free or reuse. Its
    /// window pages leave the cache with it (freed, or private to whoever still holds them).
    pub(super) fn evict(&mut self, h: BlockHash) -> u32 {
        if let Some(pages) = self.wcache.remove(h) {
            for b in pages {
                if self.pool.refs(b).is_unreferenced() {
                    self.pool.push_free(b);
                }
            }
        }
        let e = self.cache.remove(h);
        self.counters.evictions += 1;
        self.events.removed(e.hash);
        self.evicted.push(EvictedBlock {
            hash: e.hash,
            parent: e.parent,
            block: e.block,
            tokens: e.tokens,
            depth: e.depth,
        });
        e.block
    }

    /// Takes one page: the free list first, else evicts the least recently used
    /// unreferenced window set, else an unreferenced cached leaf.
    ///
    /// NOTE: window sets go first: one outlives its use as soon as its sequence's window
    /// moves on (it serves only a hit ending right there), while a full block serves every
    /// longer hit through it.
    pub(super) fn alloc_block(&mut self) -> Option<u32> {
        if let Some(b) = self.pool.pop_free() {
            return Some(b);
        }
        if let Some((_, h)) = self.wcache.oldest_unreferenced() {
            self.evict_window_set(h);
            return self.pool.pop_free();
        }
        let p = self.cfg.block_size;
        let h =
            self.cache
                .pick_victim(self.cfg.eviction, p, &self.cfg.cost, self.cfg.tier.as_ref())?;
        let block = self.evict(h);
        self.pool.claim(block);
        Some(block)
    }

    /// Takes a table reference on a block found in the cache.
    fn acquire(&mut self, block: u32) {
        if self.pool.refs(block).is_unreferenced() {
            self.cache.set_unreferenced(block, false);
        }
        self.pool.inc_table(block);
    }

    pub(super) fn release_table_ref(&mut self, block: u32) {
        if self.pool.dec_table(block) {
            self.on_unreferenced(block);
        }
    }

    fn on_unreferenced(&mut self, block: u32) {
        if self.cache.hash_of_block(block).is_some() {
            self.cache.set_unreferenced(block, true);
        } else if let Some(h) = self.wcache.hash_of_page(block) {
            // The set becomes evictable when its last page does.
            let set = self.wcache.get(h).expect("page maps to a cached set");
            if set
                .pages
                .iter()
                .all(|&b| self.pool.refs(b).is_unreferenced())
            {
                self.wcache.set_unreferenced(h, true);
            }
        } else {
            self.pool.push_free(block);
        }
    }
}

//! Exact-prefix cache across requests, at block granularity.
//!
//! NOTE: why hash chains and not a radix tree of token runs: KV lives in fixed blocks, so
//! the only reusable unit is a full block, and a node per block is all a tree would hold.
//! Each entry keeps its parent hash and a child count, which *is* the radix tree (root →
//! branch point = shared context) without node splitting, and lookup is one map probe per
//! block. Entries live in a `HashMap` keyed by hash (no `Rc<RefCell>`); a second map goes
//! from physical block to hash.
//!
//! An entry whose block has no table reference and no step hold is *unreferenced*: it still
//! holds valid KV (a later request may hit it) but counts as available capacity, and it is
//! evicted leaf-first when the free list runs dry.

use std::collections::{BTreeSet, HashMap};

use super::eviction::{block_value, hit_probability, EvictionPolicy};
use super::hash::{block_hash, chain_salt, BlockHash};
use crate::cost::{CostModel, TierCost};

/// One cached block.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedBlock {
    /// Hash of this block's content and its whole prefix.
    pub hash: BlockHash,
    /// Hash of the previous block, `None` for the first block of a sequence.
    pub parent: Option<BlockHash>,
    /// Physical block holding the KV.
    pub block: u32,
    /// Token ids whose KV the block holds; compared on lookup so a hash collision never
    /// hands out wrong KV.
    pub tokens: Vec<u32>,
    /// Logical block index (the block's first token is at `depth * block_size`).
    pub depth: usize,
    /// Number of cached blocks whose parent is this one; only leaves (0) are evictable.
    pub children: u32,
    /// Lookups that reused this block since it was inserted.
    pub hits: u64,
    /// Lookup counter value when inserted: `age = lookups − inserted_at`.
    pub inserted_at: u64,
    /// Logical clock of the last insert or hit (LRU order).
    pub last_access: u64,
    /// The block's content came back from the second tier and has not been hit yet.
    pub from_tier: bool,
    /// Namespace of its chain (0: the base model; else adapters or a cache salt): its
    /// root hashes from `chain_salt(salt, ns)`.
    pub ns: u64,
}

/// The prefix cache index. It owns no blocks; the manager owns reference counts.
#[derive(Debug, Clone)]
pub struct PrefixCache {
    salt: u64,
    entries: HashMap<BlockHash, CachedBlock>,
    by_block: HashMap<u32, BlockHash>,
    /// Cached blocks with no table reference and no hold, by block id (deterministic order).
    unreferenced: BTreeSet<u32>,
    /// Logical clock: ticks on every insert and lookup.
    clock: u64,
    /// Number of lookups so far (the unit of `age` for `p_h`).
    lookups: u64,
}

impl PrefixCache {
    /// An empty cache whose chain hashes are rooted in `salt`.
    pub fn new(salt: u64) -> Self {
        Self {
            salt,
            entries: HashMap::new(),
            by_block: HashMap::new(),
            unreferenced: BTreeSet::new(),
            clock: 0,
            lookups: 0,
        }
    }

    /// The salt every chain starts from.
    pub fn salt(&self) -> u64 {
        self.salt
    }

    /// Number of cached blocks.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of cached blocks nobody references (evictable capacity).
    pub fn num_unreferenced(&self) -> usize {
        self.unreferenced.len()
    }

    /// The entry for `hash`.
    pub fn get(&self, hash: BlockHash) -> Option<&CachedBlock> {
        self.entries.get(&hash)
    }

    /// The hash cached in physical `block`, if any.
    pub fn hash_of_block(&self, block: u32) -> Option<BlockHash> {
        self.by_block.get(&block).copied()
    }

    /// All entries (unordered).
    pub fn entries(&self) -> impl Iterator<Item = &CachedBlock> {
        self.entries.values()
    }

    /// Whether `block` is in the unreferenced set.
    pub fn is_unreferenced(&self, block: u32) -> bool {
        self.unreferenced.contains(&block)
    }

    /// Longest cached chain for `tokens`, at most `max_blocks` blocks; no side effects.
    /// Stops at the first missing or mismatching block.
    /// Only chains of namespace `ns` match.
    pub fn match_chain(
        &self,
        tokens: &[u32],
        p: usize,
        max_blocks: usize,
        ns: u64,
    ) -> Vec<&CachedBlock> {
        let mut out = Vec::new();
        let mut parent = None;
        let salt = chain_salt(self.salt, ns);
        for chunk in tokens.chunks_exact(p).take(max_blocks) {
            let h = block_hash(parent, salt, chunk);
            match self.entries.get(&h) {
                Some(e) if e.tokens == chunk && e.parent == parent => out.push(e),
                _ => break,
            }
            parent = Some(h);
        }
        out
    }

    /// Counts one lookup (advances the age of every block).
    pub fn note_lookup(&mut self) {
        self.lookups += 1;
        self.clock += 1;
    }

    /// Records a hit on `hash`; returns true if the block had come from the second tier.
    pub fn record_hit(&mut self, hash: BlockHash) -> bool {
        let clock = self.clock;
        let e = self
            .entries
            .get_mut(&hash)
            .expect("hit on a hash that is not cached");
        e.hits += 1;
        e.last_access = clock;
        std::mem::replace(&mut e.from_tier, false)
    }

    /// Inserts a block of a chain in namespace `ns` and returns its hash; `None` (and no
    /// change) when the hash or block is already cached or the parent is given but missing.
    pub fn insert(
        &mut self,
        parent: Option<BlockHash>,
        block: u32,
        tokens: &[u32],
        depth: usize,
        from_tier: bool,
        ns: u64,
    ) -> Option<BlockHash> {
        let hash = block_hash(parent, chain_salt(self.salt, ns), tokens);
        if self.entries.contains_key(&hash) || self.by_block.contains_key(&block) {
            return None;
        }
        if let Some(ph) = parent {
            self.entries.get_mut(&ph)?.children += 1;
        }
        self.clock += 1;
        let entry = CachedBlock {
            hash,
            parent,
            block,
            tokens: tokens.to_vec(),
            depth,
            children: 0,
            hits: 0,
            inserted_at: self.lookups,
            last_access: self.clock,
            from_tier,
            ns,
        };
        self.entries.insert(hash, entry);
        self.by_block.insert(block, hash);
        Some(hash)
    }

    /// Marks a cached block as referenced or not (the manager calls this on transitions).
    pub fn set_unreferenced(&mut self, block: u32, unreferenced: bool) {
        if unreferenced {
            self.unreferenced.insert(block);
        } else {
            self.unreferenced.remove(&block);
        }
    }

    /// Chooses the next block to evict under `policy`: an unreferenced leaf with the lowest
    /// key. `O(unreferenced)` per call.
    pub fn pick_victim(
        &self,
        policy: EvictionPolicy,
        block_size: usize,
        cost: &CostModel,
        tier: Option<&TierCost>,
    ) -> Option<BlockHash> {
        let mut best: Option<(f64, u64, u32, BlockHash)> = None;
        for &b in &self.unreferenced {
            let h = self.by_block[&b];
            let e = &self.entries[&h];
            if e.children > 0 {
                continue;
            }
            let value = match policy {
                EvictionPolicy::Lru => 0.0,
                EvictionPolicy::ValuePerByte => {
                    let p_h = hit_probability(e.hits, self.lookups - e.inserted_at);
                    block_value(p_h, e.depth * block_size, block_size, cost, tier)
                }
            };
            let key = (value, e.last_access, b, h);
            let better = match &best {
                None => true,
                Some(bk) => key
                    .0
                    .total_cmp(&bk.0)
                    .then(key.1.cmp(&bk.1))
                    .then(key.2.cmp(&bk.2))
                    .is_lt(),
            };
            if better {
                best = Some(key);
            }
        }
        best.map(|k| k.3)
    }

    /// Removes an entry (it must be an unreferenced leaf) and returns it.
    pub fn remove(&mut self, hash: BlockHash) -> CachedBlock {
        let e = self
            .entries
            .remove(&hash)
            .expect("removing a hash that is not cached");
        assert_eq!(
            e.children, 0,
            "evicting an inner block would orphan its chain"
        );
        self.by_block.remove(&e.block);
        self.unreferenced.remove(&e.block);
        if let Some(ph) = e.parent {
            if let Some(p) = self.entries.get_mut(&ph) {
                p.children -= 1;
            }
        }
        e
    }
}

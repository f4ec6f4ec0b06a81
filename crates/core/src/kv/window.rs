//! Sliding-window KV: the pages of a model's sliding-window layers, which a sequence needs
//! only for its last `W` positions (the hybrid attention (DESIGN.md §kv-cache) as a capacity question).
//!
//! NOTE: the layout is vLLM's hybrid allocator with one simplification. Layers are grouped
//! so that one *page* holds the K/V of `g` layers for `block_size` positions, `g` being the
//! number of full-attention layers: the full layers then fill exactly one page per logical
//! block (their table and prefix cache are the manager's usual ones), and the window layers
//! take `m = ⌈n_window / g⌉` pages per logical block (the last one possibly part empty).
//! Every page comes from the same pool, so capacity moves freely between the two kinds.
//!
//! ```text
//! Gemma 3 270M: 18 layers, 3 full (5, 11, 17), 15 window, W = 512, p = 16: g = 3, m = 5
//! logical block i of a sequence: full page F[i], window pages W[i][0..5]
//! a 4,000-token sequence holds 250 full pages + 5 × 33 window pages = 415 pages
//! (every layer global: 250 × 6 = 1,500 pages)
//! ```
//!
//! A query at position `q` reads `[q + 1 − W, q]`, so before a step that computes positions
//! from `start` on, every logical block that lies wholly before `start + 1 − W` is read by no
//! later query: its window pages go back to the pool (or stay as evictable cache). A prefix
//! of `k` cached blocks is reusable only if the window pages of the blocks the next query
//! still sees, `[first_visible(k), k)`, are all cached: the match scans from the longest
//! candidate down.

use std::collections::{BTreeSet, HashMap};

use super::hash::BlockHash;

/// Sentinel for a window page that was released (never read: it lies before the window).
pub const RELEASED: u32 = u32::MAX;

/// The window kind of a hybrid model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowKv {
    /// Positions a window-layer query sees, itself included (`attention.sliding_window`).
    /// `usize::MAX` keeps every window page (llama.cpp's `--swa-full`): same layout and
    /// units, no release, for comparison.
    pub tokens: usize,
    /// Pages per logical block for the window layers (`m` above), at least 1.
    pub pages: usize,
}

impl WindowKv {
    /// Logical blocks wholly before the window of a query at position `start`: the
    /// leading blocks a step computing from `start` on no longer needs.
    pub fn blocks_before(&self, start: usize, block_size: usize) -> usize {
        (start + 1).saturating_sub(self.tokens) / block_size
    }

    /// Most window entries (logical blocks) a sequence holds at once while growing by at
    /// most `chunk` positions per step up to `tokens` positions.
    pub fn max_live_blocks(&self, tokens: usize, chunk: usize, block_size: usize) -> usize {
        let all = tokens.div_ceil(block_size);
        let window = self
            .tokens
            .saturating_add(chunk)
            .div_ceil(block_size)
            .saturating_add(1);
        all.min(window)
    }
}

/// One cached set of window pages: the window layers' KV of one logical block, keyed by the
/// same chain hash as its full-layer page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowSet {
    pub pages: Vec<u32>,
    /// Logical clock of the last insert or hit (LRU order among unreferenced sets).
    pub last_access: u64,
}

/// Cached window page sets. Unlike the full pages' chains there is no parent structure: a
/// set is reusable on its own (its hash already names the whole prefix), so any
/// unreferenced set can be evicted at any time.
#[derive(Debug, Clone, Default)]
pub struct WindowCache {
    sets: HashMap<BlockHash, WindowSet>,
    /// Every page of each cached set → the set's hash.
    by_page: HashMap<u32, BlockHash>,
    /// Unreferenced sets by (last access, hash): eviction takes the oldest.
    unreferenced: BTreeSet<(u64, BlockHash)>,
    clock: u64,
}

impl WindowCache {
    /// Number of cached sets.
    pub fn len(&self) -> usize {
        self.sets.len()
    }

    /// True when no set is cached.
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }

    /// Number of cached sets nobody references.
    pub fn num_unreferenced(&self) -> usize {
        self.unreferenced.len()
    }

    /// The set cached under `hash`.
    pub fn get(&self, hash: BlockHash) -> Option<&WindowSet> {
        self.sets.get(&hash)
    }

    /// The hash of the cached set holding `page`.
    pub fn hash_of_page(&self, page: u32) -> Option<BlockHash> {
        self.by_page.get(&page).copied()
    }

    /// Whether the set under `hash` is unreferenced.
    pub fn is_unreferenced(&self, hash: BlockHash) -> bool {
        self.sets
            .get(&hash)
            .is_some_and(|s| self.unreferenced.contains(&(s.last_access, hash)))
    }

    /// All cached sets (unordered).
    pub fn entries(&self) -> impl Iterator<Item = (&BlockHash, &WindowSet)> {
        self.sets.iter()
    }

    /// Caches `pages` under `hash` (referenced). `false` and no change if the hash or any
    /// of the pages is already cached.
    pub fn insert(&mut self, hash: BlockHash, pages: &[u32]) -> bool {
        if self.sets.contains_key(&hash) || pages.iter().any(|p| self.by_page.contains_key(p)) {
            return false;
        }
        self.clock += 1;
        for &p in pages {
            self.by_page.insert(p, hash);
        }
        self.sets.insert(
            hash,
            WindowSet {
                pages: pages.to_vec(),
                last_access: self.clock,
            },
        );
        true
    }

    /// Marks the set under `hash` referenced or not; a hit (`referenced`) refreshes its age.
    pub fn set_unreferenced(&mut self, hash: BlockHash, unreferenced: bool) {
        let Some(s) = self.sets.get_mut(&hash) else {
            return;
        };
        self.unreferenced.remove(&(s.last_access, hash));
        if unreferenced {
            self.unreferenced.insert((s.last_access, hash));
        } else {
            self.clock += 1;
            s.last_access = self.clock;
        }
    }

    /// The least recently used unreferenced set.
    pub fn oldest_unreferenced(&self) -> Option<(u64, BlockHash)> {
        self.unreferenced.first().copied()
    }

    /// Removes the set under `hash` (whatever its references) and returns its pages.
    pub fn remove(&mut self, hash: BlockHash) -> Option<Vec<u32>> {
        let s = self.sets.remove(&hash)?;
        for p in &s.pages {
            self.by_page.remove(p);
        }
        self.unreferenced.remove(&(s.last_access, hash));
        Some(s.pages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_arithmetic() {
        let w = WindowKv {
            tokens: 512,
            pages: 5,
        };
        // A query at 527 sees 16..=527: block 0 (0..16) is wholly before it.
        assert_eq!(w.blocks_before(527, 16), 1);
        assert_eq!(w.blocks_before(526, 16), 0);
        assert_eq!(w.blocks_before(3999, 16), 218);
        assert_eq!(w.max_live_blocks(4000, 1, 16), 34);
        assert_eq!(w.max_live_blocks(100, 1, 16), 7);
        let full = WindowKv {
            tokens: usize::MAX,
            pages: 5,
        };
        assert_eq!(full.blocks_before(1 << 40, 16), 0);
        assert_eq!(full.max_live_blocks(4000, 512, 16), 250);
    }

    #[test]
    fn cache_lru_and_removal() {
        let mut c = WindowCache::default();
        assert!(c.insert(10, &[4, 5]));
        assert!(!c.insert(10, &[6, 7]), "hash already cached");
        assert!(!c.insert(11, &[9, 5]), "a page already cached");
        assert!(c.insert(11, &[6, 7]));
        c.set_unreferenced(11, true);
        c.set_unreferenced(10, true);
        // 10 was inserted first: oldest.
        assert_eq!(c.oldest_unreferenced().map(|x| x.1), Some(10));
        c.set_unreferenced(10, false); // a hit refreshes it
        c.set_unreferenced(10, true);
        assert_eq!(c.oldest_unreferenced().map(|x| x.1), Some(11));
        assert_eq!(c.remove(11), Some(vec![6, 7]));
        assert_eq!(c.hash_of_page(7), None);
        assert_eq!(c.hash_of_page(5), Some(10));
        assert_eq!(c.num_unreferenced(), 1);
        assert_eq!(c.len(), 1);
    }
}

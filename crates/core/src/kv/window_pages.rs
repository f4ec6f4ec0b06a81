//! The window-page half of [`KvManager`] (hybrid models, see [`super::window`]): page
//! arithmetic for admission, the window tables handed to the executor, the window-aware
//! prefix match, release behind the window and window-set eviction.

use super::hash::BlockHash;
use super::manager::KvManager;
use super::window::{WindowCache, RELEASED};

impl KvManager {
    /// Window pages per logical block (0 without window layers).
    pub(super) fn win_pages(&self) -> usize {
        self.cfg.window.map_or(0, |w| w.pages)
    }

    /// Pages one new logical block takes: its full block and its window pages.
    pub fn pages_per_block(&self) -> usize {
        1 + self.win_pages()
    }

    /// Most pages a sequence of `tokens` positions holds at once when it grows by at most
    /// `chunk` positions per step (window pages behind the window are released).
    pub fn pages_at_most(&self, tokens: usize, chunk: usize) -> usize {
        let p = self.cfg.block_size;
        let win = self
            .cfg
            .window
            .map_or(0, |w| w.pages * w.max_live_blocks(tokens, chunk.max(1), p));
        self.blocks_for(tokens) + win
    }

    /// Longest sequence the whole pool holds, growing by at most `chunk` positions a step.
    pub fn max_seq_tokens(&self, chunk: usize) -> usize {
        // pages_at_most is monotonic in tokens: bisect for the last length that fits.
        let (mut lo, mut hi) = (0usize, self.cfg.num_blocks * self.cfg.block_size * 2);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if self.pages_at_most(mid, chunk) <= self.cfg.num_blocks {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }

    /// Pages sequence `id` holds now (0 if unknown).
    pub fn pages_held(&self, id: u64) -> usize {
        self.seqs.get(&id).map_or(0, |s| s.pages().count())
    }

    /// Window pages of sequence `id`, one table per window page group (`m` tables), each
    /// in logical block order with [`RELEASED`] for blocks behind the window. Empty for
    /// models without window layers.
    pub fn window_tables(&self, id: u64) -> Vec<Vec<u32>> {
        let m = self.win_pages();
        let Some(seq) = self.seqs.get(&id) else {
            return Vec::new();
        };
        (0..m)
            .map(|j| seq.win.chunks_exact(m).map(|c| c[j]).collect())
            .collect()
    }

    /// Every block table of sequence `id`, indexed by page group: group 0 the
    /// full-attention layers' blocks ([`KvManager::table`]), then the window groups'
    /// ([`Self::window_tables`]). What a step or a drafter reads the sequence through.
    pub fn tables(&self, id: u64) -> Vec<Vec<u32>> {
        let mut tables = Vec::with_capacity(1 + self.win_pages());
        tables.push(self.table(id).map(|t| t.blocks.clone()).unwrap_or_default());
        tables.extend(self.window_tables(id));
        tables
    }

    /// The longest usable hit along a cached chain of full blocks: `(k, lo)`, `k` blocks
    /// whose window pages are cached for `[lo, k)`, the blocks the query at `k·p` still
    /// sees. Without window layers, the whole chain (`lo = k`).
    pub(super) fn window_hit(&self, chain: &[BlockHash]) -> (usize, usize) {
        let Some(w) = self.cfg.window else {
            return (chain.len(), chain.len());
        };
        let p = self.cfg.block_size;
        // run[i]: cached window sets ending at block i (inclusive), counted backwards.
        let mut run = vec![0usize; chain.len()];
        for (i, h) in chain.iter().enumerate() {
            if self.wcache.get(*h).is_some() {
                run[i] = if i == 0 { 1 } else { run[i - 1] + 1 };
            }
        }
        (1..=chain.len())
            .rev()
            .map(|k| (k, w.blocks_before(k * p, p)))
            .find(|&(k, lo)| run[k - 1] >= k - lo)
            .unwrap_or((0, 0))
    }

    /// Releases the window pages of sequence `id` that no query from its next position on
    /// can see (every position before `num_tokens + 1 − W`).
    pub(super) fn release_behind_window(&mut self, id: u64) {
        let (Some(w), Some(seq)) = (self.cfg.window, self.seqs.get_mut(&id)) else {
            return;
        };
        let (p, m) = (self.cfg.block_size, w.pages);
        let upto = w
            .blocks_before(seq.table.num_tokens, p)
            .min(seq.table.blocks.len());
        if upto <= seq.win_released {
            return;
        }
        let from = seq.win_released;
        let gone: Vec<u32> = seq.win[from * m..upto * m]
            .iter_mut()
            .map(|b| std::mem::replace(b, RELEASED))
            .collect();
        seq.win_released = upto;
        self.counters.window_released += (upto - from) as u64;
        for b in gone {
            self.release_table_ref(b);
        }
    }

    /// The window page sets cached beside the full blocks (read-only).
    pub fn window_cache(&self) -> &WindowCache {
        &self.wcache
    }

    /// Evicts the unreferenced window set `h` into the free list; a full block left an
    /// unreferenced leaf without it (no hit can end there any more) goes too.
    pub(super) fn evict_window_set(&mut self, h: BlockHash) {
        for b in self.wcache.remove(h).expect("evicting a cached window set") {
            self.pool.push_free(b);
        }
        let orphan = self
            .cache
            .get(h)
            .is_some_and(|e| e.children == 0 && self.cache.is_unreferenced(e.block));
        if orphan {
            let block = self.evict(h);
            self.pool.push_free(block);
        }
    }

    /// Takes a table reference on every page of the cached window set `h` (a prefix hit).
    pub(super) fn acquire_window_set(&mut self, h: BlockHash, pages: &[u32]) {
        if self.wcache.is_unreferenced(h) {
            self.wcache.set_unreferenced(h, false);
        }
        for &b in pages {
            self.pool.inc_table(b);
        }
    }
}

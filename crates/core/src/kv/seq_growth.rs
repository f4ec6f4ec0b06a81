//! A sequence's table growing and shrinking: `grow` (new blocks, copy-on-write of a shared
//! partial tail), `fork` (a child sharing every block), `free_seq` and `truncate`
//! (speculative rollback). Part of [`KvManager`]; the manager's invariants hold after each.

use super::block_table::BlockTable;
use super::error::KvError;
use super::manager::{CopyOp, KvManager, SeqKv};
use super::window::RELEASED;

impl KvManager {
    /// Pages `grow(id, total)` takes: new blocks with their window pages, plus copies of a
    /// shared partial tail, and whether the full and window tails are copied.
    pub(super) fn grow_plan(&self, seq: &SeqKv, total_tokens: usize) -> (usize, bool, bool) {
        let p = self.cfg.block_size;
        let m = self.win_pages();
        let have = seq.table.blocks.len();
        let want = BlockTable::blocks_for(total_tokens, p);
        let new = want.saturating_sub(have);
        let cur = seq.table.num_tokens;
        let writes_tail = total_tokens > cur && !cur.is_multiple_of(p);
        let cow = writes_tail && {
            let tail = seq.table.blocks[cur / p];
            self.pool.refs(tail).table_refs > 1 || self.cache.hash_of_block(tail).is_some()
        };
        let cow_win = writes_tail && m > 0 && {
            let tail = seq.win[cur / p * m];
            self.pool.refs(tail).table_refs > 1 || self.wcache.hash_of_page(tail).is_some()
        };
        (
            new * (1 + m) + cow as usize + m * cow_win as usize,
            cow,
            cow_win,
        )
    }

    /// Makes sequence `id` cover `total_tokens` positions, allocating blocks (evicting cached
    /// ones if the free list is empty) and copying a shared partial tail before it is written.
    /// All or nothing: on `OutOfBlocks` nothing changed, except that window pages behind
    /// the window (which no later query reads) are released first either way.
    pub fn grow(&mut self, id: u64, total_tokens: usize) -> Result<(), KvError> {
        if !self.seqs.contains_key(&id) {
            return Err(KvError::UnknownSequence(id));
        }
        // Pages behind the window of the first new position go back. A call that adds no
        // position (a step verifying drafts inside lookahead slots reserved earlier) must
        // not release: the extent is then past the step's first query position.
        if total_tokens > self.seqs[&id].table.num_tokens {
            self.release_behind_window(id);
        }
        let seq = &self.seqs[&id];
        let (needed, cow, cow_win) = self.grow_plan(seq, total_tokens);
        let available = self.num_available();
        if needed > available {
            return Err(KvError::OutOfBlocks { needed, available });
        }
        let mut fresh = Vec::with_capacity(needed);
        for _ in 0..needed {
            match self.alloc_block() {
                Some(b) => fresh.push(b),
                None => {
                    // Only reachable if an unreferenced cached block was not a leaf; undo.
                    for b in fresh {
                        self.release_table_ref(b);
                    }
                    return Err(KvError::OutOfBlocks { needed, available });
                }
            }
        }
        let (p, m) = (self.cfg.block_size, self.win_pages());
        let mut fresh = fresh.into_iter();
        let seq = self.seqs.get_mut(&id).expect("checked above");
        let cur = seq.table.num_tokens;
        let mut dropped = Vec::new();
        let mut tail_pages: Vec<&mut u32> = Vec::new();
        if cow {
            tail_pages.push(&mut seq.table.blocks[cur / p]);
        }
        if cow_win {
            tail_pages.extend(seq.win[cur / p * m..(cur / p + 1) * m].iter_mut());
        }
        for slot in tail_pages {
            let dst = fresh.next().expect("cow page allocated");
            let src = std::mem::replace(slot, dst);
            self.copies.push(CopyOp {
                src,
                dst,
                num_tokens: cur % p,
            });
            self.counters.cow_copies += 1;
            dropped.push(src);
        }
        let want = BlockTable::blocks_for(total_tokens, p);
        let new = want.saturating_sub(seq.table.blocks.len());
        seq.table.blocks.extend(fresh.by_ref().take(new));
        seq.win.extend(fresh);
        seq.table.num_tokens = seq.table.num_tokens.max(total_tokens);
        for src in dropped {
            // NOTE: the copy reads `src` before the step runs, so it is held (and cannot be
            // handed out again) until the step that carries the copy finishes, even if this
            // was its last table reference. The hold moves into the next `hold_step`.
            self.pool.inc_hold(src);
            self.pending_holds.push(src);
            self.release_table_ref(src);
        }
        Ok(())
    }

    /// Gives `child` a table sharing every block of `parent` (full blocks and the partial
    /// tail). The first append into a shared partial tail triggers copy-on-write.
    pub fn fork(&mut self, parent: u64, child: u64) -> Result<(), KvError> {
        if self.seqs.contains_key(&child) {
            return Err(KvError::SequenceExists(child));
        }
        let seq = self
            .seqs
            .get(&parent)
            .ok_or(KvError::UnknownSequence(parent))?
            .clone();
        for b in seq.pages() {
            self.pool.inc_table(b);
        }
        self.seqs.insert(child, seq);
        Ok(())
    }

    /// Drops sequence `id`'s table. Blocks still held by an in-flight step are released when
    /// that step finishes (deferred release). Returns false if `id` was unknown.
    pub fn free_seq(&mut self, id: u64) -> bool {
        let Some(seq) = self.seqs.remove(&id) else {
            return false;
        };
        // NOTE: tail first, so the free list hands back a sequence's last blocks first.
        for &b in seq.win.iter().rev().filter(|&&b| b != RELEASED) {
            self.release_table_ref(b);
        }
        for &b in seq.table.blocks.iter().rev() {
            self.release_table_ref(b);
        }
        true
    }

    /// Shrinks sequence `id` to `num_tokens` positions (speculative rollback), releasing
    /// blocks past the new end. Refused (nothing changed) when the window of position
    /// `num_tokens` would reach back into window pages already released. A committed block cut into becomes uncommitted for this
    /// sequence (it stays cached; the next write into it copies it first).
    pub fn truncate(&mut self, id: u64, num_tokens: usize) -> Result<(), KvError> {
        let p = self.cfg.block_size;
        let seq = self.seqs.get_mut(&id).ok_or(KvError::UnknownSequence(id))?;
        if num_tokens >= seq.table.num_tokens {
            return Ok(());
        }
        if let Some(w) = self.cfg.window {
            let first = w.blocks_before(num_tokens, p);
            if first < seq.win_released {
                return Err(KvError::BehindWindow {
                    num_tokens,
                    released_blocks: seq.win_released,
                    first_visible_block: first,
                });
            }
        }
        let keep = BlockTable::blocks_for(num_tokens, p);
        let m = self.cfg.window.map_or(0, |w| w.pages);
        let mut dropped: Vec<u32> = seq.table.blocks.drain(keep..).collect();
        if m > 0 {
            dropped.extend(seq.win.drain(keep * m..).filter(|&b| b != RELEASED));
            seq.win_released = seq.win_released.min(keep);
        }
        seq.table.num_tokens = num_tokens;
        seq.committed = seq.committed.min(num_tokens / p);
        for &b in dropped.iter().rev() {
            self.release_table_ref(b);
        }
        Ok(())
    }
}

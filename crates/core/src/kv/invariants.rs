//! [`KvManager::check_invariants`]: the manager's structure, checked from scratch.

use std::collections::HashMap;

use super::block_table::BlockTable;
use super::hash::BlockHash;
use super::manager::KvManager;
use super::window::RELEASED;

/// The first structural invariant [`KvManager::check_invariants`] found broken, described.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvariantViolation(pub String);

impl KvManager {
    /// Checks every structural invariant; `Err` names the first one broken. For tests and
    /// debug assertions; `O(blocks + table entries)`.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.find_violation().map_err(InvariantViolation)
    }

    fn find_violation(&self) -> Result<(), String> {
        let n = self.cfg.num_blocks;
        let mut table_refs = vec![0u32; n];
        for (id, s) in &self.seqs {
            let want = BlockTable::blocks_for(s.table.num_tokens, self.cfg.block_size);
            if s.table.blocks.len() != want {
                return Err(format!(
                    "seq {id}: {} blocks for {} tokens",
                    s.table.blocks.len(),
                    s.table.num_tokens
                ));
            }
            let m = self.cfg.window.map_or(0, |w| w.pages);
            if s.win.len() != s.table.blocks.len() * m || s.win_released > s.table.blocks.len() {
                return Err(format!(
                    "seq {id}: {} window pages ({} released blocks) for {} blocks of {m}",
                    s.win.len(),
                    s.win_released,
                    s.table.blocks.len()
                ));
            }
            if let Some(i) = s
                .win
                .iter()
                .enumerate()
                .position(|(i, &b)| (b == RELEASED) != (i < s.win_released * m))
            {
                return Err(format!(
                    "seq {id}: window page {i} released out of order (released {})",
                    s.win_released
                ));
            }
            for b in s.pages() {
                table_refs[b as usize] += 1;
            }
            for i in 0..s.committed {
                if self.cache.hash_of_block(s.table.blocks[i]).is_none() {
                    return Err(format!("seq {id}: committed block {i} not cached"));
                }
            }
        }
        let mut holds = vec![0u32; n];
        for b in self
            .steps
            .values()
            .flatten()
            .chain(self.pending_holds.iter())
        {
            holds[*b as usize] += 1;
        }
        let mut in_free = vec![false; n];
        for b in self.pool.free_list() {
            if std::mem::replace(&mut in_free[b as usize], true) {
                return Err(format!("block {b} twice in free list"));
            }
        }
        for b in 0..n {
            let r = self.pool.refs(b as u32);
            if r.table_refs != table_refs[b] || r.holds != holds[b] {
                return Err(format!(
                    "block {b}: refs {}/{} but tables {} holds {}",
                    r.table_refs, r.holds, table_refs[b], holds[b]
                ));
            }
            if r.free != in_free[b] {
                return Err(format!(
                    "block {b}: free flag {} but in free list {}",
                    r.free, in_free[b]
                ));
            }
            let in_set = self.wcache.hash_of_page(b as u32);
            let cached = self.cache.hash_of_block(b as u32).is_some() || in_set.is_some();
            if in_free[b] && (!r.is_unreferenced() || cached) {
                return Err(format!("block {b} free but referenced or cached"));
            }
            let unref = r.is_unreferenced();
            if in_set.is_none() && cached && unref != self.cache.is_unreferenced(b as u32) {
                return Err(format!("block {b}: unreferenced set disagrees"));
            }
            if !cached && !in_free[b] && unref {
                return Err(format!(
                    "block {b} leaked: unreferenced, not cached, not free"
                ));
            }
        }
        for (h, set) in self.wcache.entries() {
            if self.cache.get(*h).is_none() {
                return Err(format!("window set {h:#x} outlived its full block"));
            }
            let unref = set
                .pages
                .iter()
                .all(|&b| self.pool.refs(b).is_unreferenced());
            if unref != self.wcache.is_unreferenced(*h) {
                return Err(format!("window set {h:#x}: unreferenced set disagrees"));
            }
        }
        let mut children: HashMap<BlockHash, u32> = HashMap::new();
        for e in self.cache.entries() {
            if e.tokens.len() != self.cfg.block_size {
                return Err(format!(
                    "cached block {} holds {} tokens",
                    e.block,
                    e.tokens.len()
                ));
            }
            let salt = super::hash::chain_salt(self.cache.salt(), e.ns);
            if super::hash::block_hash(e.parent, salt, &e.tokens) != e.hash {
                return Err(format!("cached block {} hash mismatch", e.block));
            }
            if let Some(ph) = e.parent {
                if self.cache.get(ph).is_none() {
                    return Err(format!("cached block {} has a dangling parent", e.block));
                }
                *children.entry(ph).or_default() += 1;
            }
        }
        for e in self.cache.entries() {
            if e.children != children.get(&e.hash).copied().unwrap_or(0) {
                return Err(format!("cached block {} child count wrong", e.block));
            }
        }
        Ok(())
    }
}

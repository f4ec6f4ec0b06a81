//! The physical block pool: reference counts and a deterministic free list.
//!
//! A block has two kinds of reference:
//! - `table_refs`: how many sequence block tables point at it (sharing, forks, prefix hits);
//! - `holds`: how many submitted-but-unfinished steps read or write it.
//!
//! NOTE: they are kept apart on purpose. Copy-on-write must look at `table_refs` only (a
//! step reading a block does not make it "shared" for writing), while release must wait for
//! both to reach zero: a freed block is never handed out while an in-flight step reads it.
//!
//! The pool does not know about the prefix cache; the manager decides whether a block whose
//! references all dropped goes back to the free list or stays cached (evictable).

use std::collections::VecDeque;

/// Reference counts of one physical block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockRefs {
    /// Number of block tables holding this block.
    pub table_refs: u32,
    /// Number of in-flight steps holding this block.
    pub holds: u32,
    /// Whether the block currently sits in the free list (owned by nobody).
    pub free: bool,
}

impl BlockRefs {
    /// True when nothing references the block at all.
    pub fn is_unreferenced(&self) -> bool {
        self.table_refs == 0 && self.holds == 0
    }
}

/// Fixed set of `num_blocks` blocks of `block_size` token slots each.
///
/// Free-list order is FIFO: blocks start as `0, 1, …, n−1`, allocation pops the front,
/// release pushes the back. Tests pin exact ids, so this order is part of the contract.
#[derive(Debug, Clone)]
pub struct BlockPool {
    block_size: usize,
    refs: Vec<BlockRefs>,
    free: VecDeque<u32>,
}

impl BlockPool {
    /// A pool with every block free, in id order.
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        let refs = vec![
            BlockRefs {
                free: true,
                ..BlockRefs::default()
            };
            num_blocks
        ];
        let free = (0..num_blocks as u32).collect();
        Self {
            block_size,
            refs,
            free,
        }
    }

    /// Token slots per block (`p`).
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Total number of blocks.
    pub fn num_blocks(&self) -> usize {
        self.refs.len()
    }

    /// Number of blocks in the free list.
    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    /// Reference counts of `block`.
    pub fn refs(&self, block: u32) -> BlockRefs {
        self.refs[block as usize]
    }

    /// The free list, front (next allocated) first.
    pub fn free_list(&self) -> impl Iterator<Item = u32> + '_ {
        self.free.iter().copied()
    }

    /// Takes the next free block, giving it one table reference.
    pub fn pop_free(&mut self) -> Option<u32> {
        let b = self.free.pop_front()?;
        let r = &mut self.refs[b as usize];
        debug_assert!(
            r.free && r.is_unreferenced(),
            "free-list block {b} was referenced"
        );
        r.free = false;
        r.table_refs = 1;
        Some(b)
    }

    /// Returns an unreferenced block to the back of the free list.
    pub fn push_free(&mut self, block: u32) {
        let r = &mut self.refs[block as usize];
        assert!(
            r.is_unreferenced() && !r.free,
            "block {block} released while referenced or twice"
        );
        r.free = true;
        self.free.push_back(block);
    }

    /// Claims an unreferenced block that is not in the free list (an evicted cached block).
    pub fn claim(&mut self, block: u32) {
        let r = &mut self.refs[block as usize];
        assert!(
            r.is_unreferenced() && !r.free,
            "claimed block {block} is in use or free"
        );
        r.table_refs = 1;
    }

    /// Adds one table reference.
    pub fn inc_table(&mut self, block: u32) {
        let r = &mut self.refs[block as usize];
        assert!(!r.free, "table reference taken on free block {block}");
        r.table_refs += 1;
    }

    /// Drops one table reference; returns true when the block became unreferenced.
    pub fn dec_table(&mut self, block: u32) -> bool {
        let r = &mut self.refs[block as usize];
        r.table_refs = r
            .table_refs
            .checked_sub(1)
            .expect("table reference count underflow");
        r.is_unreferenced()
    }

    /// Adds one step hold.
    pub fn inc_hold(&mut self, block: u32) {
        let r = &mut self.refs[block as usize];
        assert!(!r.free, "step hold taken on free block {block}");
        r.holds += 1;
    }

    /// Drops one step hold; returns true when the block became unreferenced.
    pub fn dec_hold(&mut self, block: u32) -> bool {
        let r = &mut self.refs[block as usize];
        r.holds = r.holds.checked_sub(1).expect("step hold count underflow");
        r.is_unreferenced()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_free_list_order() {
        let mut p = BlockPool::new(4, 16);
        assert_eq!(p.pop_free(), Some(0));
        assert_eq!(p.pop_free(), Some(1));
        assert!(p.dec_table(0));
        p.push_free(0);
        assert_eq!(p.free_list().collect::<Vec<_>>(), vec![2, 3, 0]);
        assert_eq!(p.pop_free(), Some(2));
    }

    #[test]
    fn holds_keep_block_referenced() {
        let mut p = BlockPool::new(2, 4);
        let b = p.pop_free().unwrap();
        p.inc_hold(b);
        assert!(!p.dec_table(b));
        assert!(p.dec_hold(b));
    }
}

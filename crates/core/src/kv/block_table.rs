//! Per-sequence block table: logical block i → physical block id.
//!
//! ```text
//! tokens:  | 0 1 2 3 | 4 5 6 7 | 8 9 . . |     (p = 4, num_tokens = 10)
//! table:   [   7     ,   2     ,   5     ]
//! slot(t) = table[t / p] * p + t % p      slot(9) = 5*4 + 1 = 21
//! ```

/// Where token position `pos` lives in the paged cache through `table` (block size `p`):
/// `(physical block, row within it)`. The one place that reads a block table; the KV
/// manager, the model's K/V writes and the attention kernels all go through it (or
/// [`slot`]), so they agree on every position.
#[inline(always)]
pub fn page(table: &[u32], pos: usize, p: usize) -> (usize, usize) {
    (table[pos / p] as usize, pos % p)
}

/// The flat KV slot of position `pos` through `table`: `table[pos / p] * p + pos % p`
/// (see [`page`]). Panics when the table does not cover `pos`.
#[inline(always)]
pub fn slot(table: &[u32], pos: usize, p: usize) -> usize {
    let (block, row) = page(table, pos, p);
    block * p + row
}

/// The blocks of one sequence and how many token slots of them are in use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockTable {
    /// Physical block ids in logical order.
    pub blocks: Vec<u32>,
    /// Token positions that have a slot (written or about to be written by a step).
    pub num_tokens: usize,
}

impl BlockTable {
    /// Slot index of token position `pos` for block size `p`, if the table covers it.
    pub fn slot(&self, pos: usize, p: usize) -> Option<usize> {
        (pos / p < self.blocks.len()).then(|| slot(&self.blocks, pos, p))
    }

    /// Blocks needed to hold `tokens` positions with block size `p`.
    pub fn blocks_for(tokens: usize, p: usize) -> usize {
        tokens.div_ceil(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_formula() {
        let t = BlockTable {
            blocks: vec![7, 2, 5],
            num_tokens: 10,
        };
        assert_eq!(t.slot(0, 4), Some(28));
        assert_eq!(t.slot(9, 4), Some(21));
        assert_eq!(t.slot(12, 4), None);
        assert_eq!(BlockTable::blocks_for(9, 4), 3);
        assert_eq!(BlockTable::blocks_for(0, 4), 0);
    }
}

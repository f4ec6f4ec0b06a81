//! Per-sequence block table: logical block i → physical block id.
//!
//! ```text
//! tokens:  | 0 1 2 3 | 4 5 6 7 | 8 9 . . |     (p = 4, num_tokens = 10)
//! table:   [   7     ,   2     ,   5     ]
//! slot(t) = table[t / p] * p + t % p      slot(9) = 5*4 + 1 = 21
//! ```

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
        self.blocks.get(pos / p).map(|&b| b as usize * p + pos % p)
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

//! Which cached block to drop first when the free list is empty.
//!
//! `ValuePerByte` ranks a block by the expected time it saves, `V_h = p_h (T_r − T_f) − T_m`
//! (DESIGN.md §kv-cache), divided by its bytes. Every block has the same size, so ranking by `V_h` per
//! block is ranking per byte; the division is left out. Lowest value goes first; ties go to
//! the least recently used (logical clock), then to the lowest block id, so order is
//! deterministic.
//!
//! - `p_h`, the chance the block is hit again, is estimated from its observed reuse as a
//!   Laplace-smoothed hit rate per lookup: `(hits + 1) / (lookups since insertion + 2)`.
//!   A fresh block starts at 1/2; a block hit by every lookup tends to 1; a block nobody
//!   asks for decays like 1/age. Counting lookups rather than seconds keeps the core free
//!   of a clock and makes it deterministic.
//! - `T_r` is the recompute time of the block's tokens at its depth from the cost model:
//!   linear term plus attention pairs `p·h + p(p+1)/2`, so deep blocks are worth more.
//! - `T_f` and `T_m` come from the optional second tier; without a tier both are zero.
//!
//! Only leaves (blocks without cached children) are candidates, so a chain never loses an
//! inner block while its tail is still reachable.

use crate::cost::{CostModel, TierCost};

/// Eviction order for unreferenced cached blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EvictionPolicy {
    /// Lowest expected saving per byte first, LRU as tie-break (default).
    #[default]
    ValuePerByte,
    /// Least recently used first (for comparison).
    Lru,
}

/// Smoothed hit probability from `hits` over `age` lookups.
pub fn hit_probability(hits: u64, age: u64) -> f64 {
    ((hits as f64 + 1.0) / (age as f64 + 2.0)).min(1.0)
}

/// Expected saving `V_h` in seconds of keeping one block of `block_size` tokens whose first
/// token sits at position `depth_tokens`.
pub fn block_value(
    p_h: f64,
    depth_tokens: usize,
    block_size: usize,
    cost: &CostModel,
    tier: Option<&TierCost>,
) -> f64 {
    let t_r = cost.chunk_s(depth_tokens, block_size);
    let (t_f, t_m) = match tier {
        Some(t) => (
            t.fetch_per_token_s * block_size as f64,
            t.maintain_per_token_s * block_size as f64,
        ),
        None => (0.0, 0.0),
    };
    p_h * (t_r - t_f) - t_m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deeper_blocks_are_worth_more() {
        let m = CostModel::REFERENCE;
        let shallow = block_value(0.5, 0, 16, &m, None);
        let deep = block_value(0.5, 6144, 16, &m, None);
        assert!(deep > shallow);
        assert_eq!(hit_probability(0, 0), 0.5);
        assert!((hit_probability(9, 18) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn reference_prefix_a_value() {
        // DESIGN.md §kv-cache: A = 6144-token prefix, T_r 307.9 ms, T_f = T_m = 14.2 ms, p_h 50% → 132.7 ms.
        let t_r: f64 = 307.9e-3;
        let v = 0.5 * (t_r - 14.2e-3) - 14.2e-3;
        assert!((v * 1e3 - 132.65).abs() < 0.01);
        let tier = TierCost {
            fetch_per_token_s: 14.2e-3 / 6144.0,
            maintain_per_token_s: 14.2e-3 / 6144.0,
        };
        let flat = CostModel {
            fixed_s: 0.0,
            per_token_s: t_r / 6144.0,
            per_pair_s: 0.0,
        };
        let per_token = block_value(0.5, 0, 1, &flat, Some(&tier)) * 6144.0;
        assert!((per_token * 1e3 - 132.65).abs() < 0.01);
    }
}

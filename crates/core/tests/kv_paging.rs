//! Part A acceptance tests with exact block ids (DESIGN.md §kv-cache).

use folio_core::cost::CostModel;
use folio_core::kv::{CopyOp, EvictionPolicy, KvConfig, KvManager, StepId};

fn mgr(num_blocks: usize, block_size: usize, prefix_cache: bool) -> KvManager {
    KvManager::new(KvConfig {
        num_blocks,
        block_size,
        prefix_cache,
        ..KvConfig::default()
    })
    .expect("valid config")
}

/// Adds a sequence, computes all its tokens and commits its full blocks.
fn compute(m: &mut KvManager, id: u64, tokens: &[u32]) -> usize {
    let cached = m.create_seq(id, tokens).unwrap();
    m.grow(id, tokens.len()).unwrap();
    m.commit(id, tokens, tokens.len()).unwrap();
    cached
}

/// Sequences A, B, C, D of lengths 9, 13, 5, 15; A and B share their first 8 tokens.
fn reference_seqs() -> [Vec<u32>; 4] {
    let a: Vec<u32> = (1..=9).collect();
    let mut b: Vec<u32> = (1..=8).collect();
    b.extend(100..105);
    let c: Vec<u32> = (200..205).collect();
    let d: Vec<u32> = (300..315).collect();
    [a, b, c, d]
}

fn slots_used(p: usize, share: bool) -> (usize, usize) {
    let mut m = mgr(64, p, share);
    let seqs = reference_seqs();
    for (i, s) in seqs.iter().enumerate() {
        compute(&mut m, i as u64, s);
    }
    m.check_invariants().unwrap();
    let stats = m.stats();
    (stats.used_blocks * p, seqs.iter().map(Vec::len).sum())
}

#[test]
fn reference_paging_example() {
    // Whole-segment reservation: every sequence reserves its maximum of 16 tokens.
    let mut m = mgr(64, 16, false);
    for id in 0..4 {
        m.create_seq(id, &[]).unwrap();
        m.grow(id, 16).unwrap();
    }
    assert_eq!(m.stats().used_blocks * 16, 64);

    assert_eq!(slots_used(4, false), (52, 42));
    assert_eq!(slots_used(4, true), (44, 42));
    assert_eq!(slots_used(2, false).0, 46);
    assert_eq!(slots_used(2, true).0, 38);
    assert_eq!(slots_used(8, false).0, 56);
    assert_eq!(slots_used(8, true).0, 48);
    // p = 16: the 8 common tokens are not a full block, so nothing is shared.
    assert_eq!(slots_used(16, false).0, 64);
    assert_eq!(slots_used(16, true).0, 64);
}

#[test]
fn reference_paging_exact_block_ids() {
    let mut m = mgr(64, 4, true);
    let seqs = reference_seqs();
    let cached: Vec<usize> = seqs
        .iter()
        .enumerate()
        .map(|(i, s)| compute(&mut m, i as u64, s))
        .collect();
    assert_eq!(cached, vec![0, 8, 0, 0]);
    assert_eq!(m.table(0).unwrap().blocks, vec![0, 1, 2]);
    assert_eq!(m.table(1).unwrap().blocks, vec![0, 1, 3, 4]);
    assert_eq!(m.table(2).unwrap().blocks, vec![5, 6]);
    assert_eq!(m.table(3).unwrap().blocks, vec![7, 8, 9, 10]);
    assert_eq!(m.slot(1, 9), Some(3 * 4 + 1));
    assert_eq!(m.pool().refs(0).table_refs, 2);
    let s = m.stats();
    assert_eq!((s.prefix_query_tokens, s.prefix_hit_tokens), (42, 8));
    // Full blocks: A 2, B 1 own (+2 shared), C 1, D 3 → 7 cached.
    assert_eq!(s.cached_blocks, 7);
}

#[test]
fn four_branches_of_a_95_block_prefix() {
    let p = 16;
    let prefix: Vec<u32> = (0..95 * p as u32).map(|t| t % 50_000).collect();
    // Through fork: branches share every prefix block.
    let mut m = mgr(200, p, true);
    compute(&mut m, 0, &prefix);
    for child in 1..4 {
        m.fork(0, child).unwrap();
    }
    for id in 0..4 {
        m.grow(id, (95 + 9) * p).unwrap();
    }
    m.check_invariants().unwrap();
    assert_eq!(m.num_table_refs(), 416);
    assert_eq!(m.stats().used_blocks, 131);
    assert!(
        m.take_copy_ops().is_empty(),
        "full shared blocks are never copied"
    );

    // Through the prefix cache: the same numbers for independent requests.
    let mut m = mgr(200, p, true);
    compute(&mut m, 100, &prefix);
    m.free_seq(100);
    for id in 0..4u64 {
        let mut toks = prefix.clone();
        toks.extend((0..9 * p as u32).map(|t| 60_000 + id as u32 * 1000 + t));
        assert_eq!(compute(&mut m, id, &toks), 95 * p);
    }
    m.check_invariants().unwrap();
    assert_eq!(m.num_table_refs(), 416);
    assert_eq!(m.stats().used_blocks, 131);
}

#[test]
fn copy_on_write_of_shared_partial_tail() {
    let mut m = mgr(8, 4, false);
    m.create_seq(0, &[]).unwrap();
    m.grow(0, 6).unwrap();
    assert_eq!(m.table(0).unwrap().blocks, vec![0, 1]);
    m.fork(0, 1).unwrap();
    m.grow(1, 7).unwrap();
    assert_eq!(
        m.take_copy_ops(),
        vec![CopyOp {
            src: 1,
            dst: 2,
            num_tokens: 2
        }]
    );
    assert_eq!(m.table(1).unwrap().blocks, vec![0, 2]);
    // The parent is now the only table on block 1: it appends in place.
    m.grow(0, 7).unwrap();
    assert!(m.take_copy_ops().is_empty());
    assert_eq!(m.table(0).unwrap().blocks, vec![0, 1]);
    // The copy source is held until the step that carries the copy finishes.
    assert_eq!(m.pool().refs(1).holds, 1);
    m.hold_step(StepId(1), &[0, 1]);
    m.check_invariants().unwrap();
    m.free_seq(0);
    m.free_seq(1);
    assert_eq!(m.num_free(), 5, "blocks 0, 1, 2 still held by step 1");
    assert!(m.release_step(StepId(1)));
    assert_eq!(m.num_free(), 8);
    m.check_invariants().unwrap();
    assert_eq!(m.stats().cow_copies, 1);
}

#[test]
fn deferred_release_waits_for_in_flight_step() {
    let mut m = mgr(4, 4, false);
    m.create_seq(7, &[]).unwrap();
    m.grow(7, 8).unwrap();
    m.hold_step(StepId(3), &[7]);
    assert!(m.free_seq(7));
    assert_eq!(m.pool().free_list().collect::<Vec<_>>(), vec![2, 3]);
    m.release_step(StepId(3));
    assert_eq!(m.pool().free_list().collect::<Vec<_>>(), vec![2, 3, 0, 1]);
    m.check_invariants().unwrap();
}

#[test]
fn eviction_is_leaf_first_and_reported() {
    let mut m = mgr(4, 4, true);
    let a: Vec<u32> = (1..=9).collect();
    compute(&mut m, 0, &a);
    m.free_seq(0);
    // Blocks 0, 1 cached and evictable; block 2 (partial) back on the free list.
    assert_eq!(m.num_free(), 2);
    assert_eq!(m.num_available(), 4);
    m.create_seq(1, &[]).unwrap();
    m.grow(1, 16).unwrap();
    assert_eq!(m.table(1).unwrap().blocks, vec![3, 2, 1, 0]);
    let ev = m.take_evicted();
    assert_eq!(ev.iter().map(|e| e.block).collect::<Vec<_>>(), vec![1, 0]);
    assert_eq!(ev[0].tokens, vec![5, 6, 7, 8]);
    assert_eq!(ev[0].parent, Some(ev[1].hash));
    assert_eq!(m.stats().evictions, 2);
    m.check_invariants().unwrap();
}

#[test]
fn value_per_byte_keeps_deep_blocks_that_lru_drops() {
    // Attention-pair cost only, so depth decides the value.
    let cost = CostModel {
        fixed_s: 0.0,
        per_token_s: 0.0,
        per_pair_s: 1e-9,
    };
    let victim = |policy| {
        let cfg = KvConfig {
            num_blocks: 5,
            block_size: 4,
            eviction: policy,
            cost,
            ..KvConfig::default()
        };
        let mut m = KvManager::new(cfg).unwrap();
        compute(&mut m, 0, &(1..=12).collect::<Vec<_>>()); // blocks 0,1,2, depth 2 leaf = 2
        compute(&mut m, 1, &[50, 51, 52, 53]); // block 3, depth 0, newer
        m.free_seq(0);
        m.free_seq(1);
        m.create_seq(2, &[]).unwrap();
        m.grow(2, 8).unwrap(); // block 4 free, then one eviction
        m.take_evicted()[0].block
    };
    assert_eq!(victim(EvictionPolicy::Lru), 2, "LRU drops the oldest leaf");
    assert_eq!(
        victim(EvictionPolicy::ValuePerByte),
        3,
        "value drops the cheap shallow block"
    );
}

#[test]
fn hit_is_capped_so_last_token_is_recomputed() {
    let mut m = mgr(8, 4, true);
    let t: Vec<u32> = (1..=8).collect();
    compute(&mut m, 0, &t);
    assert_eq!(
        m.match_prefix(&t).num_tokens,
        4,
        "8 tokens: at most 7 from cache → 1 block"
    );
    assert_eq!(m.match_prefix(&[1, 2, 3, 4, 5, 6, 7, 8, 9]).num_tokens, 8);
    assert_eq!(
        m.match_prefix(&[1, 2, 3, 9, 5, 6, 7, 8, 9]).num_tokens,
        0,
        "first miss stops"
    );
}

#[test]
fn restore_registers_fetched_block_and_counts_tier_hits() {
    let mut m = mgr(4, 4, true);
    let t: Vec<u32> = (1..=9).collect();
    compute(&mut m, 0, &t);
    m.free_seq(0);
    m.create_seq(1, &[]).unwrap();
    m.grow(1, 16).unwrap();
    let ev = m.take_evicted();
    m.free_seq(1);
    // The executor spilled both; fetch them back in chain order.
    let root = ev.iter().find(|e| e.parent.is_none()).unwrap();
    let leaf = ev.iter().find(|e| e.parent.is_some()).unwrap();
    let b0 = m.restore_block(None, &root.tokens).unwrap();
    let b1 = m.restore_block(Some(root.hash), &leaf.tokens).unwrap();
    assert_eq!(
        (b0, b1),
        (0, 1),
        "free list order after freeing [3,2,1,0] tail-first"
    );
    assert_eq!(m.create_seq(2, &t).unwrap(), 8);
    let s = m.stats();
    assert_eq!((s.restores, s.tier_hit_tokens), (2, 8));
    m.check_invariants().unwrap();
}

//! KV-cache events (vLLM's BlockStored / BlockRemoved / AllBlocksCleared): the exact events
//! of a store, extend, namespace, duplicate, evict, restore and reset sequence.

use folio_core::kv::{
    block_hash, chain_hashes, chain_salt, EvictionPolicy, KvConfig, KvEvent, KvManager,
};

const SALT: u64 = 0x5eed;

fn mgr(num_blocks: usize) -> KvManager {
    let mut m = KvManager::new(KvConfig {
        num_blocks,
        block_size: 4,
        eviction: EvictionPolicy::Lru,
        salt: SALT,
        ..KvConfig::default()
    })
    .expect("valid config");
    m.enable_events(true);
    m
}

fn compute(m: &mut KvManager, id: u64, tokens: &[u32], ns: u64) {
    m.create_seq_in(id, tokens, ns).unwrap();
    m.grow(id, tokens.len()).unwrap();
    m.commit(id, tokens, tokens.len()).unwrap();
}

fn stored(hashes: &[u64], parent: Option<u64>, tokens: &[u32], ns: u64) -> KvEvent {
    KvEvent::Stored {
        hashes: hashes.to_vec(),
        parent,
        tokens: tokens.to_vec(),
        ns,
    }
}

#[test]
fn store_extend_evict_and_reset_give_exact_events() {
    let mut m = mgr(6);
    let t: Vec<u32> = (1..=9).collect();
    let h = chain_hashes(SALT, &t, 4);
    // Two full blocks committed in one call are one event, rooted at no parent; the
    // partial third block is not announced.
    compute(&mut m, 1, &t, 0);
    assert_eq!(m.take_events(), vec![stored(&h, None, &t[..8], 0)]);
    assert!(m.take_events().is_empty(), "taken events are gone");

    // The sequence grows to a third full block: one event whose parent is block 2.
    let t12: Vec<u32> = (1..=12).collect();
    m.grow(1, 12).unwrap();
    m.commit(1, &t12, 12).unwrap();
    let h2 = block_hash(Some(h[1]), SALT, &t12[8..12]);
    assert_eq!(
        m.take_events(),
        vec![stored(&[h2], Some(h[1]), &t12[8..], 0)]
    );

    // The same tokens under adapter namespace 7 are another chain, with its own root.
    compute(&mut m, 2, &t[..5], 7);
    let h7 = block_hash(None, chain_salt(SALT, 7), &t[..4]);
    assert_eq!(m.take_events(), vec![stored(&[h7], None, &t[..4], 7)]);

    // A hit on cached blocks announces nothing (they were announced when stored).
    m.free_seq(2);
    compute(&mut m, 3, &t[..5], 7);
    assert!(m.take_events().is_empty());

    // Pool of 6: seq 1 holds 3 blocks (12 tokens), seq 3 holds 2 (the cached block and its
    // private tail), 1 is free. Freeing seq 1 leaves its 3 blocks cached and evictable. A
    // new 16-token sequence needs 4 blocks: the free one, then 3 evictions, leaf first.
    m.free_seq(1);
    let fresh: Vec<u32> = (100..116).collect();
    m.create_seq(4, &fresh).unwrap();
    m.grow(4, 16).unwrap();
    assert_eq!(
        m.take_events(),
        vec![KvEvent::Removed {
            hashes: vec![h2, h[1], h[0]]
        }],
        "leaf first: block 3, then 2, then 1"
    );
    m.commit(4, &fresh, 16).unwrap();
    let hf = chain_hashes(SALT, &fresh, 4);
    assert_eq!(m.take_events(), vec![stored(&hf, None, &fresh, 0)]);

    // A reset is refused while sequences hold blocks, and records nothing.
    assert!(!m.reset_prefix_cache());
    assert!(m.take_events().is_empty());
    m.free_seq(3);
    m.free_seq(4);
    assert!(m.reset_prefix_cache());
    assert_eq!(m.take_events(), vec![KvEvent::AllCleared]);
    assert!(m.cache().is_empty());
    assert_eq!(m.num_free(), 6);
    // The evicted blocks were still reported for the second tier: seq 1's 3 earlier, then
    // the reset's 5 (adapter 7's block and the fresh chain's 4).
    assert_eq!(m.take_evicted().len(), 3 + 1 + 4);
    m.check_invariants().unwrap();
}

#[test]
fn a_block_restored_from_the_second_tier_is_stored() {
    let mut m = mgr(4);
    let a: Vec<u32> = vec![5, 6, 7, 8];
    let b: Vec<u32> = vec![9, 10, 11, 12];
    m.restore_block(None, &a).unwrap();
    let ha = block_hash(None, SALT, &a);
    m.restore_block(Some(ha), &b).unwrap();
    let hb = block_hash(Some(ha), SALT, &b);
    // Consecutive blocks of one chain merge into one event, as a commit would give.
    assert_eq!(
        m.take_events(),
        vec![stored(&[ha, hb], None, &[a, b].concat(), 0)]
    );
}

#[test]
fn a_duplicate_block_stays_private_and_unannounced() {
    let mut m = mgr(8);
    let t: Vec<u32> = (1..=8).collect();
    // Two sequences compute the same prompt side by side (neither hit the other's blocks):
    // only the first to commit enters the cache.
    m.create_seq(1, &t).unwrap();
    m.create_seq(2, &t).unwrap();
    m.grow(1, 8).unwrap();
    m.grow(2, 8).unwrap();
    m.commit(1, &t, 8).unwrap();
    m.commit(2, &t, 8).unwrap();
    let h = chain_hashes(SALT, &t, 4);
    assert_eq!(m.take_events(), vec![stored(&h, None, &t, 0)]);
}

#[test]
fn nothing_is_recorded_unless_enabled() {
    let mut m = mgr(4);
    m.enable_events(false);
    assert!(!m.events_enabled());
    compute(&mut m, 1, &(1..=9).collect::<Vec<u32>>(), 0);
    m.free_seq(1);
    m.evict_all();
    assert!(m.reset_prefix_cache());
    assert!(m.take_events().is_empty());
}

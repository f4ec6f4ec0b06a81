//! Prefix-cache namespaces (DESIGN.md §kv-cache: a cached prefix is reusable only under the same
//! adapter): the same tokens under two namespaces are two entries, with exact block ids.

use folio_core::kv::{KvConfig, KvManager};
use folio_core::sched::{Request, RequestResult, Scheduler, SchedulerConfig};

fn mgr() -> KvManager {
    KvManager::new(KvConfig {
        num_blocks: 16,
        block_size: 4,
        ..KvConfig::default()
    })
    .expect("valid config")
}

fn compute(m: &mut KvManager, id: u64, tokens: &[u32], ns: u64) -> usize {
    let cached = m.create_seq_in(id, tokens, ns).unwrap();
    m.grow(id, tokens.len()).unwrap();
    m.commit(id, tokens, tokens.len()).unwrap();
    cached
}

#[test]
fn blocks_are_shared_only_within_a_namespace() {
    let mut m = mgr();
    let t: Vec<u32> = (1..=13).collect();
    // Adapter 7 computes the prompt: blocks 0..=3 (the free list hands out 0 first).
    assert_eq!(compute(&mut m, 1, &t, 7), 0);
    assert_eq!(m.table(1).unwrap().blocks, vec![0, 1, 2, 3]);
    // The base model and adapter 8 see nothing cached for the same tokens.
    assert_eq!(m.match_prefix(&t).num_blocks, 0);
    assert_eq!(m.match_prefix_in(&t, 8).num_blocks, 0);
    assert_eq!(m.match_prefix_in(&t, 7).num_blocks, 3);
    assert_eq!(compute(&mut m, 2, &t, 0), 0);
    assert_eq!(m.table(2).unwrap().blocks, vec![4, 5, 6, 7]);
    assert_eq!(compute(&mut m, 3, &t, 8), 0);
    assert_eq!(m.table(3).unwrap().blocks, vec![8, 9, 10, 11]);
    // Adapter 7 again: its three full blocks come from cache, the tail is new.
    assert_eq!(compute(&mut m, 4, &t, 7), 12);
    assert_eq!(m.table(4).unwrap().blocks, vec![0, 1, 2, 12]);
    // And the base model's own chain is now cached too, separately.
    assert_eq!(compute(&mut m, 5, &t, 0), 12);
    assert_eq!(m.table(5).unwrap().blocks, vec![4, 5, 6, 13]);
    m.check_invariants().unwrap();
    // Three chains of three blocks each, all under distinct hashes.
    assert_eq!(m.cache().entries().count(), 9);
}

#[test]
fn the_scheduler_keys_admission_by_the_requests_namespace() {
    let mut s = Scheduler::new(SchedulerConfig {
        kv: KvConfig {
            num_blocks: 32,
            block_size: 4,
            ..KvConfig::default()
        },
        ..SchedulerConfig::default()
    })
    .unwrap();
    let t: Vec<u32> = (1..=9).collect();
    s.add_request(Request::new(1, t.clone(), 1).with_cache_ns(42))
        .unwrap();
    let out = s.schedule();
    assert_eq!(out.requests[0].start_pos, 0);
    let done = RequestResult {
        id: 1,
        new_token_ids: vec![500],
        finish: None,
    };
    assert_eq!(s.update(&out, &[done]).len(), 1, "max_tokens 1: finished");
    s.add_request(Request::new(2, t.clone(), 1)).unwrap();
    s.add_request(Request::new(3, t.clone(), 1).with_cache_ns(42))
        .unwrap();
    let out = s.schedule();
    let start = |id| out.requests.iter().find(|r| r.id == id).unwrap().start_pos;
    assert_eq!(start(2), 0, "the base request reused an adapter's blocks");
    assert_eq!(start(3), 8, "the same adapter reuses its two full blocks");
    assert_eq!(
        out.requests.iter().find(|r| r.id == 3).unwrap().tables[0][..2],
        [0, 1]
    );
}

//! Speculation owned by the scheduler and the KV manager, without a model: lookahead slots
//! for a drafter that writes K/V before verification, copy-on-write of a shared tail block
//! that holds draft positions, and rollback after partial acceptance — with exact block ids.

use folio_core::kv::{CopyOp, KvConfig};
use folio_core::sched::{Lookahead, Request, RequestResult, Scheduler, SchedulerConfig};

/// The KV slot of every token a scheduled request computes, through its group-0 table.
fn slots(r: &folio_core::sched::ScheduledRequest, s: &Scheduler) -> Vec<usize> {
    let p = s.kv().block_size();
    (r.start_pos..r.start_pos + r.token_ids.len())
        .map(|pos| folio_core::kv::slot(&r.tables[0], pos, p))
        .collect()
}

fn sched(num_blocks: usize, block_size: usize) -> Scheduler {
    Scheduler::new(SchedulerConfig {
        kv: KvConfig {
            num_blocks,
            block_size,
            prefix_cache: false,
            ..KvConfig::default()
        },
        ..SchedulerConfig::default()
    })
    .unwrap()
}

fn result(id: u64, tokens: &[u32]) -> RequestResult {
    RequestResult {
        id,
        new_token_ids: tokens.to_vec(),
        finish: None,
    }
}

#[test]
fn lookahead_slots_have_exact_blocks_and_rejected_ones_go_back() {
    let mut s = sched(16, 4);
    s.add_request(Request::new(1, (0..6).collect(), 10))
        .unwrap();
    let out = s.schedule();
    s.update(&out, &[result(1, &[100])]);
    assert_eq!(s.kv().table(1).unwrap().blocks, vec![0, 1]);

    // Five lookahead slots from position 6 (the newest token), plus the verifying step's
    // extra position: 12 positions, a third block.
    let la = s.reserve_lookahead(1, 5).unwrap();
    assert_eq!(
        la,
        Lookahead {
            start_pos: 6,
            num_slots: 5,
            tables: vec![vec![0, 1, 2]],
            copies: vec![],
        }
    );
    assert_eq!(s.kv().table(1).unwrap().num_tokens, 12);
    s.kv().check_invariants().unwrap();

    // The drafter made all five; verification runs them after the newest token.
    assert!(s.set_draft(1, vec![7, 8, 9, 10, 11]));
    let out = s.schedule();
    let r = &out.requests[0];
    assert_eq!(r.token_ids, vec![100, 7, 8, 9, 10, 11]);
    assert_eq!((r.start_pos, r.num_draft_tokens), (6, 5));
    assert_eq!(r.tables[0], vec![0, 1, 2]);
    assert_eq!(slots(r, &s), vec![6, 7, 8, 9, 10, 11]);
    assert!(out.copies.is_empty());
    // Two accepted, then the correction: 9 positions computed, the rest rolled back.
    s.update(&out, &[result(1, &[7, 8, 42])]);
    let req = s.request(1).unwrap();
    assert_eq!(req.output(), &[100, 7, 8, 42]);
    assert_eq!(req.num_computed_tokens, 9);
    let t = s.kv().table(1).unwrap();
    assert_eq!((t.blocks.clone(), t.num_tokens), (vec![0, 1, 2], 9));

    // Decode 42 (position 9) so the next draft starts at position 10.
    let out = s.schedule();
    s.update(&out, &[result(1, &[43])]);
    // Room: 10 − 5 outputs − 1 pending = 4 slots → positions 10..15, a fourth block.
    let la = s.reserve_lookahead(1, 8).unwrap();
    assert_eq!((la.start_pos, la.num_slots), (10, 4));
    assert_eq!(la.tables[0], vec![0, 1, 2, 3]);
    // The drafter stopped after one draft: the unused slots (and block 3) go back at once.
    assert!(s.set_draft(1, vec![5]));
    let t = s.kv().table(1).unwrap();
    assert_eq!((t.blocks.clone(), t.num_tokens), (vec![0, 1, 2], 12));
    let out = s.schedule();
    assert_eq!(out.requests[0].token_ids, vec![43, 5]);
    // The draft is rejected: only the correction is kept.
    s.update(&out, &[result(1, &[99])]);
    assert_eq!(s.request(1).unwrap().num_computed_tokens, 11);
    assert_eq!(s.kv().table(1).unwrap().num_tokens, 11);
    s.kv().check_invariants().unwrap();

    // Block 3 went back to the free list (fresh blocks come first, so a new request gets
    // block 4; 16 − 3 − 1 blocks are free).
    s.add_request(Request::new(2, (50..53).collect(), 1))
        .unwrap();
    let out = s.schedule();
    let b = out.requests.iter().find(|r| r.id == 2).unwrap();
    assert_eq!(b.tables[0], vec![4]);
    assert_eq!(s.kv().num_free(), 12);
}

#[test]
fn lookahead_copies_a_shared_tail_before_the_drafter_writes() {
    let mut s = sched(16, 4);
    s.add_request(Request::new(1, vec![10, 11, 12, 13, 14, 15], 8))
        .unwrap();
    let out = s.schedule();
    // Sample 2 of the same prompt shares both blocks (block 1 holds positions 4 and 5).
    s.fork(1, 2, 8, 77).unwrap();
    s.update(&out, &[result(1, &[70])]);
    assert_eq!(s.kv().table(2).unwrap().blocks, vec![0, 1]);

    // Request 1 drafts 3 positions from 6: block 1 is shared, so it is copied first (its
    // 2 computed slots into block 2), and block 3 takes positions 8..
    let la = s.reserve_lookahead(1, 3).unwrap();
    assert_eq!(la.tables[0], vec![0, 2, 3]);
    assert_eq!(
        la.copies,
        vec![CopyOp {
            src: 1,
            dst: 2,
            num_tokens: 2
        }]
    );
    assert_eq!(
        s.kv().table(2).unwrap().blocks,
        vec![0, 1],
        "the other sample keeps block 1"
    );
    assert_eq!(s.kv().stats().cow_copies, 1);
    s.kv().check_invariants().unwrap();

    // Verification writes into request 1's own blocks; request 2 now holds block 1 alone,
    // so its decode needs no copy.
    s.set_draft(1, vec![5, 6, 7]);
    let out = s.schedule();
    let ids: Vec<u64> = out.requests.iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![1, 2]);
    assert_eq!(out.requests[0].tables[0], vec![0, 2, 3]);
    assert_eq!(out.requests[1].tables[0], vec![0, 1]);
    assert!(out.copies.is_empty());
    s.update(&out, &[result(1, &[5, 9]), result(2, &[78])]);
    assert_eq!(s.request(1).unwrap().num_computed_tokens, 8);
    assert_eq!(s.kv().table(1).unwrap().blocks, vec![0, 2]);
    s.kv().check_invariants().unwrap();
}

#[test]
fn lookahead_never_preempts_and_shrinks_to_what_is_free() {
    // 4 blocks of 4: request 1 holds 2 (prompt 6 + 1 pending), request 2 one, one is free.
    let mut s = sched(4, 4);
    s.add_request(Request::new(1, (0..6).collect(), 10))
        .unwrap();
    s.add_request(Request::new(2, (20..24).collect(), 4))
        .unwrap();
    let out = s.schedule();
    s.update(&out, &[result(1, &[100]), result(2, &[200])]);
    assert_eq!(s.kv().table(2).unwrap().blocks, vec![2]);
    // 8 slots (the room left) would need 15 positions, 4 blocks; with one block free,
    // 5 slots fit (positions 6..12, the last for the verifying step).
    let la = s.reserve_lookahead(1, 10).unwrap();
    assert_eq!((la.num_slots, la.tables[0].clone()), (5, vec![0, 1, 3]));
    assert_eq!(s.stats().preemptions, 0);
    assert_eq!(s.kv().table(2).unwrap().blocks, vec![2]);
    // A waiting request has nothing to decode: no slots.
    s.add_request(Request::new(3, (0..3).collect(), 2)).unwrap();
    assert_eq!(s.reserve_lookahead(3, 4), None);
}

/// A 4-token prompt arriving behind three long prompts that are still prefilling is
/// admitted in the next step, before their chunks, and samples its first token there.
#[test]
fn a_short_prompt_does_not_wait_behind_long_prefills() {
    let mut s = Scheduler::new(SchedulerConfig {
        token_budget: 512,
        max_chunk: 256,
        kv: KvConfig {
            num_blocks: 2048,
            block_size: 16,
            ..KvConfig::default()
        },
        ..SchedulerConfig::default()
    })
    .unwrap();
    for id in 1..=3 {
        let prompt = (0..8192).map(|t| t + 10_000 * id as u32).collect();
        s.add_request(Request::new(id, prompt, 8)).unwrap();
    }
    let out = s.schedule();
    let ids: Vec<u64> = out.requests.iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![1, 2], "two chunks of 256 fill the budget");
    s.update(&out, &[]);
    s.add_request(Request::new(4, vec![1, 2, 3, 4], 8)).unwrap();
    let out = s.schedule();
    let short = &out.requests[0];
    assert_eq!((short.id, short.token_ids.clone()), (4, vec![1, 2, 3, 4]));
    assert!(short.sample, "its whole prompt runs: first token this step");
    // The long prompts keep the rest of the budget, in admission order.
    let rest: Vec<(u64, usize)> = out.requests[1..]
        .iter()
        .map(|r| (r.id, r.token_ids.len()))
        .collect();
    assert_eq!(rest, vec![(1, 256), (2, 252)]);
}

//! Scheduler behaviour with exact token ids, positions, slots and block ids.

use folio_core::kv::KvConfig;
use folio_core::sched::{
    BatchPolicy, FinishReason, KvReservation, RejectReason, Request, RequestResult, RequestStatus,
    Scheduler, SchedulerConfig, SchedulerOutput,
};

/// The KV slot of every token a scheduled request computes, through its group-0 table.
fn slots(r: &folio_core::sched::ScheduledRequest, s: &Scheduler) -> Vec<usize> {
    let p = s.kv().block_size();
    (r.start_pos..r.start_pos + r.token_ids.len())
        .map(|pos| folio_core::kv::slot(&r.tables[0], pos, p))
        .collect()
}

fn cfg(num_blocks: usize, block_size: usize) -> SchedulerConfig {
    SchedulerConfig {
        kv: KvConfig {
            num_blocks,
            block_size,
            ..KvConfig::default()
        },
        ..SchedulerConfig::default()
    }
}

/// Fake executor: every sampling request gets token `1000 + position`.
fn results(out: &SchedulerOutput) -> Vec<RequestResult> {
    out.requests
        .iter()
        .filter(|r| r.sample)
        .map(|r| RequestResult {
            id: r.id,
            new_token_ids: vec![1000 + (r.start_pos + r.token_ids.len()) as u32],
            finish: None,
        })
        .collect()
}

fn step(s: &mut Scheduler) -> (SchedulerOutput, Vec<Request>) {
    let out = s.schedule();
    let fin = s.update(&out, &results(&out));
    (out, fin)
}

#[test]
fn chunked_prefill_then_decode_with_exact_slots() {
    let mut c = cfg(16, 4);
    c.token_budget = 8;
    c.max_chunk = 6;
    let mut s = Scheduler::new(c).unwrap();
    s.add_request(Request::new(1, (0..10).collect(), 2))
        .unwrap();
    s.add_request(Request::new(2, (50..53).collect(), 1))
        .unwrap();

    let out = s.schedule();
    assert_eq!(out.requests.len(), 2);
    let a = &out.requests[0];
    assert_eq!(
        (a.id, a.start_pos, a.token_ids.clone()),
        (1, 0, (0..6).collect())
    );
    assert_eq!(a.tables[0], vec![0, 1]);
    assert_eq!(slots(a, &s), vec![0, 1, 2, 3, 4, 5]);
    assert!(!a.sample);
    let b = &out.requests[1];
    assert_eq!(
        (b.start_pos, b.token_ids.clone(), b.sample),
        (0, vec![50, 51], false)
    );
    assert_eq!(b.tables[0], vec![2]);
    assert_eq!(out.num_prefill_tokens, 8);
    assert!(s.update(&out, &results(&out)).is_empty());

    // Step 2: request 2 has one token left, so it goes with the decodes, before request 1.
    let out = s.schedule();
    assert_eq!(
        out.requests.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![2, 1]
    );
    let a = &out.requests[1];
    assert_eq!(
        (a.start_pos, a.token_ids.clone(), a.sample),
        (6, (6..10).collect(), true)
    );
    assert_eq!(
        slots(a, &s),
        vec![6, 7, 12, 13],
        "block 3 was allocated for positions 8.."
    );
    let b = &out.requests[0];
    assert_eq!(
        (b.start_pos, b.token_ids.clone(), b.sample),
        (2, vec![52], true)
    );
    let fin = s.update(&out, &results(&out));
    assert_eq!(fin.len(), 1, "request 2 had max_tokens 1");
    assert_eq!(fin[0].output(), &[1003]);
    assert_eq!(fin[0].status, RequestStatus::Finished(FinishReason::Length));

    // Step 3: a decode of request 1 feeds back token 1010 at position 10.
    let out = s.schedule();
    assert_eq!(out.requests[0].token_ids, vec![1010]);
    assert_eq!(out.requests[0].start_pos, 10);
    assert_eq!(out.num_decode_tokens, 1);
    let fin = s.update(&out, &results(&out));
    assert_eq!(fin[0].output(), &[1010, 1011]);
    assert!(!s.has_unfinished());
    let k = s.kv_stats();
    assert_eq!(k.free_blocks + k.evictable_blocks, 16);
}

#[test]
fn decodes_are_scheduled_before_prefill_chunks() {
    let mut c = cfg(64, 4);
    c.token_budget = 5;
    c.max_chunk = 4;
    let mut s = Scheduler::new(c).unwrap();
    s.add_request(Request::new(1, (0..12).collect(), 5))
        .unwrap();
    s.add_request(Request::new(2, (20..22).collect(), 5))
        .unwrap();
    step(&mut s); // 1: 4 tokens, 2: 1 token
    step(&mut s); // 1: 4 tokens, 2: 1 token (sampled)
    let out = s.schedule();
    let ids: Vec<_> = out
        .requests
        .iter()
        .map(|r| (r.id, r.token_ids.len()))
        .collect();
    assert_eq!(
        ids,
        vec![(2, 1), (1, 4)],
        "request 2 decodes before request 1's last chunk"
    );
}

#[test]
fn prefix_hit_skips_cached_tokens_and_recomputes_the_last() {
    let mut s = Scheduler::new(cfg(16, 4)).unwrap();
    let prompt: Vec<u32> = (0..9).collect();
    s.add_request(Request::new(1, prompt.clone(), 1)).unwrap();
    step(&mut s);
    s.add_request(Request::new(2, prompt.clone(), 1)).unwrap();
    let out = s.schedule();
    let r = &out.requests[0];
    assert_eq!((r.start_pos, r.token_ids.clone()), (8, vec![8]));
    assert_eq!(
        r.tables[0],
        vec![0, 1, 3],
        "blocks 0, 1 reused; block 2 went back to the free list"
    );
    assert_eq!(s.request(2).unwrap().num_cached_tokens, 8);
    s.update(&out, &results(&out));
    let k = s.kv_stats();
    assert_eq!((k.prefix_query_tokens, k.prefix_hit_tokens), (18, 8));
}

#[test]
fn a_request_without_prefix_cache_computes_its_whole_prompt() {
    let mut s = Scheduler::new(cfg(16, 4)).unwrap();
    let prompt: Vec<u32> = (0..9).collect();
    s.add_request(Request::new(1, prompt.clone(), 1)).unwrap();
    step(&mut s);
    // Prompt scoring needs logits at every position: the cached blocks are not attached.
    s.add_request(Request::new(2, prompt.clone(), 1).with_prefix_cache(false))
        .unwrap();
    let out = s.schedule();
    let r = &out.requests[0];
    assert_eq!((r.start_pos, r.token_ids.clone()), (0, prompt));
    assert_eq!(s.request(2).unwrap().num_cached_tokens, 0);
    s.update(&out, &results(&out));
    assert_eq!(s.kv_stats().prefix_hit_tokens, 0);
}

#[test]
fn on_demand_preempts_newest_and_counts_recompute() {
    // 4 blocks of 4: two requests of 7 prompt tokens grow past 8 tokens each.
    let mut c = cfg(4, 4);
    c.kv.prefix_cache = false;
    let mut s = Scheduler::new(c).unwrap();
    s.add_request(Request::new(1, (0..7).collect(), 6)).unwrap();
    s.add_request(Request::new(2, (10..17).collect(), 6))
        .unwrap();
    let mut finished = Vec::new();
    let mut preempted = Vec::new();
    for _ in 0..40 {
        if !s.has_unfinished() {
            break;
        }
        let (out, fin) = step(&mut s);
        preempted.extend(out.preempted.clone());
        finished.extend(fin);
    }
    assert_eq!(preempted, vec![2], "the newest request is the victim");
    assert_eq!(finished.len(), 2);
    let r2 = finished.iter().find(|r| r.id == 2).unwrap();
    assert_eq!(r2.num_preemptions, 1);
    // Request 2 had computed 7 prompt + 1 output when preempted at its 9th position.
    assert_eq!(r2.num_recomputed_tokens, 8);
    assert_eq!(r2.output(), &[1007, 1008, 1009, 1010, 1011, 1012]);
    assert_eq!(s.stats().recomputed_tokens, 8);
    assert_eq!(s.kv_stats().free_blocks, 4);
}

#[test]
fn reserve_final_admits_only_what_fits_at_full_length() {
    let mut c = cfg(6, 4);
    c.reservation = KvReservation::ReserveFinal;
    c.kv.prefix_cache = false;
    let mut s = Scheduler::new(c).unwrap();
    // Final KV 7 + 6 − 1 = 12 tokens = 3 blocks each: two fit, the third waits.
    for id in 1..=3 {
        s.add_request(Request::new(
            id,
            (0..7).map(|t| t + 100 * id as u32).collect(),
            6,
        ))
        .unwrap();
    }
    let out = s.schedule();
    assert_eq!(
        out.requests.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![1, 2]
    );
    s.update(&out, &results(&out));
    let mut preemptions = 0;
    while s.has_unfinished() {
        let (out, _) = step(&mut s);
        preemptions += out.preempted.len();
    }
    assert_eq!(preemptions, 0);
    assert_eq!(s.stats().finished, 3);
}

#[test]
fn fixed_batching_waits_for_the_whole_group() {
    let mut c = cfg(64, 4);
    c.policy = BatchPolicy::Fixed;
    c.max_running = 2;
    let mut s = Scheduler::new(c).unwrap();
    s.add_request(Request::new(1, vec![1, 2], 4)).unwrap();
    s.add_request(Request::new(2, vec![3, 4], 1)).unwrap();
    s.add_request(Request::new(3, vec![5, 6], 1)).unwrap();
    let mut seen = Vec::new();
    while s.has_unfinished() {
        let (out, _) = step(&mut s);
        seen.push(out.requests.iter().map(|r| r.id).collect::<Vec<_>>());
    }
    assert_eq!(seen, vec![vec![1, 2], vec![1], vec![1], vec![1], vec![3]]);
}

#[test]
fn serial_runs_one_at_a_time() {
    let mut c = cfg(64, 4);
    c.policy = BatchPolicy::Serial;
    let mut s = Scheduler::new(c).unwrap();
    s.add_request(Request::new(1, vec![1, 2], 2)).unwrap();
    s.add_request(Request::new(2, vec![3, 4], 1)).unwrap();
    let mut seen = Vec::new();
    while s.has_unfinished() {
        let (out, _) = step(&mut s);
        seen.push(out.requests.iter().map(|r| r.id).collect::<Vec<_>>());
    }
    assert_eq!(seen, vec![vec![1], vec![1], vec![2]]);
}

#[test]
fn abort_with_step_in_flight_defers_release() {
    let mut c = cfg(8, 4);
    c.kv.prefix_cache = false;
    let mut s = Scheduler::new(c).unwrap();
    s.add_request(Request::new(1, (0..10).collect(), 4))
        .unwrap();
    let out = s.schedule();
    assert_eq!(s.kv_stats().free_blocks, 5);
    let r = s.abort(1).unwrap();
    assert_eq!(r.status, RequestStatus::Finished(FinishReason::Aborted));
    assert_eq!(
        s.kv_stats().free_blocks,
        5,
        "the in-flight step still reads blocks 0..3"
    );
    assert!(
        s.update(&out, &results(&out)).is_empty(),
        "aborted results are ignored"
    );
    assert_eq!(s.kv_stats().free_blocks, 8);
    assert!(s.schedule().is_empty());
    assert!(s.abort(1).is_none());
}

#[test]
fn drafts_are_verified_and_rejected_ones_rolled_back() {
    let mut c = cfg(16, 4);
    c.kv.prefix_cache = false;
    let mut s = Scheduler::new(c).unwrap();
    s.add_request(Request::new(1, (0..6).collect(), 10))
        .unwrap();
    step(&mut s); // prefill: output [1006]
    assert!(s.set_draft(1, vec![7, 8, 9]));
    let out = s.schedule();
    let r = &out.requests[0];
    assert_eq!(r.token_ids, vec![1006, 7, 8, 9]);
    assert_eq!((r.start_pos, r.num_draft_tokens, r.sample), (6, 3, true));
    assert_eq!(
        r.tables[0],
        vec![0, 1, 2],
        "positions 6..9 need a third block"
    );
    assert_eq!(out.num_draft_tokens, 3);
    // The verifier accepts 7 and 8, rejects 9, and emits the correction 42.
    let res = vec![RequestResult {
        id: 1,
        new_token_ids: vec![7, 8, 42],
        finish: None,
    }];
    s.update(&out, &res);
    let req = s.request(1).unwrap();
    assert_eq!(req.output(), &[1006, 7, 8, 42]);
    assert_eq!(req.num_computed_tokens, 9, "prompt 6 + 1006, 7, 8");
    assert_eq!(s.kv().table(1).unwrap().blocks, vec![0, 1, 2]);
    assert_eq!(s.kv().table(1).unwrap().num_tokens, 9);
    let out = s.schedule();
    assert_eq!(
        (out.requests[0].start_pos, out.requests[0].token_ids.clone()),
        (9, vec![42])
    );
    // Drafts are capped by max_tokens: 4 outputs so far (+1 pending) of 10 → at most 5.
    s.update(&out, &results(&out));
    s.set_draft(1, vec![1; 9]);
    assert_eq!(s.request(1).unwrap().draft.len(), 4);
}

#[test]
fn engine_finish_and_max_tokens() {
    let mut s = Scheduler::new(cfg(32, 4)).unwrap();
    s.add_request(Request::new(1, vec![1, 2, 3], 100)).unwrap();
    s.add_request(Request::new(2, vec![4, 5, 6], 2)).unwrap();
    let out = s.schedule();
    let res = vec![
        RequestResult {
            id: 1,
            new_token_ids: vec![9],
            finish: Some(FinishReason::Stop),
        },
        RequestResult {
            id: 2,
            new_token_ids: vec![7, 8, 9],
            finish: None,
        },
    ];
    let fin = s.update(&out, &res);
    assert_eq!(fin.len(), 2);
    assert_eq!(fin[0].status, RequestStatus::Finished(FinishReason::Stop));
    assert_eq!(
        fin[1].output(),
        &[7, 8],
        "extra tokens past max_tokens are dropped"
    );
    assert_eq!(fin[1].status, RequestStatus::Finished(FinishReason::Length));
}

#[test]
fn add_request_rejects_with_reasons() {
    let mut s = Scheduler::new(cfg(4, 4)).unwrap();
    assert_eq!(
        s.add_request(Request::new(1, vec![], 4)),
        Err(RejectReason::EmptyPrompt)
    );
    let err = s.add_request(Request::new(1, vec![1; 10], 8)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "final KV of 17 tokens needs 5 blocks, the whole pool has 4"
    );
    s.add_request(Request::new(1, vec![1; 10], 7)).unwrap();
    assert_eq!(
        s.add_request(Request::new(1, vec![1], 1)),
        Err(RejectReason::DuplicateId(1))
    );
    let bad = SchedulerConfig {
        token_budget: 0,
        ..SchedulerConfig::default()
    };
    assert_eq!(
        Scheduler::new(bad).unwrap_err().to_string(),
        "invalid scheduler config: token_budget = 0 (must be at least 1)"
    );
}

/// n > 1 samples: a child forked after the parent's prefill shares every prompt block
/// (exact ids), gets its own first token, and copies the partial tail on its first append.
#[test]
fn fork_shares_prompt_blocks_and_copies_the_tail() {
    use folio_core::kv::KvConfig;
    use folio_core::{Request, RequestResult, Scheduler, SchedulerConfig};
    let cfg = SchedulerConfig {
        kv: KvConfig {
            num_blocks: 16,
            block_size: 4,
            prefix_cache: false,
            ..KvConfig::default()
        },
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(cfg).unwrap();
    s.add_request(Request::new(1, vec![10, 11, 12, 13, 14, 15], 4))
        .unwrap();
    let out = s.schedule();
    assert_eq!(out.requests[0].tables[0], vec![0, 1]);
    s.fork(1, 2, 4, 77).unwrap();
    assert_eq!(
        s.kv().table(2).unwrap().blocks,
        vec![0, 1],
        "child shares both prompt blocks"
    );
    s.update(
        &out,
        &[RequestResult {
            id: 1,
            new_token_ids: vec![70],
            finish: None,
        }],
    );
    assert_eq!(s.request(2).unwrap().output(), &[77]);
    // Next step: both decode; the child's append into shared block 1 copies it first.
    let out = s.schedule();
    let ids: Vec<u64> = out.requests.iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![1, 2]);
    assert_eq!(out.requests[1].token_ids, vec![77]);
    assert_eq!(out.requests[1].start_pos, 6);
    assert_eq!(
        out.copies.len(),
        1,
        "one copy-on-write of the shared partial tail"
    );
    assert_eq!(out.copies[0].src, 1);
    assert_ne!(out.requests[0].tables[0][1], out.requests[1].tables[0][1]);
    assert_eq!(
        out.requests[0].tables[0][0], out.requests[1].tables[0][0],
        "full block stays shared"
    );
    assert!(
        s.fork(1, 3, 4, 5).is_err(),
        "a parent with output cannot be forked"
    );
}

/// `max_running` counts samples: a 4-sample group (one request that will fork 3) fills a
/// limit of 4 from its admission on, so a second request waits until the group is done.
#[test]
fn max_running_counts_the_samples_a_group_will_fork() {
    let mut c = cfg(64, 4);
    c.max_running = 4;
    let mut s = Scheduler::new(c).unwrap();
    s.add_request(Request::new(1, vec![10, 11, 12], 2).with_forks(3))
        .unwrap();
    s.add_request(Request::new(9, vec![20, 21], 2)).unwrap();
    let out = s.schedule();
    let ids: Vec<u64> = out.requests.iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![1], "the group holds all 4 places before it forks");
    for child in 2..5 {
        s.fork(1, child, 2, 70).unwrap();
    }
    s.update(&out, &results(&out));
    assert_eq!(s.num_running(), 4);
    let (out, _) = step(&mut s);
    assert!(out.requests.iter().all(|r| r.id != 9), "still full");
    // The group finishes (2 tokens each); then the waiting request runs.
    for _ in 0..10 {
        if s.request(9).unwrap().status == RequestStatus::Running {
            break;
        }
        step(&mut s);
    }
    assert_eq!(s.request(9).unwrap().status, RequestStatus::Running);
    assert!(s.num_running() <= 4);
}

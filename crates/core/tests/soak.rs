//! Soak: thousands of short requests, random cancellations (also while their step is in
//! flight), random max_tokens and stops, drafts with random acceptance, and a pool small
//! enough to force preemption. Every request must end exactly once — finished, cancelled or
//! rejected with a reason — and every block must come back.

use std::collections::HashMap;

use folio_core::kv::KvConfig;
use folio_core::sched::{
    FinishReason, KvReservation, Request, RequestResult, RequestStatus, Scheduler, SchedulerConfig,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Debug, PartialEq)]
enum Outcome {
    Finished(FinishReason, usize),
    Cancelled,
    Rejected(String),
}

fn soak(seed: u64, reservation: KvReservation, n: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let cfg = SchedulerConfig {
        token_budget: 64,
        max_chunk: 16,
        max_running: 12,
        reservation,
        kv: KvConfig {
            num_blocks: 40,
            block_size: 4,
            ..KvConfig::default()
        },
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(cfg).unwrap();
    let mut outcome: HashMap<u64, Outcome> = HashMap::new();
    let mut max_tokens: HashMap<u64, usize> = HashMap::new();
    let mut next_id = 0u64;
    let mut steps = 0;
    while next_id < n || s.has_unfinished() {
        steps += 1;
        assert!(steps < 200_000, "no progress");
        for _ in 0..rng.gen_range(0..3) {
            if next_id >= n {
                break;
            }
            let id = next_id;
            next_id += 1;
            // Tiny vocabulary and a common head so prefixes are shared; a few too big to fit.
            let len = if rng.gen_bool(0.01) {
                200
            } else {
                rng.gen_range(1..40)
            };
            let prompt: Vec<u32> = (0..len)
                .map(|i| if i < 8 { 7 } else { rng.gen_range(0..3) })
                .collect();
            let mt = rng.gen_range(1..30);
            max_tokens.insert(id, mt);
            if let Err(e) = s.add_request(Request::new(id, prompt, mt)) {
                assert!(outcome
                    .insert(id, Outcome::Rejected(e.to_string()))
                    .is_none());
            }
        }
        // Drafts for a few running requests.
        for id in next_id.saturating_sub(20)..next_id {
            if s.request(id).is_some() && rng.gen_bool(0.1) {
                let k = rng.gen_range(1..4);
                s.set_draft(id, (0..k).map(|_| rng.gen_range(0..3)).collect());
            }
        }
        let out = s.schedule();
        // Random cancellations, some of them of requests in this very step.
        for _ in 0..rng.gen_range(0..2) {
            if rng.gen_bool(0.05) && next_id > 0 {
                let id = rng.gen_range(next_id.saturating_sub(30)..next_id);
                if let Some(r) = s.abort(id) {
                    assert_eq!(r.status, RequestStatus::Finished(FinishReason::Aborted));
                    assert!(outcome.insert(id, Outcome::Cancelled).is_none());
                }
            }
        }
        s.kv().check_invariants().unwrap();
        let results: Vec<RequestResult> = out
            .requests
            .iter()
            .filter(|r| r.sample)
            .map(|r| {
                let accepted = rng.gen_range(0..=r.num_draft_tokens);
                let mut toks: Vec<u32> =
                    r.token_ids[r.token_ids.len() - r.num_draft_tokens..][..accepted].to_vec();
                toks.push(rng.gen_range(0..3));
                let finish = rng.gen_bool(0.02).then_some(FinishReason::Stop);
                RequestResult {
                    id: r.id,
                    new_token_ids: toks,
                    finish,
                }
            })
            .collect();
        for r in s.update(&out, &results) {
            let f = match r.status.clone() {
                RequestStatus::Finished(f @ (FinishReason::Stop | FinishReason::Length)) => f,
                other => panic!("update returned a request with status {other:?}"),
            };
            if f == FinishReason::Length {
                assert_eq!(r.num_output_tokens(), max_tokens[&r.id]);
            }
            assert!(r.num_output_tokens() <= max_tokens[&r.id]);
            assert!(outcome
                .insert(r.id, Outcome::Finished(f, r.num_output_tokens()))
                .is_none());
        }
        s.kv().check_invariants().unwrap();
    }
    assert_eq!(outcome.len() as u64, n, "every request ended exactly once");
    let count = |f: fn(&Outcome) -> bool| outcome.values().filter(|o| f(o)).count();
    let cancelled = count(|o| *o == Outcome::Cancelled);
    let rejected = count(|o| matches!(o, Outcome::Rejected(m) if m.contains("whole pool has 40")));
    let stopped = count(|o| matches!(o, Outcome::Finished(FinishReason::Stop, _)));
    let st = s.stats();
    let kv = s.kv_stats();
    eprintln!("seed {seed} {reservation:?}: cancelled {cancelled} rejected {rejected} stopped {stopped} {st:?} {kv:?}");
    assert!(cancelled > 0 && rejected > 0 && stopped > 0);
    assert!(kv.prefix_hit_tokens > 0);
    assert!(st.accepted_draft_tokens > 0);
    if reservation == KvReservation::OnDemand {
        assert!(
            st.preemptions > 0 && st.recomputed_tokens > 0,
            "pool must force preemption"
        );
    } else {
        assert_eq!(st.preemptions, 0, "final-length reservation never preempts");
    }
    assert_eq!(kv.free_blocks + kv.evictable_blocks, kv.total_blocks);
    assert_eq!(s.kv().num_steps_in_flight(), 0);
    s.kv_mut().evict_all();
    assert_eq!(
        s.kv_stats().free_blocks,
        40,
        "free blocks return to the initial count"
    );
    s.kv().check_invariants().unwrap();
}

#[test]
fn soak_on_demand_with_preemption() {
    soak(1, KvReservation::OnDemand, 2500);
}

#[test]
fn soak_reserve_final() {
    soak(2, KvReservation::ReserveFinal, 2000);
}

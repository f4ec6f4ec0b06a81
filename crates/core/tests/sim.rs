//! The reference worked example (DESIGN.md §batching) through the real scheduler.

use folio_core::cost::CostModel;
use folio_core::kv::KvConfig;
use folio_core::sched::{BatchPolicy, SchedulerConfig};
use folio_core::sim::{simulate, SimReport, SimRequest};

fn workload() -> Vec<SimRequest> {
    vec![
        SimRequest::unique(0, 0.0, 2048, 8),
        SimRequest::unique(1, 0.0, 2048, 2),
        SimRequest::unique(2, 0.020, 8192, 2),
        SimRequest::unique(3, 0.030, 2048, 4),
    ]
}

fn run(policy: BatchPolicy, token_budget: usize, max_chunk: usize) -> SimReport {
    let cfg = SchedulerConfig {
        policy,
        token_budget,
        max_chunk,
        max_running: 2,
        kv: KvConfig {
            num_blocks: 4096,
            block_size: 16,
            ..KvConfig::default()
        },
        ..SchedulerConfig::default()
    };
    let r = simulate(cfg, &CostModel::REFERENCE, &workload()).unwrap();
    for m in &r.requests {
        assert_eq!(
            m.token_times_s.len(),
            [8, 2, 2, 4][m.id as usize],
            "request {}",
            m.id
        );
    }
    r
}

fn within(got: f64, want: f64, rel: f64) -> bool {
    ((got - want) / want).abs() <= rel
}

#[test]
fn reference_fixed_continuous_chunked() {
    let fixed = run(BatchPolicy::Fixed, usize::MAX, usize::MAX);
    let cont = run(BatchPolicy::Continuous, usize::MAX, usize::MAX);
    let chunked = run(BatchPolicy::Continuous, 4096, 2048);
    let ms = |r: &SimReport| (r.makespan_s * 1e3, r.max_itl_s * 1e3);
    eprintln!(
        "fixed {:?} continuous {:?} chunked {:?}",
        ms(&fixed),
        ms(&cont),
        ms(&chunked)
    );

    assert!(cont.makespan_s < fixed.makespan_s);
    assert!(cont.max_itl_s > fixed.max_itl_s);
    assert!(chunked.max_itl_s < cont.max_itl_s);

    assert!(
        within(fixed.makespan_s, 0.870, 0.02),
        "fixed total {:?}",
        ms(&fixed)
    );
    assert!(
        within(fixed.max_itl_s, 0.026, 0.02),
        "fixed max ITL {:?}",
        ms(&fixed)
    );
    assert!(
        within(cont.makespan_s, 0.766, 0.02),
        "continuous total {:?}",
        ms(&cont)
    );
    assert!(
        within(cont.max_itl_s, 0.376, 0.02),
        "continuous max ITL {:?}",
        ms(&cont)
    );
    assert!(
        within(chunked.makespan_s, 0.844, 0.02),
        "chunked total {:?}",
        ms(&chunked)
    );
    assert!(
        within(chunked.max_itl_s, 0.133, 0.02),
        "chunked max ITL {:?}",
        ms(&chunked)
    );
}

#[test]
fn metrics_follow_definitions() {
    let r = run(BatchPolicy::Continuous, usize::MAX, usize::MAX);
    let r0 = &r.requests[0];
    // Round 1 computes both 2K prompts together: 26.22 + 4096·0.0304 + 3e-6·2·2,098,176 ms.
    let round1 = 26.22e-3 + 4096.0 * 30.4e-6 + 3e-9 * 2.0 * 2_098_176.0;
    assert!((r0.ttft_s().unwrap() - round1).abs() < 1e-9);
    let itls = r0.itls_s();
    assert_eq!(itls.len(), 7);
    let e2e = r0.ttft_s().unwrap() + itls.iter().sum::<f64>();
    assert!((r0.e2e_s().unwrap() - e2e).abs() < 1e-12);
    // r2 arrived at 20 ms: its TTFT counts from arrival.
    let r2 = &r.requests[2];
    assert!((r2.ttft_s().unwrap() - (r2.token_times_s[0] - 0.020)).abs() < 1e-12);
}

/// Speculation through the simulator: drafts take lookahead slots from the KV manager
/// (invariants checked every round), accepted ones cut the rounds, rejected ones are rolled
/// back, and every request still gets exactly its output length.
#[test]
fn the_simulator_runs_speculation() {
    let cfg = || SchedulerConfig {
        max_running: 4,
        kv: KvConfig {
            // Tight: 4 requests × (64 + 40) tokens need 28 blocks of 16, plus lookahead.
            num_blocks: 32,
            block_size: 16,
            ..KvConfig::default()
        },
        ..SchedulerConfig::default()
    };
    let reqs: Vec<SimRequest> = (0..4).map(|i| SimRequest::unique(i, 0.0, 64, 40)).collect();
    let cost = CostModel::REFERENCE;
    let plain = folio_core::sim::simulate(cfg(), &cost, &reqs).unwrap();
    let all = |_: u64, _: usize| usize::MAX;
    let none = |_: u64, _: usize| 0;
    // Request i accepts (round + i) % 4 drafts: partial acceptance everywhere.
    let some = |id: u64, round: usize| (round + id as usize) % 4;
    let run = |accept: &dyn Fn(u64, usize) -> usize| {
        let spec = folio_core::sim::SimSpec { k: 4, accept };
        folio_core::sim::simulate_spec(cfg(), &cost, &reqs, Some(&spec)).unwrap()
    };
    let (fast, slow, mixed) = (run(&all), run(&none), run(&some));
    for r in [&plain, &fast, &slow, &mixed] {
        for m in &r.requests {
            assert_eq!(m.token_times_s.len(), 40, "request {} output", m.id);
        }
    }
    assert_eq!(plain.draft_tokens, 0);
    // All accepted: 1 prefill round, then 5 tokens per round → 8 rounds for 39 more.
    assert_eq!(fast.rounds.len(), 1 + 39usize.div_ceil(5));
    assert_eq!(fast.accepted_draft_tokens, fast.draft_tokens);
    // None accepted: one token per round, as without speculation.
    assert_eq!(slow.rounds.len(), plain.rounds.len());
    assert_eq!(slow.accepted_draft_tokens, 0);
    assert!(slow.draft_tokens > 0);
    assert!(mixed.rounds.len() < plain.rounds.len() && mixed.rounds.len() > fast.rounds.len());
    assert!(mixed.accepted_draft_tokens > 0 && mixed.accepted_draft_tokens < mixed.draft_tokens);
}

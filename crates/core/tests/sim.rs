//! The chapter's worked example (chapter 8.2) through the real scheduler.

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
    let r = simulate(cfg, &CostModel::CHAPTER, &workload()).unwrap();
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
fn chapter_fixed_continuous_chunked() {
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

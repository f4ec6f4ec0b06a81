//! Statistics on hand-made timelines: percentiles, TTFT/ITL/TPOT/E2E from the scheduled
//! arrival, goodput.

use folio_bench::report::{RunReport, RunSetup};
use folio_bench::{percentile, RequestRecord, Slo, Summary};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn percentile_interpolates_linearly_between_ranks() {
    let v = [1.0, 2.0, 3.0, 4.0];
    assert_eq!(percentile(&v, 50.0), Some(2.5));
    assert_eq!(percentile(&v, 0.0), Some(1.0));
    assert_eq!(percentile(&v, 100.0), Some(4.0));
    // rank h = 3 × 0.9 = 2.7 → 3 + 0.7 × (4 − 3)
    assert!(close(percentile(&v, 90.0).unwrap(), 3.7));
    assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
    assert_eq!(percentile(&[], 50.0), None);
    assert_eq!(percentile(&v, 101.0), None);
}

#[test]
fn summary_of_the_reference_example_shows_why_means_mislead() {
    // 9 requests at 100 ms and one at 3000 ms average 390 ms (DESIGN.md §requests).
    let mut v = vec![0.1; 9];
    v.push(3.0);
    let s = Summary::of(&v).unwrap();
    assert_eq!(s.n, 10);
    assert!(close(s.mean, 0.39));
    assert!(close(s.p50, 0.1));
    // rank 9 × 0.9 = 8.1 → 0.1 + 0.1 × 2.9
    assert!(close(s.p90, 0.39));
    // rank 8.91 → 0.1 + 0.91 × 2.9
    assert!(close(s.p99, 2.739));
    assert_eq!(s.max, 3.0);
    assert_eq!(s.min, 0.1);
    assert!(Summary::of(&[]).is_none());
}

fn rec(scheduled: f64, sent: f64, chunks: &[f64], tokens: u64) -> RequestRecord {
    RequestRecord {
        scheduled_s: scheduled,
        sent_s: sent,
        chunk_times_s: chunks.to_vec(),
        end_s: chunks.last().copied().unwrap_or(sent) + 0.001,
        output_tokens: tokens,
        ok: true,
        ..Default::default()
    }
}

#[test]
fn latencies_count_from_the_scheduled_arrival_including_the_wait() {
    // Scheduled at 1.0 s, sent only at 1.5 s (waited for a slot), first token at 1.7 s.
    let r = rec(1.0, 1.5, &[1.7, 1.75, 1.85, 1.9], 4);
    assert!(close(r.ttft().unwrap(), 0.7));
    let itl = r.itls();
    assert_eq!(itl.len(), 3);
    assert!(close(itl[0], 0.05) && close(itl[1], 0.1) && close(itl[2], 0.05));
    assert!(close(r.e2e().unwrap(), 0.9));
    // TPOT = (E2E − TTFT)/(G − 1) = 0.2/3
    assert!(close(r.tpot().unwrap(), 0.2 / 3.0));
}

#[test]
fn tpot_excludes_one_token_outputs_and_uses_usage_token_counts() {
    let one = rec(0.0, 0.0, &[0.3], 1);
    assert_eq!(one.tpot(), None);
    assert!(close(one.ttft().unwrap(), 0.3));
    assert!(close(one.e2e().unwrap(), 0.3));
    // Two chunks carrying 5 tokens (a server that batches tokens per chunk): TPOT uses G = 5.
    let multi = rec(0.0, 0.0, &[0.2, 0.6], 5);
    assert!(close(multi.tpot().unwrap(), 0.1));
    // The report's TPOT summary leaves the one-token request out entirely.
    let rep = RunReport::from_records(RunSetup::default(), vec![one, multi], 1.0, Slo::default());
    let tpot = rep.tpot_ms.unwrap();
    assert_eq!(tpot.n, 1);
    assert!(close(tpot.p50, 100.0));
    assert_eq!(rep.ttft_ms.unwrap().n, 2);
}

#[test]
fn failed_requests_have_no_latencies() {
    let mut r = rec(0.0, 0.0, &[0.1, 0.2], 2);
    r.ok = false;
    r.error = Some("HTTP 503".into());
    assert_eq!(r.ttft(), None);
    assert_eq!(r.e2e(), None);
    assert_eq!(r.tpot(), None);
    assert!(r.itls().is_empty());
    assert!(!r.good(&Slo::default()));
}

#[test]
fn slo_parses_and_judges() {
    let slo = Slo::parse("ttft=500, tpot=100,e2e=3000").unwrap();
    assert_eq!(slo.ttft_ms, Some(500.0));
    assert_eq!(slo.tpot_ms, Some(100.0));
    assert_eq!(slo.e2e_ms, Some(3000.0));
    assert!(slo.met(0.5, Some(0.1), 3.0));
    assert!(!slo.met(0.501, Some(0.1), 3.0));
    assert!(!slo.met(0.1, Some(0.2), 1.0));
    // No TPOT (one-token output) cannot miss the TPOT limit.
    assert!(slo.met(0.1, None, 1.0));
    let e = Slo::parse("ttft=abc").unwrap_err().to_string();
    assert!(e.contains("ttft") && e.contains("abc"), "{e}");
    let e = Slo::parse("latency=5").unwrap_err().to_string();
    assert!(e.contains("latency"), "{e}");
    assert!(Slo::parse("ttft=-1").is_err());
}

#[test]
fn goodput_counts_correct_and_on_time_requests_over_observed_time() {
    let slo = Slo::parse("ttft=500,e2e=2000").unwrap();
    let mut recs = vec![
        rec(0.0, 0.0, &[0.2, 0.4, 0.6], 3), // good
        rec(1.0, 1.0, &[1.3, 1.5], 2),      // good
        rec(2.0, 2.6, &[2.7, 2.8], 2),      // TTFT 0.7: late (it waited 0.6 s before sending)
        rec(3.0, 3.0, &[3.1, 5.5], 2),      // E2E 2.5: late
        rec(4.0, 4.0, &[4.1, 4.2], 2),      // on time but wrong
        rec(5.0, 5.0, &[5.1, 5.2], 2),      // on time and right
    ];
    recs[4].correct = Some(false);
    recs[5].correct = Some(true);
    recs[3].correct = Some(true); // right but late: still not good
    let mut failed = rec(6.0, 6.0, &[], 0);
    failed.ok = false;
    recs.push(failed);
    let rep = RunReport::from_records(RunSetup::default(), recs, 8.0, slo);
    assert_eq!(rep.completed, 6);
    assert_eq!(rep.failed, 1);
    assert_eq!(rep.good, 3);
    assert!(close(rep.goodput_rps, 3.0 / 8.0));
    assert!(close(rep.request_throughput, 6.0 / 8.0));
    assert_eq!(rep.judged, 3);
    assert_eq!(rep.correct, 2);
    assert_eq!((rep.on_time, rep.wrong), (4, 1));
    assert_eq!(rep.output_tokens, 13);
    assert!(close(rep.output_throughput, 13.0 / 8.0));
    // ITLs of all completed requests: 0.2, 0.2, 0.2, 0.1, 2.4, 0.1, 0.1 (s).
    let itl = rep.itl_ms.unwrap();
    assert_eq!(itl.n, 7);
    assert!(close(itl.max, 2400.0));
    assert!(close(itl.p50, 200.0));
    let table = rep.table();
    assert!(
        table.contains("Goodput (req/s):") && table.contains("0.38"),
        "{table}"
    );
}

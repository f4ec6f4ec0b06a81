//! Per-replica counters behind a router: deltas from two /metrics texts, the combined hit
//! rate weighted by queried tokens, and the table.

use folio_bench::replicas::{combined, counters, table, ReplicaDelta};

fn metrics(requests: &[(&str, u64)], queries: u64, hits: u64) -> String {
    let mut t = String::from("# TYPE vllm:request_success_total counter\n");
    for (reason, n) in requests {
        t.push_str(&format!(
            "vllm:request_success_total{{model_name=\"m\",finished_reason=\"{reason}\"}} {n}\n"
        ));
    }
    t.push_str(&format!(
        "vllm:prefix_cache_queries_total{{model_name=\"m\"}} {queries}\nvllm:prefix_cache_hits_total{{model_name=\"m\"}} {hits}\n"
    ));
    t
}

#[test]
fn deltas_and_the_combined_rate_come_from_the_counters() {
    let a0 = counters(&metrics(&[("stop", 3), ("length", 1)], 1000, 100)).unwrap();
    let a1 = counters(&metrics(&[("stop", 10), ("length", 2)], 9000, 6100)).unwrap();
    let b0 = counters(&metrics(&[("length", 0)], 0, 0)).unwrap();
    let b1 = counters(&metrics(&[("length", 4)], 2000, 1000)).unwrap();
    let a = ReplicaDelta::between("http://a", a0, a1);
    let b = ReplicaDelta::between("http://b", b0, b1);
    assert_eq!(a.requests, 8.0, "every finish reason counts");
    assert_eq!(b.requests, 4.0);
    let pa = a.prefix_cache.unwrap();
    assert_eq!((pa.queried_tokens, pa.hit_tokens), (8000.0, 6000.0));
    assert_eq!(pa.hit_rate, Some(0.75));
    // Combined: (6000 + 1000) / (8000 + 2000), not the mean of 75% and 50%.
    let all = combined(&[a.clone(), b.clone()]).unwrap();
    assert_eq!(all.hit_rate, Some(0.7));
    let t = table(&[a, b]);
    assert!(t.contains("http://a") && t.contains("75.0%"), "{t}");
    assert!(t.contains("http://b") && t.contains("50.0%"), "{t}");
    assert!(t.lines().last().unwrap().contains("70.0%"), "{t}");
}

#[test]
fn a_server_without_request_counters_is_not_a_replica() {
    assert!(counters("# nothing here\nfoo 1\n").is_none());
    assert!(combined(&[]).is_none());
}

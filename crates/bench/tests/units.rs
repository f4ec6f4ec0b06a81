//! Arrivals, workloads, Prometheus parsing, the round-time fit and charts.

use folio_bench::arrivals;
use folio_bench::plot::{self, nice_step};
use folio_bench::profile::fit::round_fit;
use folio_bench::prom::{self, PrefixCacheDelta};
use folio_bench::report::{ResultFile, RunReport, RunSetup};
use folio_bench::workload::{self, WorkloadKind, WorkloadSpec};
use folio_bench::{RequestRecord, Slo};
use rand::rngs::StdRng;
use rand::SeedableRng;

#[test]
fn arrivals_have_the_requested_mean_gap_and_burstiness() {
    let mut rng = StdRng::seed_from_u64(7);
    let t = arrivals::schedule(20_001, Some(4.0), 1.0, &mut rng);
    assert_eq!(t[0], 0.0);
    assert!(t.windows(2).all(|w| w[1] >= w[0]));
    let mean_gap = t[20_000] / 20_000.0;
    assert!((mean_gap - 0.25).abs() < 0.01, "{mean_gap}");
    // Coefficient of variation of gamma(k) gaps is 1/sqrt(k): burstier below 1.
    let cv = |k: f64| {
        let mut rng = StdRng::seed_from_u64(9);
        let t = arrivals::schedule(20_001, Some(1.0), k, &mut rng);
        let g: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
        let m = g.iter().sum::<f64>() / g.len() as f64;
        let var = g.iter().map(|x| (x - m).powi(2)).sum::<f64>() / g.len() as f64;
        (m, var.sqrt() / m)
    };
    let (m, c) = cv(0.25);
    assert!((m - 1.0).abs() < 0.05 && (c - 2.0).abs() < 0.15, "{m} {c}");
    let (m, c) = cv(4.0);
    assert!((m - 1.0).abs() < 0.05 && (c - 0.5).abs() < 0.05, "{m} {c}");
    assert_eq!(arrivals::schedule(5, None, 1.0, &mut rng), vec![0.0; 5]);
}

fn spec(kind: WorkloadKind, n: usize) -> WorkloadSpec {
    WorkloadSpec {
        kind,
        num_requests: n,
        input_tokens: 40,
        output_tokens: 8,
        range_ratio: 0.0,
        prefix_tokens: 100,
        num_prefixes: 2,
        turns: 3,
        tool_tokens: 20,
        records: 0,
        seed: 3,
    }
}

#[test]
fn workloads_have_the_requested_shape() {
    let r = workload::generate(&spec(WorkloadKind::Random, 5));
    assert_eq!(r.len(), 5);
    for c in &r {
        assert_eq!(c.turns.len(), 1);
        assert_eq!(c.turns[0].append.split_whitespace().count(), 40);
        assert_eq!(c.turns[0].max_tokens, 8);
    }
    assert_ne!(r[0].turns[0].append, r[1].turns[0].append);
    assert_eq!(
        r,
        workload::generate(&spec(WorkloadKind::Random, 5)),
        "seeded"
    );

    let s = workload::generate(&spec(WorkloadKind::SharedPrefix, 4));
    let prefix = |i: usize| {
        s[i].turns[0]
            .append
            .split("User:")
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(prefix(0), prefix(2));
    assert_eq!(prefix(1), prefix(3));
    assert_ne!(prefix(0), prefix(1));
    assert!(prefix(0).split_whitespace().count() >= 100);

    // 7 turns in conversations of 3: 3 + 3 + 1.
    let m = workload::generate(&spec(WorkloadKind::MultiTurn, 7));
    assert_eq!(
        m.iter().map(|c| c.turns.len()).collect::<Vec<_>>(),
        vec![3, 3, 1]
    );
    assert!(m[0].turns[1].append.starts_with("\nTool output:"));
    assert!(m[0].turns[0].append.starts_with("You are an agent."));

    let q = workload::generate(&spec(WorkloadKind::Retrieval, 3));
    for c in &q {
        let t = &c.turns[0];
        let ans = t.expected.as_ref().unwrap();
        assert_eq!(ans.len(), 6);
        // The asked key's record holds the answer.
        let key = t
            .append
            .split("Question: what is the value of key ")
            .nth(1)
            .unwrap()
            .split('?')
            .next()
            .unwrap();
        assert!(
            t.append.contains(&format!("key {key}: {ans}\n")),
            "{}",
            t.append
        );
    }
}

#[test]
fn prometheus_counters_are_summed_over_labels() {
    let text = "# HELP vllm:prefix_cache_queries_total x\n\
        vllm:prefix_cache_queries_total{model_name=\"a\"} 100\n\
        vllm:prefix_cache_queries_total{model_name=\"b\"} 50.0\n\
        vllm:prefix_cache_hits_total{model_name=\"a\"} 30\n\
        vllm:prefix_cache_hits_total_extra 999\n\
        vllm:num_requests_running 3\n";
    let c = prom::prefix_counters(text).unwrap();
    assert_eq!((c.queries, c.hits), (150.0, 30.0));
    assert_eq!(
        prom::sum_metric(text, &["vllm:num_requests_running"]),
        Some(3.0)
    );
    assert_eq!(prom::sum_metric(text, &["nope"]), None);
    assert!(prom::prefix_counters("llamacpp:tokens 5\n").is_none());
    let after = prom::PrefixCounters {
        queries: 250.0,
        hits: 105.0,
    };
    let d = PrefixCacheDelta::between(c, after);
    assert_eq!(d.hit_rate, Some(0.75));
    assert_eq!(PrefixCacheDelta::between(c, c).hit_rate, None);
}

#[test]
fn round_fit_recovers_a_known_cost_model() {
    // The reference fit: 26.22 ms + 30.4 µs/token + 3 ns/pair.
    let f = |t: f64, p: f64| 26.22e-3 + 30.4e-6 * t + 3e-9 * p;
    let pts: Vec<(f64, f64, f64)> = [
        (1.0, 2049.0),
        (16.0, 16.0 * 2049.0),
        (2048.0, 2048.0 * 2049.0 / 2.0),
        (64.0, 64.0 * 257.0),
    ]
    .iter()
    .map(|&(t, p)| (t, p, f(t, p)))
    .collect();
    let (a, b, c) = round_fit(&pts).unwrap();
    assert!((a - 26.22e-3).abs() < 1e-9 && (b - 30.4e-6).abs() < 1e-12 && (c - 3e-9).abs() < 1e-15);
}

#[test]
fn charts_have_one_series_per_file_and_quantile() {
    assert_eq!(nice_step(10.0, 5), 2.0);
    assert_eq!(nice_step(0.9, 6), 0.2);
    assert_eq!(nice_step(740.0, 6), 200.0);
    let run = |rate: Option<f64>, conc: Option<usize>, ttft: f64| {
        let r = RequestRecord {
            scheduled_s: 0.0,
            chunk_times_s: vec![ttft, ttft + 0.05],
            end_s: ttft + 0.06,
            output_tokens: 2,
            ok: true,
            ..Default::default()
        };
        RunReport::from_records(
            RunSetup {
                request_rate: rate,
                max_concurrency: conc,
                num_requests: 1,
                ..Default::default()
            },
            vec![r],
            1.0,
            Slo::default(),
        )
    };
    let a = ResultFile {
        label: "folio".into(),
        base_url: String::new(),
        model: String::new(),
        runs: vec![run(Some(1.0), None, 0.1), run(Some(2.0), None, 0.2)],
    };
    let b = ResultFile {
        label: "llama.cpp".into(),
        runs: vec![run(Some(1.0), None, 0.3), run(None, Some(4), 0.5)],
        ..a.clone()
    };
    let charts = plot::charts(&[a, b]);
    let names: Vec<&str> = charts.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"ttft_vs_rate.svg"), "{names:?}");
    assert!(names.contains(&"goodput_vs_rate.svg"));
    assert!(names.contains(&"throughput_vs_concurrency.svg"));
    let ttft = &charts
        .iter()
        .find(|(n, _)| n == "ttft_vs_rate.svg")
        .unwrap()
        .1;
    let series: Vec<&str> = ttft.series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        series,
        vec!["folio p50", "folio p99", "llama.cpp p50", "llama.cpp p99"]
    );
    assert_eq!(ttft.series[0].points, vec![(1.0, 100.0), (2.0, 200.0)]);
    assert_eq!(ttft.series[2].points, vec![(1.0, 300.0)]);
    let conc = &charts
        .iter()
        .find(|(n, _)| n == "throughput_vs_concurrency.svg")
        .unwrap()
        .1;
    assert_eq!(conc.series.len(), 1);
    assert_eq!(conc.series[0].points[0].0, 4.0);
    let svg = ttft.svg();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<polyline").count(), 4);
    assert!(svg.contains("llama.cpp p99"));
}

#[test]
fn base_urls_parse_and_join() {
    use folio_bench::client::BaseUrl;
    let b = BaseUrl::parse("http://127.0.0.1:8123/v1").unwrap();
    assert_eq!((b.host.as_str(), b.port), ("127.0.0.1", 8123));
    assert_eq!(b.path("/v1/completions"), "/v1/completions");
    assert_eq!(b.path("/metrics"), "/metrics");
    let b = BaseUrl::parse("http://localhost:8000/").unwrap();
    assert_eq!(b.path("/v1/models"), "/v1/models");
    let b = BaseUrl::parse("http://h/proxy").unwrap();
    assert_eq!(
        (b.port, b.path("/metrics").as_str()),
        (80, "/proxy/metrics")
    );
    assert!(BaseUrl::parse("https://h:1")
        .unwrap_err()
        .to_string()
        .contains("http://"));
    assert!(BaseUrl::parse("http://h:99999")
        .unwrap_err()
        .to_string()
        .contains("99999"));
}

#[test]
fn workloads_of_different_shapes_share_no_prompt_prefix() {
    let a = workload::generate(&spec(WorkloadKind::Random, 2));
    let mut longer = spec(WorkloadKind::Random, 2);
    longer.input_tokens = 80;
    let b = workload::generate(&longer);
    let first_words = |s: &str| s.split_whitespace().take(8).collect::<Vec<_>>().join(" ");
    assert_ne!(
        first_words(&a[0].turns[0].append),
        first_words(&b[0].turns[0].append)
    );
}

/// The json workload: a schema per request (sent as response_format), graded by
/// validation: a valid record is correct, truncated or schema-breaking answers are not.
#[test]
fn json_workload_grades_by_schema_validation() {
    use serde_json::{json, Value};
    let convs = workload::generate(&spec(WorkloadKind::Json, 12));
    assert_eq!(convs.len(), 12);
    let mut distinct = std::collections::HashSet::new();
    for c in &convs {
        let t = &c.turns[0];
        let schema = t.schema.as_ref().expect("a schema per request");
        distinct.insert(schema.to_string());
        assert!(t.expected.is_none());
        assert!(t.append.contains("JSON record"));
        // The least valid record: every required property at its simplest value.
        let mut rec = serde_json::Map::new();
        for (name, p) in schema["properties"].as_object().unwrap() {
            let v = if let Some(e) = p["enum"].as_array() {
                e[0].clone()
            } else {
                match p["type"].as_str().unwrap() {
                    "string" => json!("x"),
                    "integer" => p["minimum"].clone(),
                    "boolean" => json!(true),
                    "array" => json!([]),
                    other => panic!("unexpected type {other}"),
                }
            };
            assert!(t.append.contains(name.as_str()));
            rec.insert(name.clone(), v);
        }
        let good = Value::Object(rec.clone()).to_string();
        assert!(workload::grade_json(&good, schema), "{good} vs {schema}");
        assert!(workload::grade_json(&format!(" {good}\n"), schema));
        assert!(!workload::grade_json(&good[..good.len() - 1], schema));
        let mut extra = rec.clone();
        extra.insert("unexpected".into(), json!(1));
        assert!(!workload::grade_json(
            &Value::Object(extra).to_string(),
            schema
        ));
        assert!(!workload::grade_json("{}", schema));
    }
    assert!(distinct.len() > 6, "schemas vary by request");
    assert_eq!(WorkloadKind::parse("json").ok(), Some(WorkloadKind::Json));
}

#[test]
fn shuffled_shared_prefixes_use_each_prefix_once_per_round_in_a_fresh_order() {
    let k = 8;
    let s = workload::generate(&WorkloadSpec {
        num_prefixes: k,
        ..spec(WorkloadKind::SharedPrefixShuffled, 64)
    });
    let prefix = |i: usize| {
        s[i].turns[0]
            .append
            .split("User:")
            .next()
            .unwrap()
            .to_string()
    };
    let mut distinct: Vec<String> = (0..k).map(prefix).collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), k, "each round uses every prefix once");
    let index = |i: usize| distinct.binary_search(&prefix(i)).unwrap();
    let mut orders: Vec<Vec<usize>> = (0..8)
        .map(|r| (0..k).map(|j| index(r * k + j)).collect())
        .collect();
    for o in &orders {
        let mut sorted = o.clone();
        sorted.sort();
        assert_eq!(sorted, (0..k).collect::<Vec<_>>(), "a permutation: {o:?}");
    }
    // A round-robin router over two replicas: the replica of request i is i % 2. With the
    // cyclic order every prefix would always meet the same replica; shuffled, most meet both.
    let both = (0..k)
        .filter(|&p| {
            let reps: std::collections::HashSet<usize> =
                (0..64).filter(|&i| index(i) == p).map(|i| i % 2).collect();
            reps.len() == 2
        })
        .count();
    assert!(both >= k / 2, "{both} of {k} prefixes met both replicas");
    orders.dedup();
    assert!(orders.len() > 1, "the order changes between rounds");
}

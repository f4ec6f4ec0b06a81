//! The load generator against an in-process fake OpenAI server (canned SSE; no model).

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use folio_bench::client::BaseUrl;
use folio_bench::report::RunSetup;
use folio_bench::runner::{self, RunConfig};
use folio_bench::workload::{self, WorkloadKind, WorkloadSpec};
use folio_bench::Slo;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Fake {
    /// Every request body received.
    bodies: Mutex<Vec<Value>>,
    /// Prefix-cache counters: each request queries its word count and hits half of it.
    queries: Mutex<(u64, u64)>,
    /// Answer retrieval questions wrongly.
    wrong: bool,
    /// Answer with the right digits inside a longer number (`1234567`): a near miss.
    near_miss: bool,
    /// Answer every request with this HTTP status instead.
    fail_status: Option<u16>,
}

/// The value of the asked key, found in the prompt (a perfect reader).
fn answer(prompt: &str) -> Option<String> {
    let key = prompt
        .split("Question: what is the value of key ")
        .nth(1)?
        .split('?')
        .next()?;
    let line = prompt
        .lines()
        .find(|l| l.starts_with(&format!("key {key}: ")))?;
    Some(line.rsplit(' ').next()?.to_string())
}

async fn completions(State(s): State<Arc<Fake>>, Json(body): Json<Value>) -> Response {
    s.bodies.lock().unwrap().push(body.clone());
    if let Some(st) = s.fail_status {
        let code = axum::http::StatusCode::from_u16(st).unwrap();
        return (code, Json(json!({"error": {"message": "overloaded"}}))).into_response();
    }
    let prompt = body["prompt"].as_str().unwrap_or("");
    let words = prompt.split_whitespace().count() as u64;
    {
        let mut q = s.queries.lock().unwrap();
        q.0 += words;
        q.1 += words / 2;
    }
    let n = body["max_tokens"].as_u64().unwrap_or(16) as usize;
    let mut texts: Vec<String> = (0..n).map(|i| format!(" t{i}")).collect();
    if let Some(a) = answer(prompt) {
        texts[0] = if s.wrong {
            " 000000".into()
        } else if s.near_miss {
            format!(" {a}7")
        } else {
            format!(" {a}")
        };
    }
    let mut frames: Vec<String> = texts
        .iter()
        .map(|t| {
            format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "text": t}]})
            )
        })
        .collect();
    frames.push(format!(
        "data: {}\n\n",
        json!({"choices": [], "usage": {"prompt_tokens": words, "completion_tokens": n,
            "prompt_tokens_details": {"cached_tokens": words / 2}}})
    ));
    frames.push("data: [DONE]\n\n".into());
    // One frame per body chunk, a little apart, so the client sees a real stream.
    let stream = futures::stream::unfold(frames.into_iter(), |mut it| async move {
        let f = it.next()?;
        tokio::time::sleep(Duration::from_millis(1)).await;
        Some((Ok::<_, Infallible>(Bytes::from(f)), it))
    });
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(stream),
    )
        .into_response()
}

async fn metrics(State(s): State<Arc<Fake>>) -> String {
    let q = *s.queries.lock().unwrap();
    format!(
        "vllm:prefix_cache_queries_total{{model_name=\"fake\"}} {}\nvllm:prefix_cache_hits_total{{model_name=\"fake\"}} {}\nvllm:num_requests_running 0\n",
        q.0, q.1
    )
}

async fn start(fake: Fake) -> (BaseUrl, Arc<Fake>) {
    let state = Arc::new(fake);
    let app = Router::new()
        .route("/v1/completions", post(completions))
        .route(
            "/v1/models",
            get(|| async { Json(json!({"data": [{"id": "fake-model"}]})) }),
        )
        .route("/metrics", get(metrics))
        .route("/health", get(|| async { "ok" }))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (BaseUrl::parse(&format!("http://{addr}")).unwrap(), state)
}

fn config(base: BaseUrl, rate: Option<f64>, conc: Option<usize>) -> RunConfig {
    RunConfig {
        base,
        model: "fake-model".into(),
        chat: false,
        request_rate: rate,
        burstiness: 1.0,
        max_concurrency: conc,
        ignore_eos: true,
        slo: Slo::parse("ttft=60000,tpot=60000,e2e=60000").unwrap(),
        seed: 1,
        timeout: Duration::from_secs(30),
        progress: false,
        monitor: Some(Duration::from_millis(5)),
        duration: None,
    }
}

fn spec(kind: WorkloadKind, n: usize, out: usize) -> WorkloadSpec {
    WorkloadSpec {
        kind,
        num_requests: n,
        input_tokens: 30,
        output_tokens: out,
        range_ratio: 0.0,
        prefix_tokens: 20,
        num_prefixes: 2,
        turns: 3,
        tool_tokens: 10,
        records: 5,
        seed: 11,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_workload_streams_and_reports() {
    let (base, fake) = start(Fake::default()).await;
    assert_eq!(
        runner::detect_model(&base).await.as_deref(),
        Some("fake-model")
    );
    let cfg = config(base, Some(200.0), Some(3));
    let convs = workload::generate(&spec(WorkloadKind::Random, 12, 5));
    let rep = runner::run(&cfg, RunSetup::default(), convs).await.unwrap();
    assert_eq!(rep.completed, 12, "{:?}", rep.errors);
    assert_eq!(rep.failed, 0);
    assert_eq!(rep.output_tokens, 60);
    assert_eq!(rep.prompt_tokens, 12 * 30);
    assert_eq!(rep.good, 12);
    for r in &rep.records {
        assert_eq!(r.chunk_times_s.len(), 5);
        assert_eq!(r.output_tokens, 5);
        assert!(r.sent_s >= r.scheduled_s);
        assert!(r.ttft().unwrap() > 0.0 && r.tpot().is_some());
        assert_eq!(r.itls().len(), 4);
        assert_eq!(r.cached_tokens, Some(15));
    }
    assert_eq!(rep.itl_ms.unwrap().n, 48);
    let p = rep.prefix_cache.unwrap();
    assert_eq!((p.queried_tokens, p.hit_tokens), (360.0, 180.0));
    assert_eq!(p.hit_rate, Some(0.5));
    assert_eq!(rep.usage_cached_fraction, Some(0.5));
    let m = rep.monitor.unwrap();
    assert_eq!(m.health_failures, 0);
    assert_eq!(m.after_running, Some(0.0));
    let bodies = fake.bodies.lock().unwrap();
    assert_eq!(bodies.len(), 12);
    let b = &bodies[0];
    assert_eq!(b["model"], "fake-model");
    assert_eq!(b["stream"], true);
    assert_eq!(b["max_tokens"], 5);
    assert_eq!(b["ignore_eos"], true);
    assert_eq!(b["stream_options"]["include_usage"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_turn_replays_the_growing_history() {
    let (base, fake) = start(Fake::default()).await;
    let cfg = config(base, None, None);
    let convs = workload::generate(&spec(WorkloadKind::MultiTurn, 6, 4));
    let rep = runner::run(&cfg, RunSetup::default(), convs).await.unwrap();
    assert_eq!(rep.completed, 6);
    let bodies = fake.bodies.lock().unwrap();
    let prompts: Vec<&str> = bodies
        .iter()
        .map(|b| b["prompt"].as_str().unwrap())
        .collect();
    // Each turn's prompt = previous prompt + its answer + the appended tool output.
    let mut checked = 0;
    for p in &prompts {
        if let Some(prev) = prompts
            .iter()
            .find(|q| q.len() < p.len() && p.starts_with(&format!("{q} t0 t1 t2 t3\nTool output:")))
        {
            assert!(prev.ends_with("Assistant:"));
            checked += 1;
        }
    }
    assert_eq!(
        checked, 4,
        "two conversations of three turns: four follow-up turns"
    );
    // Turn k+1 is scheduled when turn k ended.
    let recs = &rep.records;
    for w in recs.windows(2) {
        if w[1].conversation == w[0].conversation {
            assert_eq!(w[1].turn, w[0].turn + 1);
            assert_eq!(w[1].scheduled_s, w[0].end_s);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrieval_answers_are_judged_and_wrong_ones_are_not_goodput() {
    let (base, _) = start(Fake::default()).await;
    let convs = workload::generate(&spec(WorkloadKind::Retrieval, 4, 3));
    let rep = runner::run(
        &config(base, None, None),
        RunSetup::default(),
        convs.clone(),
    )
    .await
    .unwrap();
    assert_eq!((rep.judged, rep.correct, rep.good), (4, 4, 4));

    let (base, _) = start(Fake {
        wrong: true,
        ..Default::default()
    })
    .await;
    let rep = runner::run(&config(base, None, None), RunSetup::default(), convs)
        .await
        .unwrap();
    assert_eq!(
        (rep.completed, rep.judged, rep.correct, rep.good),
        (4, 4, 0, 0)
    );
    assert_eq!(rep.goodput_rps, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goodput_needs_a_correct_answer_and_the_slo_and_the_result_file_says_so() {
    let convs = workload::generate(&spec(WorkloadKind::Retrieval, 4, 3));
    // The right digits inside a longer number are a wrong answer, however fast.
    let (base, _) = start(Fake {
        near_miss: true,
        ..Default::default()
    })
    .await;
    let rep = runner::run(
        &config(base.clone(), None, None),
        RunSetup::default(),
        convs.clone(),
    )
    .await
    .unwrap();
    assert_eq!(
        (rep.completed, rep.on_time, rep.wrong, rep.correct, rep.good),
        (4, 4, 4, 0, 0)
    );
    // Right answers that miss the SLO (TTFT under 1 microsecond) are not good either.
    let (base, _) = start(Fake::default()).await;
    let mut cfg = config(base, None, None);
    cfg.slo = Slo::parse("ttft=0.001").unwrap();
    let rep = runner::run(&cfg, RunSetup::default(), convs.clone())
        .await
        .unwrap();
    assert_eq!(
        (rep.correct, rep.wrong, rep.on_time, rep.good),
        (4, 0, 0, 0)
    );
    // Right and on time: good. The result file carries the rule and the counts.
    cfg.slo = Slo::parse("ttft=60000").unwrap();
    let rep = runner::run(&cfg, RunSetup::default(), convs).await.unwrap();
    assert_eq!((rep.correct, rep.on_time, rep.good), (4, 4, 4));
    let v: Value = serde_json::to_value(&rep).unwrap();
    assert_eq!(v["good"], 4);
    assert_eq!(v["good_rule"], folio_bench::report::GOOD_RULE);
    assert!(v["good_rule"].as_str().unwrap().contains("correct"));
    assert!(v["records"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["correct"] == true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_errors_are_counted_as_failures_with_the_reason() {
    let (base, _) = start(Fake {
        fail_status: Some(429),
        ..Default::default()
    })
    .await;
    let convs = workload::generate(&spec(WorkloadKind::Random, 3, 2));
    let rep = runner::run(&config(base, None, None), RunSetup::default(), convs)
        .await
        .unwrap();
    assert_eq!((rep.completed, rep.failed, rep.good), (0, 3, 0));
    assert!(
        rep.errors[0].contains("HTTP 429") && rep.errors[0].contains("overloaded"),
        "{:?}",
        rep.errors
    );
    assert!(rep.ttft_ms.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duration_limit_stops_sending_and_leaves_unsent_requests_out() {
    let (base, fake) = start(Fake::default()).await;
    let mut cfg = config(base, Some(1.0), None);
    // A zero-length window has passed before the first request could be sent.
    cfg.duration = Some(Duration::ZERO);
    let convs = workload::generate(&spec(WorkloadKind::Random, 3, 2));
    let rep = runner::run(&cfg, RunSetup::default(), convs.clone())
        .await
        .unwrap();
    assert_eq!((rep.records.len(), rep.completed, rep.failed), (0, 0, 0));
    assert!(fake.bodies.lock().unwrap().is_empty());
    // A long window sends everything.
    cfg.duration = Some(Duration::from_secs(3600));
    cfg.request_rate = None;
    let rep = runner::run(&cfg, RunSetup::default(), convs).await.unwrap();
    assert_eq!((rep.records.len(), rep.completed), (3, 3));
    assert_eq!(fake.bodies.lock().unwrap().len(), rep.records.len());
}

/// Requests released together (`--request-rate inf`) behind a concurrency cap reach the
/// server in workload order: the shuffled shared-prefix rounds are sent as generated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_behind_the_concurrency_cap_is_sent_in_workload_order() {
    let (base, fake) = start(Fake::default()).await;
    let cfg = config(base, None, Some(1));
    let mut s = spec(WorkloadKind::SharedPrefixShuffled, 24, 2);
    s.num_prefixes = 8;
    let convs = workload::generate(&s);
    let want: Vec<String> = convs.iter().map(|c| c.turns[0].append.clone()).collect();
    let rep = runner::run(&cfg, RunSetup::default(), convs).await.unwrap();
    assert_eq!(rep.completed, 24, "{:?}", rep.errors);
    let got: Vec<String> = fake
        .bodies
        .lock()
        .unwrap()
        .iter()
        .map(|b| b["prompt"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got, want);
}

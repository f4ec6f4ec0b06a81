//! KV-cache events over a real ZMQ socket: a SUB socket (the same pure-Rust crate a
//! router could use) receives vLLM's multipart message after a request, and the msgpack
//! batch decodes to the prompt's blocks. Also the renderer routes the router scores with.

use folio_testkit::http as common;

use common::{post_ok, start};
use rmpv::Value as Mp;
use serde_json::{json, Value};
use std::time::Duration;
use zeromq::{Socket, SocketRecv};

/// The field `key` of msgpack map `m`.
fn field<'a>(m: &'a Mp, key: &str) -> &'a Mp {
    m.as_map()
        .expect("an event is a map")
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no {key:?} in {m}"))
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("token ids")
        .iter()
        .map(|t| t.as_u64().expect("an id"))
        .collect()
}

/// The real model's engine with its KV-cache events channel (None: no model, skipped).
fn engine_with_events() -> Option<(folio_engine::EngineHandle, folio_engine::KvEventReceiver)> {
    let (tx, rx) = folio_engine::kv_event_channel();
    let cfg = folio_engine::EngineConfig {
        kv_events: Some(tx),
        ..Default::default()
    };
    Some((common::engine_with(cfg, None)?, rx))
}

#[test]
fn a_request_publishes_its_prompt_blocks_as_vllm_does() {
    let Some((engine, rx)) = engine_with_events() else {
        return;
    };
    let bs = engine.info.block_size;
    let server = start(engine, folio_server::ServerOptions::default());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let kv = folio_server::kv_events::KvEventsConfig {
        endpoint: "tcp://*:0".into(),
        topic: "kv-test".into(),
    };
    let at = rt
        .block_on(folio_server::kv_events::start(kv, rx))
        .expect("publisher binds");
    let port = at.rsplit(':').next().unwrap().to_string();
    let mut sub = zeromq::SubSocket::new();
    rt.block_on(async {
        sub.connect(&format!("tcp://127.0.0.1:{port}"))
            .await
            .unwrap();
        sub.subscribe("").await.unwrap();
        // The subscription reaches the publisher asynchronously (ZMQ's slow joiner).
        tokio::time::sleep(Duration::from_millis(500)).await;
    });

    // What the router asks each worker before routing: the prompt's token ids. Fields
    // the router adds for generation are accepted.
    let prompt = "The quick brown fox jumps over the lazy dog near the river bank while \
                  the sun sets slowly behind the distant purple mountains of the valley, \
                  and the farmers walk home along the dusty road, tired after a long day \
                  in the golden fields of wheat and barley that stretch to the horizon.";
    let rendered = post_ok(
        server.addr,
        "/v1/completions/render",
        &json!({"prompt": prompt, "max_tokens": 1, "no_stop_trim": false, "return_hidden_states": false}),
    );
    let arr = rendered.as_array().expect("a list of GenerateRequests");
    assert_eq!(arr.len(), 1);
    assert!(arr[0]["request_id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(arr[0]["sampling_params"]["max_tokens"], 1);
    let tokens = ids(&arr[0]["token_ids"]);
    let tokenized = post_ok(server.addr, "/tokenize", &json!({"prompt": prompt}));
    assert_eq!(tokens, ids(&tokenized["tokens"]), "render = tokenize");
    let full = tokens.len() / bs;
    assert!(full >= 2, "the prompt spans {} tokens", tokens.len());

    post_ok(
        server.addr,
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 1}),
    );
    let msg = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(20), sub.recv()).await })
        .expect("a batch within 20 s")
        .expect("a message");
    let frames = msg.into_vec();
    assert_eq!(frames.len(), 3, "[topic, seq, payload]");
    assert_eq!(&frames[0][..], b"kv-test");
    assert_eq!(
        &frames[1][..],
        &0u64.to_be_bytes(),
        "the first batch is seq 0"
    );
    let batch = rmpv::decode::read_value(&mut &frames[2][..]).expect("msgpack");
    let batch = batch.as_array().expect("a batch is [ts, events, rank]");
    assert_eq!(batch.len(), 3);
    let ts = batch[0].as_f64().expect("ts is a float");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((now - ts).abs() < 60.0, "ts {ts} is wall-clock seconds");
    assert_eq!(batch[2].as_u64(), Some(0), "data-parallel rank 0");
    let events = batch[1].as_array().expect("events");
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(field(e, "type").as_str(), Some("BlockStored"));
    let hashes = field(e, "block_hashes").as_array().unwrap();
    assert_eq!(hashes.len(), full, "every full prompt block, in one event");
    assert!(hashes.iter().all(|h| h.as_u64().is_some()));
    assert!(
        field(e, "parent_block_hash").is_nil(),
        "the chain starts here"
    );
    let stored: Vec<u64> = field(e, "token_ids")
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    assert_eq!(
        stored,
        tokens[..full * bs],
        "the blocks hold the rendered ids"
    );
    assert_eq!(field(e, "block_size").as_u64(), Some(bs as u64));
    assert!(field(e, "lora_id").is_nil() && field(e, "lora_name").is_nil());
    assert_eq!(field(e, "medium").as_str(), Some("GPU"));

    // The chat renderer: one GenerateRequest, the ids /tokenize gives for the messages.
    let messages = json!([{"role": "user", "content": prompt}]);
    let chat = post_ok(
        server.addr,
        "/v1/chat/completions/render",
        &json!({"messages": messages, "stream": true}),
    );
    assert!(chat["request_id"]
        .as_str()
        .unwrap()
        .starts_with("chatcmpl-"));
    assert_eq!(chat["stream"], true);
    let chat_tok = post_ok(server.addr, "/tokenize", &json!({"messages": messages}));
    assert_eq!(ids(&chat["token_ids"]), ids(&chat_tok["tokens"]));
    // An unknown model is a 404 there too.
    let r = common::post(
        server.addr,
        "/v1/chat/completions/render",
        &json!({"model": "nope", "messages": messages}),
    );
    assert_eq!(r.status, 404, "{}", r.text());
}

/// A port on loopback that nothing listens on (bound by the OS, then released).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn dropped(addr: std::net::SocketAddr) -> f64 {
    let m = common::get(addr, "/metrics").text();
    common::metric(&m, "folio_kv_events_dropped_total").expect("the dropped-events counter")
}

/// A connect-mode endpoint (`tcp://127.0.0.1:PORT`, as vLLM allows) with no subscriber for
/// 60 s: the publisher starts at once, the server keeps answering, and the events nobody
/// could receive are counted in /metrics. A subscriber that binds the port later receives
/// the new events, with a sequence number past the dropped ones. Before, the server exited
/// after 30 s with `Connect timed out after 30s`.
#[test]
fn a_late_subscriber_never_stops_the_server_and_gets_new_events() {
    let Some((engine, rx)) = engine_with_events() else {
        return;
    };
    let server = start(engine, folio_server::ServerOptions::default());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let port = free_port();
    let endpoint = format!("tcp://127.0.0.1:{port}");
    let kv = folio_server::kv_events::KvEventsConfig {
        endpoint: endpoint.clone(),
        topic: String::new(),
    };
    let t0 = std::time::Instant::now();
    let at = rt
        .block_on(folio_server::kv_events::start(kv, rx))
        .expect("a connect address with nobody listening is no error");
    assert_eq!(at, endpoint);
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "start waited for a subscriber"
    );

    // Distinct prompts, so each stores new blocks (and makes events).
    let prompt = |i: usize| {
        format!(
            "Request number {i}: the quick brown fox jumps over the lazy dog near the river \
             bank while the sun sets slowly behind the distant purple mountains, {i} times."
        )
    };
    let mut i = 0;
    while t0.elapsed() < Duration::from_secs(60) {
        let r = common::post(
            server.addr,
            "/v1/completions",
            &json!({"prompt": prompt(i), "max_tokens": 1}),
        );
        assert_eq!(
            r.status,
            200,
            "request {i} at {:?}: {}",
            t0.elapsed(),
            r.text()
        );
        assert_eq!(common::get(server.addr, "/health").status, 200);
        i += 1;
        std::thread::sleep(Duration::from_secs(3));
    }
    let lost = dropped(server.addr);
    assert!(
        lost >= i as f64,
        "{i} requests, {lost} events counted as dropped"
    );

    // The subscriber arrives (binding: the server connects to it).
    let mut sub = zeromq::SubSocket::new();
    rt.block_on(async {
        sub.bind(&endpoint).await.expect("the subscriber binds");
        sub.subscribe("").await.unwrap();
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let msg = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no event reached the late subscriber within 30 s"
        );
        let r = common::post(
            server.addr,
            "/v1/completions",
            &json!({"prompt": prompt(i), "max_tokens": 1}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        i += 1;
        let got =
            rt.block_on(async { tokio::time::timeout(Duration::from_secs(1), sub.recv()).await });
        if let Ok(m) = got {
            break m.expect("a message");
        }
    };
    let frames = msg.into_vec();
    assert_eq!(frames.len(), 3, "[topic, seq, payload]");
    let seq = u64::from_be_bytes(frames[1][..].try_into().unwrap());
    assert!(seq > 0, "sequence numbers advance past dropped batches");
    let batch = rmpv::decode::read_value(&mut &frames[2][..]).expect("msgpack");
    let events = batch.as_array().unwrap()[1].as_array().unwrap().clone();
    assert!(events
        .iter()
        .any(|e| field(e, "type").as_str() == Some("BlockStored")));
}

/// Binding an address another process holds fails at start, saying so.
#[test]
fn a_bind_address_in_use_is_an_error_at_start() {
    let held = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let (_tx, rx) = folio_engine::kv_event_channel();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let kv = folio_server::kv_events::KvEventsConfig {
        endpoint: format!("tcp://*:{port}"),
        topic: String::new(),
    };
    let e = rt
        .block_on(folio_server::kv_events::start(kv, rx))
        .expect_err("the port is taken")
        .to_string();
    assert!(
        e.contains("--kv-events-endpoint")
            && e.contains("cannot bind")
            && e.contains(&port.to_string()),
        "{e}"
    );
}

//! End-to-end tests of the HTTP API on the real model, over real HTTP.

use folio_testkit::http as common;

use common::{get, metric, post, request, Server};
use serde_json::{json, Value};

/// One server for the whole binary (the engine loads once).
fn server() -> Option<&'static Server> {
    common::shared()
}

fn complete(s: &Server, body: Value) -> Value {
    let r = post(s.addr, "/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn token_count(s: &Server, text: &str) -> usize {
    let r = post(s.addr, "/tokenize", &json!({"prompt": text}));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["count"].as_u64().unwrap() as usize
}

/// Text of a streamed completion, per choice index, plus the finish reasons.
fn stream_texts(chunks: &[Value], key: &str) -> (Vec<String>, Vec<Option<String>>) {
    let mut texts = vec![String::new(); 8];
    let mut finish = vec![None; 8];
    for c in chunks {
        for ch in c["choices"].as_array().unwrap() {
            let i = ch["index"].as_u64().unwrap() as usize;
            let t = if key == "text" {
                &ch["text"]
            } else {
                &ch["delta"]["content"]
            };
            if let Some(t) = t.as_str() {
                texts[i].push_str(t);
            }
            if let Some(f) = ch["finish_reason"].as_str() {
                assert!(finish[i].is_none(), "two finish reasons for choice {i}");
                finish[i] = Some(f.to_string());
            }
        }
    }
    let n = finish.iter().filter(|f| f.is_some()).count();
    texts.truncate(n);
    finish.truncate(n);
    (texts, finish)
}

const PROMPT: &str = "The capital of France is";

#[test]
fn completion_non_streaming() {
    let Some(s) = server() else { return };
    let v = complete(
        s,
        json!({"model": s.engine.info.model_name, "prompt": PROMPT, "max_tokens": 8, "temperature": 0, "ignore_eos": true}),
    );
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"), "{v}");
    assert_eq!(v["object"], "text_completion");
    assert!(v["created"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(v["model"], s.engine.info.model_name.as_str());
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 1);
    assert_eq!(choices[0]["index"], 0);
    assert_eq!(choices[0]["finish_reason"], "length");
    assert_eq!(choices[0]["logprobs"], Value::Null);
    assert!(!choices[0]["text"].as_str().unwrap().is_empty());
    let p = token_count(s, PROMPT) as u64;
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": p, "completion_tokens": 8, "total_tokens": p + 8,
               "prompt_tokens_details": {"cached_tokens": v["usage"]["prompt_tokens_details"]["cached_tokens"]}})
    );
    // Greedy is deterministic.
    let again = complete(
        s,
        json!({"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "ignore_eos": true}),
    );
    assert_eq!(again["choices"][0]["text"], choices[0]["text"]);
}

#[test]
fn completion_streaming_matches_non_streaming_and_sends_usage() {
    let Some(s) = server() else { return };
    let body = json!({"prompt": PROMPT, "max_tokens": 10, "temperature": 0, "ignore_eos": true});
    let full = complete(s, body.clone());
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    sb["stream_options"] = json!({"include_usage": true});
    let r = post(s.addr, "/v1/completions", &sb);
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let (chunks, done) = r.sse();
    assert!(done, "stream must end with data: [DONE]");
    for c in &chunks[..chunks.len() - 1] {
        assert_eq!(c["object"], "text_completion");
        assert_eq!(c["usage"], Value::Null, "{c}");
        assert_eq!(c["choices"].as_array().unwrap().len(), 1);
    }
    let (texts, finish) = stream_texts(&chunks, "text");
    assert_eq!(
        texts,
        vec![full["choices"][0]["text"].as_str().unwrap().to_string()]
    );
    assert_eq!(finish, vec![Some("length".to_string())]);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["completion_tokens"], 10);
    assert_eq!(
        last["usage"]["prompt_tokens"],
        full["usage"]["prompt_tokens"]
    );
    assert_eq!(last["usage"]["total_tokens"], full["usage"]["total_tokens"]);
    // All chunks of one request share its id.
    assert!(chunks.iter().all(|c| c["id"] == chunks[0]["id"]));
}

#[test]
fn chat_non_streaming_and_streaming_agree() {
    let Some(s) = server() else { return };
    let messages = json!([{"role": "system", "content": "You are brief."}, {"role": "user", "content": "What is 2+2?"}]);
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": messages, "max_completion_tokens": 12, "temperature": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["object"], "chat.completion");
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["role"], "assistant");
    let content = msg["content"].as_str().unwrap().to_string();
    assert!(!content.is_empty());
    let fin = v["choices"][0]["finish_reason"].as_str().unwrap();
    assert!(fin == "stop" || fin == "length", "{fin}");
    let completion_tokens = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((1..=12).contains(&completion_tokens));
    if fin == "length" {
        assert_eq!(completion_tokens, 12);
    }

    let r = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": messages, "max_tokens": 12, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}),
    );
    assert_eq!(r.status, 200);
    let (chunks, done) = r.sse();
    assert!(done);
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert!(chunks[1..].iter().all(|c| c["choices"]
        .get(0)
        .is_none_or(|ch| ch["delta"].get("role").is_none())));
    let (texts, finish) = stream_texts(&chunks, "content");
    assert_eq!(texts, vec![content]);
    assert_eq!(finish, vec![Some(fin.to_string())]);
    assert_eq!(
        chunks.last().unwrap()["usage"]["completion_tokens"],
        completion_tokens
    );
}

#[test]
fn stop_strings_end_generation_and_are_not_emitted() {
    let Some(s) = server() else { return };
    let base = json!({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "ignore_eos": true});
    let full = complete(s, base.clone())["choices"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    // A stop string from the middle of the greedy text: two chars starting at the 6th char.
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() >= 10, "{full:?}");
    let stop: String = chars[5..7].iter().collect();
    let expected = &full[..full.find(&stop).unwrap()];
    let mut body = base.clone();
    body["stop"] = json!([stop, "zzzz-never"]);
    let v = complete(s, body.clone());
    assert_eq!(
        v["choices"][0]["text"], expected,
        "stop {stop:?} in {full:?}"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // The same through a stream: no chunk carries any part past the stop.
    body["stream"] = json!(true);
    let (chunks, done) = post(s.addr, "/v1/completions", &body).sse();
    assert!(done);
    let (texts, finish) = stream_texts(&chunks, "text");
    assert_eq!(texts, vec![expected.to_string()]);
    assert_eq!(finish, vec![Some("stop".to_string())]);
    // A single string works too.
    let mut one = base.clone();
    one["stop"] = json!(stop);
    assert_eq!(complete(s, one)["choices"][0]["text"], expected);
}

#[test]
fn n_2_gives_two_choices() {
    let Some(s) = server() else { return };
    let v = complete(
        s,
        json!({"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "n": 2, "ignore_eos": true}),
    );
    let c = v["choices"].as_array().unwrap();
    assert_eq!(c.len(), 2);
    assert_eq!(
        (c[0]["index"].clone(), c[1]["index"].clone()),
        (json!(0), json!(1))
    );
    assert_eq!(c[0]["text"], c[1]["text"], "greedy choices are identical");
    assert_eq!(v["usage"]["completion_tokens"], 12);
    assert_eq!(
        v["usage"]["prompt_tokens"].as_u64().unwrap() as usize,
        token_count(s, PROMPT)
    );

    // Seeded sampling: reproducible per request, choices drawn with different seeds.
    let body = json!({"prompt": PROMPT, "max_tokens": 12, "temperature": 1.0, "n": 2, "seed": 7, "ignore_eos": true, "stream": true});
    let (chunks, done) = post(s.addr, "/v1/completions", &body).sse();
    assert!(done);
    let (texts, finish) = stream_texts(&chunks, "text");
    assert_eq!(
        finish,
        vec![Some("length".to_string()), Some("length".to_string())]
    );
    let (again, _) = stream_texts(&post(s.addr, "/v1/completions", &body).sse().0, "text");
    assert_eq!(texts, again, "same seed, same texts");

    // Batch of prompts × n: choice i*n + j.
    let v = complete(
        s,
        json!({"prompt": [PROMPT, "Hello"], "max_tokens": 3, "temperature": 0, "n": 2, "ignore_eos": true}),
    );
    let c = v["choices"].as_array().unwrap();
    assert_eq!(c.len(), 4);
    assert_eq!(c[0]["text"], c[1]["text"]);
    assert_eq!(c[2]["text"], c[3]["text"]);
    assert_eq!(v["usage"]["completion_tokens"], 12);
}

#[test]
fn completion_logprobs() {
    let Some(s) = server() else { return };
    let v = complete(
        s,
        json!({"prompt": PROMPT, "max_tokens": 5, "temperature": 0, "logprobs": 3, "ignore_eos": true}),
    );
    let lp = &v["choices"][0]["logprobs"];
    let tokens = lp["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 5);
    let joined: String = tokens.iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(joined, v["choices"][0]["text"].as_str().unwrap());
    let offsets: Vec<u64> = lp["text_offset"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_u64().unwrap())
        .collect();
    assert_eq!(offsets[0], 0);
    assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
    for (i, l) in lp["token_logprobs"].as_array().unwrap().iter().enumerate() {
        let l = l.as_f64().unwrap();
        assert!(l <= 0.0);
        let top = lp["top_logprobs"][i].as_object().unwrap();
        assert!(!top.is_empty() && top.len() <= 3, "{top:?}");
        // Greedy: the sampled token is the most likely one.
        let best = top
            .values()
            .map(|x| x.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert!((best - l).abs() < 1e-4, "sampled {l} vs best {best}");
    }
}

#[test]
fn chat_logprobs() {
    let Some(s) = server() else { return };
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0,
                      "logprobs": true, "top_logprobs": 2, "ignore_eos": true});
    let r = post(s.addr, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 4);
    for e in content {
        assert!(
            e["token"].is_string()
                && e["logprob"].as_f64().unwrap() <= 0.0
                && e["bytes"].is_array(),
            "{e}"
        );
        assert_eq!(e["top_logprobs"].as_array().unwrap().len(), 2, "{e}");
        assert_eq!(
            e["top_logprobs"][0]["logprob"].as_f64().unwrap(),
            e["logprob"].as_f64().unwrap()
        );
    }
    // Streaming chunks carry logprobs for their tokens.
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let (chunks, _) = post(s.addr, "/v1/chat/completions", &sb).sse();
    let n: usize = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array())
        .map(Vec::len)
        .sum();
    assert_eq!(n, 4);
}

#[test]
fn token_id_prompts_match_text_prompts() {
    let Some(s) = server() else { return };
    let ids = post(s.addr, "/tokenize", &json!({"prompt": PROMPT})).json()["tokens"].clone();
    let a = complete(
        s,
        json!({"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "ignore_eos": true}),
    );
    let b = complete(
        s,
        json!({"prompt": ids, "max_tokens": 6, "temperature": 0, "ignore_eos": true}),
    );
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
}

#[test]
fn models_tokenize_detokenize_health_metrics() {
    let Some(s) = server() else { return };
    let info = &s.engine.info;
    let m = get(s.addr, "/v1/models");
    assert_eq!(m.status, 200);
    let m = m.json();
    assert_eq!(m["object"], "list");
    let d = &m["data"][0];
    assert_eq!(d["id"], info.model_name.as_str());
    assert_eq!(d["object"], "model");
    assert_eq!(d["owned_by"], "folio");
    assert_eq!(d["root"], info.model_name.as_str());
    assert!(
        !m.to_string().contains(&info.model_path),
        "/v1/models shows the model's path: {m}"
    );
    assert_eq!(d["max_model_len"], info.context_length);

    let t = post(s.addr, "/tokenize", &json!({"prompt": "Hello world"})).json();
    assert_eq!(t["max_model_len"], info.context_length);
    assert_eq!(t["count"], t["tokens"].as_array().unwrap().len());
    let d = post(s.addr, "/detokenize", &json!({"tokens": t["tokens"]}));
    assert_eq!(d.status, 200);
    assert_eq!(d.json()["prompt"], "Hello world");
    let chat = post(
        s.addr,
        "/tokenize",
        &json!({"messages": [{"role": "user", "content": "Hi"}]}),
    )
    .json();
    let text = post(s.addr, "/detokenize", &json!({"tokens": chat["tokens"]})).json()["prompt"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.contains("Hi") && text.len() > 2, "{text:?}");

    let h = get(s.addr, "/health");
    assert_eq!((h.status, h.json()), (200, json!({})));

    complete(
        s,
        json!({"prompt": "Hi", "max_tokens": 2, "temperature": 0, "ignore_eos": true}),
    );
    let text = get(s.addr, "/metrics").text();
    let mn = format!("{{model_name=\"{}\"}}", info.model_name);
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total",
    ] {
        assert!(
            metric(&text, &format!("{name}{mn}")).is_some(),
            "missing {name}"
        );
    }
    let cfg = format!(
        "vllm:cache_config_info{{block_size=\"{}\",cache_dtype=\"{}\",num_gpu_blocks=\"{}\"}}",
        info.block_size, info.kv_format, info.num_blocks
    );
    assert_eq!(metric(&text, &cfg), Some(1.0));
    for h in [
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
    ] {
        assert!(
            metric(&text, &format!("{h}_count{mn}")).unwrap() >= 1.0,
            "{h} has no samples"
        );
    }
    assert_eq!(
        metric(&text, "folio_kv_blocks_total"),
        Some(info.num_blocks as f64)
    );
    assert!(metric(&text, "folio_requests_running").is_some());
    assert!(metric(&text, "folio_kv_blocks_used").is_some());
    assert!(metric(&text, "folio_requests_finished_total{reason=\"length\"}").unwrap() >= 1.0);
}

fn expect_error(r: &common::Resp, status: u16, message: &str) -> Value {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    let e = &v["error"];
    assert!(
        e["message"].as_str().unwrap().contains(message),
        "expected {message:?} in {e}"
    );
    assert!(
        e["type"].is_string() && e.get("param").is_some() && e["code"].is_string(),
        "{v}"
    );
    e.clone()
}

#[test]
fn errors_have_openai_shape_and_status() {
    let Some(s) = server() else { return };
    let ctx = s.engine.info.context_length;
    let a = s.addr;
    expect_error(
        &request(a, "POST", "/v1/completions", b"{not json"),
        400,
        "request body: invalid JSON",
    );
    let e = expect_error(
        &post(
            a,
            "/v1/completions",
            &json!({"prompt": "x", "temperature": 5}),
        ),
        400,
        "temperature: must be in [0, 2], got 5",
    );
    assert_eq!(
        (e["param"].clone(), e["type"].clone()),
        (json!("temperature"), json!("invalid_request_error"))
    );
    expect_error(
        &post(
            a,
            "/v1/completions",
            &json!({"prompt": "x", "temperature": "hot"}),
        ),
        400,
        "temperature: must be a number, got string \"hot\"",
    );
    expect_error(
        &post(a, "/v1/completions", &json!({"prompt": "x", "n": 9})),
        400,
        "n: must be an integer in [1, 8], got 9",
    );
    expect_error(
        &post(
            a,
            "/v1/completions",
            &json!({"prompt": "x", "stop": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q"]}),
        ),
        400,
        "stop: at most 16 items, got 17",
    );
    expect_error(
        &post(a, "/v1/completions", &json!({"temperature": 0})),
        400,
        "prompt: required",
    );
    expect_error(
        &post(a, "/v1/chat/completions", &json!({"messages": []})),
        400,
        "messages: must hold 1 to 1024 messages, got 0",
    );
    // Prompt longer than the context.
    let long: Vec<u32> = vec![28; ctx + 5];
    let e = expect_error(
        &post(a, "/v1/completions", &json!({"prompt": long})),
        400,
        &format!(
            "prompt: {} tokens, but the context length is {ctx} tokens",
            ctx + 5
        ),
    );
    assert_eq!(e["code"], "context_length_exceeded");
    expect_error(
        &post(
            a,
            "/v1/completions",
            &json!({"prompt": "Hi", "max_tokens": ctx}),
        ),
        400,
        "exceeds the context length",
    );
    // Routes and methods.
    expect_error(&get(a, "/v1/nope"), 404, "no route for /v1/nope");
    expect_error(
        &get(a, "/v1/completions"),
        405,
        "method GET is not allowed on /v1/completions",
    );
    expect_error(
        &post(a, "/detokenize", &json!({"tokens": [1, 99999999]})),
        400,
        "tokens[1]: must be a token id in [0, ",
    );
}

#[test]
fn over_the_queue_limit_is_429() {
    let Some(s) = server() else { return };
    let small = common::start(
        s.engine.clone(),
        folio_server::ServerOptions {
            max_queued: 2,
            ..Default::default()
        },
    );
    let e = expect_error(
        &post(
            small.addr,
            "/v1/completions",
            &json!({"prompt": "Hi", "n": 3, "max_tokens": 1}),
        ),
        429,
        "server overloaded",
    );
    assert_eq!(e["code"], "overloaded");
    let ok = post(
        small.addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "n": 2, "max_tokens": 1}),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(
        metric(
            &get(small.addr, "/metrics").text(),
            "folio_http_rejected_total{status=\"429\"}"
        ),
        Some(1.0)
    );
}

/// A tiny deterministic generator for the garbage pass.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

#[test]
fn garbage_input_gets_4xx_and_server_keeps_serving() {
    let Some(s) = server() else { return };
    let a = s.addr;
    let mut rng = Lcg(42);
    let mut bodies: Vec<Vec<u8>> = (0..40)
        .map(|i| (0..(i * 37 % 300 + 1)).map(|_| rng.next() as u8).collect())
        .collect();
    for v in [
        json!({"prompt": "x", "max_tokens": 1e300}),
        json!({"prompt": "x", "max_tokens": 18446744073709551615u64}),
        json!({"prompt": "x", "seed": 1.5}),
        json!({"prompt": "x", "temperature": -1e308}),
        json!({"prompt": [1e300]}),
        json!({"prompt": [[-1]]}),
        json!({"prompt": {"a": 1}}),
        json!({"prompt": true}),
        json!({"prompt": "x", "stop": [1, 2]}),
        json!({"prompt": "x", "stream": "yes"}),
        json!({"prompt": "x", "logprobs": "3"}),
        json!({"prompt": "x", "n": null, "top_k": 1.5}),
        json!({"prompt": []}),
        json!({"messages": [{"role": "user", "content": {"nested": [1, 2]}}]}),
        json!({"messages": [null]}),
        json!(["not", "an", "object"]),
        json!(null),
        json!(12),
    ] {
        bodies.push(v.to_string().into_bytes());
    }
    let deep = format!(
        "{{\"prompt\": {}1{}}}",
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    bodies.push(deep.into_bytes());
    let deep_obj = format!("{}{}", "{\"a\":".repeat(10_000), "}".repeat(10_000));
    bodies.push(deep_obj.into_bytes());
    bodies.push(b"".to_vec());
    bodies.push(
        json!({"prompt": "hello ".repeat(175_000)})
            .to_string()
            .into_bytes(),
    ); // ~1 MB
    for (i, b) in bodies.iter().enumerate() {
        for path in ["/v1/completions", "/v1/chat/completions"] {
            let r = request(a, "POST", path, b);
            assert!(
                (400..500).contains(&r.status),
                "body #{i} on {path}: {} {}",
                r.status,
                r.text()
            );
            assert!(r.json()["error"]["message"].is_string());
        }
    }
    // The empty prompt: 4xx unless the model adds BOS (then it is a valid 1-token prompt).
    let r = post(
        a,
        "/v1/completions",
        &json!({"prompt": "", "max_tokens": 1}),
    );
    if token_count(s, "") == 0 {
        expect_error(&r, 400, "prompt: must contain at least 1 token, got 0");
    } else {
        assert_eq!(r.status, 200);
    }
    assert_eq!(get(a, "/health").status, 200);
    complete(
        s,
        json!({"prompt": "Hi", "max_tokens": 2, "temperature": 0}),
    );
}

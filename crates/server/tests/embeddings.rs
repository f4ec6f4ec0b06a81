//! `/v1/embeddings` over real HTTP on the real model: vectors of the model's width, norm
//! 1, the same for the same input, the same batched as alone (each input is its own engine
//! request, batched with the others), last-token and mean pooling differ, the input shapes
//! of completions, base64, and 400s that name the field and the limit.

use folio_testkit::http as common;

use common::{post, post_ok, Server};
use serde_json::{json, Value};

fn server() -> Option<&'static Server> {
    common::shared()
}

fn vectors(r: &Value) -> Vec<Vec<f32>> {
    let data = r["data"].as_array().unwrap();
    data.iter()
        .enumerate()
        .map(|(i, d)| {
            assert_eq!(
                (d["object"].as_str(), d["index"].as_u64()),
                (Some("embedding"), Some(i as u64))
            );
            d["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

fn embed(s: &Server, body: Value) -> Vec<Vec<f32>> {
    vectors(&post_ok(s.addr, "/v1/embeddings", &body))
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum()
}

const TEXTS: [&str; 4] = [
    "The cat sat on the mat.",
    "Paris is the capital of France.",
    "A much longer sentence about the weather, which has been rainy all week in the north.",
    "The cat sat on the mat.",
];

#[test]
fn vectors_have_the_width_norm_one_and_do_not_depend_on_the_batch() {
    let Some(s) = server() else { return };
    let width = s.engine.info.hidden_size;
    for pooling in ["last", "mean"] {
        let r = post_ok(
            s.addr,
            "/v1/embeddings",
            &json!({"input": TEXTS, "pooling": pooling}),
        );
        assert_eq!(r["object"], "list");
        assert_eq!(r["model"], s.engine.info.model_name.as_str());
        let batched = vectors(&r);
        assert_eq!(batched.len(), 4);
        for v in &batched {
            assert_eq!(v.len(), width);
            assert!(
                (dot(v, v) - 1.0).abs() < 1e-5,
                "{pooling}: norm² {}",
                dot(v, v)
            );
        }
        // Identical inputs in one batch, identical vectors; different inputs differ.
        assert_eq!(batched[0], batched[3], "{pooling}");
        assert_ne!(batched[0], batched[1], "{pooling}");
        // Alone, each input gives the bits it gave in the batch.
        for (t, b) in TEXTS.iter().zip(&batched) {
            let alone = embed(s, json!({"input": t, "pooling": pooling}));
            // Bit-equal: each row is computed the same way whatever else is in the batch.
            assert_eq!(&alone[0], b, "{pooling} {t:?}");
        }
        // Usage counts every input's tokens.
        let tok: u64 = TEXTS
            .iter()
            .map(|t| {
                post_ok(s.addr, "/tokenize", &json!({"prompt": t}))["count"]
                    .as_u64()
                    .unwrap()
            })
            .sum();
        assert_eq!(
            r["usage"],
            json!({"prompt_tokens": tok, "total_tokens": tok})
        );
    }
}

#[test]
fn embeddings_batch_with_a_running_generation() {
    let Some(s) = server() else { return };
    let alone = embed(s, json!({"input": TEXTS[2], "pooling": "mean"}));
    // A long generation keeps running while the embedding prefills next to it.
    let addr = s.addr;
    let gen = std::thread::spawn(move || {
        post_ok(
            addr,
            "/v1/completions",
            &json!({"prompt": "Once upon a time", "max_tokens": 64, "temperature": 0, "ignore_eos": true}),
        )
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    let during = embed(s, json!({"input": [TEXTS[2], TEXTS[0]], "pooling": "mean"}));
    assert_eq!(gen.join().unwrap()["usage"]["completion_tokens"], 64);
    assert_eq!(alone[0], during[0]);
}

#[test]
fn pooling_token_ids_and_base64() {
    let Some(s) = server() else { return };
    let last = embed(s, json!({"input": TEXTS[1], "pooling": "last"}));
    let mean = embed(s, json!({"input": TEXTS[1], "pooling": "mean"}));
    let cos = dot(&last[0], &mean[0]);
    assert!(
        cos < 0.999,
        "last and mean pooling give the same vector (cos {cos})"
    );
    // The default is last-token (the test model has no pooling_type).
    assert_eq!(embed(s, json!({"input": TEXTS[1]})), last);
    // Token ids: the same as the text they encode; a list of lists is a batch.
    let ids = post_ok(s.addr, "/tokenize", &json!({"prompt": TEXTS[1]}))["tokens"].clone();
    assert_eq!(embed(s, json!({"input": ids})), last);
    let two = embed(s, json!({"input": [ids, ids]}));
    assert_eq!((two[0] == last[0], two[1] == last[0]), (true, true));
    // base64: little-endian f32, the same numbers.
    let r = post_ok(
        s.addr,
        "/v1/embeddings",
        &json!({"input": TEXTS[1], "encoding_format": "base64"}),
    );
    let b = r["data"][0]["embedding"].as_str().unwrap();
    assert_eq!(b.len(), (s.engine.info.hidden_size * 4).div_ceil(3) * 4);
    // dimensions equal to the width is accepted.
    let w = s.engine.info.hidden_size;
    assert_eq!(embed(s, json!({"input": TEXTS[1], "dimensions": w})), last);
}

#[test]
fn bad_input_is_a_400_naming_the_field_and_limit() {
    let Some(s) = server() else { return };
    let ctx = s.engine.info.context_length;
    let w = s.engine.info.hidden_size;
    let long = "word ".repeat(ctx + 10);
    let cases = [
        (json!({"input": ""}), "input", "input: must not be empty".to_string()),
        (json!({"input": ["a", ""]}), "input[1]", "input[1]: must not be empty".into()),
        (json!({"input": []}), "input", "input: must not be an empty array".into()),
        (json!({}), "input", "input: required, got nothing".into()),
        (json!({"input": [[1], []]}), "input[1]", "input[1]: must contain at least 1 token, got 0".into()),
        (json!({"input": "x", "dimensions": 8}), "dimensions",
         format!("dimensions: folio returns the model's full width of {w} (it cannot shorten vectors), got 8")),
        (json!({"input": "x", "encoding_format": "int8"}), "encoding_format",
         "encoding_format: must be float or base64, got \"int8\"".into()),
        (json!({"input": "x", "pooling": "cls"}), "pooling", "pooling: must be last or mean, got \"cls\"".into()),
        (json!({"input": "x", "normalize": false}), "normalize",
         "normalize: vectors are always L2-normalized (only true is accepted), got false".into()),
    ];
    for (body, param, msg) in cases {
        let r = post(s.addr, "/v1/embeddings", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let e = &r.json()["error"];
        assert_eq!(
            (e["param"].as_str(), e["message"].as_str()),
            (Some(param), Some(msg.as_str())),
            "{body}"
        );
    }
    let r = post(s.addr, "/v1/embeddings", &json!({"input": ["ok", long]}));
    assert_eq!(r.status, 400, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!(
        (e["param"].as_str(), e["code"].as_str()),
        (Some("input[1]"), Some("context_length_exceeded"))
    );
    let m = e["message"].as_str().unwrap();
    assert!(
        m.contains(&format!("the context length is {ctx} tokens")),
        "{m}"
    );
    let r = post(
        s.addr,
        "/v1/embeddings",
        &json!({"input": "x", "model": "other"}),
    );
    assert_eq!(r.status, 404, "{}", r.text());
}

//! Structured output on the default model: every answer under a JSON schema parses and
//! validates, every regex answer matches, every choice answer is one of the choices, at
//! temperature 0 and 1, with speculation off, n-gram and self-draft. Skips (with a printed
//! reason) when the model cannot be had.

use folio_engine::{
    spawn_engine, Constraint, EngineConfig, EngineHandle, Event, FinishReason, GenerateRequest,
    SamplingParams, SpecMethod,
};
use folio_gguf::GgufFile;
use folio_model::Model;
use folio_tokenizer::Tokenizer;
use serde_json::{json, Value};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

fn try_engine(cfg: EngineConfig) -> Option<EngineHandle> {
    let path = match folio_fetch::test_model() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("skipping: the default model is not available: {e:#}");
            return None;
        }
    };
    let f = GgufFile::open(&path).expect("open model");
    let model = Model::from_gguf(&f).expect("load model");
    let tok = Arc::new(Tokenizer::from_gguf(&f).expect("tokenizer"));
    Some(spawn_engine(model, tok, &path, cfg).expect("engine"))
}

/// Text and finish reason of one request.
fn run(h: &EngineHandle, reqs: Vec<GenerateRequest>) -> Vec<(String, FinishReason, usize)> {
    let streams: Vec<_> = reqs
        .into_iter()
        .map(|r| h.submit(r).expect("submit"))
        .collect();
    streams
        .into_iter()
        .map(|mut s| {
            let mut text = String::new();
            loop {
                match s.next_blocking().expect("stream ends with Finished") {
                    Event::Tokens { text: t, .. } => text.push_str(&t),
                    // Generation streams carry no embedding.
                    Event::Embedding { .. } => {}
                    Event::Finished { reason, usage, .. } => {
                        return (text, reason, usage.completion_tokens)
                    }
                }
            }
        })
        .collect()
}

fn collect_one(mut s: folio_engine::RequestStream) -> (String, FinishReason) {
    let mut text = String::new();
    loop {
        match s.next_blocking().expect("stream ends with Finished") {
            Event::Tokens { text: t, .. } => text.push_str(&t),
            // Generation streams carry no embedding.
            Event::Embedding { .. } => {}
            Event::Finished { reason, .. } => return (text, reason),
        }
    }
}

fn request(
    h: &EngineHandle,
    prompt: &str,
    c: Constraint,
    temperature: f32,
    seed: u64,
    max_tokens: usize,
) -> GenerateRequest {
    let ids = h.tokenizer.encode(prompt, true).expect("encode");
    let mut r = GenerateRequest::new(ids, max_tokens);
    r.params = SamplingParams {
        temperature,
        seed: Some(seed),
        ..SamplingParams::default()
    };
    r.constraint = Some(h.grammars.compile(&c).expect("compiles"));
    r
}

fn obj(props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": props, "required": required,
           "additionalProperties": false})
}

/// Twenty schemas: nested objects, arrays, enums, bounded numbers, anyOf, const,
/// required and optional properties, a top-level array. Strings and arrays are bounded so
/// that sampled answers finish within the token budget.
fn schemas() -> Vec<Value> {
    let s = |n: usize| json!({"type": "string", "maxLength": n});
    let int = |lo: i64, hi: i64| json!({"type": "integer", "minimum": lo, "maximum": hi});
    vec![
        obj(json!({"name": s(12), "age": int(0, 120)}), &["name", "age"]),
        obj(
            json!({"city": {"enum": ["Paris", "London", "Tokyo", "Lima"]}}),
            &["city"],
        ),
        obj(
            json!({"tags": {"type": "array", "items": s(8), "minItems": 1, "maxItems": 3}}),
            &["tags"],
        ),
        obj(
            json!({"point": obj(json!({"x": int(-100, 100), "y": int(-100, 100)}), &["x", "y"])}),
            &["point"],
        ),
        obj(
            json!({"score": {"type": "number", "minimum": 0, "maximum": 10}}),
            &["score"],
        ),
        obj(json!({"ok": {"type": "boolean"}}), &["ok"]),
        obj(json!({"value": {"anyOf": [int(0, 9), s(5)]}}), &["value"]),
        obj(json!({"id": int(1, 1000), "note": s(10)}), &["id"]),
        obj(
            json!({"items": {"type": "array", "maxItems": 3,
                             "items": obj(json!({"name": s(6), "qty": int(1, 9)}), &["name", "qty"])}}),
            &["items"],
        ),
        obj(
            json!({"color": {"enum": ["red", "green", "blue"]},
                   "shade": {"enum": ["light", "dark"]}}),
            &["color", "shade"],
        ),
        obj(
            json!({"user": obj(json!({"name": s(8),
                                      "email": {"type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,8}\\.com$"}}),
                               &["name", "email"])}),
            &["user"],
        ),
        obj(
            json!({"matrix": {"type": "array", "maxItems": 2,
                              "items": {"type": "array", "maxItems": 2, "items": int(0, 9)}}}),
            &["matrix"],
        ),
        obj(json!({"status": {"const": "done"}}), &["status"]),
        obj(
            json!({"temperature": {"type": "number", "minimum": -50, "maximum": 50},
                   "unit": {"enum": ["C", "F"]}}),
            &["temperature", "unit"],
        ),
        obj(
            json!({"a": obj(json!({"b": obj(json!({"c": int(0, 5)}), &["c"])}), &["b"])}),
            &["a"],
        ),
        obj(
            json!({"flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 4}}),
            &["flags"],
        ),
        obj(
            json!({"maybe": {"anyOf": [{"type": "null"}, int(0, 99)]}}),
            &["maybe"],
        ),
        obj(json!({"kind": {"enum": [1, 2, 3]}}), &["kind"]),
        json!({"type": "array", "items": int(0, 99), "minItems": 1, "maxItems": 4}),
        obj(
            json!({"title": {"type": "string", "minLength": 1, "maxLength": 16},
                   "year": int(1900, 2030),
                   "genres": {"type": "array", "maxItems": 2,
                              "items": {"enum": ["drama", "comedy", "horror"]}}}),
            &["title", "year"],
        ),
    ]
}

const SPECS: [(SpecMethod, Option<usize>); 3] = [
    (SpecMethod::Off, None),
    (SpecMethod::Ngram, Some(4)),
    (SpecMethod::SelfDraft, Some(3)),
];

fn cfg(spec: SpecMethod, k: Option<usize>) -> EngineConfig {
    EngineConfig {
        spec,
        spec_tokens: k,
        spec_max_tokens: k.unwrap_or(4),
        ..EngineConfig::default()
    }
}

#[test]
fn json_schema_answers_parse_and_validate() {
    let schemas = schemas();
    assert_eq!(schemas.len(), 20);
    // Texts without speculation, by temperature: greedy ones must come back the same
    // with every proposer, seeded sampled ones with n-gram drafts (position-keyed draws).
    let mut plain: std::collections::HashMap<u32, Vec<String>> = Default::default();
    for (spec, k) in SPECS {
        let Some(h) = try_engine(cfg(spec, k)) else {
            return;
        };
        for temperature in [0.0, 1.0] {
            let reqs = schemas
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let prompt = format!("Answer in JSON matching this schema: {s}\nJSON:");
                    request(
                        &h,
                        &prompt,
                        Constraint::JsonSchema(s.clone()),
                        temperature,
                        i as u64,
                        160,
                    )
                })
                .collect();
            let outs = run(&h, reqs);
            let texts: Vec<String> = outs.iter().map(|o| o.0.clone()).collect();
            match plain.get(&(temperature as u32)) {
                None => {
                    plain.insert(temperature as u32, texts);
                }
                Some(p) if temperature == 0.0 || spec == SpecMethod::Ngram => {
                    assert_eq!(
                        p, &texts,
                        "{spec:?} t={temperature}: differs from no speculation"
                    );
                }
                Some(_) => {}
            }
            for (i, (text, reason, _)) in outs.into_iter().enumerate() {
                let what = format!("{spec:?} t={temperature} schema {i}: {text:?}");
                assert_eq!(reason, FinishReason::Stop, "{what}");
                let v: Value =
                    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: not JSON: {e}"));
                if let Err(e) = jsonschema::validate(&schemas[i], &v) {
                    panic!("{what}: invalid: {e}");
                }
            }
        }
        let ns = h.metrics.constraint_mask_ns.load(Relaxed);
        let masks = h.metrics.constraint_masks.load(Relaxed);
        assert!(masks > 0);
        eprintln!(
            "{spec:?}: {masks} masks, {:.1} µs per mask",
            ns as f64 / 1e3 / masks as f64
        );
        if spec != SpecMethod::Off {
            assert!(
                h.metrics.spec.lock().unwrap().drafted > 0,
                "{spec:?} drafted"
            );
        }
        h.shutdown();
    }
}

#[test]
fn regex_choice_and_grammar_answers_match() {
    let regexes = [
        r"[0-9]{3}-[0-9]{4}",
        r"(yes|no)",
        r"[A-Z][a-z]{2,8}",
        r"[a-z]{3,8}@[a-z]{3,8}\.com",
        r"-?[0-9]{1,4}(\.[0-9]{1,2})?",
    ];
    let choices = [
        vec!["red", "green", "blue"],
        vec!["Paris", "London", "New York"],
        vec!["positive", "negative", "neutral"],
    ];
    let gbnf = r#"root ::= "The answer is " digit digit? "."
digit ::= [0-9]"#;
    let lark = folio_engine::gbnf_to_lark(gbnf).expect("GBNF converts");
    let full: Vec<regex::Regex> = regexes
        .iter()
        .map(|r| regex::Regex::new(&format!("^(?:{r})$")).unwrap())
        .collect();
    let answer = regex::Regex::new(r"^The answer is [0-9][0-9]?\.$").unwrap();
    for (spec, k) in SPECS {
        let Some(h) = try_engine(cfg(spec, k)) else {
            return;
        };
        for temperature in [0.0, 1.0] {
            let mut reqs = Vec::new();
            for (i, r) in regexes.iter().enumerate() {
                let p = format!("Give an answer matching {r}:");
                reqs.push(request(
                    &h,
                    &p,
                    Constraint::Regex(r.to_string()),
                    temperature,
                    i as u64,
                    48,
                ));
            }
            for (i, c) in choices.iter().enumerate() {
                let p = format!("Pick one of {}:", c.join(", "));
                let c = Constraint::Choice(c.iter().map(|s| s.to_string()).collect());
                reqs.push(request(&h, &p, c, temperature, i as u64, 48));
            }
            reqs.push(request(
                &h,
                "What is 6 times 7?",
                Constraint::Lark(lark.clone()),
                temperature,
                9,
                48,
            ));
            let outs = run(&h, reqs);
            for (i, (text, reason, _)) in outs.iter().enumerate() {
                let what = format!("{spec:?} t={temperature} case {i}: {text:?}");
                assert_eq!(*reason, FinishReason::Stop, "{what}");
                if i < regexes.len() {
                    assert!(full[i].is_match(text), "{what}");
                } else if i < regexes.len() + choices.len() {
                    assert!(
                        choices[i - regexes.len()].contains(&text.as_str()),
                        "{what}"
                    );
                } else {
                    assert!(answer.is_match(text), "{what}");
                }
            }
        }
        h.shutdown();
    }
}

#[test]
fn json_object_and_bad_constraints() {
    let Some(h) = try_engine(EngineConfig::default()) else {
        return;
    };
    let r = request(
        &h,
        "Describe a cat as a JSON object:",
        Constraint::JsonObject,
        0.0,
        1,
        200,
    );
    let (text, reason, _) = run(&h, vec![r]).pop().unwrap();
    assert_eq!(reason, FinishReason::Stop, "{text:?}");
    let v: Value = serde_json::from_str(&text).expect("JSON");
    assert!(v.is_object(), "{text}");
    // n > 1: every sample of a group has its own matcher from the start.
    let schema = schemas()[0].clone();
    let mut r = request(
        &h,
        "A person as JSON:",
        Constraint::JsonSchema(schema.clone()),
        1.0,
        0,
        96,
    );
    r.params.seed = None;
    let params: Vec<SamplingParams> = (0..3)
        .map(|j| SamplingParams {
            temperature: 1.0,
            seed: Some(40 + j),
            ..SamplingParams::default()
        })
        .collect();
    for s in h.submit_n(r, params).expect("submit_n") {
        let (text, reason) = collect_one(s);
        assert_eq!(reason, FinishReason::Stop, "{text:?}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(jsonschema::is_valid(&schema, &v), "{text}");
    }
    // What llguidance cannot compile is refused with its message (a request can only carry
    // a compiled constraint, so none reaches the engine).
    for bad in [
        Constraint::JsonSchema(json!({"type": "object", "properties": {"a": {"type": "nope"}}})),
        Constraint::Regex("(unclosed".into()),
        Constraint::Lark("start: undefined_rule".into()),
    ] {
        let e = h.grammars.compile(&bad).expect_err("does not compile");
        assert!(!e.to_string().is_empty());
    }
    h.shutdown();
}

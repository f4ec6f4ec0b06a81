//! OpenAI's strict mode on the real model: 20 varied `strict: true` schemas that do not say
//! `additionalProperties`, at temperatures 0 and 1, never produce a key outside
//! `properties`; the count of answers cut off by `length` is printed. Keywords the
//! compiler does not implement are a 400 naming them. Skips without the model.

use folio_testkit::http as common;

use common::post;
use serde_json::{json, Value};

/// The 20 schemas: flat, nested, arrays of objects, enums, `anyOf`, `$ref`, empty objects.
fn schemas() -> Vec<Value> {
    let s = |v: Value| v;
    vec![
        s(
            json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
        ),
        s(
            json!({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]}),
        ),
        s(
            json!({"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}}}),
        ),
        s(json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})),
        s(
            json!({"type": "object", "properties": {"score": {"type": "number"}, "label": {"enum": ["good", "bad"]}}, "required": ["score", "label"]}),
        ),
        s(
            json!({"type": "object", "properties": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "zip": {"type": "string"}}, "required": ["street"]}}, "required": ["address"]}),
        ),
        s(
            json!({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4}}, "required": ["tags"]}),
        ),
        s(
            json!({"type": "object", "properties": {"people": {"type": "array", "maxItems": 3, "items": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}}, "required": ["people"]}),
        ),
        s(
            json!({"type": "object", "properties": {"meta": {"type": "object"}}, "required": ["meta"]}),
        ),
        s(
            json!({"type": "object", "properties": {"o1": {"type": "object", "properties": {"o2": {"type": "object", "properties": {"v": {"type": "integer"}}}}}}, "required": ["o1"]}),
        ),
        s(
            json!({"type": "object", "properties": {"title": {"type": "string"}, "year": {"type": "integer", "minimum": 1900, "maximum": 2100}}, "required": ["title", "year"]}),
        ),
        s(
            json!({"type": "object", "properties": {"value": {"anyOf": [{"type": "string"}, {"type": "object", "properties": {"n": {"type": "integer"}}}]}}, "required": ["value"]}),
        ),
        s(
            json!({"type": "object", "$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}}, "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"$ref": "#/$defs/pt"}}, "required": ["a", "b"]}),
        ),
        s(
            json!({"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no", "maybe"]}, "why": {"type": "string"}}, "required": ["answer"]}),
        ),
        s(
            json!({"type": "object", "properties": {"first": {"type": "string"}, "last": {"type": "string"}, "email": {"type": "string"}}, "required": ["first", "last", "email"]}),
        ),
        s(
            json!({"type": "object", "properties": {"items": {"type": "array", "maxItems": 3, "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}, "required": ["sku", "qty"]}}}, "required": ["items"]}),
        ),
        s(
            json!({"type": "object", "properties": {"settings": {"type": "object", "properties": {"dark": {"type": "boolean"}, "size": {"type": "integer"}}}}}),
        ),
        s(
            json!({"type": "object", "properties": {"id": {"type": "integer"}, "parent": {"type": ["integer", "null"]}}, "required": ["id", "parent"]}),
        ),
        s(
            json!({"type": "object", "properties": {"summary": {"type": "string", "maxLength": 80}, "keywords": {"type": "array", "items": {"type": "string"}, "maxItems": 3}}, "required": ["summary", "keywords"]}),
        ),
        s(
            json!({"type": "object", "properties": {"event": {"type": "object", "properties": {"name": {"type": "string"}, "when": {"type": "object", "properties": {"day": {"type": "integer"}, "month": {"type": "integer"}}}}}}, "required": ["event"]}),
        ),
    ]
}

/// Keys of `v` that `schema` (read strictly) has no place for, as paths.
fn extra_keys(schema: &Value, root: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let target = root
            .pointer(r.trim_start_matches('#'))
            .expect("ref resolves");
        return extra_keys(target, root, v, path, out);
    }
    if let Some(branches) = schema.get("anyOf").and_then(Value::as_array) {
        // Fine if some branch has a place for every key.
        let per: Vec<Vec<String>> = branches
            .iter()
            .map(|b| {
                let mut o = Vec::new();
                extra_keys(b, root, v, path, &mut o);
                o
            })
            .collect();
        if per.iter().all(|o| !o.is_empty()) {
            out.extend(per.into_iter().flatten());
        }
        return;
    }
    match v {
        Value::Object(m) => {
            let props = schema.get("properties").and_then(Value::as_object);
            for (k, x) in m {
                match props.and_then(|p| p.get(k)) {
                    Some(s) => extra_keys(s, root, x, &format!("{path}.{k}"), out),
                    None => out.push(format!("{path}.{k}")),
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = schema.get("items") {
                for (i, x) in a.iter().enumerate() {
                    extra_keys(items, root, x, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// Runs every schema at temperatures 0 and 1 against the server at `addr`; panics on an
/// extra key, returns (answers, answers cut by `length`) per temperature.
pub fn check_all(addr: std::net::SocketAddr, max_tokens: u32) -> Vec<(f64, usize, usize)> {
    let mut figures = Vec::new();
    for temperature in [0.0, 1.0] {
        let (mut n, mut cut) = (0, 0);
        for (i, schema) in schemas().into_iter().enumerate() {
            let body = json!({
                "messages": [{"role": "user", "content": "Answer with a JSON object for this schema."}],
                "max_tokens": max_tokens,
                "temperature": temperature,
                "seed": i,
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": format!("s{i}"), "schema": schema, "strict": true}},
            });
            let r = post(addr, "/v1/chat/completions", &body);
            assert_eq!(r.status, 200, "schema {i}: {}", r.text());
            let v = r.json();
            let c = &v["choices"][0];
            let text = c["message"]["content"].as_str().unwrap().to_string();
            n += 1;
            if c["finish_reason"] == "length" {
                cut += 1;
                eprintln!("schema {i} at t={temperature} cut by length: {text}");
                continue;
            }
            let out: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("schema {i}: {text:?}: {e}"));
            let mut extra = Vec::new();
            extra_keys(&schema, &schema, &out, "$", &mut extra);
            assert!(
                extra.is_empty(),
                "schema {i} at t={temperature}: extra keys {extra:?} in {text}"
            );
        }
        figures.push((temperature, n, cut));
    }
    figures
}

/// `max_tokens` for the check: room for a strict answer's bounded strings
/// (`strict_schema::MAX_STRING_CHARS`) to end; `$FOLIO_STRICT_MAX_TOKENS` sets another.
fn max_tokens() -> u32 {
    std::env::var("FOLIO_STRICT_MAX_TOKENS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

#[test]
fn strict_schemas_never_produce_keys_outside_properties() {
    let Some(s) = common::shared() else { return };
    let m = max_tokens();
    let figures = check_all(s.addr, m);
    for (t, n, cut) in &figures {
        println!("strict schemas, SmolLM2, max_tokens {m}, temperature {t}: {cut} of {n} ended by length");
    }
}

/// A running `folio serve` (say with Qwen2.5-Coder-1.5B) at `$FOLIO_STRICT_ADDR`.
#[test]
fn strict_schemas_against_a_running_server() {
    let Ok(addr) = std::env::var("FOLIO_STRICT_ADDR") else {
        eprintln!("SKIPPED: FOLIO_STRICT_ADDR is not set");
        return;
    };
    let m = max_tokens();
    let figures = check_all(addr.parse().expect("host:port"), m);
    for (t, n, cut) in &figures {
        println!(
            "strict schemas, {addr}, max_tokens {m}, temperature {t}: {cut} of {n} ended by length"
        );
    }
}

#[test]
fn unimplemented_schema_keywords_are_400s_naming_them() {
    let Some(s) = common::shared() else { return };
    for (schema, keyword) in [
        (
            json!({"type": "array", "contains": {"type": "integer"}}),
            "contains",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "unevaluatedProperties": false}),
            "unevaluatedProperties",
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "integer", "if": {"minimum": 3}, "then": {"maximum": 5}}}}),
            "if",
        ),
    ] {
        let body = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
                          "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}}});
        let r = post(s.addr, "/v1/chat/completions", &body);
        assert_eq!(r.status, 400, "{schema}: {}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["param"], "response_format", "{e}");
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains(&format!("\"{keyword}\"")), "{msg}");
    }
}

//! Structured-output fields → one [`folio_engine::Constraint`], the field it came from
//! named in every error.
//!
//! Read on both /v1/completions and /v1/chat/completions:
//! - OpenAI `response_format`: `{"type": "text"}` (no constraint), `{"type":
//!   "json_object"}`, `{"type": "json_schema", "json_schema": {"name", "schema",
//!   "strict"}}`.
//! - vLLM `structured_outputs`: one of `json` (a schema, or its JSON text), `regex`,
//!   `choice`, `grammar`, `json_object`; and the older `guided_json`, `guided_regex`,
//!   `guided_choice`, `guided_grammar`. Grammars are Lark (llguidance's dialect), or GBNF
//!   when they contain `::=` (xgrammar's EBNF).
//! - llama-server `grammar` (GBNF) and `json_schema` (a schema).
//!
//! Schemas are read as OpenAI's strict mode and vLLM read them: objects that do not say
//! `additionalProperties` allow no other keys ([`crate::strict_schema`]), except under
//! `response_format` without `strict: true`, which keeps JSON Schema's defaults. Keywords
//! llguidance does not implement are refused by name, never ignored.
//!
//! Two of them in one request are a 400 naming both. Whether the constraint compiles is
//! settled by [`crate::grammar_compiler::GrammarCompiler::compile`] (a size limit or
//! llguidance's message in a 400), once per call.

use crate::error::ApiError;
use crate::fields::{show, Fields};
use folio_engine::{Constraint, GrammarLimits};
use serde_json::Value;

/// Most alternatives of a choice.
pub const MAX_CHOICES: usize = 1024;

/// A request's constraint and the field that set it.
#[derive(Clone, Debug, PartialEq)]
pub struct Structured {
    pub field: String,
    pub constraint: Constraint,
}

/// Reads every structured-output field of `f`; at most one may constrain the output.
pub fn parse(f: &Fields) -> Result<Option<Structured>, ApiError> {
    let mut found: Vec<Structured> = Vec::new();
    let mut add = |field: String, c: Option<Constraint>| {
        if let Some(constraint) = c {
            found.push(Structured { field, constraint });
        }
    };
    if let Some(v) = f.get("response_format") {
        add("response_format".into(), response_format(v)?);
    }
    if let Some(v) = f.get("structured_outputs") {
        let (field, c) = structured_outputs(v)?;
        add(field, c);
    }
    if let Some(v) = f.get("guided_json") {
        add(
            "guided_json".into(),
            Some(json_schema("guided_json", v, true)?),
        );
    }
    if let Some(v) = f.get("guided_regex") {
        add("guided_regex".into(), Some(regex("guided_regex", v)?));
    }
    if let Some(v) = f.get("guided_choice") {
        add("guided_choice".into(), Some(choice("guided_choice", v)?));
    }
    if let Some(v) = f.get("guided_grammar") {
        add(
            "guided_grammar".into(),
            Some(grammar("guided_grammar", v, false)?),
        );
    }
    if let Some(v) = f.get("grammar") {
        add("grammar".into(), Some(grammar("grammar", v, true)?));
    }
    if let Some(v) = f.get("json_schema") {
        add(
            "json_schema".into(),
            Some(json_schema("json_schema", v, true)?),
        );
    }
    if found.len() > 1 {
        let names: Vec<&str> = found.iter().map(|s| s.field.as_str()).collect();
        return Err(ApiError::param(
            names[1],
            format!(
                "{} both constrain the output; give only one",
                names.join(" and ")
            ),
        ));
    }
    Ok(found.pop())
}

fn object<'a>(name: &str, v: &'a Value) -> Result<&'a serde_json::Map<String, Value>, ApiError> {
    v.as_object()
        .ok_or_else(|| ApiError::param(name, format!("must be an object, got {}", show(v))))
}

fn response_format(v: &Value) -> Result<Option<Constraint>, ApiError> {
    let o = object("response_format", v)?;
    let f = Fields::new(o);
    let ty = f
        .str("type")
        .map_err(|_| ApiError::param("response_format.type", "must be a string"))?;
    match ty {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Constraint::JsonObject)),
        Some("json_schema") => {
            let Some(js) = f.get("json_schema") else {
                return Err(ApiError::param(
                    "response_format.json_schema",
                    "is required when type is json_schema",
                ));
            };
            let js = object("response_format.json_schema", js)?;
            let inner = Fields::new(js);
            inner.str("name").map_err(|_| {
                ApiError::param("response_format.json_schema.name", "must be a string")
            })?;
            let strict = inner.bool("strict", false).map_err(|_| {
                ApiError::param("response_format.json_schema.strict", "must be a boolean")
            })?;
            match inner.get("schema") {
                // OpenAI makes the schema optional: then any JSON value.
                None => Ok(Some(Constraint::JsonSchema(serde_json::json!({})))),
                Some(s) => Ok(Some(json_schema(
                    "response_format.json_schema.schema",
                    s,
                    strict,
                )?)),
            }
        }
        Some(other) => Err(ApiError::param(
            "response_format.type",
            format!("must be one of text, json_object, json_schema; got {other:?}"),
        )),
        None => Err(ApiError::param("response_format.type", "is required")),
    }
}

/// vLLM's `structured_outputs` object: exactly one of its constraint keys.
fn structured_outputs(v: &Value) -> Result<(String, Option<Constraint>), ApiError> {
    let o = object("structured_outputs", v)?;
    let f = Fields::new(o);
    let mut found: Vec<(String, Constraint)> = Vec::new();
    let name = |k: &str| format!("structured_outputs.{k}");
    if let Some(v) = f.get("json") {
        found.push((name("json"), json_schema(&name("json"), v, true)?));
    }
    if let Some(v) = f.get("regex") {
        found.push((name("regex"), regex(&name("regex"), v)?));
    }
    if let Some(v) = f.get("choice") {
        found.push((name("choice"), choice(&name("choice"), v)?));
    }
    if let Some(v) = f.get("grammar") {
        found.push((name("grammar"), grammar(&name("grammar"), v, false)?));
    }
    if f.bool("json_object", false)
        .map_err(|_| ApiError::param(name("json_object"), "must be a boolean"))?
    {
        found.push((name("json_object"), Constraint::JsonObject));
    }
    if let Some(v) = f.get("structural_tag") {
        return Err(ApiError::param(
            name("structural_tag"),
            format!("not supported by folio, got {}", show(v)),
        ));
    }
    match found.len() {
        0 => Ok(("structured_outputs".into(), None)),
        1 => {
            let (field, c) = found.pop().expect("one");
            Ok((field, Some(c)))
        }
        _ => Err(ApiError::param(
            found[1].0.clone(),
            format!(
                "{} and {} both constrain the output; give only one",
                found[0].0, found[1].0
            ),
        )),
    }
}

/// A schema as an object (or boolean), or as the JSON text of one; `strict` closes its
/// objects ([`crate::strict_schema::strict`]).
fn json_schema(name: &str, v: &Value, strict: bool) -> Result<Constraint, ApiError> {
    let schema = match v {
        Value::Object(_) | Value::Bool(_) => v.clone(),
        Value::String(s) => serde_json::from_str::<Value>(s)
            .map_err(|e| ApiError::param(name, format!("is a string but not JSON: {e}")))?,
        _ => {
            return Err(ApiError::param(
                name,
                format!("must be a JSON schema (an object), got {}", show(v)),
            ))
        }
    };
    if !schema.is_object() && !schema.is_boolean() {
        return Err(ApiError::param(
            name,
            format!("must be a JSON schema (an object), got {}", show(&schema)),
        ));
    }
    Ok(Constraint::JsonSchema(if strict {
        crate::strict_schema::strict(schema)
    } else {
        schema
    }))
}

fn nonempty_str<'a>(name: &str, v: &'a Value) -> Result<&'a str, ApiError> {
    match v {
        Value::String(s) if !s.is_empty() => Ok(s),
        _ => Err(ApiError::param(
            name,
            format!("must be a non-empty string, got {}", show(v)),
        )),
    }
}

fn regex(name: &str, v: &Value) -> Result<Constraint, ApiError> {
    Ok(Constraint::Regex(nonempty_str(name, v)?.to_string()))
}

fn choice(name: &str, v: &Value) -> Result<Constraint, ApiError> {
    let items = match v {
        Value::Array(a) if !a.is_empty() && a.len() <= MAX_CHOICES => a,
        _ => {
            return Err(ApiError::param(
                name,
                format!(
                    "must be an array of 1 to {MAX_CHOICES} strings, got {}",
                    show(v)
                ),
            ))
        }
    };
    let choices = items
        .iter()
        .enumerate()
        .map(|(i, x)| nonempty_str(&format!("{name}[{i}]"), x).map(str::to_string))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Constraint::Choice(choices))
}

/// A grammar: GBNF when `gbnf` (llama-server's `grammar`) or when it has `::=`, else Lark.
fn grammar(name: &str, v: &Value, gbnf: bool) -> Result<Constraint, ApiError> {
    let g = nonempty_str(name, v)?;
    if gbnf || g.contains("::=") {
        // Checked before the conversion, which would otherwise run on any size.
        let max = GrammarLimits::default().max_bytes;
        if g.len() > max {
            return Err(ApiError::param(
                name,
                folio_engine::LimitError {
                    what: "grammar bytes",
                    limit: max,
                    value: g.len(),
                },
            ));
        }
        let lark = folio_engine::gbnf_to_lark(g)
            .map_err(|e| ApiError::param(name, format!("not a valid GBNF grammar: {e}")))?;
        Ok(Constraint::Lark(lark))
    } else {
        Ok(Constraint::Lark(g.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_json(v: Value) -> Result<Option<Structured>, ApiError> {
        let o = v.as_object().unwrap().clone();
        parse(&Fields::new(&o))
    }

    #[test]
    fn every_field_maps_to_its_constraint() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        // Strict reading: the object is closed.
        let closed = crate::strict_schema::strict(schema.clone());
        assert_eq!(closed["additionalProperties"], false);
        let cases = [
            (json!({"response_format": {"type": "text"}}), None),
            (
                json!({"response_format": {"type": "json_object"}}),
                Some(("response_format", Constraint::JsonObject)),
            ),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}}}),
                Some(("response_format", Constraint::JsonSchema(closed.clone()))),
            ),
            // `strict: false` (OpenAI's default) keeps JSON Schema's defaults.
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": false}}}),
                Some(("response_format", Constraint::JsonSchema(schema.clone()))),
            ),
            (
                json!({"structured_outputs": {"json": schema}}),
                Some((
                    "structured_outputs.json",
                    Constraint::JsonSchema(closed.clone()),
                )),
            ),
            (
                json!({"structured_outputs": {"regex": "[0-9]+"}}),
                Some((
                    "structured_outputs.regex",
                    Constraint::Regex("[0-9]+".into()),
                )),
            ),
            (
                json!({"structured_outputs": {"choice": ["a", "b"]}}),
                Some((
                    "structured_outputs.choice",
                    Constraint::Choice(vec!["a".into(), "b".into()]),
                )),
            ),
            (
                json!({"guided_json": schema.to_string()}),
                Some(("guided_json", Constraint::JsonSchema(closed.clone()))),
            ),
            (
                json!({"guided_grammar": "start: \"x\""}),
                Some(("guided_grammar", Constraint::Lark("start: \"x\"".into()))),
            ),
            (
                json!({"json_schema": schema}),
                Some(("json_schema", Constraint::JsonSchema(closed.clone()))),
            ),
        ];
        for (body, want) in cases {
            let got = parse_json(body.clone()).unwrap();
            let got = got.map(|s| (s.field, s.constraint));
            let want = want.map(|(f, c)| (f.to_string(), c));
            assert_eq!(got, want, "{body}");
        }
        let g = parse_json(json!({"grammar": "root ::= \"yes\" | \"no\""}))
            .unwrap()
            .unwrap();
        assert_eq!(g.field, "grammar");
        assert!(matches!(g.constraint, Constraint::Lark(l) if l.contains("g_root")));
    }

    #[test]
    fn errors_name_the_fields() {
        let two =
            parse_json(json!({"response_format": {"type": "json_object"}, "guided_regex": "a"}))
                .unwrap_err();
        assert!(
            two.message.contains("response_format and guided_regex"),
            "{}",
            two.message
        );
        let two =
            parse_json(json!({"structured_outputs": {"regex": "a", "choice": ["b"]}})).unwrap_err();
        assert!(two
            .message
            .contains("structured_outputs.regex and structured_outputs.choice"));
        for (body, field) in [
            (
                json!({"response_format": {"type": "xml"}}),
                "response_format.type",
            ),
            (
                json!({"response_format": {"type": "json_schema"}}),
                "response_format.json_schema",
            ),
            (json!({"response_format": "json"}), "response_format"),
            (json!({"guided_choice": []}), "guided_choice"),
            (json!({"guided_choice": ["a", 3]}), "guided_choice[1]"),
            (json!({"guided_json": "{not json"}), "guided_json"),
            (json!({"guided_regex": 5}), "guided_regex"),
            (json!({"grammar": "root = x"}), "grammar"),
        ] {
            let e = parse_json(body.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{body}: {}", e.message);
        }
    }
}

//! OpenAI's strict-mode reading of a JSON schema: an object schema that does not say
//! `additionalProperties` allows no keys beyond its `properties` (and `patternProperties`).
//! Unbounded scalars get bounds too: a string without `maxLength` (or `pattern`, `format`,
//! `enum`, `const`) at most [`MAX_STRING_CHARS`] characters, an integer without bounds
//! within ±(2^53 − 1), the range JSON parsers read exactly (RFC 7493, I-JSON). A small
//! model at temperature 0 otherwise repeats a string's words or an integer's digits until
//! `max_tokens` cuts the JSON off unterminated. A bounded integer costs llguidance lexer
//! states for each property that holds one: past [`MAX_BOUNDED_INTEGERS`] of them (a
//! schema of thousands of integer properties no longer compiles) they stay unbounded.
//!
//! JSON Schema's own default is "any other key, of any value": a small model given
//! `{"properties": {"name": …}}` then adds keys of its own, or nests objects until it is
//! cut off. OpenAI's `strict: true` and vLLM's and llama.cpp's schema compilers close
//! such objects; folio does the same before handing the schema to llguidance, except
//! where a client asked for JSON Schema's defaults (`strict: false`).

use serde_json::{Map, Value};

/// Longest string a strict schema allows where it sets no bound of its own.
pub const MAX_STRING_CHARS: u64 = 512;
/// Largest integer JSON parsers read exactly (2^53 − 1).
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// Most integer schemas a strict schema bounds.
pub const MAX_BOUNDED_INTEGERS: usize = 64;

/// Keywords whose value is one subschema.
const ONE: [&str; 5] = [
    "items",
    "additionalProperties",
    "additionalItems",
    "not",
    "contains",
];
/// Keywords whose value is a list of subschemas (`allOf` apart: see [`close`]).
const LIST: [&str; 4] = ["anyOf", "oneOf", "prefixItems", "items"];
/// Keywords whose value maps names to subschemas.
const MAP: [&str; 5] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// `schema` with every object schema that does not set `additionalProperties` closed
/// (`"additionalProperties": false`), and unbounded strings and integers bounded, at any
/// depth: properties, items, `anyOf`/`oneOf` branches and `$defs`. The branches of an
/// `allOf` are not closed themselves (each would refuse the others' keys) but what they
/// contain is.
pub fn strict(mut schema: Value) -> Value {
    let ints = free_integers(&schema) <= MAX_BOUNDED_INTEGERS;
    walk(&mut schema, true, ints);
    schema
}

fn walk(v: &mut Value, close_here: bool, ints: bool) {
    let Value::Object(o) = v else { return };
    if close_here && is_object_schema(o) && !o.contains_key("additionalProperties") {
        o.insert("additionalProperties".into(), Value::Bool(false));
    }
    bound_scalars(o, ints);
    for k in ONE {
        if let Some(s) = o.get_mut(k) {
            walk(s, true, ints);
        }
    }
    for k in LIST {
        if let Some(Value::Array(a)) = o.get_mut(k) {
            a.iter_mut().for_each(|s| walk(s, true, ints));
        }
    }
    for k in MAP {
        if let Some(Value::Object(m)) = o.get_mut(k) {
            m.values_mut().for_each(|s| walk(s, true, ints));
        }
    }
    if let Some(Value::Array(a)) = o.get_mut("allOf") {
        a.iter_mut().for_each(|s| walk(s, false, ints));
    }
}

/// How many objects anywhere in `v` are integer schemas without bounds.
fn free_integers(v: &Value) -> usize {
    match v {
        Value::Object(o) => {
            let own = has_type(o, "integer")
                && !["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]
                    .iter()
                    .any(|k| o.contains_key(*k));
            usize::from(own) + o.values().map(free_integers).sum::<usize>()
        }
        Value::Array(a) => a.iter().map(free_integers).sum(),
        _ => 0,
    }
}

/// Bounds for a string or integer schema that has none.
fn bound_scalars(o: &mut Map<String, Value>, ints: bool) {
    let free = ["enum", "const", "pattern", "format"]
        .iter()
        .all(|k| !o.contains_key(*k));
    if free && has_type(o, "string") && !o.contains_key("maxLength") {
        let min = o.get("minLength").and_then(Value::as_u64).unwrap_or(0);
        o.insert("maxLength".into(), MAX_STRING_CHARS.max(min).into());
    }
    if ints && free && has_type(o, "integer") && !has_type(o, "number") {
        if !o.contains_key("minimum") && !o.contains_key("exclusiveMinimum") {
            o.insert("minimum".into(), (-MAX_SAFE_INTEGER).into());
        }
        if !o.contains_key("maximum") && !o.contains_key("exclusiveMaximum") {
            o.insert("maximum".into(), MAX_SAFE_INTEGER.into());
        }
    }
}

/// `type` is or includes `t`.
fn has_type(o: &Map<String, Value>, t: &str) -> bool {
    match o.get("type") {
        Some(Value::String(s)) => s == t,
        Some(Value::Array(ts)) => ts.iter().any(|x| x == t),
        _ => false,
    }
}

/// An object schema: `type` is or includes `"object"`, or it lists `properties`.
fn is_object_schema(o: &Map<String, Value>) -> bool {
    has_type(o, "object") || o.contains_key("properties")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_close_at_every_depth_unless_they_say_otherwise() {
        let s = json!({
            "type": "object",
            "properties": {
                "a": {"type": "object", "properties": {"b": {"type": "string"}, "n": {"type": ["integer", "null"]}}},
                "open": {"type": "object", "additionalProperties": true},
                "list": {"type": "array", "items": {"properties": {"x": {}}}},
                "either": {"anyOf": [{"type": "object"}, {"type": "null"}]},
                "ref": {"$ref": "#/$defs/d"}
            },
            "$defs": {"d": {"type": ["object", "null"]}},
            "allOf": [{"properties": {"p": {"type": "object"}}}, {"required": ["p"]}]
        });
        assert_eq!(
            strict(s),
            json!({
                "type": "object",
                "properties": {
                    "a": {"type": "object", "properties": {"b": {"type": "string", "maxLength": 512}, "n": {"type": ["integer", "null"], "minimum": -9007199254740991i64, "maximum": 9007199254740991i64}}, "additionalProperties": false},
                    "open": {"type": "object", "additionalProperties": true},
                    "list": {"type": "array", "items": {"properties": {"x": {}}, "additionalProperties": false}},
                    "either": {"anyOf": [{"type": "object", "additionalProperties": false}, {"type": "null"}]},
                    "ref": {"$ref": "#/$defs/d"}
                },
                "$defs": {"d": {"type": ["object", "null"], "additionalProperties": false}},
                "allOf": [{"properties": {"p": {"type": "object", "additionalProperties": false}}}, {"required": ["p"]}],
                "additionalProperties": false
            })
        );
        // Past the integer budget, integers stay unbounded (strings are still bounded).
        let many: serde_json::Map<String, Value> = (0..=MAX_BOUNDED_INTEGERS)
            .map(|i| (format!("p{i}"), json!({"type": "integer"})))
            .collect();
        let s = strict(json!({"type": "object", "properties": many}));
        assert_eq!(s["properties"]["p0"], json!({"type": "integer"}));
        // Bounded or constrained scalars, other schemas and booleans stay as they are.
        for s in [
            json!({"type": "string", "maxLength": 3}),
            json!({"type": "string", "format": "date"}),
            json!({"type": "string", "enum": ["a"]}),
            json!({"type": "integer", "minimum": 0, "maximum": 10}),
            json!({"type": "number"}),
            json!(true),
            json!({}),
        ] {
            assert_eq!(strict(s.clone()), s);
        }
    }
}

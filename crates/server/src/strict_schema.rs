//! OpenAI's strict-mode reading of a JSON schema: an object schema that does not say
//! `additionalProperties` allows no keys beyond its `properties` (and `patternProperties`).
//!
//! JSON Schema's own default is "any other key, of any value": a small model given
//! `{"properties": {"name": …}}` then adds keys of its own, or nests objects until it is
//! cut off. OpenAI's `strict: true` and vLLM's and llama.cpp's schema compilers close
//! such objects; folio does the same before handing the schema to llguidance, except
//! where a client asked for JSON Schema's defaults (`strict: false`).

use serde_json::{Map, Value};

/// Keywords whose value is one subschema.
const ONE: [&str; 5] = ["items", "additionalProperties", "additionalItems", "not", "contains"];
/// Keywords whose value is a list of subschemas (`allOf` apart: see [`close`]).
const LIST: [&str; 4] = ["anyOf", "oneOf", "prefixItems", "items"];
/// Keywords whose value maps names to subschemas.
const MAP: [&str; 5] = ["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"];

/// `schema` with every object schema that does not set `additionalProperties` closed
/// (`"additionalProperties": false`), at any depth: properties, items, `anyOf`/`oneOf`
/// branches and `$defs`. The branches of an `allOf` are not closed themselves (each
/// would refuse the others' keys) but what they contain is.
pub fn close(mut schema: Value) -> Value {
    walk(&mut schema, true);
    schema
}

fn walk(v: &mut Value, close_here: bool) {
    let Value::Object(o) = v else { return };
    if close_here && is_object_schema(o) && !o.contains_key("additionalProperties") {
        o.insert("additionalProperties".into(), Value::Bool(false));
    }
    for k in ONE {
        if let Some(s) = o.get_mut(k) {
            walk(s, true);
        }
    }
    for k in LIST {
        if let Some(Value::Array(a)) = o.get_mut(k) {
            a.iter_mut().for_each(|s| walk(s, true));
        }
    }
    for k in MAP {
        if let Some(Value::Object(m)) = o.get_mut(k) {
            m.values_mut().for_each(|s| walk(s, true));
        }
    }
    if let Some(Value::Array(a)) = o.get_mut("allOf") {
        a.iter_mut().for_each(|s| walk(s, false));
    }
}

/// An object schema: `type` is or includes `"object"`, or it lists `properties`.
fn is_object_schema(o: &Map<String, Value>) -> bool {
    let typed = match o.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => false,
    };
    typed || o.contains_key("properties")
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
                "a": {"type": "object", "properties": {"b": {"type": "string"}}},
                "open": {"type": "object", "additionalProperties": true},
                "list": {"type": "array", "items": {"properties": {"x": {}}}},
                "either": {"anyOf": [{"type": "object"}, {"type": "null"}]},
                "ref": {"$ref": "#/$defs/d"}
            },
            "$defs": {"d": {"type": ["object", "null"]}},
            "allOf": [{"properties": {"p": {"type": "object"}}}, {"required": ["p"]}]
        });
        assert_eq!(
            close(s),
            json!({
                "type": "object",
                "properties": {
                    "a": {"type": "object", "properties": {"b": {"type": "string"}}, "additionalProperties": false},
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
        // Not object schemas, and booleans, stay as they are.
        for s in [json!({"type": "string"}), json!(true), json!({})] {
            assert_eq!(close(s.clone()), s);
        }
    }
}

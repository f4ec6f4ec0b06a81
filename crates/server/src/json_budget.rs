//! Parsing a body into a `serde_json::Value` with a cap on what it may hold.
//!
//! A `Value` costs 32 bytes, and an array's vector up to twice that while it grows, for
//! as little as two bytes of text (`1,`): a 31.5 MB body of `"prompt": [1, 1, …]` took
//! the process to 1.3 GB, far past the prompt-memory bound in the README, before the
//! prompt's length was ever compared with the context. Here the parse stops as soon as
//!
//! - one array or object holds more than [`JsonBudget::max_items`] items, the larger of the
//!   context length and the vocabulary: no field takes more (a token prompt longer than
//!   the context cannot run, `logit_bias` names at most every token), so a huge token
//!   array is refused after materialising no more than that; or
//! - the whole body holds more than [`JsonBudget::max_values`] values,
//!   `128 × max_model_len` (at least 65,536): a batch of 32 full-context token prompts
//!   fits four times over, and its parse costs at most 8 KiB × `max_model_len`, inside
//!   the per-core term of the bound (`130 × 81 × max_model_len`).

use crate::error::ApiError;
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::cell::{Cell, RefCell};
use std::fmt;

/// The caps of one parse.
#[derive(Clone, Copy, Debug)]
pub struct JsonBudget {
    /// Most items in one array or object.
    pub max_items: usize,
    /// Most values in the whole body.
    pub max_values: usize,
    /// For the messages: the context length, vocabulary size and `max_model_len`.
    pub context: usize,
    pub vocab: usize,
    pub max_model_len: usize,
}

impl JsonBudget {
    pub fn new(context: usize, vocab: usize, max_model_len: usize) -> JsonBudget {
        JsonBudget {
            max_items: context.max(vocab),
            max_values: (128 * max_model_len).max(1 << 16),
            context,
            vocab,
            max_model_len,
        }
    }
}

/// Which cap a parse ran into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Overrun {
    Items,
    Values,
}

/// The running count of one parse.
struct Count {
    budget: JsonBudget,
    values: Cell<usize>,
    /// The top-level field being read (for the message).
    field: RefCell<Option<String>>,
    overrun: Cell<Option<Overrun>>,
}

impl Count {
    fn take<E: serde::de::Error>(&self) -> Result<(), E> {
        let n = self.values.get() + 1;
        self.values.set(n);
        if n > self.budget.max_values {
            return Err(self.fail(Overrun::Values));
        }
        Ok(())
    }

    fn item<E: serde::de::Error>(&self, len: usize) -> Result<(), E> {
        if len >= self.budget.max_items {
            return Err(self.fail(Overrun::Items));
        }
        Ok(())
    }

    fn fail<E: serde::de::Error>(&self, what: Overrun) -> E {
        self.overrun.set(Some(what));
        E::custom("over the body's value budget")
    }

    fn error(&self, what: Overrun) -> ApiError {
        let b = &self.budget;
        let field = self.field.borrow().clone();
        let detail = match what {
            Overrun::Items => format!(
                "an array or object of more than {} items, the most any field takes (the context holds {} tokens, the vocabulary has {} ids)",
                b.max_items, b.context, b.vocab
            ),
            Overrun::Values => format!(
                "the body holds more than {} JSON values, the most a request may carry (128 x max_model_len {})",
                b.max_values, b.max_model_len
            ),
        };
        match field {
            Some(f) => ApiError::param(f, detail),
            None => ApiError::bad_request(format!("request body: {detail}"), "invalid_parameter"),
        }
    }
}

/// Parses `bytes` as one JSON object within `budget`.
pub fn parse_object(bytes: &[u8], budget: JsonBudget) -> Result<Map<String, Value>, ApiError> {
    let count = Count {
        budget,
        values: Cell::new(0),
        field: RefCell::new(None),
        overrun: Cell::new(None),
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Seed {
        count: &count,
        top: true,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    match parsed {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(ApiError::bad_request(
            format!(
                "request body: expected a JSON object, got {}",
                crate::fields::type_name(&other)
            ),
            "invalid_json",
        )),
        Err(e) => Err(match count.overrun.get() {
            Some(what) => count.error(what),
            None => {
                ApiError::bad_request(format!("request body: invalid JSON: {e}"), "invalid_json")
            }
        }),
    }
}

/// Builds a `Value` as serde_json's own visitor does, counting as it goes.
#[derive(Clone, Copy)]
struct Seed<'a> {
    count: &'a Count,
    /// The body itself: its keys name the field in messages.
    top: bool,
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.count.take()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.count.take()?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.count.take()?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.count.take()?;
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.count.take()?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.count.take()?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.count.take()?;
        Ok(Value::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.count.take()?;
        let inner = Seed {
            count: self.count,
            top: false,
        };
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(inner)? {
            self.count.item(items.len())?;
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.count.take()?;
        let inner = Seed {
            count: self.count,
            top: false,
        };
        let mut m = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if self.top {
                *self.count.field.borrow_mut() = Some(k.clone());
            }
            self.count.item(m.len())?;
            let v = map.next_value_seed(inner)?;
            m.insert(k, v);
        }
        Ok(Value::Object(m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> JsonBudget {
        JsonBudget {
            max_items: 8,
            max_values: 20,
            context: 8,
            vocab: 5,
            max_model_len: 8,
        }
    }

    #[test]
    fn parses_within_the_budget() {
        let m = parse_object(
            br#"{"a": [1, -2, 3.5, "x", null, true], "b": {"c": []}}"#,
            budget(),
        )
        .unwrap();
        assert_eq!(m["a"][2], 3.5);
        assert_eq!(m["b"]["c"], serde_json::json!([]));
    }

    #[test]
    fn a_long_array_names_its_field_and_the_limit() {
        let e = parse_object(br#"{"n": 1, "prompt": [1,1,1,1,1,1,1,1,1]}"#, budget()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("prompt"));
        assert!(e.message.contains("more than 8 items"), "{}", e.message);
    }

    #[test]
    fn too_many_values_in_all() {
        let e = parse_object(
            br#"{"p": [[1,2,3,4],[1,2,3,4],[1,2,3,4],[1,2,3,4],[1]]}"#,
            budget(),
        )
        .unwrap_err();
        assert!(
            e.message.contains("more than 20 JSON values"),
            "{}",
            e.message
        );
    }

    #[test]
    fn garbage_is_still_invalid_json() {
        let e = parse_object(br#"{"a": [1,"#, budget()).unwrap_err();
        assert_eq!(e.code, "invalid_json");
        let e = parse_object(br#"{"a": 1} x"#, budget()).unwrap_err();
        assert_eq!(e.code, "invalid_json");
    }
}

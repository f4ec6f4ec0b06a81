//! Typed reads of request fields with errors that name the field, the limit and the value.
//!
//! `null` counts as absent everywhere (OpenAI clients send explicit nulls).

use crate::error::ApiError;
use serde_json::{Map, Value};

/// The fields of one JSON object.
pub struct Fields<'a> {
    obj: &'a Map<String, Value>,
}

/// "a string", "a number", … for messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A short rendering of a received value for error messages (long values are cut).
pub fn show(v: &Value) -> String {
    let s = match v {
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(o) => format!("an object with {} keys", o.len()),
        Value::String(s) => format!("string {:?}", truncate(s, 64)),
        other => other.to_string(),
    };
    truncate(&s, 80).to_string()
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `x` rendered without a trailing ".0" for whole numbers.
fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

impl<'a> Fields<'a> {
    pub fn new(obj: &'a Map<String, Value>) -> Fields<'a> {
        Fields { obj }
    }

    /// The value of `name`, `None` when absent or null.
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.obj.get(name).filter(|v| !v.is_null())
    }

    pub fn bool(&self, name: &str, default: bool) -> Result<bool, ApiError> {
        match self.get(name) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(ApiError::param(
                name,
                format!("must be a boolean, got {}", show(v)),
            )),
        }
    }

    pub fn str(&self, name: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(ApiError::param(
                name,
                format!("must be a string, got {}", show(v)),
            )),
        }
    }

    /// A number in `[lo, hi]` (or `(lo, hi]` when `lo_open`).
    pub fn number(
        &self,
        name: &str,
        lo: f64,
        hi: f64,
        lo_open: bool,
    ) -> Result<Option<f64>, ApiError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let x = v
            .as_f64()
            .ok_or_else(|| ApiError::param(name, format!("must be a number, got {}", show(v))))?;
        let ok = if lo_open { x > lo } else { x >= lo } && x <= hi;
        if !ok {
            let open = if lo_open { "(" } else { "[" };
            return Err(ApiError::param(
                name,
                format!(
                    "must be in {open}{}, {}], got {}",
                    num(lo),
                    num(hi),
                    show(v)
                ),
            ));
        }
        Ok(Some(x))
    }

    /// An integer in `[lo, hi]`.
    pub fn int(&self, name: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let range = || format!("must be an integer in [{lo}, {hi}], got {}", show(v));
        let x = match v {
            Value::Number(n) => match n.as_i64() {
                Some(x) => x,
                // Whole floats ("max_tokens": 16.0) are accepted, as Python clients send them.
                None => match n.as_f64() {
                    Some(f) if f.fract() == 0.0 && f.abs() < 9e15 => f as i64,
                    _ => return Err(ApiError::param(name, range())),
                },
            },
            _ => return Err(ApiError::param(name, range())),
        };
        if x < lo || x > hi {
            return Err(ApiError::param(name, range()));
        }
        Ok(Some(x))
    }

    /// A string or an array of strings, at most `max_items` of at most `max_len` bytes each.
    pub fn strings(
        &self,
        name: &str,
        max_items: usize,
        max_len: usize,
    ) -> Result<Vec<String>, ApiError> {
        let items: Vec<&Value> = match self.get(name) {
            None => return Ok(Vec::new()),
            Some(Value::String(s)) => return check_str(name, s, max_len).map(|s| vec![s]),
            Some(Value::Array(a)) => a.iter().collect(),
            Some(v) => {
                return Err(ApiError::param(
                    name,
                    format!("must be a string or an array of strings, got {}", show(v)),
                ))
            }
        };
        if items.len() > max_items {
            return Err(ApiError::param(
                name,
                format!("at most {max_items} items, got {}", items.len()),
            ));
        }
        items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => check_str(&format!("{name}[{i}]"), s, max_len),
                v => Err(ApiError::param(
                    format!("{name}[{i}]"),
                    format!("must be a string, got {}", show(v)),
                )),
            })
            .collect()
    }

    /// Rejects a field folio does not implement unless it holds its neutral value.
    pub fn unsupported(
        &self,
        name: &str,
        neutral: impl Fn(&Value) -> bool,
    ) -> Result<(), ApiError> {
        match self.get(name) {
            Some(v) if !neutral(v) => Err(ApiError::param(
                name,
                format!("not supported by folio, got {}", show(v)),
            )),
            _ => Ok(()),
        }
    }
}

fn check_str(name: &str, s: &str, max_len: usize) -> Result<String, ApiError> {
    if s.is_empty() {
        return Err(ApiError::param(name, "must not be empty"));
    }
    if s.len() > max_len {
        return Err(ApiError::param(
            name,
            format!("at most {max_len} bytes, got {}", s.len()),
        ));
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn numbers_name_field_limit_and_value() {
        let o = obj(json!({"temperature": 5, "top_p": 0, "t": "hot", "x": null}));
        let f = Fields::new(&o);
        assert_eq!(
            f.number("temperature", 0.0, 2.0, false)
                .unwrap_err()
                .message,
            "temperature: must be in [0, 2], got 5"
        );
        assert_eq!(
            f.number("top_p", 0.0, 1.0, true).unwrap_err().message,
            "top_p: must be in (0, 1], got 0"
        );
        assert_eq!(
            f.number("t", 0.0, 1.0, false).unwrap_err().message,
            "t: must be a number, got string \"hot\""
        );
        assert_eq!(f.number("x", 0.0, 1.0, false).unwrap(), None);
        assert_eq!(f.number("missing", 0.0, 1.0, false).unwrap(), None);
    }

    #[test]
    fn integers_accept_whole_floats_and_reject_huge() {
        let o =
            obj(json!({"a": 16.0, "b": 1.5, "c": 1e300, "d": 18446744073709551615u64, "e": -1}));
        let f = Fields::new(&o);
        assert_eq!(f.int("a", 1, 100).unwrap(), Some(16));
        assert_eq!(
            f.int("b", 1, 100).unwrap_err().message,
            "b: must be an integer in [1, 100], got 1.5"
        );
        assert_eq!(
            f.int("c", 1, 100).unwrap_err().message,
            "c: must be an integer in [1, 100], got 1e+300"
        );
        assert_eq!(
            f.int("d", 1, 100).unwrap_err().message,
            "d: must be an integer in [1, 100], got 18446744073709551615"
        );
        assert_eq!(
            f.int("e", 1, 100).unwrap_err().message,
            "e: must be an integer in [1, 100], got -1"
        );
    }

    #[test]
    fn strings_bound_count_and_length() {
        let o = obj(
            json!({"s": "x", "a": ["a", "b"], "n": [1], "e": [""], "many": ["a","b","c"], "w": 3}),
        );
        let f = Fields::new(&o);
        assert_eq!(f.strings("s", 2, 4).unwrap(), vec!["x"]);
        assert_eq!(f.strings("a", 2, 4).unwrap(), vec!["a", "b"]);
        assert_eq!(
            f.strings("n", 2, 4).unwrap_err().message,
            "n[0]: must be a string, got 1"
        );
        assert_eq!(
            f.strings("e", 2, 4).unwrap_err().message,
            "e[0]: must not be empty"
        );
        assert_eq!(
            f.strings("many", 2, 4).unwrap_err().message,
            "many: at most 2 items, got 3"
        );
        assert_eq!(
            f.strings("w", 2, 4).unwrap_err().message,
            "w: must be a string or an array of strings, got 3"
        );
        assert!(f.strings("absent", 2, 4).unwrap().is_empty());
    }

    #[test]
    fn long_values_are_cut_in_messages() {
        let long = "é".repeat(1000);
        let o = obj(json!({ "b": long }));
        let m = Fields::new(&o).bool("b", false).unwrap_err().message;
        assert!(m.starts_with("b: must be a boolean, got string \"é"), "{m}");
        assert!(m.len() < 120, "{m}");
    }
}

//! JSON read a piece at a time, for tool-call arguments that stream as they are generated.
//!
//! A call's `arguments` go out as the model wrote them with the whitespace outside strings
//! dropped (the text `serde_json` writes for the same value, key order kept). The
//! minified text of a prefix of a value is a prefix of the minified text of the whole
//! value, so the fragments streamed while a call is generated concatenate to exactly the
//! arguments of the finished call.

/// One JSON value scanned from the start of a text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan {
    /// The value's text so far, whitespace outside strings removed.
    pub minified: String,
    /// Byte offset just past the value, once it is complete.
    pub end: Option<usize>,
}

/// Scans the JSON value at the start of `text` (leading whitespace skipped) as far as it
/// goes. A scalar at the top ends at whitespace or a delimiter; an object, array or string
/// at its closing character.
pub fn scan_value(text: &str) -> Scan {
    let mut minified = String::new();
    let (mut in_str, mut esc, mut depth) = (false, false, 0usize);
    for (i, c) in text.char_indices() {
        if in_str {
            minified.push(c);
            if esc {
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == '"' {
                in_str = false;
                if depth == 0 {
                    return done(minified, i + 1);
                }
            }
            continue;
        }
        match c {
            ' ' | '\n' | '\r' | '\t' => {
                if depth == 0 && !minified.is_empty() {
                    return done(minified, i);
                }
            }
            '"' => {
                minified.push(c);
                in_str = true;
            }
            '{' | '[' => {
                minified.push(c);
                depth += 1;
            }
            '}' | ']' | ',' if depth == 0 => return done(minified, i),
            '}' | ']' => {
                minified.push(c);
                depth -= 1;
                if depth == 0 {
                    return done(minified, i + 1);
                }
            }
            _ => minified.push(c),
        }
    }
    Scan {
        minified,
        end: None,
    }
}

fn done(minified: String, end: usize) -> Scan {
    Scan {
        minified,
        end: Some(end),
    }
}

/// A call object `{"name": …, "arguments"|"parameters": …}` read as far as it goes, keys in
/// any order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallScan {
    /// The name, once its string is complete.
    pub name: Option<String>,
    /// The arguments' minified text so far (an object or array), or the content of a
    /// string holding them once that string is complete.
    pub args: String,
    /// The arguments are complete.
    pub args_done: bool,
    /// The arguments came as a JSON string: nothing of them can stream before it ends.
    pub args_in_string: bool,
    /// Byte offset just past the object's `}`, once it is complete.
    pub end: Option<usize>,
}

/// Scans the call object at the start of `text` (after blanks).
pub fn scan_call(text: &str) -> CallScan {
    let mut out = CallScan::default();
    let lead = text.len() - text.trim_start().len();
    let mut pos = lead;
    if !text[pos..].starts_with('{') {
        return out;
    }
    pos += 1;
    loop {
        pos = skip_blank(text, pos);
        let rest = &text[pos..];
        if rest.starts_with('}') {
            out.end = Some(pos + 1);
            return out;
        }
        if rest.starts_with(',') {
            pos += 1;
            continue;
        }
        // A key.
        let key = scan_value(rest);
        let Some(kend) = key.end else { return out };
        let Ok(key) = serde_json::from_str::<String>(&key.minified) else {
            return out;
        };
        pos = skip_blank(text, pos + kend);
        if !text[pos..].starts_with(':') {
            return out;
        }
        pos = skip_blank(text, pos + 1);
        let v = scan_value(&text[pos..]);
        match key.as_str() {
            "name" if v.end.is_some() => {
                out.name = serde_json::from_str::<String>(&v.minified).ok();
            }
            "arguments" | "parameters" => {
                if v.minified.starts_with('"') {
                    out.args_in_string = true;
                    if v.end.is_some() {
                        out.args = serde_json::from_str::<String>(&v.minified).unwrap_or_default();
                    }
                } else {
                    out.args = v.minified;
                }
                out.args_done = v.end.is_some();
            }
            _ => {}
        }
        let Some(vend) = v.end else { return out };
        pos += vend;
    }
}

fn skip_blank(text: &str, pos: usize) -> usize {
    pos + (text[pos..].len() - text[pos..].trim_start().len())
}

/// The elements of the JSON array at the start of `text` (after blanks), each as its
/// text, the last maybe incomplete; `None` when `text` does not start an array.
pub fn array_elements(text: &str) -> Option<Vec<&str>> {
    let mut pos = skip_blank(text, 0);
    if !text[pos..].starts_with('[') {
        return None;
    }
    pos += 1;
    let mut out = Vec::new();
    loop {
        pos = skip_blank(text, pos);
        let rest = &text[pos..];
        if rest.is_empty() || rest.starts_with(']') {
            return Some(out);
        }
        if rest.starts_with(',') {
            pos += 1;
            continue;
        }
        match scan_value(rest).end {
            Some(e) => {
                out.push(&rest[..e]);
                pos += e;
            }
            None => {
                out.push(rest);
                return Some(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_scan_to_their_end_without_blanks() {
        let s = scan_value(" {\"a\": [1, \"x }\\\" y\"], \"b\": {}} tail");
        assert_eq!(s.minified, "{\"a\":[1,\"x }\\\" y\"],\"b\":{}}");
        assert_eq!(s.end, Some(31));
        assert_eq!(scan_value("12, 3"), done("12".into(), 2));
        assert_eq!(
            scan_value("{\"a\": 1"),
            Scan {
                minified: "{\"a\":1".into(),
                end: None
            }
        );
        // Every prefix's minified text is a prefix of the whole one.
        let whole = "{\"k\": [true, null, \"v w\"], \"n\": -1.5e3 }";
        let all = scan_value(whole).minified;
        for i in 0..=whole.len() {
            assert!(all.starts_with(&scan_value(&whole[..i]).minified), "{i}");
        }
    }

    #[test]
    fn call_objects_in_any_key_order() {
        let c = scan_call("{\"arguments\": {\"x\": 1}, \"name\": \"f\"} rest");
        assert_eq!(c.name.as_deref(), Some("f"));
        assert_eq!((c.args.as_str(), c.args_done), ("{\"x\":1}", true));
        assert_eq!(c.end, Some(36));
        let c = scan_call("{\"name\": \"f\", \"arguments\": {\"x\": [1, 2");
        assert_eq!(c.name.as_deref(), Some("f"));
        assert_eq!((c.args.as_str(), c.args_done), ("{\"x\":[1,2", false));
        let c = scan_call("{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": 2}\"}");
        assert!(c.args_in_string);
        assert_eq!(c.args, "{\"q\": 2}");
        assert_eq!(scan_call("{\"na").name, None);
        assert_eq!(
            array_elements("[{\"a\": 1}, {\"b\""),
            Some(vec!["{\"a\": 1}", "{\"b\""])
        );
    }
}

//! A lazily triggered constraint for tool calls the model chooses to make
//! (`tool_choice: "auto"`): free text until the chat format's call opener (`<tool_call>`
//! for Hermes and Qwen), then one call object `{"name": …, "arguments": …}` valid under
//! the call schema, then the closer, then free text again (and more calls).
//!
//! It is one Lark grammar for llguidance: the text before a call is a lazy lexeme that
//! ends at the first opener, the text after the last call one that never contains it. So
//! the mask allows everything until the model writes the opener, and a strict tool's
//! arguments are constrained from that token on, the same matcher, clones and rollback as
//! any other constraint.

use serde_json::Value;

/// The grammar of calls opened by `open` and closed by `close`, each matching
/// `call_schema` (JSON laid out as folio lays out schemas), with free text around them.
pub fn lazy_calls(open: &str, close: &str, call_schema: &Value) -> String {
    let schema = crate::constraint::with_layout(call_schema.clone());
    let open_rx = regex_escape(open);
    let close_lit = serde_json::to_string(close).expect("a string serializes");
    format!(
        "start: call* TEXT\n\
         call: before \"\\n\"? call_json \"\\n\"? {close_lit}\n\
         before[lazy]: /(?s:.*){open_rx}/\n\
         call_json: %json {schema}\n\
         TEXT: /(?s:.*)/ & ~/(?s:.*){open_rx}(?s:.*)/\n"
    )
}

/// `s` as a literal inside a Lark `/…/` regex.
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

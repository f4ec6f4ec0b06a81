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
/// An answer that starts with `{` or a ```` ```json ```` fence is one call as bare JSON,
/// as the tool parser reads it (models taught tags often write that instead).
pub fn lazy_calls(open: &str, close: &str, call_schema: &Value) -> String {
    let schema = crate::constraint::with_layout(call_schema.clone());
    let o = regex_escape(open);
    let close_lit = serde_json::to_string(close).expect("a string serializes");
    let bare = r"[ \t\n]*(\{|```json)(?s:.*)";
    format!(
        "start: first_call call* TEXT | FIRST_TEXT | LEAD? call_json END?\n\
         first_call: first_before \"\\n\"? call_json \"\\n\"? {close_lit}\n\
         call: before \"\\n\"? call_json \"\\n\"? {close_lit}\n\
         first_before[lazy]: /(?s:.*){o}/ & ~/{bare}/\n\
         before[lazy]: /(?s:.*){o}/\n\
         call_json: %json {schema}\n\
         FIRST_TEXT: /(?s:.*)/ & ~/(?s:.*){o}(?s:.*)/ & ~/{bare}/\n\
         TEXT: /(?s:.*)/ & ~/(?s:.*){o}(?s:.*)/\n\
         LEAD: /[ \\t\\n]*```json[ \\t]*\\n?/ | /[ \\t\\n]+/\n\
         END: /[ \\t\\n]*```[ \\t\\n]*/ | /[ \\t\\n]+/\n"
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

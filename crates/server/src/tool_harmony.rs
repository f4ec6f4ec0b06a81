//! GPT-OSS's harmony format read out of a completion: messages
//! `<|channel|>NAME[ to=functions.F][ <|constrain|>json]<|message|>BODY` ending in
//! `<|end|>`, `<|call|>` or `<|return|>`, the next one opened by `<|start|>assistant`. The
//! `analysis` channel is reasoning, `final` (and `commentary` without a recipient) is
//! content, and a message to `functions.F` is a call of `F` with its body as arguments.
//! A recipient may also stand in the header before `<|channel|>`.
//!
//! [`read`] reads a completion as far as it has been generated: the reasoning and content
//! it returns only grow as text is added (a possible marker at the end is held back), so
//! a stream sends their new tails.

use crate::tool_parse::{json_args, PartialCall};

const MESSAGE: &str = "<|message|>";
const CHANNEL: &str = "<|channel|>";
const ENDS: [&str; 4] = ["<|end|>", "<|call|>", "<|return|>", "<|start|>"];

/// A harmony completion, read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Harmony {
    pub reasoning: String,
    pub content: String,
    pub calls: Vec<PartialCall>,
}

/// Reads `text`; `done` when it is the whole completion (nothing held back).
pub fn read(text: &str, done: bool) -> Harmony {
    let mut out = Harmony::default();
    let mut rest = text;
    // Text before any header (a model not writing harmony) is content.
    let first = [rest.find(CHANNEL), rest.find("<|start|>")]
        .into_iter()
        .flatten()
        .min();
    let lead = match first {
        Some(i) => &rest[..i],
        None if done => rest,
        None => hold(rest, &[CHANNEL, "<|start|>"]),
    };
    out.content.push_str(lead);
    let Some(first) = first else { return out };
    rest = &rest[first..];
    loop {
        let Some(m) = rest.find(MESSAGE) else {
            return out;
        };
        let header = &rest[..m];
        let body_all = &rest[m + MESSAGE.len()..];
        let end = ENDS.iter().filter_map(|e| body_all.find(e)).min();
        let body = match end {
            Some(e) => &body_all[..e],
            None if done => body_all,
            None => hold(body_all, &ENDS),
        };
        let closed = end.is_some() || done;
        match recipient(header) {
            Some(f) => {
                let mut c = json_args(f, body);
                c.complete |= closed && c.args_started;
                out.calls.push(c);
            }
            None if channel(header) == Some("analysis") => out.reasoning.push_str(body),
            None => out.content.push_str(body),
        }
        let Some(e) = end else { return out };
        // Past the end marker to the next header (`<|start|>` is part of it).
        let after = &body_all[e..];
        rest = match ENDS.iter().find(|m| after.starts_with(*m)) {
            Some(&"<|start|>") | None => after,
            Some(m) => &after[m.len()..],
        };
    }
}

/// `text` without a tail that may still grow into one of `markers`.
fn hold<'a>(text: &'a str, markers: &[&str]) -> &'a str {
    let cut = markers
        .iter()
        .flat_map(|m| (1..m.len()).filter(|&k| text.ends_with(&m[..k])))
        .max()
        .unwrap_or(0);
    &text[..text.len() - cut]
}

/// `F` of a `to=functions.F` in a header.
fn recipient(header: &str) -> Option<&str> {
    let i = header.find("to=functions.")?;
    let name = &header[i + "to=functions.".len()..];
    let end = name
        .find(|c: char| c.is_whitespace() || c == '<')
        .unwrap_or(name.len());
    Some(&name[..end])
}

/// The channel's name in a header.
fn channel(header: &str) -> Option<&str> {
    let i = header.find(CHANNEL)?;
    let c = &header[i + CHANNEL.len()..];
    let end = c
        .find(|ch: char| ch.is_whitespace() || ch == '<')
        .unwrap_or(c.len());
    Some(&c[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";

    #[test]
    fn channels_become_reasoning_content_and_calls() {
        let h = read(TEXT, true);
        assert_eq!(h.reasoning, "User wants weather.");
        assert_eq!(h.content, "");
        assert_eq!(
            h.calls,
            vec![PartialCall {
                name: Some("get_weather".into()),
                args: "{\"city\":\"Paris\"}".into(),
                args_started: true,
                complete: true
            }]
        );
        let h = read("<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hi there.", true);
        assert_eq!(
            (h.reasoning.as_str(), h.content.as_str()),
            ("Easy.", "Hi there.")
        );
        assert!(h.calls.is_empty());
        // The recipient before the channel.
        let h = read("<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>", true);
        assert_eq!(h.calls[0].name.as_deref(), Some("f"));
        assert_eq!(h.calls[0].args, "{}");
    }

    #[test]
    fn prefixes_read_as_prefixes() {
        let whole = read(TEXT, true);
        for i in 0..=TEXT.len() {
            if !TEXT.is_char_boundary(i) {
                continue;
            }
            let h = read(&TEXT[..i], false);
            assert!(whole.reasoning.starts_with(&h.reasoning), "{i}: {h:?}");
            assert!(whole.content.starts_with(&h.content), "{i}: {h:?}");
            for (c, w) in h.calls.iter().zip(&whole.calls) {
                assert!(w.args.starts_with(&c.args), "{i}: {h:?}");
            }
        }
    }
}

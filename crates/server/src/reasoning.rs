//! The reasoning split (`--reasoning-parser`): a thinking model's `<think>…</think>` text
//! goes to `reasoning_content`, the rest stays `content`, as vLLM's reasoning parsers do.
//!
//! One [`Split`] reads a choice's text chunk by chunk; the non-streaming answer feeds the
//! whole text through the same code, so a stream and a collected answer split alike. A tag
//! may arrive cut across chunks (`"<thi"`, `"nk>"`): the tail of the text that could still
//! grow into the tag being looked for is held back until the next chunk (or the end)
//! decides it.
//!
//! The two parsers differ in where the text starts:
//! - `deepseek_r1`: in reasoning. DeepSeek-R1's (and Qwen3 thinking-2507's) chat templates
//!   put `<think>` into the prompt, so the output starts inside the thought and the first
//!   `</think>` ends it; a leading `<think>` the model writes anyway is dropped. Without a
//!   `</think>` (cut by `max_tokens`) everything is reasoning, as in vLLM.
//! - `qwen3`: in content. A `<think>` opens reasoning (Qwen3 writes it first when thinking
//!   is on), the first `</think>` after it closes it; text without `<think>` is all content
//!   (thinking off). An unclosed thought stays reasoning in both modes.
//!
//! After the thought ends, later tags are plain content.

/// Which model family's convention to follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parser {
    DeepSeekR1,
    Qwen3,
}

/// The tags both conventions use.
const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// The names `--reasoning-parser` accepts.
pub const NAMES: &str = "deepseek_r1, qwen3";

impl Parser {
    pub fn from_name(name: &str) -> Option<Parser> {
        match name {
            "deepseek_r1" => Some(Parser::DeepSeekR1),
            "qwen3" => Some(Parser::Qwen3),
            _ => None,
        }
    }
}

/// Where the split stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// deepseek_r1 before any text: a leading `<think>` is dropped, anything else is
    /// reasoning.
    Start,
    /// qwen3 before `<think>`: content, looking for the tag.
    BeforeThink,
    /// Inside the thought, looking for `</think>`.
    Thinking,
    /// The thought ended: everything is content.
    After,
}

/// Text of one chunk, split.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parts {
    pub reasoning: String,
    pub content: String,
}

impl Parts {
    pub fn is_empty(&self) -> bool {
        self.reasoning.is_empty() && self.content.is_empty()
    }
}

/// One choice's text being split.
#[derive(Clone, Debug)]
pub struct Split {
    state: State,
    /// Text received but not yet given out: a tail that may still be the start of a tag.
    held: String,
}

impl Split {
    pub fn new(p: Parser) -> Split {
        Split {
            state: match p {
                Parser::DeepSeekR1 => State::Start,
                Parser::Qwen3 => State::BeforeThink,
            },
            held: String::new(),
        }
    }

    /// Whether text arriving now belongs to the thought (for counting reasoning tokens).
    pub fn in_reasoning(&self) -> bool {
        matches!(self.state, State::Start | State::Thinking)
    }

    /// Adds `text` and returns what can be given out now.
    pub fn push(&mut self, text: &str) -> Parts {
        Parts::of(self.pieces(text))
    }

    /// Like [`Split::push`], as pieces in text order (qwen3 may write content before
    /// `<think>`, and one event may hold several tokens): `(is_reasoning, text)`, each
    /// non-empty.
    pub fn pieces(&mut self, text: &str) -> Vec<(bool, String)> {
        self.held.push_str(text);
        let mut out = Pieces::default();
        loop {
            let buf = std::mem::take(&mut self.held);
            match self.state {
                State::After => {
                    out.add(false, &buf);
                    return out.0;
                }
                State::Start => {
                    if let Some(rest) = buf.strip_prefix(OPEN) {
                        self.state = State::Thinking;
                        self.held = rest.to_string();
                    } else if OPEN.starts_with(buf.as_str()) {
                        // Still could be the leading tag (empty included).
                        self.held = buf;
                        return out.0;
                    } else {
                        self.state = State::Thinking;
                        self.held = buf;
                    }
                }
                State::BeforeThink | State::Thinking => {
                    let (tag, next) = if self.state == State::Thinking {
                        (CLOSE, State::After)
                    } else {
                        (OPEN, State::Thinking)
                    };
                    let reasoning = self.state == State::Thinking;
                    match buf.find(tag) {
                        Some(i) => {
                            out.add(reasoning, &buf[..i]);
                            self.state = next;
                            self.held = buf[i + tag.len()..].to_string();
                        }
                        None => {
                            let keep = partial_tag(&buf, tag);
                            out.add(reasoning, &buf[..buf.len() - keep]);
                            self.held = buf[buf.len() - keep..].to_string();
                            return out.0;
                        }
                    }
                }
            }
        }
    }

    /// The end of the text: whatever is held back goes out as what it is now.
    pub fn finish(&mut self) -> Parts {
        Parts::of(self.finish_pieces())
    }

    /// [`Split::finish`] as pieces.
    pub fn finish_pieces(&mut self) -> Vec<(bool, String)> {
        let held = std::mem::take(&mut self.held);
        let mut out = Pieces::default();
        out.add(self.in_reasoning(), &held);
        out.0
    }
}

/// Pieces in order, neighbours of one kind merged, empty ones dropped.
#[derive(Default)]
struct Pieces(Vec<(bool, String)>);

impl Pieces {
    fn add(&mut self, reasoning: bool, text: &str) {
        if text.is_empty() {
            return;
        }
        match self.0.last_mut() {
            Some((r, t)) if *r == reasoning => t.push_str(text),
            _ => self.0.push((reasoning, text.to_string())),
        }
    }
}

impl Parts {
    fn of(pieces: Vec<(bool, String)>) -> Parts {
        let mut p = Parts::default();
        for (reasoning, text) in pieces {
            match reasoning {
                true => p.reasoning.push_str(&text),
                false => p.content.push_str(&text),
            }
        }
        p
    }
}

/// Splits a whole text at once (non-streaming answers).
pub fn split(p: Parser, text: &str) -> Parts {
    let mut s = Split::new(p);
    let mut a = s.push(text);
    let b = s.finish();
    a.reasoning.push_str(&b.reasoning);
    a.content.push_str(&b.content);
    a
}

/// Moves the thought of every choice of a non-streaming chat response into
/// `message.reasoning_content` (null without one); `content` keeps the rest (null when
/// nothing is left, as vLLM answers).
pub fn split_response(v: &mut serde_json::Value, p: Parser) {
    use serde_json::Value;
    let Some(choices) = v.get_mut("choices").and_then(Value::as_array_mut) else {
        return;
    };
    for ch in choices {
        let msg = &mut ch["message"];
        let parts = split(p, msg["content"].as_str().unwrap_or(""));
        let or_null = |s: String| match s.is_empty() {
            true => Value::Null,
            false => Value::String(s),
        };
        msg["reasoning_content"] = or_null(parts.reasoning);
        msg["content"] = or_null(parts.content);
    }
}

/// Length of the longest suffix of `s` that is a proper prefix of `tag`.
fn partial_tag(s: &str, tag: &str) -> usize {
    (1..tag.len().min(s.len() + 1))
        .rev()
        .find(|&k| s.ends_with(&tag[..k]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(reasoning: &str, content: &str) -> Parts {
        Parts {
            reasoning: reasoning.into(),
            content: content.into(),
        }
    }

    /// Feeds `text` cut at every pair of char boundaries (three chunks, so a tag is cut at
    /// every byte and also into three pieces) and checks that each way gives `want`: a
    /// partial tag given out too early would no longer be found.
    fn check_all_splits(p: Parser, text: &str, want: &Parts) {
        let cuts: Vec<usize> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .collect();
        for &a in &cuts {
            for &b in cuts.iter().filter(|&&b| b >= a) {
                let mut s = Split::new(p);
                let mut got = Parts::default();
                for chunk in [&text[..a], &text[a..b], &text[b..]] {
                    let o = s.push(chunk);
                    got.reasoning.push_str(&o.reasoning);
                    got.content.push_str(&o.content);
                }
                let o = s.finish();
                got.reasoning.push_str(&o.reasoning);
                got.content.push_str(&o.content);
                assert_eq!(&got, want, "{p:?} {text:?} cut at {a},{b}");
            }
        }
        assert_eq!(&split(p, text), want, "{p:?} {text:?} whole");
    }

    #[test]
    fn deepseek_r1_starts_in_the_thought() {
        let p = Parser::DeepSeekR1;
        let cases = [
            (
                "Let me see.</think>\n\nParis.",
                parts("Let me see.", "\n\nParis."),
            ),
            ("<think>hmm</think>ok", parts("hmm", "ok")),
            (
                "no end tag, all reasoning",
                parts("no end tag, all reasoning", ""),
            ),
            ("</think>answer", parts("", "answer")),
            (
                "a</think>b</think>c<think>d",
                parts("a", "b</think>c<think>d"),
            ),
            ("é<thi</think>ü<", parts("é<thi", "ü<")),
            ("<thin", parts("<thin", "")),
            ("", parts("", "")),
        ];
        for (text, want) in cases {
            check_all_splits(p, text, &want);
        }
    }

    #[test]
    fn qwen3_needs_the_open_tag() {
        let p = Parser::Qwen3;
        let cases = [
            (
                "<think>\nplan\n</think>\n\nHello",
                parts("\nplan\n", "\n\nHello"),
            ),
            ("Hello, no thinking", parts("", "Hello, no thinking")),
            ("<think>cut short", parts("cut short", "")),
            ("a<think>b</think>c", parts("b", "ac")),
            ("x </think> y", parts("", "x </think> y")),
            ("ends with <thin", parts("", "ends with <thin")),
            ("<think></think>", parts("", "")),
            ("<think>ü</thinkü</think>ö", parts("ü</thinkü", "ö")),
        ];
        for (text, want) in cases {
            check_all_splits(p, text, &want);
        }
    }

    #[test]
    fn partial_tags_are_held_back_then_released() {
        let mut s = Split::new(Parser::Qwen3);
        assert_eq!(s.push("Hi <th"), parts("", "Hi "));
        assert!(!s.in_reasoning());
        assert_eq!(s.push("ink>why</th"), parts("why", ""));
        assert!(s.in_reasoning());
        assert_eq!(s.push("is not a tag"), parts("</this not a tag", ""));
        assert_eq!(s.push("</think>done <"), parts("", "done <"));
        assert!(!s.in_reasoning());
        assert_eq!(s.finish(), parts("", ""));
        assert_eq!(partial_tag("ab</thi", CLOSE), 5);
        assert_eq!(partial_tag("<", CLOSE), 1);
        assert_eq!(partial_tag("x", CLOSE), 0);
        let mut s = Split::new(Parser::Qwen3);
        assert_eq!(
            s.pieces("a<think>b</th"),
            vec![(false, "a".to_string()), (true, "b".to_string())]
        );
        assert_eq!(s.pieces("ink>c"), vec![(false, "c".to_string())]);
        assert_eq!(Parser::from_name("qwen3"), Some(Parser::Qwen3));
        assert_eq!(Parser::from_name("r1"), None);
    }
}

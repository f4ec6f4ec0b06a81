//! Structured output (constrained decoding): a request's [`Constraint`] (JSON schema, regex,
//! choice, Lark grammar) compiled by llguidance into a matcher over the model's
//! vocabulary.
//!
//! - [`Grammars`] is the vocabulary as llguidance sees it (each token id's bytes, special
//!   tokens marked, the end-of-generation ids as EOS), built once per model on first use
//!   and shared by every request; [`Grammars::compile`] turns a constraint into a
//!   [`Compiled`] one, off the engine thread (the server answers 400 with llguidance's
//!   message when it fails). A request carries the compiled matcher, and the engine, its
//!   forks and the other prompts of a batched request each start from a clone of it:
//!   nothing is compiled on the engine thread, where it would stall every running decode.
//! - `Guide` is one request's matcher: the token mask of the current position (disallowed
//!   logits become −∞), commit of sampled tokens, the check of drafts against the grammar
//!   and rollback of drafted tokens, and whether the grammar is done (the request then
//!   finishes with `stop`).
//!
//! JSON schemas are compiled with fixed separators (`", "`, `": "`) and no free whitespace
//! unless the schema sets `x-guidance` itself: a small model otherwise tends to spend its
//! budget on whitespace.

use crate::api::EngineMetrics;
use crate::grammar_limits::{GrammarLimits, LimitError};
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, SimpleVob, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// What a request's output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum Constraint {
    /// Any JSON object (OpenAI `response_format: {"type": "json_object"}`).
    JsonObject,
    /// A JSON document valid under this JSON schema.
    JsonSchema(Value),
    /// A string matching this regular expression (Rust `regex` syntax), whole.
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// A context-free grammar in llguidance's Lark syntax (see [`crate::gbnf_to_lark`]
    /// for GBNF).
    Lark(String),
}

impl Constraint {
    /// The llguidance grammar of this constraint.
    fn grammar(&self) -> Result<TopLevelGrammar, CompileError> {
        Ok(match self {
            Constraint::JsonObject => TopLevelGrammar::from_json_schema(with_layout(
                serde_json::json!({"type": "object"}),
            )),
            Constraint::JsonSchema(s) => {
                if !s.is_object() && !s.is_boolean() {
                    return Err(CompileError::Invalid(
                        "a JSON schema must be an object or a boolean".into(),
                    ));
                }
                TopLevelGrammar::from_json_schema(with_layout(s.clone()))
            }
            Constraint::Regex(r) => TopLevelGrammar::from_regex(r),
            Constraint::Choice(c) => {
                if c.is_empty() {
                    return Err(CompileError::Invalid(
                        "a choice needs at least one string".into(),
                    ));
                }
                let alts: Vec<String> = c
                    .iter()
                    .map(|s| serde_json::to_string(s).expect("a string serializes"))
                    .collect();
                TopLevelGrammar::from_lark(format!("start: {}", alts.join(" | ")))
            }
            Constraint::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
        })
    }
}

/// `schema` with folio's JSON layout unless it sets `x-guidance` itself.
pub(crate) fn with_layout(mut schema: Value) -> Value {
    if let Value::Bool(b) = schema {
        schema = if b {
            serde_json::json!({})
        } else {
            serde_json::json!({"not": {}})
        };
    }
    if let Some(o) = schema.as_object_mut() {
        o.entry("x-guidance").or_insert_with(|| {
            serde_json::json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": ",
            })
        });
    }
    schema
}

/// Why a constraint did not compile.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// Over one of the size limits; llguidance never saw it.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// llguidance refused it (its message).
    #[error("{0}")]
    Invalid(String),
}

/// The model's vocabulary as llguidance's token environment, built on first use.
pub struct Grammars {
    tokenizer: Arc<folio_tokenizer::Tokenizer>,
    /// Logit rows are this long (the model's vocabulary, maybe padded past the
    /// tokenizer's).
    vocab: usize,
    factory: OnceLock<Result<ParserFactory, CompileError>>,
    limits: GrammarLimits,
}

impl Grammars {
    pub fn new(tokenizer: Arc<folio_tokenizer::Tokenizer>, vocab: usize) -> Grammars {
        Grammars {
            tokenizer,
            vocab,
            factory: OnceLock::new(),
            limits: GrammarLimits::default(),
        }
    }

    /// The parser factory: every token id's bytes (special tokens behind llguidance's
    /// 0xFF marker, ids past the tokenizer empty), the end-of-generation ids as EOS.
    fn factory(&self) -> Result<&ParserFactory, CompileError> {
        self.factory
            .get_or_init(|| {
                let t0 = Instant::now();
                let tok = &self.tokenizer;
                let words: Vec<Vec<u8>> = (0..self.vocab as u32)
                    .map(|id| {
                        let b = tok.token_bytes_ref(id);
                        if tok.is_special(id) && !b.is_empty() {
                            let mut w = Vec::with_capacity(b.len() + 1);
                            w.push(TokTrie::SPECIAL_TOKEN_MARKER);
                            w.extend_from_slice(b);
                            w
                        } else {
                            b.to_vec()
                        }
                    })
                    .collect();
                let mut eos: Vec<u32> = tok
                    .eog_ids()
                    .iter()
                    .copied()
                    .filter(|&e| (e as usize) < self.vocab)
                    .collect();
                if let Some(e) = tok.eos_id().filter(|&e| (e as usize) < self.vocab) {
                    eos.retain(|&x| x != e);
                    eos.insert(0, e);
                }
                if eos.is_empty() {
                    return Err(CompileError::Invalid(
                        "the model has no end-of-generation token".to_string(),
                    ));
                }
                let info = TokRxInfo::new(self.vocab as u32, eos[0]);
                let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos);
                let env: llguidance::toktrie::TokEnv = Arc::new(ApproximateTokEnv::new(trie));
                let mut f = ParserFactory::new_simple(&env)
                    .map_err(|e| CompileError::Invalid(e.to_string()))?;
                f.quiet();
                tracing::info!(
                    "constraint: token environment of {} tokens built in {:.0} ms",
                    self.vocab,
                    t0.elapsed().as_secs_f64() * 1e3
                );
                Ok(f)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The size limits every constraint is checked against before it is compiled.
    pub fn limits(&self) -> &GrammarLimits {
        &self.limits
    }

    /// Compiles `c` into a fresh matcher, after checking it against [`Grammars::limits`].
    /// Builds the token environment on first use, which takes a while; recursion in
    /// llguidance needs up to [`COMPILE_STACK_BYTES`](crate::grammar_limits::COMPILE_STACK_BYTES)
    /// of stack: call it on a thread of its own with that stack, off async threads.
    pub fn compile(&self, c: &Constraint) -> Result<Compiled, CompileError> {
        self.limits.check(c)?;
        let grammar = c.grammar()?;
        let f = self.factory()?;
        let parser = f
            .create_parser(grammar)
            .map_err(|e| CompileError::Invalid(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        match matcher.get_error() {
            Some(e) => Err(CompileError::Invalid(e)),
            None => Ok(Compiled {
                constraint: c.clone(),
                matcher,
            }),
        }
    }

    /// A request's guide: a clone of the compiled matcher at its start, counting mask time
    /// into `metrics`.
    pub(crate) fn guide(&self, c: &Compiled, metrics: Arc<EngineMetrics>) -> Guide {
        Guide {
            matcher: c.matcher.clone(),
            eos: self
                .tokenizer
                .eos_id()
                .or(self.tokenizer.eog_ids().first().copied()),
            metrics,
        }
    }
}

/// A constraint compiled by [`Grammars::compile`]: its matcher at the start of the output,
/// cloned for each request that runs it.
#[derive(Clone)]
pub struct Compiled {
    constraint: Constraint,
    matcher: Matcher,
}

impl Compiled {
    /// The constraint it was compiled from.
    pub fn constraint(&self) -> &Constraint {
        &self.constraint
    }
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Compiled").field(&self.constraint).finish()
    }
}

/// One request's matcher. Between steps it has consumed exactly the request's output.
pub(crate) struct Guide {
    matcher: Matcher,
    /// The token forced when the matcher fails (it ends the request).
    eos: Option<u32>,
    metrics: Arc<EngineMetrics>,
}

impl Guide {
    /// Sets every logit the grammar forbids at the current position to −∞ (positions past
    /// the vocabulary too). A matcher in error allows only EOS, which ends the request.
    pub fn mask(&mut self, logits: &mut [f32]) {
        let t0 = Instant::now();
        match self.matcher.compute_mask_or_eos() {
            Ok(m) => apply_mask(&m, logits),
            Err(e) => {
                tracing::warn!("constraint: mask failed, ending the request: {e}");
                self.force_eos(logits);
            }
        }
        // Every allowed token may be −∞ already (e.g. `ignore_eos` with only EOS left):
        // end rather than draw from nothing.
        if !logits.iter().any(|x| x.is_finite()) {
            self.force_eos(logits);
        }
        let m = &self.metrics;
        m.constraint_mask_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        m.constraint_masks.fetch_add(1, Relaxed);
    }

    fn force_eos(&self, logits: &mut [f32]) {
        logits.fill(f32::NEG_INFINITY);
        if let Some(x) = self.eos.and_then(|e| logits.get_mut(e as usize)) {
            *x = 0.0;
        }
    }

    /// Whether the grammar takes `tok` at the current position. A greedy row whose raw
    /// argmax it takes needs no mask (the masked argmax is the same token); the check is
    /// counted as that position's mask.
    pub fn accepts(&mut self, tok: u32) -> bool {
        let t0 = Instant::now();
        let ok = self.valid_prefix(&[tok]) == 1;
        let m = &self.metrics;
        m.constraint_mask_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        if ok {
            m.constraint_masks.fetch_add(1, Relaxed);
        }
        ok
    }

    /// How many of `drafts` the grammar accepts in a row from the current position.
    pub fn valid_prefix(&mut self, drafts: &[u32]) -> usize {
        if drafts.is_empty() || self.matcher.is_stopped() {
            return 0;
        }
        self.matcher.validate_tokens(drafts).unwrap_or(0)
    }

    /// Consumes one token; `false` if the grammar refused it (or was done).
    pub fn commit(&mut self, tok: u32) -> bool {
        if self.matcher.is_stopped() {
            return false;
        }
        let t0 = Instant::now();
        let ok = self.matcher.consume_token(tok).is_ok();
        self.metrics
            .constraint_commit_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        ok
    }

    /// Consumes `toks` up to the grammar's end: returns how many were taken (the rest
    /// come after the grammar finished, or were refused).
    pub fn commit_all(&mut self, toks: &[u32]) -> usize {
        for (i, &t) in toks.iter().enumerate() {
            if !self.commit(t) {
                return i;
            }
        }
        toks.len()
    }

    /// Forgets the last `n` consumed tokens (rejected drafts).
    pub fn rollback(&mut self, n: usize) {
        if n > 0 {
            if let Err(e) = self.matcher.rollback(n) {
                tracing::warn!("constraint: rollback of {n} tokens failed: {e}");
            }
        }
    }

    /// The grammar is complete and allows nothing more: the request stops.
    pub fn is_done(&self) -> bool {
        self.matcher.is_stopped()
    }
}

/// `logits[i] = −∞` wherever `mask` does not allow `i` (and past its length).
fn apply_mask(mask: &SimpleVob, logits: &mut [f32]) {
    let words = mask.as_slice();
    for (i, chunk) in logits.chunks_mut(32).enumerate() {
        let w = words.get(i).copied().unwrap_or(0);
        if w == u32::MAX {
            continue;
        }
        for (b, x) in chunk.iter_mut().enumerate() {
            if (w >> b) & 1 == 0 {
                *x = f32::NEG_INFINITY;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llguidance::toktrie::TokEnv;

    /// One token per byte (plus a few specials, the last one EOS).
    fn guide(c: &Constraint) -> (Guide, TokEnv) {
        let env = ApproximateTokEnv::single_byte_env();
        let mut f = ParserFactory::new_simple(&env).unwrap();
        f.quiet();
        let m = Matcher::new(f.create_parser(c.grammar().unwrap()));
        assert!(m.get_error().is_none());
        let eos = env.tok_trie().eos_token();
        let g = Guide {
            matcher: m,
            eos: Some(eos),
            metrics: Arc::default(),
        };
        (g, env)
    }

    fn toks(s: &str) -> Vec<u32> {
        s.bytes().map(u32::from).collect()
    }

    /// The tokens the mask leaves finite.
    fn allowed(g: &mut Guide, env: &TokEnv) -> Vec<u32> {
        let mut l = vec![0.0f32; env.tok_trie().vocab_size()];
        g.mask(&mut l);
        (0..l.len() as u32)
            .filter(|&i| l[i as usize].is_finite())
            .collect()
    }

    #[test]
    fn drafts_are_cut_at_the_first_refused_token() {
        let (mut g, _) = guide(&Constraint::Choice(vec!["abc".into(), "abd".into()]));
        assert_eq!(g.valid_prefix(&toks("abx")), 2, "partial acceptance");
        assert_eq!(g.valid_prefix(&toks("xab")), 0, "all rejected");
        assert_eq!(g.valid_prefix(&toks("abd")), 3, "all accepted");
        assert_eq!(g.valid_prefix(&[]), 0);
        // Validation consumes nothing.
        assert!(g.commit(u32::from(b'a')));
    }

    #[test]
    fn verification_rolls_back_to_the_accepted_drafts() {
        let (mut g, env) = guide(&Constraint::Choice(vec!["abc".into(), "aac".into()]));
        // Row masks: the matcher steps over the drafts "ab".
        assert_eq!(allowed(&mut g, &env), toks("a"));
        assert_eq!(g.commit_all(&toks("ab")), 2);
        assert_eq!(allowed(&mut g, &env), toks("c"));
        // Verification accepted only the first draft, and corrected the second to 'a'.
        g.rollback(1);
        assert!(g.commit(u32::from(b'a')));
        assert_eq!(allowed(&mut g, &env), toks("c"));
        assert!(!g.is_done());
        assert!(g.commit(u32::from(b'c')));
        assert!(g.is_done(), "\"aac\" completes the grammar");
        // Nothing more is taken; the finished grammar allows only EOS.
        assert!(!g.commit(u32::from(b'c')));
        assert_eq!(g.valid_prefix(&toks("c")), 0);
        assert_eq!(allowed(&mut g, &env), vec![env.tok_trie().eos_token()]);
    }

    #[test]
    fn all_drafts_rejected_and_bonus_token() {
        let (mut g, env) = guide(&Constraint::Regex("[ab]{2}c".into()));
        // Every draft rejected: roll all of them back.
        assert_eq!(g.commit_all(&toks("ab")), 2);
        g.rollback(2);
        assert_eq!(allowed(&mut g, &env), toks("ab"));
        // Every draft accepted: the bonus row is masked after the last draft.
        assert_eq!(g.commit_all(&toks("ba")), 2);
        assert_eq!(allowed(&mut g, &env), toks("c"));
        // Tokens after the grammar's end are not taken.
        assert_eq!(g.commit_all(&toks("cc")), 1);
        assert!(g.is_done());
        // Rolling back past the end reopens the grammar.
        g.rollback(1);
        assert!(!g.is_done());
        assert_eq!(allowed(&mut g, &env), toks("c"));
    }

    #[test]
    fn mask_counts_time_and_covers_padding() {
        let (mut g, env) = guide(&Constraint::Regex("x".into()));
        // A row longer than the vocabulary (padded embeddings): the tail is masked.
        let mut l = vec![1.0f32; env.tok_trie().vocab_size() + 40];
        g.mask(&mut l);
        let finite: Vec<usize> = (0..l.len()).filter(|&i| l[i].is_finite()).collect();
        assert_eq!(finite, vec![b'x' as usize]);
        assert_eq!(g.metrics.constraint_masks.load(Relaxed), 1);
    }

    #[test]
    fn schemas_get_folio_layout_unless_they_set_their_own() {
        let s = with_layout(serde_json::json!({"type": "object"}));
        assert_eq!(s["x-guidance"]["whitespace_flexible"], false);
        let own = serde_json::json!({"type": "object", "x-guidance": {"lenient": true}});
        assert_eq!(with_layout(own.clone()), own);
        assert!(Constraint::JsonSchema(serde_json::json!(3))
            .grammar()
            .is_err());
        assert!(Constraint::Choice(vec![]).grammar().is_err());
    }

    /// The allowed tokens, as text, of the byte vocabulary (EOS as "EOS").
    fn allowed_text(g: &mut Guide, env: &TokEnv) -> Vec<String> {
        let eos = env.tok_trie().eos_token();
        allowed(g, env)
            .into_iter()
            .map(|t| {
                if t == eos {
                    "EOS".to_string()
                } else if t < 128 {
                    (t as u8 as char).to_string()
                } else {
                    format!("#{t}")
                }
            })
            .collect()
    }

    #[test]
    fn tool_calls_are_constrained_from_their_opener_on() {
        let schema = serde_json::json!({"type": "object", "properties": {
            "name": {"const": "f"},
            "arguments": {"type": "object", "properties": {"a": {"type": "integer"}},
                          "required": ["a"], "additionalProperties": false}},
            "required": ["name", "arguments"], "additionalProperties": false});
        let g = crate::tool_grammar::lazy_calls("<tool_call>", "</tool_call>", &schema);
        let (mut g, env) = guide(&Constraint::Lark(g));
        // Free text: anything, "<tool" too, and the end.
        let free = allowed_text(&mut g, &env);
        assert!(
            free.len() > 90 && free.contains(&"EOS".to_string()),
            "{free:?}"
        );
        let t = toks("Hi <tool <tool_call>\n");
        assert_eq!(g.commit_all(&t), t.len());
        // Inside the call: the schema's JSON only.
        assert_eq!(allowed_text(&mut g, &env), vec!["{"]);
        let t = toks("{\"name\": \"f\", \"arguments\": {\"a\": 12");
        assert_eq!(g.commit_all(&t), t.len());
        // No other key may follow "a": digits or the object's end.
        let after = allowed_text(&mut g, &env);
        assert!(
            !after.contains(&",".to_string()) && after.contains(&"}".to_string()),
            "{after:?}"
        );
        assert_eq!(g.valid_prefix(&[u32::from(b',')]), 0);
        let t = toks("}}\n</tool_call>");
        assert_eq!(g.commit_all(&t), t.len());
        // Free text again, and the end.
        let free = allowed_text(&mut g, &env);
        assert!(
            free.len() > 90 && free.contains(&"EOS".to_string()),
            "{free:?}"
        );
        // An answer that starts as bare JSON, fenced or not, is one call.
        for text in [
            "{\"name\": \"f\", \"arguments\": {\"a\": 1",
            "```json\n{\"name\": \"f\", \"arguments\": {\"a\": 1",
        ] {
            let lark = crate::tool_grammar::lazy_calls("<tool_call>", "</tool_call>", &schema);
            let (mut g, env) = guide(&Constraint::Lark(lark));
            let t = toks(text);
            assert_eq!(g.commit_all(&t), t.len(), "{text}");
            assert_eq!(g.valid_prefix(&[u32::from(b',')]), 0, "{text}");
            let t = toks("}}");
            assert_eq!(g.commit_all(&t), t.len(), "{text}");
            assert!(
                allowed_text(&mut g, &env).contains(&"EOS".to_string()),
                "{text}"
            );
        }
        // Other fences and text are free.
        let lark = crate::tool_grammar::lazy_calls("<tool_call>", "</tool_call>", &schema);
        let (mut g, _) = guide(&Constraint::Lark(lark));
        let t = toks("```python\n{'x': 1, 'y': 2}\n```");
        assert_eq!(g.commit_all(&t), t.len());
        // A key the schema does not have is refused right after the opener.
        let (mut g, _) = guide(&Constraint::Lark(crate::tool_grammar::lazy_calls(
            "<tool_call>",
            "</tool_call>",
            &schema,
        )));
        assert_eq!(
            g.commit_all(&toks("<tool_call>{\"name\": \"f\", \"arguments\": {\"b")),
            toks("<tool_call>{\"name\": \"f\", \"arguments\": {\"").len()
        );
    }
}

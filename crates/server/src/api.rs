//! The request types and ids every endpoint shares: which API a request came through, a
//! prompt before tokenization, an echoed prompt, and the ids and timestamps of answers.
//! A leaf: it imports nothing else from this crate, so the modules that read requests
//! (`params`, `prompt`, `tools`) and those that write answers (`openai`, `echo`) meet
//! here instead of importing one another.

use folio_engine::FinishReason;
use folio_tokenizer::ChatMessage;
use serde_json::{Map, Value};
use std::hash::{BuildHasher, Hasher};

/// Which endpoint a request came through; decides field names and response shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Completions,
    Chat,
}

/// One prompt before tokenization.
#[derive(Clone, Debug, PartialEq)]
pub enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
    Chat {
        messages: Vec<ChatMessage>,
        add_generation_prompt: bool,
        /// `chat_template_kwargs`: extra variables for the chat template.
        kwargs: Map<String, Value>,
    },
}

/// One prompt as echoed.
#[derive(Clone, Debug, PartialEq)]
pub struct EchoPrompt {
    /// The prompt as sent (token-id prompts: decoded).
    pub text: String,
    pub ids: Vec<u32>,
}

/// The OpenAI `finish_reason` of an engine finish: the one place the server spells it
/// (chunks, responses, metrics and error messages all read it here).
pub fn finish_reason(r: &FinishReason) -> &'static str {
    r.as_openai()
}

/// A fresh random request id with the endpoint's prefix.
pub fn new_id(api: Api) -> String {
    let prefix = match api {
        Api::Completions => "cmpl-",
        Api::Chat => "chatcmpl-",
    };
    random_id(prefix)
}

/// `prefix` and 16 random hex digits.
pub fn random_id(prefix: &str) -> String {
    // RandomState is seeded per instance from the OS: enough for unique ids, no extra crate.
    let r = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("{prefix}{r:016x}")
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_prefixes_and_differ() {
        let (a, b) = (new_id(Api::Chat), new_id(Api::Chat));
        assert!(a.starts_with("chatcmpl-") && new_id(Api::Completions).starts_with("cmpl-"));
        assert_ne!(a, b);
    }
}

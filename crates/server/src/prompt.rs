//! Prompts: the shapes clients send (`prompt` as text, token ids or a batch of either;
//! chat `messages`) and their tokenization.

use crate::api::PromptInput;
use crate::capacity::Capacity;
use crate::error::ApiError;
use crate::fields::{show, Fields};
use folio_tokenizer::{ChatMessage, Tokenizer};
use serde_json::{Map, Value};

/// Most prompts in one /v1/completions batch.
pub const MAX_PROMPTS: usize = 32;
/// Most chat messages in one request.
pub const MAX_MESSAGES: usize = 1024;

/// The `prompt` field of /v1/completions: a string, an array of strings, an array of token
/// ids, or an array of arrays of token ids. Takes the value out of the body, so that a
/// long prompt's text is moved, not copied.
pub fn completion_prompts(v: Option<Value>, vocab: usize) -> Result<Vec<PromptInput>, ApiError> {
    prompt_list(v, "prompt", vocab, MAX_PROMPTS)
}

/// A field of that shape named `field` (`prompt`, the embeddings' `input`), at most `max`
/// items.
pub fn prompt_list(
    v: Option<Value>,
    field: &str,
    vocab: usize,
    max: usize,
) -> Result<Vec<PromptInput>, ApiError> {
    let v = v
        .filter(|v| !v.is_null())
        .ok_or_else(|| ApiError::param(field, "required, got nothing"))?;
    let items = match v {
        Value::String(s) => return Ok(vec![PromptInput::Text(s)]),
        Value::Array(a) => a,
        v => {
            return Err(ApiError::param(
                field,
                format!(
                    "must be a string, an array of strings or an array of token ids, got {}",
                    show(&v)
                ),
            ))
        }
    };
    if items.is_empty() {
        return Err(ApiError::param(field, "must not be an empty array"));
    }
    if items.iter().all(Value::is_number) {
        return token_ids(field, &items, vocab).map(|t| vec![PromptInput::Tokens(t)]);
    }
    if items.len() > max {
        return Err(ApiError::param(
            field,
            format!("at most {max} prompts in a batch, got {}", items.len()),
        ));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) => Ok(PromptInput::Text(s)),
            Value::Array(a) => {
                token_ids(&format!("{field}[{i}]"), &a, vocab).map(PromptInput::Tokens)
            }
            v => Err(ApiError::param(
                format!("{field}[{i}]"),
                format!(
                    "must be a string or an array of token ids, got {}",
                    show(&v)
                ),
            )),
        })
        .collect()
}

fn token_ids(name: &str, items: &[Value], vocab: usize) -> Result<Vec<u32>, ApiError> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| match v.as_u64() {
            Some(t) if (t as usize) < vocab => Ok(t as u32),
            _ => Err(ApiError::param(
                format!("{name}[{i}]"),
                format!("must be a token id in [0, {vocab}), got {}", show(v)),
            )),
        })
        .collect()
}

/// The `messages` field of /v1/chat/completions (and /tokenize), taken out of the body
/// (`messages`; its contents are moved, not copied), with `chat_template_kwargs` and
/// `add_generation_prompt` from the rest of it (`f`).
pub fn chat_prompt(messages: Option<Value>, f: &Fields) -> Result<PromptInput, ApiError> {
    let v = messages
        .filter(|v| !v.is_null())
        .ok_or_else(|| ApiError::param("messages", "required, got nothing"))?;
    let Value::Array(items) = v else {
        return Err(ApiError::param(
            "messages",
            format!("must be an array of messages, got {}", show(&v)),
        ));
    };
    if items.is_empty() || items.len() > MAX_MESSAGES {
        return Err(ApiError::param(
            "messages",
            format!(
                "must hold 1 to {MAX_MESSAGES} messages, got {}",
                items.len()
            ),
        ));
    }
    let messages = items
        .into_iter()
        .enumerate()
        .map(|(i, m)| message(i, m))
        .collect::<Result<_, _>>()?;
    let mut kwargs = match f.get("chat_template_kwargs") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(v) => {
            return Err(ApiError::param(
                "chat_template_kwargs",
                format!("must be an object, got {}", show(v)),
            ))
        }
    };
    // OpenAI's `reasoning_effort` reaches templates that read it (GPT-OSS's) as the
    // variable of that name; `chat_template_kwargs` wins when it sets one too.
    if let Some(e) = f.str("reasoning_effort")? {
        kwargs
            .entry("reasoning_effort")
            .or_insert_with(|| Value::String(e.to_string()));
    }
    Ok(PromptInput::Chat {
        messages,
        add_generation_prompt: f.bool("add_generation_prompt", true)?,
        kwargs,
    })
}

fn message(i: usize, m: Value) -> Result<ChatMessage, ApiError> {
    let name = |field: &str| format!("messages[{i}].{field}");
    let Value::Object(mut o) = m else {
        return Err(ApiError::param(
            format!("messages[{i}]"),
            format!("must be an object, got {}", show(&m)),
        ));
    };
    let content = o.remove("content").filter(|c| !c.is_null());
    let f = Fields::new(&o);
    let role = f
        .str("role")
        .map_err(|_| {
            ApiError::param(
                name("role"),
                format!("must be a string, got {}", show(&o["role"])),
            )
        })?
        .ok_or_else(|| ApiError::param(name("role"), "required, got nothing"))?;
    let content = match content {
        None => String::new(),
        Some(Value::String(s)) => s,
        // Content parts: only text is supported; parts are joined by newlines, as vLLM does.
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, p) in parts.iter().enumerate() {
                let kind = p.get("type").and_then(Value::as_str);
                match (kind, p.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => texts.push(t),
                    _ => {
                        return Err(ApiError::param(
                            format!("messages[{i}].content[{j}]"),
                            format!(
                            "only {{\"type\": \"text\", \"text\": …}} parts are supported, got {}",
                            show(p)
                        ),
                        ))
                    }
                }
            }
            texts.join("\n")
        }
        Some(v) => {
            return Err(ApiError::param(
                name("content"),
                format!("must be a string or an array of parts, got {}", show(&v)),
            ))
        }
    };
    let mut msg = ChatMessage::new(role, content);
    msg.tool_calls = crate::tools::message_tool_calls(i, f.get("tool_calls"))?;
    for (key, slot) in [
        ("tool_call_id", &mut msg.tool_call_id),
        ("name", &mut msg.name),
    ] {
        *slot = match f.get(key) {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => {
                return Err(ApiError::param(
                    name(key),
                    format!("must be a string, got {}", show(v)),
                ))
            }
        };
    }
    Ok(msg)
}

/// Refuses `text` if it must encode to more prompt tokens than `cap` lets one request
/// have, from its byte length alone (`Tokenizer::min_tokens`): before any memory goes into
/// tokenizing it.
pub fn check_text(
    tok: &Tokenizer,
    text: &str,
    field: &str,
    cap: &Capacity,
) -> Result<(), ApiError> {
    cap.check_text(
        field,
        text.len(),
        tok.min_tokens(text),
        tok.max_token_bytes(),
    )
}

/// Bytes of text a tokenization of `inputs` reads (what bounds its memory).
pub fn text_bytes(inputs: &[PromptInput]) -> usize {
    inputs
        .iter()
        .map(|i| match i {
            PromptInput::Text(t) => t.len(),
            PromptInput::Tokens(_) => 0,
            PromptInput::Chat { messages, .. } => messages
                .iter()
                .map(|m| m.content.len() + m.tool_calls.as_ref().map_or(0, |c| c.to_string().len()))
                .sum(),
        })
        .sum()
}

/// Token ids of one prompt. `field` names it in errors (`prompt`, `prompt[2]`, `messages`).
/// Text is encoded with special-token parsing, as Hugging Face tokenizers do. Text (also
/// a rendered chat) that must be more tokens than `cap` allows is refused unencoded.
pub fn tokenize(
    tok: &Tokenizer,
    input: &PromptInput,
    field: &str,
    cap: &Capacity,
) -> Result<Vec<u32>, ApiError> {
    match input {
        PromptInput::Tokens(t) => Ok(t.clone()),
        PromptInput::Text(s) => {
            check_text(tok, s, field, cap)?;
            tok.encode(s, true)
                .map_err(|e| ApiError::param(field, format!("cannot tokenize: {e}")))
        }
        PromptInput::Chat {
            messages,
            add_generation_prompt,
            kwargs,
        } => {
            let text = tok
                .apply_chat_template_with(messages, *add_generation_prompt, kwargs)
                .map_err(|e| ApiError::param(field, format!("chat template failed: {e}")))?;
            check_text(tok, &text, field, cap)?;
            let mut ids = tok
                .encode(&text, true)
                .map_err(|e| ApiError::param(field, format!("cannot tokenize: {e}")))?;
            // The template usually writes the BOS text itself; do not add a second one.
            if let Some(bos) = tok.bos_id() {
                if ids.len() >= 2 && ids[0] == bos && ids[1] == bos {
                    ids.remove(0);
                }
            }
            Ok(ids)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat(body: Value) -> Result<PromptInput, ApiError> {
        let mut o = body.as_object().unwrap().clone();
        let messages = o.remove("messages");
        chat_prompt(messages, &Fields::new(&o))
    }

    fn prompts(v: Value) -> Result<Vec<PromptInput>, ApiError> {
        completion_prompts(Some(v), 100)
    }

    #[test]
    fn prompt_shapes() {
        assert_eq!(
            prompts(json!("hi")).unwrap(),
            vec![PromptInput::Text("hi".into())]
        );
        assert_eq!(
            prompts(json!([1, 2])).unwrap(),
            vec![PromptInput::Tokens(vec![1, 2])]
        );
        assert_eq!(
            prompts(json!(["a", [3]])).unwrap(),
            vec![PromptInput::Text("a".into()), PromptInput::Tokens(vec![3])]
        );
        assert_eq!(
            prompts(json!([])).unwrap_err().message,
            "prompt: must not be an empty array"
        );
        assert_eq!(
            prompts(json!([1, 100])).unwrap_err().message,
            "prompt[1]: must be a token id in [0, 100), got 100"
        );
        assert_eq!(
            prompts(json!([-1])).unwrap_err().message,
            "prompt[0]: must be a token id in [0, 100), got -1"
        );
        assert_eq!(
            prompts(json!(["a", {}])).unwrap_err().message,
            "prompt[1]: must be a string or an array of token ids, got an object with 0 keys"
        );
        assert_eq!(
            prompts(json!(5)).unwrap_err().message,
            "prompt: must be a string, an array of strings or an array of token ids, got 5"
        );
        assert_eq!(
            completion_prompts(None, 100).unwrap_err().message,
            "prompt: required, got nothing"
        );
    }

    #[test]
    fn chat_messages() {
        let o = json!({"messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": null}
        ]});
        let p = chat(o).unwrap();
        assert_eq!(
            p,
            PromptInput::Chat {
                messages: vec![
                    ChatMessage::new("system", "be brief"),
                    ChatMessage::new("user", "a\nb"),
                    ChatMessage::new("assistant", "")
                ],
                add_generation_prompt: true,
                kwargs: Map::new(),
            }
        );
        let bad = [
            (json!({"messages": []}), "messages: must hold 1 to 1024 messages, got 0"),
            (json!({"messages": "hi"}), "messages: must be an array of messages, got string \"hi\""),
            (
                json!({"messages": [{"role": "user"}], "chat_template_kwargs": [1]}),
                "chat_template_kwargs: must be an object, got an array of 1 items",
            ),
            (json!({"messages": [{"content": "x"}]}), "messages[0].role: required, got nothing"),
            (json!({"messages": [{"role": 1}]}), "messages[0].role: must be a string, got 1"),
            (json!({"messages": [{"role": "user", "content": 3}]}), "messages[0].content: must be a string or an array of parts, got 3"),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
                "messages[0].content[0]: only {\"type\": \"text\", \"text\": …} parts are supported, got an object with 1 keys",
            ),
        ];
        for (body, msg) in bad {
            assert_eq!(chat(body).unwrap_err().message, msg);
        }
    }
}

//! Chat templates on a tiny vocabulary: HF-style environment features templates rely on.

mod common;

use common::*;
use folio_tokenizer::{ChatMessage, Tokenizer, TokenizerError};

fn with_template(template: &str) -> Tokenizer {
    let mut spec = tiny_spec();
    spec.chat_template = Some(template.into());
    Tokenizer::from_spec(spec).unwrap()
}

fn msgs() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new("system", "  Be brief.  "),
        ChatMessage::new("user", "Hi \"there\""),
    ]
}

#[test]
fn trim_and_lstrip_blocks_like_hugging_face() {
    let tok = with_template(
        "{{ bos_token }}\n{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}\n{% if add_generation_prompt %}>{% endif %}\n",
    );
    assert_eq!(
        tok.apply_chat_template(&msgs(), true).unwrap(),
        "<s>\n[Hi \"there\"]\n>"
    );
    assert_eq!(
        tok.apply_chat_template(&msgs(), false).unwrap(),
        "<s>\n[Hi \"there\"]\n"
    );
}

#[test]
fn python_methods_tojson_and_loop_controls() {
    let tok = with_template(
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}\
         {{ m.content.strip() }}|{{ m.role.upper() }}|{{ m.role.startswith('sys') }}|\
         {{ m.content | tojson }}{% endfor %}|{{ eos_token }}",
    );
    assert_eq!(
        tok.apply_chat_template(&msgs(), false).unwrap(),
        "Be brief.|SYSTEM|True|\"  Be brief.  \"|<|end|>"
    );
}

#[test]
fn raise_exception_becomes_a_template_error_with_its_message() {
    let tok = with_template(
        "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation must start with user') }}{% endif %}",
    );
    let err = tok.apply_chat_template(&msgs(), true).unwrap_err();
    assert!(matches!(err, TokenizerError::Template(_)));
    assert!(
        err.to_string()
            .contains("Conversation must start with user"),
        "{err}"
    );
}

#[test]
fn strftime_now_prints_a_date() {
    let tok = with_template("{{ strftime_now('%Y-%m-%d') }}");
    let date = tok.apply_chat_template(&[], false).unwrap();
    assert_eq!(date.len(), 10, "{date}");
    assert!(
        date.starts_with("20") && date.as_bytes()[4] == b'-',
        "{date}"
    );
}

#[test]
fn broken_or_missing_template_fails_only_at_render_time() {
    let tok = with_template("{% for m in messages %}");
    let err = tok
        .apply_chat_template(&msgs(), true)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("chat template error"), "{err}");
    assert_eq!(tok.encode(" the", false).unwrap(), vec![G_THE]);

    let tok = Tokenizer::from_spec(tiny_spec()).unwrap();
    assert!(tok.chat_template().is_none());
    assert!(matches!(
        tok.apply_chat_template(&msgs(), true),
        Err(TokenizerError::NoChatTemplate)
    ));
}

#[test]
fn kwargs_reach_the_template_and_a_file_template_replaces_the_models() {
    let mut tok = with_template("{{ messages | length }}");
    let kwargs: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
        r#"{"enable_thinking": false, "messages": "ignored", "bos_token": "ignored"}"#,
    )
    .unwrap();
    tok.set_chat_template(
        "{{ bos_token }}{{ messages | length }}|{{ enable_thinking }}|{{ add_generation_prompt }}",
    )
    .unwrap();
    assert_eq!(
        tok.apply_chat_template_with(&msgs(), true, &kwargs)
            .unwrap(),
        "<s>2|False|True"
    );
    // Without kwargs the variable is undefined (renders empty), as in Hugging Face.
    assert_eq!(
        tok.apply_chat_template(&msgs(), false).unwrap(),
        "<s>2||False"
    );
    let err = tok.set_chat_template("{% if %}").unwrap_err();
    assert!(matches!(err, TokenizerError::Template(_)), "{err}");
    // The old template stays in place.
    assert_eq!(
        tok.apply_chat_template(&msgs(), false).unwrap(),
        "<s>2||False"
    );
}

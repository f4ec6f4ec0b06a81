//! Checks against the real SmolLM2-135M-Instruct GGUF and llama.cpp's reference token ids
//! (testdata/llamacpp-greedy.json at the repository root, llama.cpp's server output).
//! Each test skips with a notice when the model file is absent.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use folio_gguf::GgufFile;
use folio_tokenizer::{ChatMessage, IncrementalDecoder, Tokenizer, TokenizerSpec};
use serde_json::Value;

fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("FOLIO_MODEL") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    PathBuf::from(home).join(".cache/folio/models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The real model's tokenizer, built once for all tests; `None` (with a notice) when the
/// model file is absent.
fn load() -> Option<&'static Tokenizer> {
    static TOK: OnceLock<Option<Tokenizer>> = OnceLock::new();
    let tok = TOK.get_or_init(|| {
        let path = model_path();
        if !path.exists() {
            return None;
        }
        let f = GgufFile::open(&path).expect("open model");
        Some(Tokenizer::from_gguf(&f).expect("build tokenizer"))
    });
    if tok.is_none() {
        eprintln!(
            "SKIPPED: model file {} not found (set FOLIO_MODEL)",
            model_path().display()
        );
    }
    tok.as_ref()
}

fn reference() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/llamacpp-greedy.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("read reference")).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn spec_matches_the_known_metadata() {
    let path = model_path();
    if !path.exists() {
        eprintln!("SKIPPED: model file {} not found", path.display());
        return;
    }
    let spec = TokenizerSpec::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    assert_eq!(spec.model, "gpt2");
    assert_eq!(spec.pre.as_deref(), Some("smollm"));
    assert_eq!(spec.tokens.len(), 49152);
    assert_eq!(spec.token_types.len(), 49152);
    assert_eq!(spec.merges.len(), 48900);
    assert_eq!(
        (spec.bos_id, spec.eos_id, spec.eot_id),
        (Some(1), Some(2), None)
    );
    assert!(!spec.add_bos && !spec.add_eos);
    assert_eq!(spec.tokens[2], "<|im_end|>");
}

#[test]
fn prompt_ids_and_output_text_match_llama_cpp() {
    let Some(tok) = load() else { return };
    let reference = reference();
    let prompts = reference["prompts"].as_array().unwrap();
    assert_eq!(prompts.len(), 5);
    for p in prompts {
        let name = p["name"].as_str().unwrap();
        let text = p["prompt_text"].as_str().unwrap();
        assert_eq!(
            tok.encode(text, true).unwrap(),
            ids(&p["prompt_token_ids"]),
            "prompt ids of {name}"
        );
        for run in ["greedy", "greedy_ignore_eos"] {
            let out: Vec<u32> = ids(&p[run]["output_token_ids"])
                .into_iter()
                .filter(|&id| !tok.is_eog(id))
                .collect();
            assert_eq!(
                tok.decode(&out, true),
                p[run]["output_text"].as_str().unwrap(),
                "{run} output text of {name}"
            );
        }
    }
}

#[test]
fn special_ids_and_end_of_generation_set() {
    let Some(tok) = load() else { return };
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!((tok.bos_id(), tok.eos_id()), (Some(1), Some(2)));
    // <|endoftext|> = 0, <|im_end|> = 2 and the fill-in-the-middle repository token
    // <reponame> = 4: llama.cpp b11312's EOG set for this model ("printing all EOG tokens").
    assert_eq!(tok.eog_ids(), &[0, 2, 4]);
    assert!(tok.is_special(1) && tok.is_special(16) && !tok.is_special(17));
    assert_eq!(tok.token_bytes(1), b"<|im_start|>");
    assert_eq!(tok.token_bytes(198), b"\n");
    assert_eq!(tok.token_bytes(3575), b" capital");
    assert_eq!(
        tok.decode(&[1, 4093, 198, 2], false),
        "<|im_start|>user\n<|im_end|>"
    );
    assert_eq!(tok.decode(&[1, 4093, 198, 2], true), "user\n");
}

#[test]
fn special_text_is_plain_text_without_parse_special() {
    let Some(tok) = load() else { return };
    let with = tok.encode("<|im_start|>user", true).unwrap();
    assert_eq!(with, vec![1, 4093]);
    let without = tok.encode("<|im_start|>user", false).unwrap();
    assert!(!without.contains(&1), "{without:?}");
    assert!(without.len() > 2, "{without:?}");
    assert_eq!(tok.decode(&without, true), "<|im_start|>user");
}

#[test]
fn tricky_text_round_trips() {
    let Some(tok) = load() else { return };
    for text in [
        "",
        " ",
        "  leading and trailing  ",
        "tabs\tand\n\nnewlines\r\n",
        "I'm sure they'll say it's 12345.678 + 0x1F",
        "naïve café — 日本語のテキスト, Ελληνικά, עברית",
        "emoji 🦀👍🏽👨‍👩‍👧 and \u{0}",
        "fn main() {\n    println!(\"{}\", 1 << 3);\n}",
    ] {
        let ids = tok.encode(text, true).unwrap();
        assert_eq!(tok.decode(&ids, false), text);
    }
}

#[test]
fn incremental_decoder_holds_back_split_chars() {
    if load().is_none() {
        return;
    }
    // IncrementalDecoder owns an Arc, so this test builds its own copy.
    let tok = Arc::new(Tokenizer::from_gguf(&GgufFile::open(&model_path()).unwrap()).unwrap());
    let text = "Hi 🦀 and 👨‍👩‍👧 say 世界你好, ok";
    let ids = tok.encode(text, true).unwrap();
    // The emoji must really be split across tokens for this test to mean anything.
    assert!(
        ids.iter()
            .any(|&id| std::str::from_utf8(&tok.token_bytes(id)).is_err()),
        "no token ends mid-char: {ids:?}"
    );
    let mut dec = IncrementalDecoder::new(tok.clone(), true);
    let mut streamed = String::new();
    for &id in &ids {
        let chunk = dec.push(id);
        assert!(
            !chunk.contains('\u{FFFD}'),
            "U+FFFD mid-stream at token {id}"
        );
        streamed.push_str(&chunk);
    }
    streamed.push_str(&dec.flush());
    assert_eq!(streamed, tok.decode(&ids, true));
    assert_eq!(streamed, text);
}

#[test]
fn chat_template_renders_chatml_with_default_system_message() {
    let Some(tok) = load() else { return };
    assert!(tok.chat_template().unwrap().contains("<|im_start|>"));
    let msgs = [ChatMessage::new("user", "What is the capital of France?")];
    let got = tok.apply_chat_template(&msgs, true).unwrap();
    assert_eq!(
        got,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nWhat is the capital of France?<|im_end|>\n\
         <|im_start|>assistant\n"
    );
    let no_prompt = tok.apply_chat_template(&msgs, false).unwrap();
    assert_eq!(
        no_prompt,
        got.strip_suffix("<|im_start|>assistant\n").unwrap()
    );
}

#[test]
fn chat_template_with_system_message_reproduces_the_reference_prompt() {
    let Some(tok) = load() else { return };
    let msgs = [
        ChatMessage::new(
            "system",
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
        ),
        ChatMessage::new("user", "Write a haiku about the ocean."),
    ];
    let rendered = tok.apply_chat_template(&msgs, true).unwrap();
    let reference = reference();
    let haiku = reference["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "chat_system_haiku")
        .unwrap();
    assert_eq!(rendered, haiku["prompt_text"].as_str().unwrap());
    assert_eq!(
        tok.encode(&rendered, true).unwrap(),
        ids(&haiku["prompt_token_ids"])
    );
}

/// The bound a server uses to refuse text before tokenizing it: SmolLM2's longest token
/// is `\n` + 80 spaces (81 bytes), and no text encodes to fewer tokens than its bytes / 81,
/// not counting the bytes the vocabulary has no token for (it lacks e.g. \x04, which the
/// BPE drops).
#[test]
fn min_tokens_bounds_the_token_count() {
    let Some(tok) = load() else { return };
    assert_eq!(tok.max_token_bytes(), Some(81));
    assert_eq!(
        tok.encode(&"\u{4}".repeat(1000), false).unwrap(),
        Vec::<u32>::new()
    );
    assert_eq!(tok.min_tokens(&"\u{4}".repeat(1000)), 0);
    assert_eq!(tok.min_tokens(&"a".repeat(810)), 10);
    for text in [
        format!("\n{}", " ".repeat(80)).repeat(100),
        "#".repeat(10_000),
        " ".repeat(10_000),
        "<|im_start|>".repeat(50),
        "The quick brown fox jumps over the lazy dog. ".repeat(200),
        "日本語のテキスト 🦀".repeat(100),
        "a\u{4}b\u{6}c ".repeat(1000),
    ] {
        let n = tok.encode(&text, true).unwrap().len();
        let min = tok.min_tokens(&text);
        assert!(min <= n, "bound {min} > {n} tokens");
        assert!(
            min > 0 && min >= n / 100,
            "bound {min} useless for {n} tokens"
        );
    }
}

//! Checks against the real Gemma 3 270M GGUF (a SentencePiece vocabulary of 262144
//! tokens) and llama.cpp's token ids for it (testdata/gemma3-spm-tokens.json, made by
//! scripts/spm_tokens.py from llama.cpp's server). Each test skips with a notice when the
//! model file is absent.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use folio_gguf::GgufFile;
use folio_tokenizer::{ChatMessage, IncrementalDecoder, Tokenizer, TokenizerSpec};
use serde_json::Value;

/// `FOLIO_GEMMA_MODEL`, else the catalogue's `gemma3-270m` (fetched into `$FOLIO_HOME` on
/// first use, as `--model gemma3-270m` does; its path even if the fetch fails, so the
/// tests skip naming it).
fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("FOLIO_GEMMA_MODEL") {
        return PathBuf::from(p);
    }
    let e = folio_fetch::catalog::find("gemma3-270m").expect("catalogue entry");
    folio_fetch::ensure(e).unwrap_or_else(|err| {
        eprintln!("fetching gemma3-270m failed: {err:#}");
        folio_fetch::model_path(e)
    })
}

fn load() -> Option<Arc<Tokenizer>> {
    static TOK: OnceLock<Option<Arc<Tokenizer>>> = OnceLock::new();
    let tok = TOK.get_or_init(|| {
        let path = model_path();
        if !path.exists() {
            return None;
        }
        let f = GgufFile::open(&path).expect("open model");
        Some(Arc::new(Tokenizer::from_gguf(&f).expect("build tokenizer")))
    });
    if tok.is_none() {
        eprintln!("SKIPPED: the gemma3-270m file could not be had (set FOLIO_GEMMA_MODEL)");
    }
    tok.clone()
}

fn read_reference(name: &str) -> Value {
    let path = format!("{}/../../testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("read reference")).unwrap()
}

fn reference() -> Value {
    read_reference("gemma3-spm-tokens.json")
}

/// Fails listing every fixture string whose ids differ from llama.cpp's.
fn check_ids(tok: &Tokenizer, reference: &Value) {
    let cases = reference["cases"].as_array().unwrap();
    assert!(cases.len() >= 30);
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        for (parse_special, key) in [(true, "ids"), (false, "ids_no_parse_special")] {
            let want = ids(&case[key]);
            let got = tok.encode(text, parse_special).unwrap();
            if got != want {
                failures.push(format!(
                    "{text:?} parse_special={parse_special}:\n  got  {got:?}\n  want {want:?}"
                ));
            }
        }
        assert_eq!(
            tok.decode(&ids(&case["ids"]), false),
            case["detokenized"].as_str().unwrap(),
            "{text:?}"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
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
    assert_eq!(spec.model, "llama");
    assert_eq!(spec.tokens.len(), 262144);
    assert_eq!(spec.scores.len(), 262144);
    assert!(!spec.add_space_prefix);
    assert!(spec.add_bos && !spec.add_eos);
    assert_eq!((spec.bos_id, spec.eos_id), (Some(2), Some(1)));
    assert!(spec.chat_template.is_none());
}

#[test]
fn ids_match_llama_cpp_for_every_fixture_string() {
    let Some(tok) = load() else { return };
    check_ids(&tok, &reference());
}

/// The same vocabulary with `add_space_prefix` on (llama.cpp ran on a copy of the file
/// with that one key changed): the Llama 2 / Mistral / Phi-3 convention, a space before
/// the text at the start and after every special token (Gemma's `\n` and runs of spaces
/// are user-defined tokens, so this hits often).
#[test]
fn ids_match_llama_cpp_with_add_space_prefix() {
    let path = model_path();
    if !path.exists() {
        eprintln!("SKIPPED: model file {} not found", path.display());
        return;
    }
    let mut spec = TokenizerSpec::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    spec.add_space_prefix = true;
    let tok = Tokenizer::from_spec(spec).unwrap();
    check_ids(&tok, &read_reference("gemma3-spm-prefix-tokens.json"));
}

#[test]
fn decode_matches_llama_cpp_detokenize_and_round_trips() {
    let Some(tok) = load() else { return };
    let mut skipped = 0;
    for case in reference()["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let ids = ids(&case["ids"]);
        // llama.cpp's /detokenize renders special tokens (the leading <bos> included).
        assert_eq!(
            tok.decode(&ids, false),
            case["detokenized"].as_str().unwrap(),
            "{text:?}"
        );
        // Where llama.cpp round-trips (all but a text already holding `▁`, which both
        // read as a space), so must we: special tokens rendered, encode's BOS dropped.
        if case["detokenized"].as_str().unwrap() != format!("<bos>{text}") {
            assert!(text.contains('▁'), "{text:?}");
            skipped += 1;
            continue;
        }
        assert_eq!(tok.decode(&ids[1..], false), text, "{text:?}");
        let plain = tok.encode(text, false).unwrap();
        assert_eq!(tok.decode(&plain, true), text, "{text:?}");
    }
    assert_eq!(skipped, 1);
}

#[test]
fn streaming_matches_decode_without_replacement_chars() {
    let Some(tok) = load() else { return };
    for text in [
        "emoji 🦀👍🏽👨‍👩‍👧 ok",
        "🫠🪿🧌",
        "rare: 𝕏𝕚 ☃ ﬁ \u{ad} soft",
        "日本語のテキストです。",
    ] {
        let ids = tok.encode(text, false).unwrap();
        let mut dec = IncrementalDecoder::new(tok.clone(), true);
        let mut streamed = String::new();
        for &id in &ids {
            let chunk = dec.push(id);
            assert!(!chunk.contains('\u{FFFD}'), "U+FFFD mid-stream in {text:?}");
            streamed.push_str(&chunk);
        }
        streamed.push_str(&dec.flush());
        assert_eq!(streamed, text);
    }
    // 🪿 is spelled with byte tokens, so a char really is split across tokens here.
    let ids = tok.encode("🪿", false).unwrap();
    assert!(ids.len() > 1, "{ids:?}");
}

#[test]
fn special_ids_end_of_generation_and_chat_format() {
    let Some(tok) = load() else { return };
    assert_eq!((tok.bos_id(), tok.eos_id()), (Some(2), Some(1)));
    // <eos> 1, <end_of_turn> 106, and </s> 212 (made a control token, as llama.cpp).
    assert_eq!(tok.eog_ids(), &[1, 106, 212]);
    assert_eq!(tok.eot_id(), Some(106));
    assert!(tok.is_special(2) && tok.is_special(106) && tok.is_special(212));
    assert_eq!(tok.decode(&[2, 105, 2364, 107], true), "user\n");

    let msgs = [
        ChatMessage::new("system", "Answer briefly."),
        ChatMessage::new("user", "What is the capital of France?"),
    ];
    let prompt = tok.apply_chat_template(&msgs, true).unwrap();
    assert_eq!(
        prompt,
        "<start_of_turn>user\nAnswer briefly.\n\nWhat is the capital of France?<end_of_turn>\n\
         <start_of_turn>model\n"
    );
    let ids = tok.encode(&prompt, true).unwrap();
    assert_eq!(&ids[..4], &[2, 105, 2364, 107]);
    assert_eq!(&ids[ids.len() - 3..], &[105, 4368, 107]);
}

/// SentencePiece: every byte becomes part of a token (byte fallback), so the bound holds.
#[test]
fn min_tokens_bounds_the_token_count() {
    let Some(tok) = load() else { return };
    let m = tok
        .max_token_bytes()
        .expect("SentencePiece with byte fallback");
    assert!((16..=64).contains(&m), "{m}");
    assert_eq!(tok.min_tokens(&"\u{4}".repeat(1000)), 1000usize.div_ceil(m));
    for text in [
        "─".repeat(5000),
        " ".repeat(10_000),
        "\n".repeat(10_000),
        "<start_of_turn>user\nhi<end_of_turn>".repeat(50),
        "naïve café — 日本語のテキスト 🦀".repeat(100),
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

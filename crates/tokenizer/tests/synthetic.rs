//! A tokenizer built from a tiny in-memory vocabulary (no model file): exact ids, special
//! token handling, BOS/EOS, round trips, and GGUF metadata handling through folio-gguf.

mod common;

use common::*;
use folio_gguf::{GgufFile, GgufWriter, Value};
use folio_tokenizer::{Tokenizer, TokenizerError, TokenizerSpec};

fn tiny() -> Tokenizer {
    Tokenizer::from_spec(tiny_spec()).unwrap()
}

#[test]
fn merges_apply_in_rank_order() {
    let tok = tiny();
    assert_eq!(tok.encode(" the", false).unwrap(), vec![G_THE]);
    // "the" has no "t he" rule; " hello" merges "h e" then "l o".
    assert_eq!(
        tok.encode("the hello", false).unwrap(),
        vec![byte_id(b't'), HE, byte_id(b' '), HE, byte_id(b'l'), LO]
    );
    assert_eq!(tok.encode("", true).unwrap(), Vec::<u32>::new());
}

#[test]
fn control_tokens_need_parse_special_but_user_defined_always_match() {
    let tok = tiny();
    assert_eq!(
        tok.encode("<s>x<|end|>", true).unwrap(),
        vec![BOS, byte_id(b'x'), END]
    );
    assert_eq!(
        tok.encode("<s>", false).unwrap(),
        vec![byte_id(b'<'), byte_id(b's'), byte_id(b'>')]
    );
    assert_eq!(
        tok.encode("a<tag>", false).unwrap(),
        vec![byte_id(b'a'), TAG]
    );
    assert_eq!(
        tok.encode("a<tag>", true).unwrap(),
        vec![byte_id(b'a'), TAG]
    );
}

#[test]
fn bos_and_eos_are_added_only_when_the_spec_says_so() {
    let mut spec = tiny_spec();
    spec.add_bos = true;
    spec.add_eos = true;
    let tok = Tokenizer::from_spec(spec).unwrap();
    assert_eq!(tok.encode(" the", true).unwrap(), vec![BOS, G_THE, END]);
    assert_eq!(tok.encode("", true).unwrap(), vec![BOS, END]);
}

#[test]
fn decode_and_token_bytes() {
    let tok = tiny();
    let ids = [BOS, G_THE, byte_id(b'!'), TAG, END, 99_999];
    assert_eq!(tok.decode(&ids, false), "<s> the!<tag><|end|>");
    assert_eq!(tok.decode(&ids, true), " the!<tag>");
    assert_eq!(tok.token_bytes(G_T), b" t");
    assert_eq!(tok.token_bytes(byte_id(0xF0)), [0xF0]);
    assert_eq!(tok.token_bytes(END), b"<|end|>");
    assert_eq!(tok.token_bytes(99_999), b"");
    assert!(tok.is_special(END) && tok.is_special(BOS));
    assert!(!tok.is_special(TAG) && !tok.is_special(G_THE) && !tok.is_special(99_999));
    assert_eq!(tok.vocab_size(), 264);
    assert_eq!(tok.eog_ids(), &[END]);
}

#[test]
fn text_round_trips_through_the_tiny_vocab() {
    let tok = tiny();
    for text in [
        "the hello world",
        "  spaced\tout\n\n",
        "naïve 日本 🦀 <s> <tag> <|end|>",
        "12345 it's",
        "\u{0}\u{7f}\u{ff}",
    ] {
        let ids = tok.encode(text, false).unwrap();
        assert_eq!(tok.decode(&ids, false), text, "{text:?}");
        let ids = tok.encode(text, true).unwrap();
        assert_eq!(tok.decode(&ids, false), text, "{text:?}");
    }
}

/// llama.cpp also ends generation at the fill-in-the-middle pad, repository and
/// file-separator tokens (Qwen2.5-Coder's `<|fim_pad|>`, `<|repo_name|>`, `<|file_sep|>`),
/// typed control whatever the file says; the other FIM tokens stay ordinary.
#[test]
fn fim_pad_repo_and_file_separator_join_the_eog_set() {
    let mut spec = tiny_spec();
    let first = spec.tokens.len() as u32;
    for t in [
        "<|fim_pad|>",
        "<|repo_name|>",
        "<|file_sep|>",
        "<|fim_middle|>",
    ] {
        spec.tokens.push(t.into());
        spec.token_types.push(1);
    }
    let tok = Tokenizer::from_spec(spec).unwrap();
    for id in first..first + 3 {
        assert!(tok.is_eog(id) && tok.is_special(id), "{id}");
    }
    assert!(!tok.is_eog(first + 3));
}

#[test]
fn end_of_turn_texts_join_the_eog_set() {
    let mut spec = tiny_spec();
    spec.tokens[0] = "<|im_end|>".into();
    spec.tokens.push("<|endoftext|>".into());
    spec.token_types.push(3);
    spec.eos_id = Some(BOS);
    let tok = Tokenizer::from_spec(spec).unwrap();
    assert_eq!(tok.eog_ids(), &[0, 1, 264]);
    assert_eq!(tok.eot_id(), Some(0));
    assert!(tok.is_eog(264) && !tok.is_eog(2));
}

#[test]
fn bad_specs_give_errors_that_name_the_problem() {
    let err = |spec: TokenizerSpec| Tokenizer::from_spec(spec).err().unwrap().to_string();

    let mut s = tiny_spec();
    s.model = "bert".into();
    assert!(err(s).contains("unsupported tokenizer model \"bert\""));

    let mut s = tiny_spec();
    s.pre = Some("klingon".into());
    assert!(err(s).contains("\"klingon\""));

    let mut s = tiny_spec();
    s.token_types.pop();
    assert_eq!(
        err(s),
        "tokenizer metadata \"tokenizer.ggml.token_type\" has 263 entries but the vocabulary has 264 tokens"
    );

    let mut s = tiny_spec();
    s.eos_id = Some(264);
    assert_eq!(
        err(s),
        "tokenizer metadata \"tokenizer.ggml.eos_token_id\" is 264, outside the vocabulary of 264 tokens"
    );

    let mut s = tiny_spec();
    s.merges.push("nospace".into());
    assert!(err(s).contains("merge rule #5"));

    let mut s = tiny_spec();
    s.tokens.clear();
    s.token_types.clear();
    assert!(err(s).contains("vocabulary size 0"));
}

fn write_gguf(spec: &TokenizerSpec, extra: &[(&str, Value)]) -> GgufFile {
    let strings = |v: &[String]| Value::Array(v.iter().cloned().map(Value::String).collect());
    let mut w = GgufWriter::new();
    w.add_metadata("tokenizer.ggml.model", Value::String(spec.model.clone()));
    w.add_metadata("tokenizer.ggml.tokens", strings(&spec.tokens));
    w.add_metadata(
        "tokenizer.ggml.token_type",
        Value::Array(spec.token_types.iter().map(|&t| Value::I32(t)).collect()),
    );
    w.add_metadata("tokenizer.ggml.merges", strings(&spec.merges));
    for (k, v) in extra {
        w.add_metadata(k, v.clone());
    }
    GgufFile::from_bytes(w.to_bytes()).unwrap()
}

#[test]
fn spec_reads_gguf_metadata_with_llama_cpp_defaults() {
    let spec = tiny_spec();
    let f = write_gguf(
        &spec,
        &[
            ("tokenizer.ggml.pre", Value::String("gpt2".into())),
            ("tokenizer.ggml.bos_token_id", Value::U32(BOS)),
            ("tokenizer.ggml.eos_token_id", Value::U32(END)),
            ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
        ],
    );
    assert_eq!(TokenizerSpec::from_gguf(&f).unwrap(), spec);
    let tok = Tokenizer::from_gguf(&f).unwrap();
    assert_eq!(tok.encode(" the", false).unwrap(), vec![G_THE]);

    // No pre means llama.cpp's "default"; llama3 pre-tokenizers add BOS by default.
    let f = write_gguf(&spec, &[]);
    let read = TokenizerSpec::from_gguf(&f).unwrap();
    assert_eq!((read.pre, read.add_bos, read.bos_id), (None, false, None));
    let f = write_gguf(
        &spec,
        &[("tokenizer.ggml.pre", Value::String("llama-bpe".into()))],
    );
    assert!(TokenizerSpec::from_gguf(&f).unwrap().add_bos);
}

#[test]
fn gguf_type_errors_name_the_key() {
    let spec = tiny_spec();
    let f = write_gguf(
        &spec,
        &[("tokenizer.ggml.bos_token_id", Value::String("1".into()))],
    );
    let err = TokenizerSpec::from_gguf(&f).unwrap_err();
    assert!(matches!(
        err,
        TokenizerError::WrongType {
            field: "tokenizer.ggml.bos_token_id",
            ..
        }
    ));
    assert!(err.to_string().contains("string \"1\""), "{err}");

    let mut w = GgufWriter::new();
    w.add_metadata("tokenizer.ggml.model", Value::String("gpt2".into()));
    let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(
        TokenizerSpec::from_gguf(&f).unwrap_err().to_string(),
        "tokenizer metadata \"tokenizer.ggml.tokens\" is missing"
    );
}

//! A SentencePiece (`tokenizer.ggml.model = "llama"`) tokenizer on a tiny hand-made
//! vocabulary: exact ids for llama.cpp's score-ordered merges, ties, byte fallback and
//! unknown, the space prefix, special tokens, decoding, streaming and metadata errors.
//!
//! ids: 0 `<unk>`, 1 `<s>`, 2 `</s>` (control), 3 `<tag>` (user-defined),
//! 4..=259 the byte tokens `<0x00>`..`<0xFF>` (byte b is 4 + b), then the normal tokens
//! listed in [`NORMAL`] from 260 on.

use std::sync::Arc;

use folio_gguf::{GgufFile, GgufWriter, Value};
use folio_tokenizer::{
    token_type, ChatMessage, IncrementalDecoder, Tokenizer, TokenizerError, TokenizerSpec,
};

const UNK: u32 = 0;
const BOS: u32 = 1;
const EOS: u32 = 2;
const TAG: u32 = 3;

/// Normal tokens and their scores, ids 260.. in order.
const NORMAL: &[(&str, f32)] = &[
    ("▁", -1.0),    // 260
    ("a", -2.0),    // 261
    ("b", -2.0),    // 262
    ("c", -2.0),    // 263
    ("d", -2.0),    // 264
    ("ab", -3.0),   // 265
    ("bc", -4.0),   // 266
    ("cd", -3.5),   // 267
    ("abcd", -6.0), // 268
    ("▁ab", -2.5),  // 269
    ("aa", -3.0),   // 270
    ("x", -2.0),    // 271
    ("y", -2.0),    // 272
    ("z", -2.0),    // 273
    ("xy", -3.0),   // 274
    ("yz", -3.0),   // 275
    ("日", -2.0),   // 276
];

const SP: u32 = 260;
const A: u32 = 261;
const B: u32 = 262;
const C: u32 = 263;
const D: u32 = 264;
const AB: u32 = 265;
const BC: u32 = 266;
const CD: u32 = 267;
const ABCD: u32 = 268;
const SP_AB: u32 = 269;
const AA: u32 = 270;
const X: u32 = 271;
const Y: u32 = 272;
const Z: u32 = 273;
const XY: u32 = 274;
const YZ: u32 = 275;
const NICHI: u32 = 276;

fn byte(b: u8) -> u32 {
    4 + u32::from(b)
}

fn spm_spec(add_space_prefix: bool) -> TokenizerSpec {
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>", "<tag>"].map(String::from).to_vec();
    let mut token_types = vec![
        token_type::UNKNOWN,
        token_type::CONTROL,
        token_type::CONTROL,
        token_type::USER_DEFINED,
    ];
    let mut scores = vec![0.0; 4];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        token_types.push(token_type::BYTE);
        scores.push(0.0);
    }
    for &(t, s) in NORMAL {
        tokens.push(t.into());
        token_types.push(token_type::NORMAL);
        scores.push(s);
    }
    TokenizerSpec {
        model: "llama".into(),
        tokens,
        token_types,
        scores,
        bos_id: Some(BOS),
        eos_id: Some(EOS),
        unk_id: Some(UNK),
        add_space_prefix,
        add_bos: false,
        ..TokenizerSpec::default()
    }
}

fn spm(add_space_prefix: bool) -> Tokenizer {
    Tokenizer::from_spec(spm_spec(add_space_prefix)).unwrap()
}

#[test]
fn the_highest_scoring_merge_goes_first() {
    let tok = spm(false);
    let enc = |s| tok.encode(s, true).unwrap();
    // ab (-3) beats bc (-4); cd (-3.5) beats bc (-4).
    assert_eq!(enc("abc"), [AB, C]);
    assert_eq!(enc("bcd"), [B, CD]);
    // ab, then cd (bc went stale), then ab+cd: a merge only happens when the merged
    // text is a token, and merged symbols keep merging.
    assert_eq!(enc("abcd"), [ABCD]);
    assert_eq!(enc("dabcd"), [D, ABCD]);
}

#[test]
fn equal_scores_merge_leftmost_first() {
    let tok = spm(false);
    let enc = |s| tok.encode(s, true).unwrap();
    assert_eq!(enc("xyz"), [XY, Z]);
    assert_eq!(enc("aaa"), [AA, A]);
    assert_eq!(enc("aaaaa"), [AA, AA, A]);
    assert_eq!(enc("yzxyz"), [YZ, XY, Z]);
    // No pair is a token: one token per char.
    assert_eq!(enc("yx"), [Y, X]);
}

#[test]
fn unknown_chars_fall_back_to_byte_tokens_then_unk() {
    let tok = spm(false);
    let enc = |s| tok.encode(s, true).unwrap();
    assert_eq!(enc("é"), [byte(0xC3), byte(0xA9)]);
    assert_eq!(
        enc("a🦀日"),
        [A, byte(0xF0), byte(0x9F), byte(0xA6), byte(0x80), NICHI]
    );
    assert_eq!(enc("\n"), [byte(b'\n')]);

    // Without a <0xC3> token the byte becomes <unk>.
    let mut spec = spm_spec(false);
    spec.tokens[byte(0xC3) as usize] = "<unused>".into();
    spec.token_types[byte(0xC3) as usize] = token_type::UNUSED;
    let tok = Tokenizer::from_spec(spec.clone()).unwrap();
    assert_eq!(tok.encode("é", true).unwrap(), [UNK, byte(0xA9)]);

    // With no unknown token either, encoding fails with an error naming the byte.
    spec.unk_id = None;
    let tok = Tokenizer::from_spec(spec).unwrap();
    let err = tok.encode("é", true).unwrap_err();
    assert!(
        matches!(err, TokenizerError::NoByteToken { byte: 0xC3 }),
        "{err}"
    );
    assert!(err.to_string().contains("<0xC3>"), "{err}");
}

#[test]
fn space_prefix_at_the_start_and_after_special_tokens() {
    let tok = spm(true);
    let enc = |s, special| tok.encode(s, special).unwrap();
    assert_eq!(enc("ab", true), [SP_AB]);
    assert_eq!(enc(" ab", true), [SP, SP_AB]);
    assert_eq!(enc("a  b", true), [SP, A, SP, SP, B]);
    assert_eq!(enc("", true), Vec::<u32>::new());
    // After a control token (parsed) and a user-defined one (always), not after text.
    assert_eq!(enc("ab<s>ab", true), [SP_AB, BOS, SP_AB]);
    assert_eq!(enc("ab<tag>ab", false), [SP_AB, TAG, SP_AB]);
    assert_eq!(enc("<s><s>", true), [BOS, BOS]);
    // Unparsed, "<s>" is text: its chars are not tokens, so bytes.
    assert_eq!(
        enc("<s>ab", false),
        [SP, byte(b'<'), byte(b's'), byte(b'>'), AB]
    );

    let tok = spm(false);
    let enc = |s, special| tok.encode(s, special).unwrap();
    assert_eq!(enc("ab", true), [AB]);
    assert_eq!(enc(" ab", true), [SP_AB]);
    assert_eq!(enc("ab<s>ab", true), [AB, BOS, AB]);
    assert_eq!(enc(" ", true), [SP]);
}

#[test]
fn bos_and_eos_follow_the_spec() {
    let mut spec = spm_spec(true);
    spec.add_bos = true;
    spec.add_eos = true;
    let tok = Tokenizer::from_spec(spec).unwrap();
    assert_eq!(tok.encode("ab", true).unwrap(), [BOS, SP_AB, EOS]);
    // Empty text is BOS (and EOS) alone: no space is prefixed to nothing.
    assert_eq!(tok.encode("", true).unwrap(), [BOS, EOS]);
    assert_eq!(tok.encode("<s>", true).unwrap(), [BOS, BOS, EOS]);
}

#[test]
fn decode_maps_spaces_bytes_and_specials() {
    let tok = spm(true);
    let ids = [
        BOS,
        SP_AB,
        SP,
        byte(0xC3),
        byte(0xA9),
        TAG,
        EOS,
        UNK,
        99_999,
    ];
    assert_eq!(tok.decode(&ids, false), "<s> ab é<tag></s><unk>");
    assert_eq!(tok.decode(&ids, true), " ab é<tag>");
    assert_eq!(tok.token_bytes(SP_AB), b" ab");
    assert_eq!(tok.token_bytes(byte(0xFF)), [0xFF]);
    assert_eq!(tok.token_bytes(BOS), b"<s>");
    assert!(tok.is_special(BOS) && tok.is_special(UNK) && tok.is_special(EOS));
    assert!(!tok.is_special(TAG) && !tok.is_special(byte(0)) && !tok.is_special(AB));
    assert_eq!(tok.eog_ids(), &[EOS]);
    assert_eq!(tok.vocab_size(), 260 + NORMAL.len());

    for text in ["abcd xyz", "  a\tb\n", "é 🦀 日本"] {
        let ids = tok.encode(text, false).unwrap();
        // The space prefix comes back as a leading space.
        assert_eq!(tok.decode(&ids, false), format!(" {text}"), "{text:?}");
    }
    let tok = spm(false);
    for text in ["abcd xyz", "  a\tb\n", "é 🦀 日本", "<s> <tag> </s>"] {
        let ids = tok.encode(text, false).unwrap();
        assert_eq!(tok.decode(&ids, false), text, "{text:?}");
        let ids = tok.encode(text, true).unwrap();
        assert_eq!(tok.decode(&ids, false), text, "{text:?}");
    }
}

#[test]
fn streaming_assembles_chars_from_byte_tokens() {
    let tok = Arc::new(spm(false));
    let ids = tok.encode("aé🦀 b", true).unwrap();
    let mut dec = IncrementalDecoder::new(tok.clone(), true);
    let chunks: Vec<String> = ids.iter().map(|&id| dec.push(id)).collect();
    assert_eq!(chunks, ["a", "", "é", "", "", "", "🦀", " ", "b"]);
    assert_eq!(dec.flush(), "");
}

#[test]
fn malformed_vocabularies_are_errors_naming_the_field() {
    let err = |spec: TokenizerSpec| Tokenizer::from_spec(spec).err().unwrap().to_string();

    let mut s = spm_spec(true);
    s.scores.pop();
    assert_eq!(
        err(s),
        "tokenizer metadata \"tokenizer.ggml.scores\" has 276 entries but the vocabulary has 277 tokens"
    );

    let mut s = spm_spec(true);
    s.tokens[byte(7) as usize] = "<0x7>".into();
    let e = err(s);
    assert!(e.contains("token #11") && e.contains("\"<0x7>\""), "{e}");

    let mut s = spm_spec(true);
    s.unk_id = Some(1000);
    assert!(err(s).contains("\"tokenizer.ggml.unknown_token_id\" is 1000"));

    let mut s = spm_spec(true);
    s.token_types.pop();
    assert!(err(s).contains("\"tokenizer.ggml.token_type\" has 276 entries"));

    // No scores at all is llama.cpp's all-zero scores: ties everywhere, leftmost first.
    let mut s = spm_spec(false);
    s.scores.clear();
    let tok = Tokenizer::from_spec(s).unwrap();
    assert_eq!(tok.encode("abcd", true).unwrap(), [ABCD]);
    assert_eq!(tok.encode("bcd", true).unwrap(), [BC, D]);
}

fn write_gguf(spec: &TokenizerSpec, extra: &[(&str, Value)]) -> GgufFile {
    let mut w = GgufWriter::new();
    w.add_metadata("tokenizer.ggml.model", Value::String(spec.model.clone()));
    w.add_metadata(
        "tokenizer.ggml.tokens",
        Value::Array(spec.tokens.iter().cloned().map(Value::String).collect()),
    );
    w.add_metadata(
        "tokenizer.ggml.token_type",
        Value::Array(spec.token_types.iter().map(|&t| Value::I32(t)).collect()),
    );
    w.add_metadata(
        "tokenizer.ggml.scores",
        Value::Array(spec.scores.iter().map(|&s| Value::F32(s)).collect()),
    );
    for (k, v) in extra {
        w.add_metadata(k, v.clone());
    }
    GgufFile::from_bytes(w.to_bytes()).unwrap()
}

#[test]
fn gguf_metadata_with_llama_cpp_spm_defaults() {
    let spec = spm_spec(false);
    // Nothing but tokens, types and scores: BOS 1, EOS 2, unknown 0, add BOS, prefix space.
    let read = TokenizerSpec::from_gguf(&write_gguf(&spec, &[])).unwrap();
    assert_eq!(read.scores, spec.scores);
    assert_eq!(
        (read.bos_id, read.eos_id, read.unk_id),
        (Some(1), Some(2), Some(0))
    );
    assert!(read.add_bos && !read.add_eos && read.add_space_prefix);
    let tok = Tokenizer::from_spec(read).unwrap();
    assert_eq!(tok.encode("ab", true).unwrap(), [BOS, SP_AB]);

    let f = write_gguf(
        &spec,
        &[
            ("tokenizer.ggml.add_space_prefix", Value::Bool(false)),
            ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
            ("tokenizer.ggml.unknown_token_id", Value::U32(3)),
            ("general.name", Value::String("tiny".into())),
        ],
    );
    let read = TokenizerSpec::from_gguf(&f).unwrap();
    assert!(!read.add_bos && !read.add_space_prefix);
    assert_eq!((read.unk_id, read.name.as_deref()), (Some(3), Some("tiny")));

    let f = write_gguf(
        &spec,
        &[("tokenizer.ggml.scores", Value::String("no".into()))],
    );
    let e = TokenizerSpec::from_gguf(&f).unwrap_err();
    assert!(matches!(
        e,
        TokenizerError::WrongType {
            field: "tokenizer.ggml.scores",
            ..
        }
    ));
}

#[test]
fn phi3_special_tokens_strip_whitespace_to_their_right() {
    let mut spec = spm_spec(false);
    spec.tokens.push("<|end|>".into());
    spec.token_types.push(token_type::CONTROL);
    spec.scores.push(0.0);
    let end = spec.tokens.len() as u32 - 1;
    let plain = Tokenizer::from_spec(spec.clone()).unwrap();
    assert_eq!(plain.encode("<|end|> a", true).unwrap(), [end, SP, A]);
    // `<|end|>` is also an end-of-generation text.
    assert!(plain.is_eog(end));

    spec.name = Some("Phi-3 mini".into());
    let phi3 = Tokenizer::from_spec(spec).unwrap();
    assert_eq!(phi3.encode("<|end|> \n a", true).unwrap(), [end, A]);
    assert_eq!(
        phi3.encode("<tag> a</s>\nb", true).unwrap(),
        [TAG, A, EOS, B]
    );
    // `<s>` and `<unk>` keep what follows them.
    assert_eq!(phi3.encode("<s> a", true).unwrap(), [BOS, SP, A]);
}

#[test]
fn gemma_turns_without_a_template_use_llama_cpp_gemma_format() {
    // Expected texts are llama.cpp's (`llama-server --no-jinja --chat-template gemma`,
    // POST /apply-template).
    let mut spec = spm_spec(false);
    for t in ["<start_of_turn>", "<end_of_turn>"] {
        spec.tokens.push(t.into());
        spec.token_types.push(token_type::CONTROL);
        spec.scores.push(0.0);
    }
    let tok = Tokenizer::from_spec(spec).unwrap();
    let msgs = [
        ChatMessage::new("system", " Be brief. "),
        ChatMessage::new("user", "Hi\n"),
        ChatMessage::new("assistant", "Hello."),
        ChatMessage::new("user", "Bye"),
    ];
    assert_eq!(
        tok.apply_chat_template(&msgs, true).unwrap(),
        "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n\
         <start_of_turn>model\nHello.<end_of_turn>\n\
         <start_of_turn>user\nBye<end_of_turn>\n\
         <start_of_turn>model\n"
    );
    // Also from llama-server --no-jinja --chat-template gemma: system messages join
    // with nothing between and wait for the first user turn.
    let msgs2 = [
        ChatMessage::new("system", "A"),
        ChatMessage::new("system", "B"),
        ChatMessage::new("assistant", "x"),
        ChatMessage::new("user", "u"),
    ];
    assert_eq!(
        tok.apply_chat_template(&msgs2, true).unwrap(),
        "<start_of_turn>model\nx<end_of_turn>\n<start_of_turn>user\nAB\n\nu<end_of_turn>\n\
         <start_of_turn>model\n"
    );
    assert_eq!(
        tok.apply_chat_template(&msgs[1..2], false).unwrap(),
        "<start_of_turn>user\nHi<end_of_turn>\n"
    );
    // `<end_of_turn>` ends generation.
    assert_eq!(tok.eog_ids(), &[EOS, 278]);
    // Vocabularies without Gemma's turn tokens still have no template.
    assert!(matches!(
        spm(false).apply_chat_template(&msgs, true),
        Err(TokenizerError::NoChatTemplate)
    ));
}

#[test]
fn end_of_generation_texts_and_llama_cpp_exceptions() {
    let with = |texts: &[&str]| {
        let mut spec = spm_spec(false);
        for t in texts {
            spec.tokens.push((*t).into());
            // Typed normal: llama.cpp makes end-of-generation texts control tokens.
            spec.token_types.push(token_type::NORMAL);
            spec.scores.push(0.0);
        }
        Tokenizer::from_spec(spec).unwrap()
    };
    // 277 <|end|>, 278 <eos>.
    let tok = with(&["<|end|>", "<eos>"]);
    assert_eq!(tok.eog_ids(), &[EOS, 277, 278]);
    assert!(tok.is_special(277));
    assert_eq!(tok.encode("<|end|>", true).unwrap(), [277]);
    assert_ne!(tok.encode("<|end|>", false).unwrap(), [277]);

    // gpt-oss: with <|return|> and <|call|>, <|end|> is user-defined text, not EOG.
    let tok = with(&["<|end|>", "<|return|>", "<|call|>"]);
    assert_eq!(tok.eog_ids(), &[EOS, 278, 279]);
    assert!(!tok.is_special(277));
    assert_eq!(tok.encode("<|end|>", false).unwrap(), [277]);

    // gpt-oss's header markers are always rendered (llama.cpp retypes them user-defined),
    // so a completion read without special tokens still shows its channels; <|end|> too,
    // while <|return|> and <|call|> end generation and are special.
    let mut spec = spm_spec(false);
    for t in [
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|start|>",
        "<|channel|>",
        "<|message|>",
        "<|constrain|>",
    ] {
        spec.tokens.push(t.into());
        spec.token_types.push(token_type::CONTROL);
        spec.scores.push(0.0);
    }
    let tok = Tokenizer::from_spec(spec).unwrap();
    assert_eq!(tok.eog_ids(), &[EOS, 278, 279]);
    for id in [277, 280, 281, 282, 283] {
        assert!(!tok.is_special(id), "{id}");
    }
    assert!(tok.is_special(278) && tok.is_special(279));
    let ids = [280, 281, 282, 277, 279];
    assert_eq!(
        tok.decode(&ids, true),
        "<|start|><|channel|><|message|><|end|>"
    );
    assert_eq!(
        tok.decode(&ids, false),
        "<|start|><|channel|><|message|><|end|><|call|>"
    );

    // Gemma 4: with <|tool_response>, </s> is a normal token.
    let mut spec = spm_spec(false);
    spec.tokens[EOS as usize] = "<eos>".into();
    spec.tokens.push("</s>".into());
    spec.tokens.push("<|tool_response>".into());
    spec.token_types
        .extend([token_type::NORMAL, token_type::CONTROL]);
    spec.scores.extend([0.0, 0.0]);
    let tok = Tokenizer::from_spec(spec).unwrap();
    assert_eq!(tok.eog_ids(), &[EOS, 278]);
    assert!(!tok.is_special(277));
}

/// GPT-OSS's chat template (llama.cpp's models/templates/openai-gpt-oss-120b.jinja, as the
/// GGUF carries it) renders the harmony prompt: the texts below are Python jinja2's with
/// Hugging Face's settings, the date left out (it is today's).
#[test]
fn gpt_oss_template_renders_harmony() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/templates/openai-gpt-oss-120b.jinja"
    );
    let mut tok = Tokenizer::from_spec(spm_spec(false)).unwrap();
    tok.set_chat_template(&std::fs::read_to_string(path).unwrap())
        .unwrap();
    let undated = |s: String| {
        let i = s.find("Current date: ").expect("a date line") + "Current date: ".len();
        format!("{}DATE{}", &s[..i], &s[i + "YYYY-MM-DD".len()..])
    };
    let head = "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: DATE\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>";
    let msgs = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "What is 2+2?"),
    ];
    assert_eq!(
        undated(tok.apply_chat_template(&msgs, true).unwrap()),
        format!("{head}<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|><|start|>user<|message|>What is 2+2?<|end|><|start|>assistant")
    );
    let msgs = [
        ChatMessage::new("user", "Hi"),
        ChatMessage::new("assistant", "Hello!"),
        ChatMessage::new("user", "Thanks"),
    ];
    assert_eq!(
        undated(tok.apply_chat_template(&msgs, true).unwrap()),
        format!("{head}<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|end|><|start|>user<|message|>Thanks<|end|><|start|>assistant")
    );
    // `reasoning_effort` through the template's variables.
    let mut kw = serde_json::Map::new();
    kw.insert("reasoning_effort".into(), "high".into());
    let high = tok.apply_chat_template_with(&msgs[..1], true, &kw).unwrap();
    assert!(high.contains("\nReasoning: high\n"), "{high}");
}

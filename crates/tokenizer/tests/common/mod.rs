//! A tiny byte-level vocabulary for tests that need no model file.
//!
//! ids: 0 `<|end|>` (control), 1 `<s>` (control), 2 `<tag>` (user-defined),
//! 3..=258 the 256 single bytes (byte b has id 3 + b), then merged tokens
//! 259 `Ġt`, 260 `he`, 261 `Ġthe`, 262 `lo`, 263 `Ġw`.

#![allow(dead_code)]

use folio_tokenizer::{token_type, TokenizerSpec};

/// GPT-2's byte → char alphabet.
pub fn byte_char(b: u8) -> char {
    let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable {
        return char::from(b);
    }
    let rank = (0..b)
        .filter(|&x| !matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF))
        .count() as u32;
    char::from_u32(256 + rank).unwrap()
}

pub fn byte_id(b: u8) -> u32 {
    3 + u32::from(b)
}

pub const END: u32 = 0;
pub const BOS: u32 = 1;
pub const TAG: u32 = 2;
pub const G_T: u32 = 259;
pub const HE: u32 = 260;
pub const G_THE: u32 = 261;
pub const LO: u32 = 262;

pub fn tiny_spec() -> TokenizerSpec {
    let mut tokens: Vec<String> = vec!["<|end|>".into(), "<s>".into(), "<tag>".into()];
    let mut token_types = vec![
        token_type::CONTROL,
        token_type::CONTROL,
        token_type::USER_DEFINED,
    ];
    for b in 0..=255u8 {
        tokens.push(byte_char(b).to_string());
        token_types.push(token_type::NORMAL);
    }
    for t in ["Ġt", "he", "Ġthe", "lo", "Ġw"] {
        tokens.push(t.into());
        token_types.push(token_type::NORMAL);
    }
    TokenizerSpec {
        model: "gpt2".into(),
        name: None,
        pre: Some("gpt2".into()),
        tokens,
        token_types,
        scores: Vec::new(),
        merges: ["Ġ t", "h e", "Ġt he", "l o", "Ġ w"]
            .map(String::from)
            .to_vec(),
        bos_id: Some(BOS),
        eos_id: Some(END),
        eot_id: None,
        unk_id: None,
        add_space_prefix: false,
        add_bos: false,
        add_eos: false,
        chat_template: None,
    }
}

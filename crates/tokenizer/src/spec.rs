//! [`TokenizerSpec`]: everything a tokenizer is built from, as plain data.
//!
//! Kept separate from [`crate::Tokenizer`] so tests (and other formats) can build a
//! tokenizer without a GGUF file, and so the GGUF key handling lives in one place.

use folio_gguf::{GgufFile, Value};

use crate::error::{Result, TokenizerError};

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
pub mod token_type {
    /// An ordinary vocabulary entry.
    pub const NORMAL: i32 = 1;
    /// The unknown-token placeholder.
    pub const UNKNOWN: i32 = 2;
    /// A control token such as `<|im_start|>`: never produced by plain text.
    pub const CONTROL: i32 = 3;
    /// An added token matched verbatim in the input even without special parsing.
    pub const USER_DEFINED: i32 = 4;
    /// A reserved slot.
    pub const UNUSED: i32 = 5;
    /// A byte-fallback token (`<0x0A>`), used by SentencePiece vocabularies.
    pub const BYTE: i32 = 6;
}

/// The tokenizer description found in a GGUF file's `tokenizer.*` metadata.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TokenizerSpec {
    /// `tokenizer.ggml.model`: `"gpt2"` (byte-level BPE) or `"llama"` (SentencePiece);
    /// anything else is reported as unsupported by [`crate::Tokenizer::from_spec`].
    pub model: String,
    /// `general.name`: llama.cpp gives special tokens of models named Phi-3 the
    /// "strip whitespace to the right" attribute.
    pub name: Option<String>,
    /// `tokenizer.ggml.pre`: selects the regexes that split text before BPE
    /// (`smollm`, `llama-bpe`, `qwen2`, `gpt2`, `default`, …). `None` means `default`.
    pub pre: Option<String>,
    /// Token texts; the id of a token is its position.
    pub tokens: Vec<String>,
    /// One [`token_type`] per token; empty means all normal.
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.scores`: SentencePiece merge priority per token (higher merges
    /// first); empty means all 0. Unused by BPE.
    pub scores: Vec<f32>,
    /// BPE merge rules, `"LEFT RIGHT"`, highest priority first.
    pub merges: Vec<String>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos_id: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos_id: Option<u32>,
    /// `tokenizer.ggml.eot_token_id`; when absent the tokenizer looks for well-known
    /// end-of-turn texts such as `<|im_end|>` (as llama.cpp does).
    pub eot_id: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`: SentencePiece's fallback for a byte with no
    /// `<0xNN>` token.
    pub unk_id: Option<u32>,
    /// `tokenizer.ggml.add_space_prefix`: SentencePiece prepends a space to the text at
    /// the start and after each special token. Unused by BPE.
    pub add_space_prefix: bool,
    /// `tokenizer.ggml.add_bos_token`: prepend BOS in [`crate::Tokenizer::encode`].
    pub add_bos: bool,
    /// `tokenizer.ggml.add_eos_token`: append EOS in [`crate::Tokenizer::encode`].
    pub add_eos: bool,
    /// `tokenizer.chat_template` (Jinja, Hugging Face semantics).
    pub chat_template: Option<String>,
}

const MODEL: &str = "tokenizer.ggml.model";
const PRE: &str = "tokenizer.ggml.pre";
const TOKENS: &str = "tokenizer.ggml.tokens";
const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const MERGES: &str = "tokenizer.ggml.merges";
const NAME: &str = "general.name";
const SCORES: &str = "tokenizer.ggml.scores";
const UNK: &str = "tokenizer.ggml.unknown_token_id";
const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
const BOS: &str = "tokenizer.ggml.bos_token_id";
const EOS: &str = "tokenizer.ggml.eos_token_id";
const EOT: &str = "tokenizer.ggml.eot_token_id";
const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
const CHAT_TEMPLATE: &str = "tokenizer.chat_template";

impl TokenizerSpec {
    /// Reads the `tokenizer.*` keys of `f`.
    ///
    /// Only `tokenizer.ggml.model` and `tokenizer.ggml.tokens` are required; everything
    /// else falls back to llama.cpp's defaults (BOS is added by default only for
    /// SentencePiece and llama-3 style vocabularies; SentencePiece defaults to BOS 1,
    /// EOS 2, unknown 0 where those ids exist, and to `add_space_prefix`).
    pub fn from_gguf(f: &GgufFile) -> Result<Self> {
        let model = req_str(f, MODEL)?.to_owned();
        let pre = opt_str(f, PRE)?.map(str::to_owned);
        let tokens = str_array(f, TOKENS)?.ok_or(TokenizerError::MissingField { field: TOKENS })?;
        let token_types = match f.get(TOKEN_TYPE) {
            None => Vec::new(),
            Some(v) => int_array(v, TOKEN_TYPE)?,
        };
        let merges = str_array(f, MERGES)?.unwrap_or_default();
        let llama3_like = pre.as_deref().is_some_and(crate::pretokenize::adds_bos);
        let add_bos = opt_bool(f, ADD_BOS)?.unwrap_or(model == "llama" || llama3_like);
        let add_eos = opt_bool(f, ADD_EOS)?.unwrap_or(false);
        let spm = model == "llama";
        let scores = match f.get(SCORES) {
            None => Vec::new(),
            Some(v) => float_array(v, SCORES)?,
        };
        // llama.cpp's SentencePiece defaults, dropped when outside the vocabulary.
        let spm_default = |id: u32| (spm && (id as usize) < tokens.len()).then_some(id);
        let bos_id = match pre.as_deref() {
            Some(p) if crate::pre_regex::NO_BOS.contains(&p) => None,
            _ => opt_id(f, BOS)?.or(spm_default(1)),
        };
        let eos_id = opt_id(f, EOS)?.or(spm_default(2));
        let unk_id = opt_id(f, UNK)?.or(spm_default(0));
        let add_space_prefix = opt_bool(f, ADD_SPACE_PREFIX)?.unwrap_or(spm);
        Ok(TokenizerSpec {
            model,
            name: opt_str(f, NAME)?.map(str::to_owned),
            pre,
            tokens,
            token_types,
            scores,
            merges,
            bos_id,
            eos_id,
            eot_id: opt_id(f, EOT)?,
            unk_id,
            add_space_prefix,
            add_bos,
            add_eos,
            chat_template: opt_str(f, CHAT_TEMPLATE)?.map(str::to_owned),
        })
    }
}

fn wrong(field: &'static str, expected: &'static str, v: &Value) -> TokenizerError {
    TokenizerError::WrongType {
        field,
        expected,
        found: v.describe(),
    }
}

fn opt_str<'a>(f: &'a GgufFile, field: &'static str) -> Result<Option<&'a str>> {
    match f.get(field) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(Some)
            .ok_or_else(|| wrong(field, "a string", v)),
    }
}

fn req_str<'a>(f: &'a GgufFile, field: &'static str) -> Result<&'a str> {
    opt_str(f, field)?.ok_or(TokenizerError::MissingField { field })
}

fn opt_bool(f: &GgufFile, field: &'static str) -> Result<Option<bool>> {
    match f.get(field) {
        None => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| wrong(field, "a bool", v)),
    }
}

fn opt_id(f: &GgufFile, field: &'static str) -> Result<Option<u32>> {
    match f.get(field) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| wrong(field, "an integer in 0..=4294967295", v)),
    }
}

fn str_array(f: &GgufFile, field: &'static str) -> Result<Option<Vec<String>>> {
    let Some(v) = f.get(field) else {
        return Ok(None);
    };
    let items = v
        .as_array()
        .ok_or_else(|| wrong(field, "an array of strings", v))?;
    items
        .iter()
        .map(|item| {
            item.as_str()
                .map(str::to_owned)
                .ok_or_else(|| wrong(field, "an array of strings", v))
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

fn int_array(v: &Value, field: &'static str) -> Result<Vec<i32>> {
    let items = v
        .as_array()
        .ok_or_else(|| wrong(field, "an array of integers", v))?;
    items
        .iter()
        .map(|item| {
            item.as_i64()
                .and_then(|x| i32::try_from(x).ok())
                .ok_or_else(|| wrong(field, "an array of 32-bit integers", v))
        })
        .collect()
}

fn float_array(v: &Value, field: &'static str) -> Result<Vec<f32>> {
    let items = v
        .as_array()
        .ok_or_else(|| wrong(field, "an array of numbers", v))?;
    items
        .iter()
        .map(|item| {
            item.as_f64()
                .map(|x| x as f32)
                .ok_or_else(|| wrong(field, "an array of numbers", v))
        })
        .collect()
}

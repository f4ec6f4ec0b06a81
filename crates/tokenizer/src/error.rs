//! The crate's one error type.
//!
//! Messages name the metadata field (or argument), the limit and the value received, so a
//! user with an odd GGUF file can tell what is wrong without a debugger.

/// Everything that can go wrong building a tokenizer, encoding text or rendering a template.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A metadata key the tokenizer needs is absent.
    #[error("tokenizer metadata {field:?} is missing")]
    MissingField { field: &'static str },

    /// A metadata key holds a value of another type.
    #[error("tokenizer metadata {field:?} must be {expected}, got {found}")]
    WrongType {
        field: &'static str,
        expected: &'static str,
        found: String,
    },

    /// `tokenizer.ggml.model` names a tokenizer folio does not implement.
    #[error("unsupported tokenizer model {model:?} in \"tokenizer.ggml.model\" (folio supports \"gpt2\", byte-level BPE, and \"llama\", SentencePiece)")]
    UnsupportedModel { model: String },

    /// `tokenizer.ggml.pre` names a pre-tokenizer whose split rules folio does not know;
    /// guessing would silently produce different token ids than llama.cpp.
    #[error("unsupported pre-tokenizer {pre:?} in \"tokenizer.ggml.pre\" (known: {known})")]
    UnsupportedPre { pre: String, known: String },

    /// Two per-token arrays disagree in length.
    #[error(
        "tokenizer metadata {field:?} has {len} entries but the vocabulary has {vocab} tokens"
    )]
    LengthMismatch {
        field: &'static str,
        len: usize,
        vocab: usize,
    },

    /// The vocabulary is empty or larger than token ids can address.
    #[error("vocabulary size {size} is outside 1..={limit}")]
    VocabSize { size: usize, limit: usize },

    /// A special token id that is not in the vocabulary.
    #[error("tokenizer metadata {field:?} is {id}, outside the vocabulary of {vocab} tokens")]
    IdOutOfRange {
        field: &'static str,
        id: u64,
        vocab: usize,
    },

    /// A merge rule that is not two tokens separated by one space.
    #[error(
        "merge rule #{index} in \"tokenizer.ggml.merges\" is {value:?}: expected \"LEFT RIGHT\""
    )]
    BadMerge { index: usize, value: String },

    /// A SentencePiece token typed BYTE whose text is not `<0xNN>`.
    #[error("token #{id} is a byte token in \"tokenizer.ggml.token_type\" but its text {text:?} in \"tokenizer.ggml.tokens\" is not <0xNN>")]
    BadByteToken { id: u32, text: String },

    /// A SentencePiece vocabulary with neither a `<0xNN>` token for a byte that needs
    /// one nor an unknown token to fall back to.
    #[error("the vocabulary has no token for byte 0x{byte:02X} (no <0x{byte:02X}> token and no \"tokenizer.ggml.unknown_token_id\")")]
    NoByteToken { byte: u8 },

    /// The `tokenizers` crate refused the model or pre-tokenizer.
    #[error("building the BPE tokenizer failed: {0}")]
    Build(String),

    /// The `tokenizers` crate failed while encoding.
    #[error("encoding failed: {0}")]
    Encode(String),

    /// The model has no chat template and none was given.
    #[error("the model has no chat template (\"tokenizer.chat_template\" is missing)")]
    NoChatTemplate,

    /// The chat template failed to parse or render, or called `raise_exception`.
    #[error("chat template error: {0}")]
    Template(String),
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, TokenizerError>;

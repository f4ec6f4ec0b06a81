//! folio-tokenizer: text ⇄ token ids for GGUF models, matching llama.cpp's ids exactly,
//! plus the text-side pieces of serving: chat templates, streaming detokenization and
//! stop strings.
//!
//! # Layout
//!
//! - [`spec`]: [`TokenizerSpec`], the tokenizer metadata read from a GGUF file.
//! - `pretokenize`: the `tokenizers` pre-tokenizer for a `tokenizer.ggml.pre` name;
//!   `pre_regex`: llama.cpp's regexes and the names that select them (checked against
//!   llama.cpp's `/tokenize` by tests/pretok_oracle.rs).
//! - `special`: splitting input at special-token texts before BPE.
//! - `spm`: llama.cpp's SentencePiece merge, for `tokenizer.ggml.model = "llama"`.
//! - `byte_level`: GPT-2's byte ⇄ char alphabet, for decoding.
//! - [`Tokenizer`]: encode / decode / special ids / chat template, and `min_tokens` (a
//!   lower bound on a text's token count from its bytes, without tokenizing).
//! - `chat` + `date`: [`ChatMessage`] and the minijinja environment for chat templates.
//! - [`IncrementalDecoder`]: token stream → complete UTF-8 text.
//! - [`StopMatcher`]: stop strings over streamed text.
//! - [`TokenizerError`]: the one error type.

mod byte_level;
mod chat;
mod date;
pub use date::civil_from_days;
mod error;
mod incremental;
mod pre_regex;
mod pretokenize;
pub mod spec;
mod special;
mod spm;
mod stop;
mod tokenizer;

pub use chat::ChatMessage;
pub use error::{Result, TokenizerError};
pub use incremental::IncrementalDecoder;
pub use spec::{token_type, TokenizerSpec};
pub use stop::{StopMatcher, StopOutput};
pub use tokenizer::{Tokenizer, MAX_VOCAB};

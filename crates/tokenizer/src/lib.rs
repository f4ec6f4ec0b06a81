//! folio-tokenizer

//! folio-gguf

//! Errors of model loading and forward passes.

use thiserror::Error;

/// What went wrong loading a model or running a batch. Messages name the field, the limit
/// and the value so a user can act on them.
#[derive(Debug, Error)]
pub enum ModelError {
    #[error("gguf: {0}")]
    Gguf(#[from] folio_gguf::GgufError),
    #[error("kernels: {0}")]
    Kernel(#[from] folio_kernels::matmul::KernelError),
    #[error("unsupported architecture '{0}' (supported: llama, qwen2, qwen3, phi3)")]
    UnsupportedArch(String),
    #[error("tensor '{name}': {what}")]
    Tensor { name: String, what: String },
    #[error("metadata '{key}': {what}")]
    Metadata { key: String, what: String },
    #[error("batch: {0}")]
    Batch(String),
}

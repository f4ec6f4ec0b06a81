//! Size caps applied while parsing.
//!
//! WHY: a GGUF header is untrusted input. Every count in it (string lengths, array lengths,
//! key and tensor counts) is a u64 that a crafted or corrupted file can set to 2^64-1. The
//! reader never allocates from a count alone: it checks the count against the cap below AND
//! against the bytes that remain in the file (each item needs at least a known number of
//! bytes), so memory use stays proportional to the file size. The caps are far above what
//! real models use (SmolLM2: 49,152 vocabulary entries, 272 tensors, a chat template of a
//! few KiB) so they only ever trip on broken files.

/// Longest string (key, value or tensor name): 1 MiB. Chat templates are the longest
/// strings in real files (tens of KiB at most).
pub const MAX_STRING_LEN: u64 = 1 << 20;

/// Most elements in one metadata array: 16 Mi. Vocabularies are ~50k-250k entries.
pub const MAX_ARRAY_LEN: u64 = 16 << 20;

/// Deepest nesting of arrays inside arrays. WHY: parsing recurses; a crafted file of
/// nested empty arrays must not overflow the stack.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// Most metadata key/value pairs: 1 Mi.
pub const MAX_KV_COUNT: u64 = 1 << 20;

/// Most tensors: 100k. Large models have a few thousand.
pub const MAX_TENSOR_COUNT: u64 = 100_000;

/// Most dimensions per tensor: ggml's GGML_MAX_DIMS.
pub const MAX_DIMS: u32 = 4;

/// Largest accepted `general.alignment`: 1 MiB (it must also be a power of two).
pub const MAX_ALIGNMENT: u64 = 1 << 20;

/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: usize = 32;

//! The crate's one error type.
//!
//! Every variant says *what* is wrong and *where*: a byte offset into the file, a metadata
//! key or a tensor name, plus the limit and the value received where a limit applies.
//! Errors raised while parsing one key or one tensor are wrapped in [`GgufError::InKey`] /
//! [`GgufError::InTensor`] so the low-level readers need not know which item they serve.

use std::path::PathBuf;

use crate::GgmlType;

/// Everything that can go wrong reading, dequantizing or writing a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The first four bytes are not `GGUF`.
    #[error(
        "not a GGUF file: magic at byte 0 is {found:02x?}, expected \"GGUF\" [47, 47, 55, 46]"
    )]
    BadMagic { found: Vec<u8> },

    /// Version 1 (u32 counts) or a version from the future.
    #[error("unsupported GGUF version {version} at byte 4: folio reads versions 2 and 3 (version 1 used 32-bit counts and is obsolete; re-convert the model)")]
    UnsupportedVersion { version: u32 },

    /// The file ends before an item that the header says is there.
    #[error(
        "truncated file: {what} needs {needed} bytes at byte {offset}, but only {available} remain"
    )]
    Truncated {
        what: &'static str,
        offset: u64,
        needed: u64,
        available: u64,
    },

    /// A count or length is above one of the caps in [`crate::limits`].
    #[error("{what} at byte {offset} is {value}, above the limit {limit}")]
    LimitExceeded {
        what: &'static str,
        offset: u64,
        value: u64,
        limit: u64,
    },

    /// A metadata value type number outside 0..=12.
    #[error("unknown metadata value type {value_type} at byte {offset} (known types are 0..=12)")]
    UnknownValueType { value_type: u32, offset: u64 },

    /// A string (key, value or tensor name) that is not UTF-8.
    #[error("{what} at byte {offset} is not valid UTF-8")]
    InvalidUtf8 { what: &'static str, offset: u64 },

    /// A bool byte other than 0 or 1.
    #[error("bool value at byte {offset} is {value}, expected 0 or 1")]
    InvalidBool { value: u8, offset: u64 },

    /// The same metadata key appears twice; which one wins would be a guess.
    #[error("duplicate metadata key {key:?} at byte {offset}")]
    DuplicateKey { key: String, offset: u64 },

    /// Wraps an error raised while reading the value of metadata key `key`.
    #[error("in metadata key {key:?}: {source}")]
    InKey { key: String, source: Box<GgufError> },

    /// Wraps an error raised while reading or validating tensor `name`.
    #[error("in tensor {name:?}: {source}")]
    InTensor {
        name: String,
        source: Box<GgufError>,
    },

    /// The same tensor name appears twice.
    #[error("duplicate tensor name {name:?} at byte {offset}")]
    DuplicateTensor { name: String, offset: u64 },

    /// The product of the dimensions does not fit in 64 bits (or in memory).
    #[error("element count of dims {dims:?} overflows")]
    ElementCountOverflow { dims: Vec<u64> },

    /// A value count that is not a whole number of blocks of the type.
    #[error("{n_values} values are not a whole number of {ty} blocks of {block_size}")]
    NotWholeBlocks {
        ty: GgmlType,
        n_values: u64,
        block_size: usize,
    },

    /// A tensor type whose layout folio does not know (for sizing) or cannot convert.
    #[error("tensor type {ty} is not supported for {what}")]
    UnsupportedType { ty: GgmlType, what: &'static str },

    /// A tensor data offset that is not a multiple of the file's alignment.
    #[error("data offset {offset} (relative to the data section) is not a multiple of the alignment {alignment}")]
    MisalignedOffset { offset: u64, alignment: usize },

    /// A tensor whose bytes would lie (partly) outside the file.
    #[error(
        "data range {start}..{end} (absolute bytes) lies outside the file of {file_len} bytes"
    )]
    TensorOutOfBounds { start: u64, end: u64, file_len: u64 },

    /// Two tensors whose data ranges share bytes: writing one would change the other, and a
    /// crafted file could alias a small tensor into a large one's data.
    #[error("tensor {second:?} data {second_start}..{second_end} overlaps tensor {first:?} data {first_start}..{first_end} (absolute bytes)")]
    TensorOverlap {
        first: String,
        first_start: u64,
        first_end: u64,
        second: String,
        second_start: u64,
        second_end: u64,
    },

    /// `general.alignment` is zero, not a power of two, too large or not an integer.
    #[error("metadata key \"general.alignment\" is {value}: must be a power of two between 1 and {limit}")]
    BadAlignment { value: String, limit: u64 },

    /// A metadata key the caller needs is absent.
    #[error("metadata key {key:?} is missing")]
    MissingKey { key: String },

    /// A metadata key holds a value of another type than the caller needs.
    #[error("metadata key {key:?} holds {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },

    /// No tensor of that name.
    #[error("no tensor named {name:?}")]
    TensorNotFound { name: String },

    /// A byte buffer whose length does not match the values it should hold.
    #[error("{ty} data for {n_values} values must be {expected} bytes, got {got}")]
    DataLength {
        ty: GgmlType,
        n_values: u64,
        expected: u64,
        got: u64,
    },

    /// Something the writer cannot encode (e.g. a mixed-type array).
    #[error("cannot write {what}: {reason}")]
    InvalidWrite { what: String, reason: String },
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, GgufError>;

impl GgufError {
    /// Wraps `self` as having happened inside metadata key `key`.
    pub(crate) fn in_key(self, key: &str) -> GgufError {
        GgufError::InKey {
            key: key.to_owned(),
            source: Box::new(self),
        }
    }

    /// Wraps `self` as having happened inside tensor `name`.
    pub(crate) fn in_tensor(self, name: &str) -> GgufError {
        GgufError::InTensor {
            name: name.to_owned(),
            source: Box::new(self),
        }
    }
}

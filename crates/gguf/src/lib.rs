//! folio-gguf: reads (and, for tests, writes) GGUF model files.
//!
//! A GGUF file is a header (metadata key/values and a tensor index) followed by an aligned
//! data section of tensor bytes. This crate parses and validates the header from untrusted
//! bytes, maps the file, and hands out tensor bytes and reference dequantizations. It does
//! no model math.
//!
//! ```
//! use folio_gguf::{GgmlType, GgufFile, GgufWriter, Value};
//!
//! let mut w = GgufWriter::new();
//! w.add_metadata("general.architecture", Value::String("llama".into()));
//! // amax 127 gives the Q8_0 scale d = 1.0 exactly, so the round trip is exact.
//! w.add_tensor_f32("w", &[32, 2], GgmlType::Q8_0, &[127.0; 64]).unwrap();
//! let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
//! assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
//! let t = f.tensor("w").unwrap();
//! assert_eq!((t.cols(), t.rows(), t.n_bytes), (32, 2, 68));
//! assert_eq!(f.tensor_f32("w").unwrap(), vec![127.0; 64]);
//! ```
//!
//! # Layout
//!
//! - [`GgufFile`] (`file.rs`): an opened, validated file; metadata getters, tensor lookup,
//!   raw tensor bytes, dequantized copies.
//! - `parse.rs`: the on-disk layout (sketched there) and all validation of header bytes.
//! - `cursor.rs`: bounds-checked little-endian reads that report byte offsets.
//! - [`limits`]: size caps for crafted files, and why they exist.
//! - [`Value`] (`value.rs`): a metadata value.
//! - [`GgmlType`] (`ggml_type.rs`): tensor storage types and their block geometry.
//! - [`TensorInfo`] (`tensor_info.rs`): one tensor index entry.
//! - [`dequant`]: scalar reference dequantization, bit-exact with ggml.
//! - [`quant`]: reference quantizers (to build test models).
//! - [`iquant`]: the grid i-quants (IQ2_*, IQ3_*): one parsed form, dequantization, quantizer;
//!   [`grids`]: their constant tables, exactly ggml's.
//! - [`GgufWriter`] (`writer.rs`): builds GGUF v2/v3 files in memory.
//! - [`GgufError`] (`error.rs`): every error names what is wrong and where.

mod cursor;
pub mod dequant;
mod error;
mod file;
mod ggml_type;
pub mod grids;
mod iq1s_grid;
pub mod iquant;
mod kv_format;
pub mod limits;
mod parse;
pub mod quant;
mod quant_low;
mod tensor_info;
mod value;
mod writer;

pub use error::{GgufError, Result};
pub use file::GgufFile;
pub use ggml_type::GgmlType;
pub use kv_format::{KvFormat, KvFormatRefused, KvFormats, KvRows, UnknownKvFormat};
pub use tensor_info::TensorInfo;
pub use value::Value;
pub use writer::GgufWriter;

//! A model file's identity by content, for whatever keeps KV across restarts (the disk
//! tier) and keys blocks (the prefix-cache salt).
//!
//! A path says nothing about what it holds: a GGUF replaced at the same path (a new
//! fine-tune, a re-quantization) must never be served KV computed by the old one. Hashing
//! every weight would cost seconds per gigabyte at start, so the key covers what tells
//! models apart cheaply: the whole GGUF header (metadata, tokenizer, tensor names, types,
//! shapes and offsets), the file size and modification time, and samples of the tensor
//! data: the first and last [`EDGE`] bytes of every tensor and [`STRIDE_SAMPLES`] windows
//! spread evenly over the data section. Two files with the same header and size whose
//! weights differ only between the samples, with the same mtime, would share a key; a
//! real model swap changes every tensor.

use folio_core::kv::fnv1a;
use std::path::Path;

/// Bytes sampled at each end of every tensor's data.
pub const EDGE: usize = 4096;
/// Evenly spaced windows of [`EDGE`] bytes over the whole data section.
pub const STRIDE_SAMPLES: usize = 256;

/// The content key of the GGUF at `path`, or `None` when it cannot be read as one (the
/// caller then keys by path: nothing persisted can be trusted across such a file).
pub fn model_key(path: &Path) -> Option<u64> {
    let meta = std::fs::metadata(path).ok()?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    let f = folio_gguf::GgufFile::open(path).ok()?;
    let bytes = f.bytes();
    let data_start = (f.data_offset() as usize).min(bytes.len());
    let mut parts: Vec<u64> = vec![bytes.len() as u64, mtime, fnv1a(&bytes[..data_start])];
    for t in f.tensors() {
        let d = f.tensor_data(t);
        let n = d.len().min(EDGE);
        parts.push(fnv1a(&d[..n]));
        parts.push(fnv1a(&d[d.len() - n..]));
    }
    let data = &bytes[data_start..];
    if !data.is_empty() {
        let step = (data.len() / STRIDE_SAMPLES).max(1);
        for i in 0..STRIDE_SAMPLES {
            let at = (i * step).min(data.len() - 1);
            parts.push(fnv1a(&data[at..(at + EDGE).min(data.len())]));
        }
    }
    let flat: Vec<u8> = parts.iter().flat_map(|p| p.to_le_bytes()).collect();
    Some(fnv1a(&flat))
}

//! One entry of the tensor index.

use crate::GgmlType;

/// Where a tensor lives in the file and how it is shaped. Built and validated by the
/// reader: `offset..offset + n_bytes` lies inside the file.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions in ggml order: `dims[0]` is the contiguous row length (columns).
    pub dims: Vec<u64>,
    /// Storage type of the data.
    pub ggml_type: GgmlType,
    /// Absolute byte offset of the data in the file (data section start + relative offset).
    pub offset: u64,
    /// Bytes of data.
    pub n_bytes: usize,
}

impl TensorInfo {
    /// Number of values (product of all dims; the reader checked it does not overflow).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Number of rows: product of `dims[1..]` (1 for a vector).
    pub fn rows(&self) -> usize {
        self.dims.iter().skip(1).product::<u64>() as usize
    }

    /// Row length: `dims[0]` (1 for a scalar with no dims).
    pub fn cols(&self) -> usize {
        self.dims.first().copied().unwrap_or(1) as usize
    }
}

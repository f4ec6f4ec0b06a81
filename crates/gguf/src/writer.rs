//! [`GgufWriter`]: builds GGUF v2/v3 files in memory (tests, tiny models, fixtures).

use std::path::Path;

use crate::limits::DEFAULT_ALIGNMENT;
use crate::parse::align_up;
use crate::value::type_id;
use crate::{quant, GgmlType, GgufError, Result, Value};

/// One tensor queued for writing: bytes already in its type's block format.
#[derive(Clone, Debug)]
struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

/// Collects metadata and tensors, then serializes a GGUF file. The data section is
/// aligned to `general.alignment` when that key is set to a valid power of two, else 32.
#[derive(Clone, Debug)]
pub struct GgufWriter {
    version: u32,
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// A writer for GGUF version 3.
    pub fn new() -> Self {
        Self::with_version(3)
    }

    /// A writer for `version` (2 and 3 share one layout; other numbers are written as
    /// given, which lets tests produce files the reader must reject).
    pub fn with_version(version: u32) -> Self {
        GgufWriter {
            version,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Sets `key` (replacing an earlier value in place, since GGUF keys are unique).
    pub fn add_metadata(&mut self, key: &str, value: Value) -> &mut Self {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key.to_owned(), value)),
        }
        self
    }

    /// Queues a tensor whose `data` is already in `ty`'s block format. Sizes are checked
    /// by [`GgufWriter::try_to_bytes`].
    pub fn add_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> &mut Self {
        self.tensors.push(PendingTensor {
            name: name.to_owned(),
            dims: dims.to_vec(),
            ty,
            data,
        });
        self
    }

    /// Quantizes `values` to `ty` and queues them as a tensor of shape `dims`.
    pub fn add_tensor_f32(
        &mut self,
        name: &str,
        dims: &[u64],
        ty: GgmlType,
        values: &[f32],
    ) -> Result<&mut Self> {
        let n = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        if n != Some(values.len() as u64) {
            return Err(GgufError::InvalidWrite {
                what: format!("tensor {name:?}"),
                reason: format!(
                    "dims {dims:?} do not hold the {} values given",
                    values.len()
                ),
            });
        }
        let data = quant::quantize(ty, values).map_err(|e| e.in_tensor(name))?;
        Ok(self.add_tensor(name, dims, ty, data))
    }

    fn alignment(&self) -> u64 {
        self.metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| v.as_u64())
            .filter(|a| a.is_power_of_two())
            .unwrap_or(DEFAULT_ALIGNMENT as u64)
    }

    /// Serializes the file, checking that arrays are homogeneous, tensor names unique and
    /// tensor byte lengths consistent with their dims and type.
    pub fn try_to_bytes(&self) -> Result<Vec<u8>> {
        let align = self.alignment();
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            write_str(&mut out, key);
            out.extend_from_slice(&value.type_id().to_le_bytes());
            write_value(&mut out, key, value)?;
        }
        let mut rel = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for (i, t) in self.tensors.iter().enumerate() {
            if self.tensors[..i].iter().any(|o| o.name == t.name) {
                return Err(GgufError::InvalidWrite {
                    what: format!("tensor {:?}", t.name),
                    reason: "duplicate tensor name".to_owned(),
                });
            }
            let n = t.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            let n = n.ok_or_else(|| {
                GgufError::ElementCountOverflow {
                    dims: t.dims.clone(),
                }
                .in_tensor(&t.name)
            })?;
            let expected = t.ty.bytes_for(n).map_err(|e| e.in_tensor(&t.name))?;
            if expected != t.data.len() as u64 {
                return Err(GgufError::DataLength {
                    ty: t.ty,
                    n_values: n,
                    expected,
                    got: t.data.len() as u64,
                }
                .in_tensor(&t.name));
            }
            write_str(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.to_u32().to_le_bytes());
            out.extend_from_slice(&rel.to_le_bytes());
            offsets.push(rel);
            rel = align_up(rel + expected, align);
        }
        out.resize(align_up(out.len() as u64, align) as usize, 0);
        let data_start = out.len();
        for (t, off) in self.tensors.iter().zip(offsets) {
            out.resize(data_start + off as usize, 0);
            out.extend_from_slice(&t.data);
        }
        out.resize(data_start + rel as usize, 0);
        Ok(out)
    }

    /// Serializes the file.
    ///
    /// # Panics
    /// If [`GgufWriter::try_to_bytes`] fails: a mixed-type array, a duplicate tensor name
    /// or tensor bytes that do not match dims and type. These are bugs in the calling
    /// code (the writer builds test fixtures), not bad input data.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self.try_to_bytes() {
            Ok(bytes) => bytes,
            Err(e) => panic!("GgufWriter::to_bytes: {e}"),
        }
    }

    /// Writes the file to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let bytes = self
            .try_to_bytes()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        std::fs::write(path, bytes)
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Writes the payload of metadata `key`'s value (its type number is written by the caller).
fn write_value(out: &mut Vec<u8>, key: &str, value: &Value) -> Result<()> {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.push(*v as u8),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            // NOTE: an empty array gets element type u8; readers see an empty array either way.
            let elem_ty = items.first().map_or(type_id::U8, Value::type_id);
            if let Some(bad) = items.iter().position(|v| v.type_id() != elem_ty) {
                return Err(GgufError::InvalidWrite {
                    what: format!("metadata key {key:?}"),
                    reason: format!(
                        "array element {bad} is {}, but element 0 is {}",
                        items[bad].describe(),
                        items[0].describe()
                    ),
                });
            }
            out.extend_from_slice(&elem_ty.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                write_value(out, key, item)?;
            }
        }
    }
    Ok(())
}

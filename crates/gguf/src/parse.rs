//! Parsing of the header, the metadata and the tensor index from untrusted bytes.
//!
//! ```text
//! offset 0   "GGUF" magic                          4 B
//!        4   version (2 or 3)                      u32
//!        8   tensor_count                          u64
//!       16   kv_count                              u64
//!       24   kv_count x { key: string, type: u32, value }
//!            tensor_count x { name: string, n_dims: u32, dims: u64[n_dims],
//!                             type: u32, offset: u64 (relative to data section) }
//!            padding to a multiple of general.alignment (default 32)
//!            data section: tensor bytes, each at an aligned relative offset
//! string = u64 length + UTF-8 bytes;  array = u32 element type + u64 count + elements
//! ```

use std::collections::HashMap;

use crate::cursor::Cursor;
use crate::limits::*;
use crate::value::type_id;
use crate::{GgmlType, GgufError, Result, TensorInfo, Value};

/// Everything the header describes; the bytes stay with the caller.
pub(crate) struct Parsed {
    pub version: u32,
    pub alignment: usize,
    /// Key/value pairs in file order (order matters to humans reading dumps).
    pub metadata: Vec<(String, Value)>,
    /// Key -> position in `metadata`.
    pub key_index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    /// Tensor name -> position in `tensors`.
    pub tensor_index: HashMap<String, usize>,
    /// Absolute byte offset where the data section starts.
    pub data_offset: u64,
}

/// Parses and validates a whole GGUF header against `bytes` (the entire file).
pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed> {
    let mut cur = Cursor::new(bytes);
    let magic = cur.take(4, "magic").map_err(|_| GgufError::BadMagic {
        found: bytes[..bytes.len().min(4)].to_vec(),
    })?;
    if magic != b"GGUF" {
        return Err(GgufError::BadMagic {
            found: magic.to_vec(),
        });
    }
    let version = cur.u32("version")?;
    if version != 2 && version != 3 {
        return Err(GgufError::UnsupportedVersion { version });
    }
    // NOTE: the tensor count is only checked against its cap here; the per-tensor
    // minimum size is checked once the metadata has been read.
    let tensor_count_offset = cur.pos() as u64;
    let tensor_count = cur.u64("tensor count")?;
    if tensor_count > MAX_TENSOR_COUNT {
        return Err(GgufError::LimitExceeded {
            what: "tensor count",
            offset: tensor_count_offset,
            value: tensor_count,
            limit: MAX_TENSOR_COUNT,
        });
    }
    // Each kv needs at least an 8-byte key length, a 4-byte type and a 1-byte value.
    let kv_count = cur.count("metadata kv count", MAX_KV_COUNT, 13)?;

    let (metadata, key_index) = parse_metadata(&mut cur, kv_count)?;
    let alignment = alignment_of(&metadata, &key_index)?;
    let (tensors, tensor_index, data_offset) =
        parse_tensor_infos(&mut cur, tensor_count, alignment, bytes.len() as u64)?;
    Ok(Parsed {
        version,
        alignment,
        metadata,
        key_index,
        tensors,
        tensor_index,
        data_offset,
    })
}

type Metadata = (Vec<(String, Value)>, HashMap<String, usize>);

fn parse_metadata(cur: &mut Cursor<'_>, kv_count: u64) -> Result<Metadata> {
    let mut metadata = Vec::with_capacity(kv_count as usize);
    let mut index = HashMap::with_capacity(kv_count as usize);
    for _ in 0..kv_count {
        let key_offset = cur.pos() as u64;
        let key = cur.string("metadata key", MAX_STRING_LEN)?;
        if index.contains_key(&key) {
            return Err(GgufError::DuplicateKey {
                key,
                offset: key_offset,
            });
        }
        let value = parse_typed_value(cur, 0).map_err(|e| e.in_key(&key))?;
        index.insert(key.clone(), metadata.len());
        metadata.push((key, value));
    }
    Ok((metadata, index))
}

/// Reads a u32 value type and checks it is known.
fn value_type(cur: &mut Cursor<'_>, what: &'static str) -> Result<u32> {
    let offset = cur.pos() as u64;
    let ty = cur.u32(what)?;
    if ty > type_id::F64 {
        return Err(GgufError::UnknownValueType {
            value_type: ty,
            offset,
        });
    }
    Ok(ty)
}

fn parse_typed_value(cur: &mut Cursor<'_>, depth: usize) -> Result<Value> {
    let ty = value_type(cur, "metadata value type")?;
    parse_value(cur, ty, depth)
}

/// Fewest bytes a value of type `ty` occupies; bounds array counts by the bytes left.
fn min_value_bytes(ty: u32) -> u64 {
    match ty {
        type_id::U8 | type_id::I8 | type_id::BOOL => 1,
        type_id::U16 | type_id::I16 => 2,
        type_id::U32 | type_id::I32 | type_id::F32 => 4,
        type_id::ARRAY => 12,
        _ => 8, // u64, i64, f64, string length
    }
}

fn parse_value(cur: &mut Cursor<'_>, ty: u32, depth: usize) -> Result<Value> {
    Ok(match ty {
        type_id::U8 => Value::U8(cur.u8("u8 value")?),
        type_id::I8 => Value::I8(cur.u8("i8 value")? as i8),
        type_id::U16 => Value::U16(cur.u16("u16 value")?),
        type_id::I16 => Value::I16(cur.u16("i16 value")? as i16),
        type_id::U32 => Value::U32(cur.u32("u32 value")?),
        type_id::I32 => Value::I32(cur.u32("i32 value")? as i32),
        type_id::U64 => Value::U64(cur.u64("u64 value")?),
        type_id::I64 => Value::I64(cur.u64("i64 value")? as i64),
        type_id::F32 => Value::F32(cur.f32("f32 value")?),
        type_id::F64 => Value::F64(cur.f64("f64 value")?),
        type_id::BOOL => {
            let offset = cur.pos() as u64;
            match cur.u8("bool value")? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                value => return Err(GgufError::InvalidBool { value, offset }),
            }
        }
        type_id::STRING => Value::String(cur.string("string value", MAX_STRING_LEN)?),
        type_id::ARRAY => {
            let elem_ty = value_type(cur, "array element type")?;
            if elem_ty == type_id::ARRAY && depth + 1 >= MAX_ARRAY_DEPTH {
                return Err(GgufError::LimitExceeded {
                    what: "array nesting depth",
                    offset: cur.pos() as u64 - 4,
                    value: depth as u64 + 2,
                    limit: MAX_ARRAY_DEPTH as u64,
                });
            }
            let n = cur.count("array length", MAX_ARRAY_LEN, min_value_bytes(elem_ty))?;
            let mut items = Vec::with_capacity(n as usize);
            for _ in 0..n {
                items.push(parse_value(cur, elem_ty, depth + 1)?);
            }
            Value::Array(items)
        }
        other => {
            return Err(GgufError::UnknownValueType {
                value_type: other,
                offset: cur.pos() as u64,
            })
        }
    })
}

fn alignment_of(metadata: &[(String, Value)], index: &HashMap<String, usize>) -> Result<usize> {
    let Some(&i) = index.get("general.alignment") else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let value = &metadata[i].1;
    match value.as_u64() {
        Some(a) if a.is_power_of_two() && a <= MAX_ALIGNMENT => Ok(a as usize),
        _ => Err(GgufError::BadAlignment {
            value: value.describe(),
            limit: MAX_ALIGNMENT,
        }),
    }
}

type TensorIndex = (Vec<TensorInfo>, HashMap<String, usize>, u64);

fn parse_tensor_infos(
    cur: &mut Cursor<'_>,
    count: u64,
    alignment: usize,
    file_len: u64,
) -> Result<TensorIndex> {
    // Each info needs at least: name length 8, n_dims 4, type 4, offset 8.
    let needed = count * 24;
    if needed > cur.remaining() as u64 {
        return Err(GgufError::Truncated {
            what: "tensor infos",
            offset: cur.pos() as u64,
            needed,
            available: cur.remaining() as u64,
        });
    }
    let mut raw = Vec::with_capacity(count as usize);
    let mut index = HashMap::with_capacity(count as usize);
    for _ in 0..count {
        let name_offset = cur.pos() as u64;
        let name = cur.string("tensor name", MAX_STRING_LEN)?;
        if index.contains_key(&name) {
            return Err(GgufError::DuplicateTensor {
                name,
                offset: name_offset,
            });
        }
        let info = parse_tensor_info(cur, &name).map_err(|e| e.in_tensor(&name))?;
        index.insert(name.clone(), raw.len());
        raw.push((name, info));
    }
    let data_offset = align_up(cur.pos() as u64, alignment as u64);
    let mut tensors = Vec::with_capacity(raw.len());
    for (name, (dims, ggml_type, rel_offset)) in raw {
        let info = locate(
            name.clone(),
            dims,
            ggml_type,
            rel_offset,
            data_offset,
            alignment,
            file_len,
        )
        .map_err(|e| e.in_tensor(&name))?;
        tensors.push(info);
    }
    check_overlaps(&tensors)?;
    Ok((tensors, index, data_offset))
}

/// Checks that no two tensors' data ranges share a byte (empty tensors share none).
fn check_overlaps(tensors: &[TensorInfo]) -> Result<()> {
    let mut ranges: Vec<(u64, u64, usize)> = tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| t.n_bytes > 0)
        .map(|(i, t)| (t.offset, t.offset + t.n_bytes as u64, i))
        .collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        let ((s0, e0, i0), (s1, e1, i1)) = (w[0], w[1]);
        if s1 < e0 {
            return Err(GgufError::TensorOverlap {
                first: tensors[i0].name.clone(),
                first_start: s0,
                first_end: e0,
                second: tensors[i1].name.clone(),
                second_start: s1,
                second_end: e1,
            });
        }
    }
    Ok(())
}

/// Dims, type and relative offset of one tensor, as read.
type RawInfo = (Vec<u64>, GgmlType, u64);

fn parse_tensor_info(cur: &mut Cursor<'_>, _name: &str) -> Result<RawInfo> {
    let n_dims_offset = cur.pos() as u64;
    let n_dims = cur.u32("tensor n_dims")?;
    if n_dims > MAX_DIMS {
        return Err(GgufError::LimitExceeded {
            what: "tensor n_dims",
            offset: n_dims_offset,
            value: n_dims.into(),
            limit: MAX_DIMS.into(),
        });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(cur.u64("tensor dim")?);
    }
    let ggml_type = GgmlType::from_u32(cur.u32("tensor type")?);
    let rel_offset = cur.u64("tensor data offset")?;
    Ok((dims, ggml_type, rel_offset))
}

/// Sizes a tensor and checks its data lies, aligned, inside the file.
fn locate(
    name: String,
    dims: Vec<u64>,
    ggml_type: GgmlType,
    rel_offset: u64,
    data_offset: u64,
    alignment: usize,
    file_len: u64,
) -> Result<TensorInfo> {
    let n_elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| GgufError::ElementCountOverflow { dims: dims.clone() })?;
    let cols = dims.first().copied().unwrap_or(1);
    let block_size = ggml_type.block_size().ok_or(GgufError::UnsupportedType {
        ty: ggml_type,
        what: "sizing (unknown block layout)",
    })?;
    if !cols.is_multiple_of(block_size as u64) {
        return Err(GgufError::NotWholeBlocks {
            ty: ggml_type,
            n_values: cols,
            block_size,
        });
    }
    let n_bytes = ggml_type.bytes_for(n_elements)?;
    if !rel_offset.is_multiple_of(alignment as u64) {
        return Err(GgufError::MisalignedOffset {
            offset: rel_offset,
            alignment,
        });
    }
    let start = data_offset.checked_add(rel_offset);
    let end = start.and_then(|s| s.checked_add(n_bytes));
    match (start, end) {
        (Some(start), Some(end)) if end <= file_len => Ok(TensorInfo {
            name,
            dims,
            ggml_type,
            offset: start,
            n_bytes: n_bytes as usize,
        }),
        _ => Err(GgufError::TensorOutOfBounds {
            start: data_offset.saturating_add(rel_offset),
            end: data_offset
                .saturating_add(rel_offset)
                .saturating_add(n_bytes),
            file_len,
        }),
    }
}

/// Rounds `x` up to a multiple of `align` (a power of two), saturating.
pub(crate) fn align_up(x: u64, align: u64) -> u64 {
    x.saturating_add(align - 1) & !(align - 1)
}

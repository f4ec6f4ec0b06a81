//! [`GgufFile`]: an opened, validated GGUF file.

use std::path::Path;

use crate::parse::{parse, Parsed};
use crate::{dequant, GgufError, Result, TensorInfo, Value};

/// The file's bytes: a read-only memory map for real models (weights are paged in on
/// demand and shared with the page cache), or an owned buffer for tests and fuzzing.
enum Storage {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mmap(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// An opened GGUF file whose header has been fully parsed and validated: every tensor's
/// data range lies inside the file, is aligned, and has a size consistent with its type.
pub struct GgufFile {
    storage: Storage,
    /// The validated header; its field docs say what each part holds.
    header: Parsed,
}

/// Opens `path` for reading only if it is a regular file. The open itself never blocks: a
/// FIFO would otherwise hang the opening thread until some writer appeared (a path given
/// over HTTP, `POST /v1/load_lora_adapter`, must not park a server thread), so it is opened
/// non-blocking and refused by its type, checked on the opened descriptor so a file
/// swapped in after a path check is caught too.
fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let file = opts.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(file)
}

impl GgufFile {
    /// Memory-maps and validates the file at `path` (a regular file; see [`open_regular`]).
    pub fn open(path: &Path) -> Result<GgufFile> {
        let io_err = |source| GgufError::Io {
            path: path.to_owned(),
            source,
        };
        let file = open_regular(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        let storage = if len == 0 {
            // NOTE: mapping an empty file fails on some platforms; parse reports BadMagic.
            Storage::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only. Like every mmap-based model loader we assume
            // the file is not truncated or rewritten while it is open; if it were, reads
            // could fault or see changed bytes, which we accept for model files.
            Storage::Mmap(unsafe { memmap2::Mmap::map(&file) }.map_err(io_err)?)
        };
        Self::from_storage(storage)
    }

    /// Validates a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        Self::from_storage(Storage::Owned(bytes))
    }

    fn from_storage(storage: Storage) -> Result<GgufFile> {
        let header = parse(storage.bytes())?;
        Ok(GgufFile { storage, header })
    }

    /// GGUF version: 2 or 3.
    pub fn version(&self) -> u32 {
        self.header.version
    }

    /// `general.alignment`, or 32 when absent.
    pub fn alignment(&self) -> usize {
        self.header.alignment
    }

    /// Absolute byte offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.header.data_offset
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// All metadata, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.header.metadata
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.header
            .key_index
            .get(key)
            .map(|&i| &self.header.metadata[i].1)
    }

    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_owned(),
        })
    }

    fn wrong_type(key: &str, expected: &'static str, found: &Value) -> GgufError {
        GgufError::WrongType {
            key: key.to_owned(),
            expected,
            found: found.describe(),
        }
    }

    /// An integer key as u64 (any integer type whose value is non-negative).
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let v = self.require(key)?;
        v.as_u64()
            .ok_or_else(|| Self::wrong_type(key, "a non-negative integer", v))
    }

    /// A float key as f32 (f32, f64 or an integer).
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        let v = self.require(key)?;
        v.as_f64()
            .map(|f| f as f32)
            .ok_or_else(|| Self::wrong_type(key, "a number", v))
    }

    /// A string key.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        let v = self.require(key)?;
        v.as_str()
            .ok_or_else(|| Self::wrong_type(key, "a string", v))
    }

    fn get_array(&self, key: &str, expected: &'static str) -> Result<&[Value]> {
        let v = self.require(key)?;
        v.as_array()
            .ok_or_else(|| Self::wrong_type(key, expected, v))
    }

    /// An array-of-strings key.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        self.get_array_of(key, "an array of strings", Value::as_str)
    }

    /// An array-of-integers key as i64 (any integer element type that fits).
    pub fn get_i64_array(&self, key: &str) -> Result<Vec<i64>> {
        self.get_array_of(key, "an array of integers", Value::as_i64)
    }

    /// An array-of-numbers key as f32.
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>> {
        self.get_array_of(key, "an array of numbers", |e| e.as_f64().map(|f| f as f32))
    }

    /// An array key whose every element `elem` reads; the first that it cannot makes the
    /// whole key a type error naming `expected`.
    fn get_array_of<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        elem: impl Fn(&'a Value) -> Option<T>,
    ) -> Result<Vec<T>> {
        let v = self.require(key)?;
        self.get_array(key, expected)?
            .iter()
            .map(|e| elem(e).ok_or_else(|| Self::wrong_type(key, expected, v)))
            .collect()
    }

    /// All tensors, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.header.tensors
    }

    /// The tensor called `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.header
            .tensor_index
            .get(name)
            .map(|&i| &self.header.tensors[i])
    }

    /// The raw bytes of a tensor of this file (bounds were validated at open). An `info`
    /// from another file whose range does not fit this one yields an empty slice.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        let start = info.offset as usize;
        self.bytes()
            .get(start..start.saturating_add(info.n_bytes))
            .unwrap_or(&[])
    }

    /// A dequantized f32 copy of tensor `name` (any type [`dequant::dequantize`] supports).
    pub fn tensor_f32(&self, name: &str) -> Result<Vec<f32>> {
        let info = self.tensor(name).ok_or_else(|| GgufError::TensorNotFound {
            name: name.to_owned(),
        })?;
        let n = usize::try_from(info.n_elements()).map_err(|_| {
            GgufError::ElementCountOverflow {
                dims: info.dims.clone(),
            }
            .in_tensor(name)
        })?;
        let mut out = vec![0.0f32; n];
        dequant::dequantize(info.ggml_type, self.tensor_data(info), &mut out)
            .map_err(|e| e.in_tensor(name))?;
        Ok(out)
    }
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.header.version)
            .field("alignment", &self.header.alignment)
            .field("n_bytes", &self.bytes().len())
            .field("n_metadata", &self.header.metadata.len())
            .field("n_tensors", &self.header.tensors.len())
            .finish()
    }
}

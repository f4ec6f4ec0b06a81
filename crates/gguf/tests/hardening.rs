//! Malformed and truncated files: every one must give an error naming what and where,
//! never a panic or an out-of-bounds read.

use folio_gguf::limits::*;
use folio_gguf::{GgmlType, GgufError, GgufFile, GgufWriter, Value};
use proptest::prelude::*;

/// A small but varied valid file: every kind of metadata and several tensor types.
fn sample_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("llama".into()))
        .add_metadata("llama.block_count", Value::U32(2))
        .add_metadata("f", Value::F32(1e-5))
        .add_metadata("b", Value::Bool(true))
        .add_metadata(
            "tokens",
            Value::Array(
                ["a", "bc", "<s>"]
                    .iter()
                    .map(|s| Value::String(s.to_string()))
                    .collect(),
            ),
        )
        .add_metadata(
            "nested",
            Value::Array(vec![
                Value::Array(vec![Value::I64(1), Value::I64(2)]),
                Value::Array(vec![]),
            ]),
        )
        .add_metadata(
            "scores",
            Value::Array(vec![Value::F32(0.0), Value::F32(-1.0), Value::F32(2.0)]),
        );
    let v: Vec<f32> = (0..512).map(|i| (i as f32 * 0.37).sin()).collect();
    w.add_tensor_f32("norm", &[8], GgmlType::F32, &v[..8])
        .unwrap();
    w.add_tensor_f32("q8", &[32, 2], GgmlType::Q8_0, &v[..64])
        .unwrap();
    w.add_tensor_f32("q41", &[64], GgmlType::Q4_1, &v[..64])
        .unwrap();
    w.add_tensor_f32("q4k", &[256, 2], GgmlType::Q4_K, &v)
        .unwrap();
    w.add_tensor_f32("q6k", &[256], GgmlType::Q6_K, &v[..256])
        .unwrap();
    w.add_tensor_f32("h", &[4], GgmlType::F16, &v[..4]).unwrap();
    w.to_bytes()
}

/// Opens `bytes`; on success checks every invariant the reader promises.
fn open_checked(bytes: Vec<u8>) -> Result<(), GgufError> {
    let len = bytes.len() as u64;
    let f = GgufFile::from_bytes(bytes)?;
    for t in f.tensors() {
        assert!(
            t.offset.checked_add(t.n_bytes as u64).unwrap() <= len,
            "{} out of file",
            t.name
        );
        assert_eq!(f.tensor_data(t).len(), t.n_bytes);
        assert_eq!((t.offset - f.data_offset()) % f.alignment() as u64, 0);
        assert!(t.dims.len() <= MAX_DIMS as usize);
        if t.n_elements() <= 1 << 20 {
            // May fail for unsupported types; must not panic.
            let _ = f.tensor_f32(&t.name);
        }
    }
    Ok(())
}

#[test]
fn sample_file_is_valid() {
    let bytes = sample_file();
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    assert_eq!(f.tensors().len(), 6);
    assert_eq!(f.metadata().len(), 7);
    open_checked(bytes).unwrap();
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = sample_file();
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    // The writer pads after the last tensor; only the bytes up to its end are required.
    let needed = f
        .tensors()
        .iter()
        .map(|t| t.offset + t.n_bytes as u64)
        .max()
        .unwrap() as usize;
    for n in 0..bytes.len() {
        let r = open_checked(bytes[..n].to_vec());
        if n < needed {
            let err = r.expect_err(&format!("prefix of {n} bytes must fail"));
            let msg = err.to_string();
            assert!(
                msg.contains("byte") || msg.contains("magic"),
                "prefix {n}: error does not say where: {msg}"
            );
        } else {
            r.unwrap();
        }
    }
}

fn header_len() -> usize {
    GgufFile::from_bytes(sample_file()).unwrap().data_offset() as usize
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    #[test]
    fn flipped_bytes_never_panic(edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut bytes = sample_file();
        let n = bytes.len();
        for (i, v) in edits {
            bytes[i.index(n)] = v;
        }
        let _ = open_checked(bytes);
    }

    #[test]
    fn header_bytes_flipped_never_panic(edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)) {
        let mut bytes = sample_file();
        let n = header_len();
        for (i, v) in edits {
            bytes[i.index(n)] = v;
        }
        let _ = open_checked(bytes);
    }

    #[test]
    fn huge_u64_fields_never_panic(
        pos in any::<prop::sample::Index>(),
        value in prop_oneof![
            Just(u64::MAX), Just(u64::MAX / 2), Just(1u64 << 32), Just(1u64 << 40),
            Just(MAX_STRING_LEN + 1), Just(MAX_ARRAY_LEN), Just(MAX_KV_COUNT), any::<u64>(), 0u64..64,
        ],
    ) {
        let mut bytes = sample_file();
        let at = pos.index(header_len() - 8);
        bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        let _ = open_checked(bytes);
    }

    #[test]
    fn random_bytes_never_panic(tail in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut bytes = b"GGUF\x03\x00\x00\x00".to_vec();
        bytes.extend(tail);
        let _ = open_checked(bytes);
    }
}

// ---- crafted files, exact errors ----

/// A hand-rolled GGUF byte builder for files the writer would refuse to produce.
#[derive(Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(tensors: u64, kvs: u64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(3).u64(tensors).u64(kvs);
        r
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend(s.as_bytes());
        self
    }
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        dims.iter().for_each(|&d| {
            self.u64(d);
        });
        self.u32(ty).u64(offset)
    }
    /// Pads to 32 and appends `n` data bytes.
    fn data(&mut self, n: usize) -> Vec<u8> {
        let mut b = std::mem::take(&mut self.0);
        b.resize(b.len().div_ceil(32) * 32 + n, 0);
        b
    }
    fn open(&mut self) -> GgufError {
        GgufFile::from_bytes(std::mem::take(&mut self.0)).unwrap_err()
    }
}

fn err_of(bytes: Vec<u8>) -> String {
    GgufFile::from_bytes(bytes).unwrap_err().to_string()
}

#[test]
fn bad_magic_and_tiny_files() {
    assert_eq!(
        err_of(vec![]),
        "not a GGUF file: magic at byte 0 is [], expected \"GGUF\" [47, 47, 55, 46]"
    );
    assert!(err_of(b"GGML\x03\0\0\0".to_vec()).contains("[47, 47, 4d, 4c]"));
    assert_eq!(
        err_of(b"GGUF\x03\0".to_vec()),
        "truncated file: version needs 4 bytes at byte 4, but only 2 remain"
    );
}

#[test]
fn count_caps_and_truncated_counts() {
    let e = Raw::header(MAX_TENSOR_COUNT + 1, 0).open();
    assert_eq!(
        e.to_string(),
        format!(
            "tensor count at byte 8 is {}, above the limit 100000",
            MAX_TENSOR_COUNT + 1
        )
    );
    let e = Raw::header(0, u64::MAX).open();
    assert!(
        matches!(
            e,
            GgufError::LimitExceeded {
                what: "metadata kv count",
                offset: 16,
                value: u64::MAX,
                limit: MAX_KV_COUNT
            }
        ),
        "{e}"
    );
    // Under the cap but more than the file can hold: refused before allocating.
    let e = Raw::header(0, MAX_KV_COUNT).open();
    assert!(
        matches!(
            e,
            GgufError::Truncated {
                what: "metadata kv count",
                offset: 24,
                ..
            }
        ),
        "{e}"
    );
    let e = Raw::header(1000, 0).open();
    assert!(
        matches!(
            e,
            GgufError::Truncated {
                what: "tensor infos",
                offset: 24,
                needed: 24000,
                available: 0
            }
        ),
        "{e}"
    );
}

#[test]
fn string_and_array_caps() {
    let e = Raw::header(0, 1).u64(MAX_STRING_LEN + 1).u64(0).open();
    assert_eq!(
        e.to_string(),
        "string length at byte 24 is 1048577, above the limit 1048576"
    );
    let e = Raw::header(0, 1).str("k").u32(8).u64(u64::MAX).open();
    assert_eq!(
        e.to_string(),
        format!(
            "in metadata key \"k\": string length at byte 37 is {}, above the limit 1048576",
            u64::MAX
        )
    );
    let e = Raw::header(0, 1)
        .str("k")
        .u32(9)
        .u32(0)
        .u64(MAX_ARRAY_LEN + 1)
        .open();
    assert!(
        e.to_string().starts_with(
            "in metadata key \"k\": array length at byte 41 is 16777217, above the limit 16777216"
        ),
        "{e}"
    );
    // 16M strings claimed in a tiny file: refused by the bytes-left check.
    let e = Raw::header(0, 1)
        .str("k")
        .u32(9)
        .u32(8)
        .u64(MAX_ARRAY_LEN)
        .open();
    assert_eq!(e.to_string(), "in metadata key \"k\": truncated file: array length needs 134217728 bytes at byte 49, but only 0 remain");
}

#[test]
fn nesting_depth_is_capped() {
    let mut r = Raw::header(0, 1);
    r.str("deep").u32(9);
    for _ in 0..20 {
        r.u32(9).u64(1);
    }
    let e = r.open();
    assert!(e.to_string().contains("array nesting depth"), "{e}");
    assert!(e.to_string().contains("\"deep\""), "{e}");
}

#[test]
fn unknown_value_types_and_bad_values() {
    let e = Raw::header(0, 2)
        .str("ok")
        .u32(4)
        .u32(7)
        .str("bad.key")
        .u32(13)
        .open();
    assert_eq!(e.to_string(), "in metadata key \"bad.key\": unknown metadata value type 13 at byte 57 (known types are 0..=12)");
    assert!(
        matches!(e, GgufError::InKey { ref key, ref source } if key == "bad.key" && matches!(**source, GgufError::UnknownValueType { value_type: 13, offset: 57 }))
    );
    let e = Raw::header(0, 1).str("a").u32(9).u32(99).open();
    assert!(
        e.to_string()
            .contains("unknown metadata value type 99 at byte 37"),
        "{e}"
    );
    let mut r = Raw::header(0, 1);
    r.str("b").u32(7).0.push(2);
    assert_eq!(
        r.open().to_string(),
        "in metadata key \"b\": bool value at byte 37 is 2, expected 0 or 1"
    );
    let mut r = Raw::header(0, 1);
    r.u64(2).0.extend([0xff, 0xfe]);
    r.u32(4).u32(0);
    assert_eq!(
        r.open().to_string(),
        "metadata key at byte 32 is not valid UTF-8"
    );
    let e = Raw::header(0, 2)
        .str("k")
        .u32(4)
        .u32(1)
        .str("k")
        .u32(4)
        .u32(2)
        .open();
    assert_eq!(e.to_string(), "duplicate metadata key \"k\" at byte 41");
}

#[test]
fn bad_alignment() {
    for v in [0u32, 3, 1 << 21] {
        let e = Raw::header(0, 1)
            .str("general.alignment")
            .u32(4)
            .u32(v)
            .open();
        assert_eq!(e.to_string(), format!("metadata key \"general.alignment\" is u32 {v}: must be a power of two between 1 and 1048576"));
    }
    let e = Raw::header(0, 1)
        .str("general.alignment")
        .u32(8)
        .str("32")
        .open();
    assert!(matches!(e, GgufError::BadAlignment { .. }), "{e}");
}

#[test]
fn tensor_validation() {
    let e = GgufFile::from_bytes(
        Raw::header(1, 0)
            .tensor("t", &[1, 1, 1, 1, 1], 0, 0)
            .data(4),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "in tensor \"t\": tensor n_dims at byte 33 is 5, above the limit 4"
    );

    let e = GgufFile::from_bytes(
        Raw::header(1, 0)
            .tensor("t", &[1 << 32, 1 << 32, 2], 0, 0)
            .data(64),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "in tensor \"t\": element count of dims [4294967296, 4294967296, 2] overflows"
    );

    let e = GgufFile::from_bytes(Raw::header(1, 0).tensor("t", &[31], 8, 0).data(64)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "in tensor \"t\": 31 values are not a whole number of Q8_0 blocks of 32"
    );

    let e = GgufFile::from_bytes(Raw::header(1, 0).tensor("t", &[4], 0, 16).data(64)).unwrap_err();
    assert_eq!(e.to_string(), "in tensor \"t\": data offset 16 (relative to the data section) is not a multiple of the alignment 32");

    let e =
        GgufFile::from_bytes(Raw::header(1, 0).tensor("w", &[32, 4], 2, 0).data(71)).unwrap_err();
    // header 24 + name 9 + n_dims 4 + dims 16 + type 4 + offset 8 = 65 -> data at 96; 4*18 = 72 bytes.
    assert_eq!(
        e.to_string(),
        "in tensor \"w\": data range 96..168 (absolute bytes) lies outside the file of 167 bytes"
    );
    assert!(GgufFile::from_bytes(Raw::header(1, 0).tensor("w", &[32, 4], 2, 0).data(72)).is_ok());

    let e = GgufFile::from_bytes(
        Raw::header(1, 0)
            .tensor("w", &[4], 0, u64::MAX - 31)
            .data(16),
    )
    .unwrap_err();
    assert!(
        matches!(e, GgufError::InTensor { ref source, .. } if matches!(**source, GgufError::TensorOutOfBounds { .. })),
        "{e}"
    );

    let e =
        GgufFile::from_bytes(Raw::header(1, 0).tensor("nv", &[256], 40, 0).data(256)).unwrap_err();
    assert_eq!(e.to_string(), "in tensor \"nv\": tensor type NVFP4 (ggml type 40) is not supported for sizing (unknown block layout)");

    let e = GgufFile::from_bytes(
        Raw::header(2, 0)
            .tensor("a", &[4], 0, 0)
            .tensor("a", &[4], 0, 32)
            .data(64),
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "duplicate tensor name \"a\" at byte 57");

    let e = Raw::header(1, 0).str("tensor_t").u32(1).u64(4).open();
    assert_eq!(e.to_string(), "in tensor \"tensor_t\": truncated file: tensor type needs 4 bytes at byte 52, but only 0 remain");
}

#[test]
fn types_known_only_by_size_open_but_do_not_dequantize() {
    // Q8_K (id 15): 292 bytes per 256 values. The file opens; tensor_f32 names the tensor and type.
    let f = GgufFile::from_bytes(Raw::header(1, 0).tensor("q8k", &[256], 15, 0).data(292)).unwrap();
    let t = f.tensor("q8k").unwrap();
    assert_eq!((t.ggml_type, t.n_bytes), (GgmlType::Other(15), 292));
    assert_eq!(
        f.tensor_f32("q8k").unwrap_err().to_string(),
        "in tensor \"q8k\": tensor type Q8_K (ggml type 15) is not supported for dequantization"
    );
}

#[test]
fn q5_0_tensors_now_dequantize() {
    // Q5_0 (id 6): 22 bytes per 32 values; all-zero bytes are code 0 times d = 0.
    let f = GgufFile::from_bytes(Raw::header(1, 0).tensor("q5", &[32], 6, 0).data(22)).unwrap();
    let t = f.tensor("q5").unwrap();
    assert_eq!((t.ggml_type, t.n_bytes), (GgmlType::Q5_0, 22));
    assert_eq!(f.tensor_f32("q5").unwrap(), vec![0.0; 32]);
}

/// Two tensors whose data ranges share bytes (the second starts inside the first) are
/// refused at open, naming both tensors and both ranges; touching ranges are fine.
#[test]
fn overlapping_tensor_data_is_refused() {
    // F32 (type 0): "a" is 16 values = 64 bytes at 0, "b" 8 values at 32 (inside "a").
    let mut r = Raw::header(2, 0);
    r.tensor("a", &[16], 0, 0).tensor("b", &[8], 0, 32);
    let bytes = r.data(64);
    let e = GgufFile::from_bytes(bytes).unwrap_err();
    assert!(
        matches!(&e, GgufError::TensorOverlap { first, second, .. } if first == "a" && second == "b"),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("\"a\"") && msg.contains("\"b\"") && msg.contains("overlaps"),
        "{msg}"
    );
    // The same two tensors placed end to end open.
    let mut r = Raw::header(2, 0);
    r.tensor("a", &[16], 0, 0).tensor("b", &[8], 0, 64);
    GgufFile::from_bytes(r.data(96)).expect("adjacent tensors are valid");
}

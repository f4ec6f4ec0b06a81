//! Writer -> reader round trips and the metadata getters.

use folio_gguf::{GgmlType, GgufError, GgufFile, GgufWriter, Value};

/// One value of every metadata type, including nested and empty arrays.
fn all_values() -> Vec<(&'static str, Value)> {
    vec![
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60_000)),
        ("t.i16", Value::I16(-30_000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.u64", Value::U64(u64::MAX - 1)),
        ("t.i64", Value::I64(i64::MIN + 1)),
        ("t.f32", Value::F32(-1.5e-7)),
        ("t.f64", Value::F64(std::f64::consts::PI)),
        ("t.bool_t", Value::Bool(true)),
        ("t.bool_f", Value::Bool(false)),
        ("t.str", Value::String("héllo {{ chat }}\n".into())),
        ("t.str_empty", Value::String(String::new())),
        (
            "t.arr_str",
            Value::Array(vec![
                Value::String("a".into()),
                Value::String("".into()),
                Value::String("ü".into()),
            ]),
        ),
        (
            "t.arr_i32",
            Value::Array(vec![Value::I32(1), Value::I32(-2), Value::I32(3)]),
        ),
        (
            "t.arr_f32",
            Value::Array(vec![Value::F32(0.5), Value::F32(-0.25)]),
        ),
        ("t.arr_u8", Value::Array(vec![Value::U8(1), Value::U8(255)])),
        (
            "t.arr_bool",
            Value::Array(vec![Value::Bool(true), Value::Bool(false)]),
        ),
        ("t.arr_u64", Value::Array(vec![Value::U64(7)])),
        ("t.arr_f64", Value::Array(vec![Value::F64(1e300)])),
        ("t.arr_i8", Value::Array(vec![Value::I8(-1)])),
        ("t.arr_u16", Value::Array(vec![Value::U16(9)])),
        ("t.arr_i16", Value::Array(vec![Value::I16(-9)])),
        ("t.arr_u32", Value::Array(vec![Value::U32(10)])),
        ("t.arr_i64", Value::Array(vec![Value::I64(-10)])),
        ("t.arr_empty", Value::Array(vec![])),
        (
            "t.arr_nested",
            Value::Array(vec![
                Value::Array(vec![Value::U32(1), Value::U32(2)]),
                Value::Array(vec![Value::String("x".into())]),
                Value::Array(vec![]),
                Value::Array(vec![Value::Array(vec![Value::I64(-5)])]),
            ]),
        ),
    ]
}

fn build(version: u32) -> Vec<u8> {
    let mut w = GgufWriter::with_version(version);
    for (k, v) in all_values() {
        w.add_metadata(k, v);
    }
    w.add_tensor_f32(
        "a",
        &[4, 2],
        GgmlType::F32,
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
    )
    .unwrap();
    w.add_tensor("b", &[32], GgmlType::Q8_0, {
        let mut d = vec![0u8; 34];
        d[0..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        for (j, b) in d[2..].iter_mut().enumerate() {
            *b = (j as i8 - 16) as u8;
        }
        d
    });
    w.add_tensor_f32("c", &[3], GgmlType::F16, &[0.5, -2.0, 65504.0])
        .unwrap();
    w.to_bytes()
}

#[test]
fn every_value_type_round_trips_v2_and_v3() {
    for version in [2, 3] {
        let f = GgufFile::from_bytes(build(version)).unwrap();
        assert_eq!(f.version(), version);
        assert_eq!(f.alignment(), 32);
        let expected = all_values();
        assert_eq!(f.metadata().len(), expected.len());
        for ((k, v), (ek, ev)) in f.metadata().iter().zip(&expected) {
            assert_eq!(k, ek, "metadata keeps file order");
            assert_eq!(v, ev, "value of {k}");
            assert_eq!(f.get(k), Some(ev));
        }
    }
}

#[test]
fn tensors_round_trip_with_aligned_offsets() {
    let f = GgufFile::from_bytes(build(3)).unwrap();
    let names: Vec<_> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let a = f.tensor("a").unwrap();
    assert_eq!(
        (a.dims.clone(), a.ggml_type, a.n_bytes),
        (vec![4, 2], GgmlType::F32, 32)
    );
    assert_eq!((a.cols(), a.rows(), a.n_elements()), (4, 2, 8));
    assert_eq!(a.offset, f.data_offset());
    assert_eq!(f.data_offset() % 32, 0);
    let b = f.tensor("b").unwrap();
    assert_eq!(b.offset, f.data_offset() + 32);
    assert_eq!(b.n_bytes, 34);
    let c = f.tensor("c").unwrap();
    assert_eq!(c.offset, f.data_offset() + 96, "34 bytes of b padded to 64");
    assert_eq!(
        f.tensor_f32("a").unwrap(),
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    );
    let expected_b: Vec<f32> = (0..32).map(|j| (j as f32 - 16.0) * 0.5).collect();
    assert_eq!(f.tensor_f32("b").unwrap(), expected_b);
    assert_eq!(f.tensor_f32("c").unwrap(), [0.5, -2.0, 65504.0]);
    assert_eq!(f.tensor_data(c), &[0x00, 0x38, 0x00, 0xc0, 0xff, 0x7b]);
    assert!(f.tensor("missing").is_none());
    assert!(matches!(
        f.tensor_f32("missing"),
        Err(GgufError::TensorNotFound { .. })
    ));
}

#[test]
fn custom_alignment_is_honoured() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.alignment", Value::U32(64));
    w.add_tensor_f32("x", &[3], GgmlType::F32, &[1.0, 2.0, 3.0])
        .unwrap();
    w.add_tensor_f32("y", &[1], GgmlType::F32, &[4.0]).unwrap();
    let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.data_offset() % 64, 0);
    assert_eq!(f.tensor("y").unwrap().offset, f.data_offset() + 64);
    assert_eq!(f.tensor_f32("y").unwrap(), [4.0]);
}

#[test]
fn getters_convert_and_name_the_key() {
    let f = GgufFile::from_bytes(build(3)).unwrap();
    assert_eq!(f.get_u64("t.u8").unwrap(), 200);
    assert_eq!(f.get_u64("t.u32").unwrap(), 4_000_000_000);
    assert_eq!(f.get_f32("t.f64").unwrap(), std::f32::consts::PI);
    assert_eq!(f.get_f32("t.u16").unwrap(), 60_000.0);
    assert_eq!(f.get_str("t.str").unwrap(), "héllo {{ chat }}\n");
    assert_eq!(f.get_str_array("t.arr_str").unwrap(), ["a", "", "ü"]);
    assert_eq!(f.get_i64_array("t.arr_i32").unwrap(), [1, -2, 3]);
    assert_eq!(f.get_f32_array("t.arr_f32").unwrap(), [0.5, -0.25]);
    assert_eq!(f.get_i64_array("t.arr_empty").unwrap(), Vec::<i64>::new());

    let err = f.get_u64("t.i8").unwrap_err();
    assert!(
        matches!(err, GgufError::WrongType { ref key, .. } if key == "t.i8"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "metadata key \"t.i8\" holds i8 -100, expected a non-negative integer"
    );
    let err = f.get_str("nope").unwrap_err();
    assert_eq!(err.to_string(), "metadata key \"nope\" is missing");
    let err = f.get_str_array("t.arr_i32").unwrap_err();
    assert_eq!(
        err.to_string(),
        "metadata key \"t.arr_i32\" holds array of 3 i32, expected an array of strings"
    );
    assert!(f.get_f32("t.str").is_err());
    assert!(f.get_u64("t.u64").is_ok());
    assert!(f.get_i64_array("t.arr_u64").is_ok());
}

#[test]
fn value_accessors() {
    assert_eq!(Value::I32(-1).as_u64(), None);
    assert_eq!(Value::I32(5).as_u64(), Some(5));
    assert_eq!(Value::U64(u64::MAX).as_i64(), None);
    assert_eq!(Value::U8(3).as_i64(), Some(3));
    assert_eq!(Value::F32(1.5).as_u64(), None);
    assert_eq!(Value::F32(1.5).as_f64(), Some(1.5));
    assert_eq!(Value::Bool(true).as_bool(), Some(true));
    assert_eq!(Value::U8(1).as_bool(), None);
    assert_eq!(Value::String("s".into()).as_str(), Some("s"));
    assert_eq!(
        Value::Array(vec![Value::U8(1)]).as_array(),
        Some(&[Value::U8(1)][..])
    );
}

#[test]
fn version_1_and_others_are_rejected() {
    for version in [0, 1, 4] {
        let err = GgufFile::from_bytes(GgufWriter::with_version(version).to_bytes()).unwrap_err();
        assert!(matches!(err, GgufError::UnsupportedVersion { version: v } if v == version));
        assert!(
            err.to_string()
                .contains(&format!("version {version} at byte 4")),
            "{err}"
        );
    }
}

#[test]
fn empty_file_is_readable() {
    let f = GgufFile::from_bytes(GgufWriter::new().to_bytes()).unwrap();
    assert!(f.metadata().is_empty() && f.tensors().is_empty());
}

#[test]
fn open_reads_from_disk_and_reports_path() {
    let dir = std::env::temp_dir().join(format!("folio-gguf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.gguf");
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("llama".into()));
    w.add_tensor_f32("w", &[32, 2], GgmlType::Q4_0, &[0.25; 64])
        .unwrap();
    w.write(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.tensor("w").unwrap().n_bytes, 36);
    let missing = dir.join("missing.gguf");
    let err = GgufFile::open(&missing).unwrap_err();
    assert!(err.to_string().contains("missing.gguf"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn writer_rejects_inconsistent_input() {
    let mut w = GgufWriter::new();
    w.add_metadata("mixed", Value::Array(vec![Value::U8(1), Value::I8(1)]));
    let err = w.try_to_bytes().unwrap_err();
    assert!(
        err.to_string().contains("mixed") && err.to_string().contains("element 1"),
        "{err}"
    );

    let mut w = GgufWriter::new();
    w.add_tensor("t", &[32], GgmlType::Q8_0, vec![0; 33]);
    let err = w.try_to_bytes().unwrap_err();
    assert_eq!(
        err.to_string(),
        "in tensor \"t\": Q8_0 data for 32 values must be 34 bytes, got 33"
    );

    let mut w = GgufWriter::new();
    assert!(w
        .add_tensor_f32("t", &[3, 2], GgmlType::F32, &[1.0; 5])
        .is_err());
    assert!(w
        .add_tensor_f32("t", &[31], GgmlType::Q4_0, &[1.0; 31])
        .is_err());
}

#[test]
fn add_metadata_replaces_an_existing_key() {
    let mut w = GgufWriter::new();
    w.add_metadata("k", Value::U32(1))
        .add_metadata("j", Value::U32(2))
        .add_metadata("k", Value::U32(3));
    let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(
        f.metadata(),
        &[
            ("k".to_string(), Value::U32(3)),
            ("j".to_string(), Value::U32(2))
        ]
    );
}

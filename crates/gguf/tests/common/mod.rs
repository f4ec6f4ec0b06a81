//! Shared by the dequantization tests: f16 constants and a dequantize-to-Vec helper.
#![allow(dead_code)]

use folio_gguf::dequant::dequantize;
use folio_gguf::GgmlType;
use half::f16;

pub fn h(v: f32) -> [u8; 2] {
    let x = f16::from_f32(v);
    assert_eq!(x.to_f32(), v, "test constants must be exact in f16");
    x.to_le_bytes()
}

pub fn deq(ty: GgmlType, data: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n];
    dequantize(ty, data, &mut out).unwrap();
    out
}

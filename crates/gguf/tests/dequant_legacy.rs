//! The 32-value legacy quants (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): hand-built blocks against
//! hand formulas, and the quantizers bit for bit against ggml's reference ones.

mod common;

use common::{deq, h};
use folio_gguf::quant::quantize;
use folio_gguf::GgmlType;
use half::f16;

#[test]
fn q8_0_block() {
    let mut b = h(0.5).to_vec();
    b.extend((0..32).map(|j| (j * 8 - 128) as i8 as u8)); // -128, -120, ..., 120
    let expected: Vec<f32> = (0..32).map(|j| 0.5 * (j * 8 - 128) as f32).collect();
    assert_eq!(deq(GgmlType::Q8_0, &b, 32), expected);
}

#[test]
fn q4_0_block() {
    let mut b = h(0.25).to_vec();
    // byte j: low nibble j (element j), high nibble 15 - j (element j + 16)
    b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let mut expected = vec![0.0; 32];
    for j in 0..16 {
        expected[j] = 0.25 * (j as f32 - 8.0);
        expected[j + 16] = 0.25 * ((15 - j) as f32 - 8.0);
    }
    assert_eq!(deq(GgmlType::Q4_0, &b, 32), expected);
    assert_eq!(expected[0], -2.0);
    assert_eq!(expected[16], 1.75);
}

#[test]
fn q4_1_block() {
    let mut b = h(0.5).to_vec();
    b.extend(h(-3.0));
    b.extend((0..16u8).map(|j| ((j * 3) % 16) | (((j * 5 + 1) % 16) << 4)));
    let mut expected = vec![0.0; 32];
    for j in 0..16 {
        expected[j] = 0.5 * ((j * 3) % 16) as f32 - 3.0;
        expected[j + 16] = 0.5 * ((j * 5 + 1) % 16) as f32 - 3.0;
    }
    assert_eq!(deq(GgmlType::Q4_1, &b, 32), expected);
    assert_eq!(&expected[..2], &[-3.0, -1.5]);
}

#[test]
fn q4_0_quantizer_matches_ggml_ref() {
    // x = j - 16: largest magnitude is -16, so d = -16 / -8 = 2, q = min(15, (int)((j-16)/2 + 8.5)).
    let x: Vec<f32> = (0..32).map(|j| j as f32 - 16.0).collect();
    let b = quantize(GgmlType::Q4_0, &x).unwrap();
    assert_eq!(&b[..2], &h(2.0));
    for j in 0..16 {
        let q = |i: usize| ((i as f32 - 16.0) / 2.0 + 8.5).trunc().min(15.0) as u8;
        assert_eq!(b[2 + j], q(j) | (q(j + 16) << 4), "byte {j}");
    }
    assert_eq!(b[2], 0x80); // element 0 -> 0, element 16 -> 8
}

#[test]
fn q4_1_and_q8_0_quantizers_match_ggml_ref() {
    // x = j/2 on 0..15.5: min 0, d = 15.5/15, q = (int)(x/d + 0.5)
    let x: Vec<f32> = (0..32).map(|j| j as f32 * 0.5).collect();
    let b = quantize(GgmlType::Q4_1, &x).unwrap();
    let d = 15.5f32 / 15.0;
    assert_eq!(&b[..2], &f16::from_f32(d).to_le_bytes());
    assert_eq!(&b[2..4], &h(0.0));
    let q = |i: usize| ((x[i] * (1.0 / d)) + 0.5) as u8;
    for j in 0..16 {
        assert_eq!(b[4 + j], q(j).min(15) | (q(j + 16).min(15) << 4));
    }
    // Q8_0: amax 127 -> d = 1, q = round(x)
    let x: Vec<f32> = (0..32).map(|j| (j as f32 - 16.0) * 7.9 + 0.5).collect();
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let b = quantize(GgmlType::Q8_0, &x).unwrap();
    let d = amax / 127.0;
    assert_eq!(&b[..2], &f16::from_f32(d).to_le_bytes());
    for j in 0..32 {
        assert_eq!(b[2 + j] as i8, (x[j] * (1.0 / d)).round() as i8);
    }
}

/// Q5_0/Q5_1 quants: element j (j < 16) in the low nibble of qs[j], element j + 16 in the
/// high nibble; bit 4 of element i is bit i of the little-endian u32 qh.
fn pack_q5(code: impl Fn(usize) -> u8) -> Vec<u8> {
    let qh: u32 = (0..32).map(|i| u32::from(code(i) >> 4) << i).sum();
    let mut b = qh.to_le_bytes().to_vec();
    b.extend((0..16).map(|j| (code(j) & 0xF) | ((code(j + 16) & 0xF) << 4)));
    b
}

#[test]
fn q5_0_and_q5_1_blocks() {
    let code = |i: usize| ((i * 7 + 3) % 32) as u8;
    let mut b = h(0.5).to_vec();
    b.extend(pack_q5(code));
    assert_eq!(b.len(), 22);
    let expected: Vec<f32> = (0..32).map(|i| 0.5 * (code(i) as f32 - 16.0)).collect();
    assert_eq!(deq(GgmlType::Q5_0, &b, 32), expected);
    // element 4: code 31 -> 0.5 * 15 = 7.5; element 9: code 2 -> -7
    assert_eq!((expected[4], expected[9]), (7.5, -7.0));

    let mut b = h(0.25).to_vec();
    b.extend(h(-2.0));
    b.extend(pack_q5(code));
    assert_eq!(b.len(), 24);
    let expected: Vec<f32> = (0..32).map(|i| 0.25 * code(i) as f32 - 2.0).collect();
    assert_eq!(deq(GgmlType::Q5_1, &b, 32), expected);

    // qh bit 17 -> element 17 gains 16 steps; qs[1] high nibble bit 0 -> element 17 one step.
    let mut b = vec![0u8; 22];
    b[..2].copy_from_slice(&h(1.0));
    b[2 + 2] = 0x02; // qh bit 17
    b[6 + 1] = 0x10;
    let y = deq(GgmlType::Q5_0, &b, 32);
    assert_eq!(y[17], 1.0);
    assert!(y.iter().enumerate().all(|(i, &v)| i == 17 || v == -16.0));
}

//! The non-linear 4-bit quants (IQ4_NL, IQ4_XS): hand-built blocks against hand formulas
//! over ggml's value table.

mod common;

use common::{deq, h};
use folio_gguf::GgmlType;

const KV: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

#[test]
fn iq4_nl_block() {
    let code = |i: usize| ((i * 5 + 2) % 16) as u8;
    let mut b = h(0.5).to_vec();
    b.extend((0..16).map(|j| code(j) | (code(j + 16) << 4)));
    let expected: Vec<f32> = (0..32).map(|i| 0.5 * KV[code(i) as usize] as f32).collect();
    assert_eq!(deq(GgmlType::IQ4_NL, &b, 32), expected);
    assert_eq!(expected[0], -41.5); // code 2 -> -83
    assert_eq!(folio_gguf::dequant::KVALUES_IQ4NL, KV);
}

#[test]
fn iq4_xs_block() {
    let ls = |ib: usize| ((ib * 9 + 5) % 64) as u16; // 5, 14, 23, ..., 63 + wrap
    let code = |i: usize| ((i * 11 + 4) % 16) as u8;
    let d = 0.25f32;
    let mut b = h(d).to_vec();
    let scales_h: u16 = (0..8).map(|ib| (ls(ib) >> 4) << (2 * ib)).sum();
    b.extend(scales_h.to_le_bytes());
    b.extend((0..4).map(|k| (ls(2 * k) & 0xF) as u8 | (((ls(2 * k + 1) & 0xF) as u8) << 4)));
    for ib in 0..8 {
        b.extend((0..16).map(|j| code(32 * ib + j) | (code(32 * ib + 16 + j) << 4)));
    }
    assert_eq!(b.len(), 136);
    let expected: Vec<f32> = (0..256)
        .map(|i| d * (ls(i / 32) as f32 - 32.0) * KV[code(i) as usize] as f32)
        .collect();
    assert_eq!(deq(GgmlType::IQ4_XS, &b, 256), expected);
    // element 0: ls 5, code 4 (-49): 0.25 * -27 * -49 = 330.75
    assert_eq!(expected[0], 330.75);
}

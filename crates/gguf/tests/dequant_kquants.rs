//! The K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): hand-built 256-value blocks against hand
//! formulas, and single-bit probes of where each bit of the packed layout lands.

mod common;

use common::{deq, h};
use folio_gguf::GgmlType;

/// Packs 8 six-bit (scale, min) pairs the way ggml's Q4_K/Q5_K scales[12] hold them:
/// bytes 0..4: scale j (low 6 bits) + bits 4..5 of scale j+4 in the top 2 bits;
/// bytes 4..8: min j + bits 4..5 of min j+4; bytes 8..12: low 4 bits of scale j+4 | min j+4 << 4.
fn pack_k4_scales(sc: [u8; 8], m: [u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
    }
    s
}

#[test]
fn q4_k_block() {
    let sc = [3u8, 17, 63, 0, 40, 33, 5, 62];
    let m = [1u8, 60, 20, 31, 47, 16, 63, 2];
    let (d, dmin) = (0.5f32, 0.25f32);
    let q = |i: usize| ((i * 7 + 3) % 16) as u8;
    let mut b = h(d).to_vec();
    b.extend(h(dmin));
    b.extend(pack_k4_scales(sc, m));
    // qs[32*c + l]: low nibble = element 64c + l, high nibble = element 64c + 32 + l.
    for c in 0..4 {
        for l in 0..32 {
            b.push(q(64 * c + l) | (q(64 * c + 32 + l) << 4));
        }
    }
    assert_eq!(b.len(), 144);
    let expected: Vec<f32> = (0..256)
        .map(|i| {
            let s = i / 32;
            (d * sc[s] as f32) * q(i) as f32 - dmin * m[s] as f32
        })
        .collect();
    let got = deq(GgmlType::Q4_K, &b, 256);
    assert_eq!(got, expected);
    // spot checks by hand: element 0: q=3, sc=3, m=1 -> 0.5*3*3 - 0.25 = 4.25
    assert_eq!(got[0], 4.25);
    // element 255: sub-block 7 (sc 62, m 2), q = (255*7+3)%16 = 12 -> 31*12 - 0.5 = 371.5
    assert_eq!(got[255], 371.5);
}

/// Q6_K 6-bit codes: element 128h + 32k + l takes its low 4 bits from ql[64h + l (+32 if k is
/// odd)] (low nibble for k < 2, high for k >= 2) and its top 2 bits from qh[32h + l] bits 2k..2k+1.
#[test]
fn q6_k_block() {
    let d = 0.125f32;
    let sc: Vec<i8> = (0..16).map(|k| (k as i8 - 8) * 9).collect(); // -72..63
    let code = |i: usize| ((i * 13 + 5) % 64) as u8;
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for hh in 0..2 {
        for l in 0..32 {
            let e = |k: usize| code(128 * hh + 32 * k + l);
            ql[64 * hh + l] = (e(0) & 0xF) | ((e(2) & 0xF) << 4);
            ql[64 * hh + l + 32] = (e(1) & 0xF) | ((e(3) & 0xF) << 4);
            qh[32 * hh + l] =
                (e(0) >> 4) | ((e(1) >> 4) << 2) | ((e(2) >> 4) << 4) | ((e(3) >> 4) << 6);
        }
    }
    let mut b = ql.to_vec();
    b.extend(qh);
    b.extend(sc.iter().map(|&s| s as u8));
    b.extend(h(d));
    assert_eq!(b.len(), 210);
    let expected: Vec<f32> = (0..256)
        .map(|i| d * sc[i / 16] as f32 * (code(i) as i32 - 32) as f32)
        .collect();
    let got = deq(GgmlType::Q6_K, &b, 256);
    assert_eq!(got, expected);
    // element 0: code 5, sc -72 -> 0.125 * -72 * -27 = 243
    assert_eq!(got[0], 243.0);
}

/// Single-bit probes: which element does each ql/qh bit move? Guards the layout against
/// a self-consistent but wrong packing in both the test and the code.
#[test]
fn q6_k_bit_positions() {
    let mut base = vec![0u8; 210];
    base[192..208].fill(1); // all scales 1
    base[208..210].copy_from_slice(&h(1.0));
    let zero = deq(GgmlType::Q6_K, &base, 256);
    assert!(zero.iter().all(|&v| v == -32.0));
    let probe = |byte: usize, bit: u8| {
        let mut b = base.clone();
        b[byte] |= 1 << bit;
        let y = deq(GgmlType::Q6_K, &b, 256);
        let changed: Vec<_> = (0..256).filter(|&i| y[i] != -32.0).collect();
        assert_eq!(changed.len(), 1);
        (changed[0], y[changed[0]] + 32.0)
    };
    assert_eq!(probe(0, 0), (0, 1.0)); // ql[0] low nibble -> element 0
    assert_eq!(probe(0, 4), (64, 1.0)); // ql[0] high nibble -> element 64
    assert_eq!(probe(32, 0), (32, 1.0)); // ql[32] low -> element 32
    assert_eq!(probe(32 + 5, 7), (96 + 5, 8.0)); // ql[37] high bit 3 -> element 101
    assert_eq!(probe(64, 0), (128, 1.0)); // second half
    assert_eq!(probe(128, 0), (0, 16.0)); // qh[0] bits 0-1 -> element 0, value bit 4
    assert_eq!(probe(128, 3), (32, 32.0)); // qh[0] bit 3 -> element 32, value bit 5
    assert_eq!(probe(128 + 32 + 1, 6), (128 + 96 + 1, 16.0));
}

#[test]
fn q4_k_bit_positions() {
    let mut base = vec![0u8; 144];
    base[0..2].copy_from_slice(&h(1.0));
    base[4..16].copy_from_slice(&pack_k4_scales([1; 8], [0; 8]));
    let probe = |byte: usize, bit: u8| {
        let mut b = base.clone();
        b[byte] |= 1 << bit;
        let y = deq(GgmlType::Q4_K, &b, 256);
        let changed: Vec<_> = (0..256).filter(|&i| y[i] != 0.0).collect();
        assert_eq!(changed.len(), 1);
        (changed[0], y[changed[0]])
    };
    assert_eq!(probe(16, 0), (0, 1.0));
    assert_eq!(probe(16, 4), (32, 1.0));
    assert_eq!(probe(16 + 33, 7), (64 + 32 + 1, 8.0));
    // scale of sub-block 5 = 1 | bit 4 set via bits 6-7 of scales[1] -> 17
    let mut b = base.clone();
    b[4 + 1] |= 1 << 6;
    b[16 + 32 * 2 + 3] = 0x20; // element 64*2 + 32 + 3 = 163 (sub-block 5), q = 2
    assert_eq!(deq(GgmlType::Q4_K, &b, 256)[163], 34.0);
}

/// Element 128n + 32j + l of Q2_K/Q3_K keeps its 2 low bits in byte 32n + l, bits 2j..2j+1.
fn pack_2bit(code: impl Fn(usize) -> u8) -> [u8; 64] {
    let mut qs = [0u8; 64];
    for i in 0..256 {
        qs[32 * (i / 128) + i % 32] |= (code(i) & 3) << (2 * ((i % 128) / 32));
    }
    qs
}

#[test]
fn q2_k_block() {
    let sc = |s: usize| ((s * 5 + 1) % 16) as u8;
    let mn = |s: usize| ((s * 3 + 2) % 16) as u8;
    let code = |i: usize| ((i * 7 + i / 16) % 4) as u8;
    let (d, dmin) = (0.5f32, 0.25f32);
    let mut b: Vec<u8> = (0..16).map(|s| sc(s) | (mn(s) << 4)).collect();
    b.extend(pack_2bit(code));
    b.extend(h(d));
    b.extend(h(dmin));
    assert_eq!(b.len(), 84);
    let expected: Vec<f32> = (0..256)
        .map(|i| d * sc(i / 16) as f32 * code(i) as f32 - dmin * mn(i / 16) as f32)
        .collect();
    let got = deq(GgmlType::Q2_K, &b, 256);
    assert_eq!(got, expected);
    // element 255: sub-block 15 (scale 12, min 15), code (1785 + 15) % 4 = 0 -> -3.75
    assert_eq!(got[255], -3.75);

    // probes: scales 1, mins 0, d 1, codes 0 -> all zero; one qs bit moves one element.
    let mut base = vec![0u8; 84];
    base[..16].fill(1);
    base[80..82].copy_from_slice(&h(1.0));
    let probe = |byte: usize, bit: u8| {
        let mut b = base.clone();
        b[byte] |= 1 << bit;
        let y = deq(GgmlType::Q2_K, &b, 256);
        let changed: Vec<_> = (0..256).filter(|&i| y[i] != 0.0).collect();
        assert_eq!(changed.len(), 1);
        (changed[0], y[changed[0]])
    };
    assert_eq!(probe(16, 0), (0, 1.0));
    assert_eq!(probe(16, 3), (32, 2.0));
    assert_eq!(probe(16 + 32 + 5, 6), (128 + 96 + 5, 1.0));
    assert_eq!(probe(16 + 20, 4), (64 + 20, 1.0));
}

/// Q3_K scales[12]: scale s (6 bits) has its low 4 bits in byte s%8 (low nibble for s < 8)
/// and its high 2 bits in byte 8 + s%4 at bits 2*(s/4) (gguf-py's IIIIAAAA ... PPLLHHDD).
fn pack_q3_scales(sc: impl Fn(usize) -> u8) -> [u8; 12] {
    let mut s = [0u8; 12];
    for k in 0..16 {
        s[k % 8] |= (sc(k) & 0xF) << (4 * (k / 8));
        s[8 + k % 4] |= (sc(k) >> 4) << (2 * (k / 4));
    }
    s
}

#[test]
fn q3_k_block() {
    let sc = |s: usize| ((s * 11 + 7) % 64) as u8;
    let code = |i: usize| ((i * 3 + i / 32) % 8) as u8; // value code - 4
    let d = 0.5f32;
    // hmask[l] bit 4n + j: bit 2 of the code of element 128n + 32j + l.
    let mut hmask = [0u8; 32];
    for i in 0..256 {
        hmask[i % 32] |= (code(i) >> 2) << (4 * (i / 128) + (i % 128) / 32);
    }
    let mut b = hmask.to_vec();
    b.extend(pack_2bit(code));
    b.extend(pack_q3_scales(sc));
    b.extend(h(d));
    assert_eq!(b.len(), 110);
    let unpacked = folio_gguf::dequant::q3_k_scales(&b[96..108]);
    assert_eq!(unpacked.to_vec(), (0..16).map(sc).collect::<Vec<_>>());
    let expected: Vec<f32> = (0..256)
        .map(|i| d * (sc(i / 16) as f32 - 32.0) * (code(i) as f32 - 4.0))
        .collect();
    let got = deq(GgmlType::Q3_K, &b, 256);
    assert_eq!(got, expected);
    // element 0: scale 7, code 0 -> 0.5 * -25 * -4 = 50
    assert_eq!(got[0], 50.0);

    // probes: all high bits set, scales 33 (-> 1), d 1 -> all zero.
    let mut base = vec![0u8; 110];
    base[..32].fill(0xFF);
    base[96..108].copy_from_slice(&pack_q3_scales(|_| 33));
    base[108..110].copy_from_slice(&h(1.0));
    assert!(deq(GgmlType::Q3_K, &base, 256).iter().all(|&v| v == 0.0));
    let probe = |byte: usize, bit: u8| {
        let mut b = base.clone();
        b[byte] ^= 1 << bit;
        let y = deq(GgmlType::Q3_K, &b, 256);
        let changed: Vec<_> = (0..256).filter(|&i| y[i] != 0.0).collect();
        assert_eq!(changed.len(), 1);
        (changed[0], y[changed[0]])
    };
    assert_eq!(probe(32 + 32 + 3, 2), (128 + 32 + 3, 1.0));
    assert_eq!(probe(5, 4), (128 + 5, -4.0)); // hmask[5] bit 4: n = 1, j = 0
    assert_eq!(probe(31, 3), (96 + 31, -4.0));
}

#[test]
fn q5_k_block() {
    let sc = [3u8, 17, 63, 0, 40, 33, 5, 62];
    let m = [1u8, 60, 20, 31, 47, 16, 63, 2];
    let (d, dmin) = (0.5f32, 0.25f32);
    let q = |i: usize| ((i * 13 + i / 64 + 3) % 32) as u8;
    let mut b = h(d).to_vec();
    b.extend(h(dmin));
    b.extend(pack_k4_scales(sc, m));
    // qh[l] bit s: bit 4 of element 32s + l.
    b.extend((0..32).map(|l| (0..8).map(|s| (q(32 * s + l) >> 4) << s).sum::<u8>()));
    for c in 0..4 {
        for l in 0..32 {
            b.push((q(64 * c + l) & 0xF) | ((q(64 * c + 32 + l) & 0xF) << 4));
        }
    }
    assert_eq!(b.len(), 176);
    let expected: Vec<f32> = (0..256)
        .map(|i| (d * sc[i / 32] as f32) * q(i) as f32 - dmin * m[i / 32] as f32)
        .collect();
    let got = deq(GgmlType::Q5_K, &b, 256);
    assert_eq!(got, expected);
    // element 2: q = 29, sc 3, m 1 -> 1.5 * 29 - 0.25 = 43.25
    assert_eq!(got[2], 43.25);
}

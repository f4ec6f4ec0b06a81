//! Per-row scales of the superblock layout, written once for every width: a [`Lanes`] value
//! holds one row (the scalar reference), 8 rows (AVX2) or 16 rows (AVX-512) of a panel, and
//! [`header`] / [`scales`] unpack ggml's packed scale bits with the same integer operations
//! and the same float roundings at every width, so every ISA gets the reference's bits.

use super::sb_format::{f16_bits, SbType, PANEL};

/// A vector of i32 lanes (one per panel row) with its f32 companion.
pub(crate) trait Lanes: Copy {
    type F: Copy;
    /// Lanes consecutive u32 / u16 / f16 values at `p`.
    unsafe fn u32s(p: *const u8) -> Self;
    unsafe fn u16s(p: *const u8) -> Self;
    unsafe fn f16s(p: *const u8) -> Self::F;
    unsafe fn u8s(p: *const u8) -> Self;
    /// ggml's `ggml_e8m0_to_fp32_half` of each lane (an e8m0 byte): `2^(e - 128)`, the
    /// subnormals 2^-128 and 2^-127 for e = 0 and 1.
    fn e8m0_half(self) -> Self::F;
    fn splat_f(v: f32) -> Self::F;
    fn zero_f() -> Self::F;
    fn zero() -> Self;
    fn shr(self, n: u32) -> Self;
    fn shl(self, n: u32) -> Self;
    fn sar(self, n: u32) -> Self;
    fn and(self, m: i32) -> Self;
    fn or(self, o: Self) -> Self;
    fn sub(self, c: i32) -> Self;
    fn to_f(self) -> Self::F;
    fn fmul(a: Self::F, b: Self::F) -> Self::F;
    fn fneg(a: Self::F) -> Self::F;
}

/// One row: the scalar reference.
#[derive(Clone, Copy, Debug)]
pub(crate) struct One(pub i32);

/// One row's float.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OneF(pub f32);

impl Lanes for One {
    type F = OneF;
    unsafe fn u32s(p: *const u8) -> Self {
        One((p as *const u32).read_unaligned() as i32)
    }
    unsafe fn u16s(p: *const u8) -> Self {
        One((p as *const u16).read_unaligned() as i32)
    }
    unsafe fn f16s(p: *const u8) -> OneF {
        OneF(f16_bits((p as *const u16).read_unaligned() as u32))
    }
    unsafe fn u8s(p: *const u8) -> Self {
        One(*p as i32)
    }
    fn e8m0_half(self) -> OneF {
        OneF(folio_gguf::dequant::e8m0_to_f32_half(self.0 as u8))
    }
    fn splat_f(v: f32) -> OneF {
        OneF(v)
    }
    fn zero_f() -> OneF {
        OneF(0.0)
    }
    fn zero() -> Self {
        One(0)
    }
    fn shr(self, n: u32) -> Self {
        One(((self.0 as u32) >> n) as i32)
    }
    fn shl(self, n: u32) -> Self {
        One(((self.0 as u32) << n) as i32)
    }
    fn sar(self, n: u32) -> Self {
        One(self.0 >> n)
    }
    fn and(self, m: i32) -> Self {
        One(self.0 & m)
    }
    fn or(self, o: Self) -> Self {
        One(self.0 | o.0)
    }
    fn sub(self, c: i32) -> Self {
        One(self.0 - c)
    }
    fn to_f(self) -> OneF {
        OneF(self.0 as f32)
    }
    fn fmul(a: OneF, b: OneF) -> OneF {
        OneF(a.0 * b.0)
    }
    fn fneg(a: OneF) -> OneF {
        OneF(-a.0)
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{Y, Z};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Lanes;
    use std::arch::x86_64::*;

    /// 16 rows in a 512-bit register (callers are `avx512f` functions).
    #[derive(Clone, Copy)]
    pub(crate) struct Z(pub __m512i);

    impl Lanes for Z {
        type F = __m512;
        #[inline(always)]
        unsafe fn u32s(p: *const u8) -> Self {
            Z(_mm512_loadu_si512(p as *const _))
        }
        #[inline(always)]
        unsafe fn u16s(p: *const u8) -> Self {
            Z(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p as *const _)))
        }
        #[inline(always)]
        unsafe fn f16s(p: *const u8) -> __m512 {
            _mm512_cvtph_ps(_mm256_loadu_si256(p as *const _))
        }
        #[inline(always)]
        unsafe fn u8s(p: *const u8) -> Self {
            Z(_mm512_cvtepu8_epi32(_mm_loadu_si128(p as *const _)))
        }
        #[inline(always)]
        fn e8m0_half(self) -> __m512 {
            unsafe {
                let two = _mm512_set1_epi32(2);
                let small = _mm512_cmplt_epi32_mask(self.0, two);
                let normal =
                    _mm512_slli_epi32::<23>(_mm512_sub_epi32(self.0, _mm512_set1_epi32(1)));
                let sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), self.0);
                _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, sub))
            }
        }
        #[inline(always)]
        fn splat_f(v: f32) -> __m512 {
            unsafe { _mm512_set1_ps(v) }
        }
        #[inline(always)]
        fn zero_f() -> __m512 {
            unsafe { _mm512_setzero_ps() }
        }
        #[inline(always)]
        fn zero() -> Self {
            unsafe { Z(_mm512_setzero_si512()) }
        }
        #[inline(always)]
        fn shr(self, n: u32) -> Self {
            unsafe { Z(_mm512_srl_epi32(self.0, _mm_cvtsi32_si128(n as i32))) }
        }
        #[inline(always)]
        fn shl(self, n: u32) -> Self {
            unsafe { Z(_mm512_sll_epi32(self.0, _mm_cvtsi32_si128(n as i32))) }
        }
        #[inline(always)]
        fn sar(self, n: u32) -> Self {
            unsafe { Z(_mm512_sra_epi32(self.0, _mm_cvtsi32_si128(n as i32))) }
        }
        #[inline(always)]
        fn and(self, m: i32) -> Self {
            unsafe { Z(_mm512_and_si512(self.0, _mm512_set1_epi32(m))) }
        }
        #[inline(always)]
        fn or(self, o: Self) -> Self {
            unsafe { Z(_mm512_or_si512(self.0, o.0)) }
        }
        #[inline(always)]
        fn sub(self, c: i32) -> Self {
            unsafe { Z(_mm512_sub_epi32(self.0, _mm512_set1_epi32(c))) }
        }
        #[inline(always)]
        fn to_f(self) -> __m512 {
            unsafe { _mm512_cvtepi32_ps(self.0) }
        }
        #[inline(always)]
        fn fmul(a: __m512, b: __m512) -> __m512 {
            unsafe { _mm512_mul_ps(a, b) }
        }
        #[inline(always)]
        fn fneg(a: __m512) -> __m512 {
            unsafe {
                _mm512_castsi512_ps(_mm512_xor_si512(
                    _mm512_castps_si512(a),
                    _mm512_set1_epi32(i32::MIN),
                ))
            }
        }
    }

    /// 8 rows in a 256-bit register (callers are `avx2` functions).
    #[derive(Clone, Copy)]
    pub(crate) struct Y(pub __m256i);

    impl Lanes for Y {
        type F = __m256;
        #[inline(always)]
        unsafe fn u32s(p: *const u8) -> Self {
            Y(_mm256_loadu_si256(p as *const _))
        }
        #[inline(always)]
        unsafe fn u16s(p: *const u8) -> Self {
            Y(_mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const _)))
        }
        #[inline(always)]
        unsafe fn f16s(p: *const u8) -> __m256 {
            _mm256_cvtph_ps(_mm_loadu_si128(p as *const _))
        }
        #[inline(always)]
        unsafe fn u8s(p: *const u8) -> Self {
            Y(_mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const _)))
        }
        #[inline(always)]
        fn e8m0_half(self) -> __m256 {
            unsafe {
                let small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), self.0);
                let normal =
                    _mm256_slli_epi32::<23>(_mm256_sub_epi32(self.0, _mm256_set1_epi32(1)));
                let sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), self.0);
                _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small))
            }
        }
        #[inline(always)]
        fn splat_f(v: f32) -> __m256 {
            unsafe { _mm256_set1_ps(v) }
        }
        #[inline(always)]
        fn zero_f() -> __m256 {
            unsafe { _mm256_setzero_ps() }
        }
        #[inline(always)]
        fn zero() -> Self {
            unsafe { Y(_mm256_setzero_si256()) }
        }
        #[inline(always)]
        fn shr(self, n: u32) -> Self {
            unsafe { Y(_mm256_srl_epi32(self.0, _mm_cvtsi32_si128(n as i32))) }
        }
        #[inline(always)]
        fn shl(self, n: u32) -> Self {
            unsafe { Y(_mm256_sll_epi32(self.0, _mm_cvtsi32_si128(n as i32))) }
        }
        #[inline(always)]
        fn sar(self, n: u32) -> Self {
            unsafe { Y(_mm256_sra_epi32(self.0, _mm_cvtsi32_si128(n as i32))) }
        }
        #[inline(always)]
        fn and(self, m: i32) -> Self {
            unsafe { Y(_mm256_and_si256(self.0, _mm256_set1_epi32(m))) }
        }
        #[inline(always)]
        fn or(self, o: Self) -> Self {
            unsafe { Y(_mm256_or_si256(self.0, o.0)) }
        }
        #[inline(always)]
        fn sub(self, c: i32) -> Self {
            unsafe { Y(_mm256_sub_epi32(self.0, _mm256_set1_epi32(c))) }
        }
        #[inline(always)]
        fn to_f(self) -> __m256 {
            unsafe { _mm256_cvtepi32_ps(self.0) }
        }
        #[inline(always)]
        fn fmul(a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_mul_ps(a, b) }
        }
        #[inline(always)]
        fn fneg(a: __m256) -> __m256 {
            unsafe { _mm256_xor_ps(a, _mm256_set1_ps(-0.0)) }
        }
    }
}

/// A superblock's header fields for some rows: `d`, the second f16 (`dmin` or `m`, zero
/// where absent) and up to four packed scale words.
#[derive(Clone, Copy)]
pub(crate) struct Header<L: Lanes> {
    pub d: L::F,
    pub f1: L::F,
    pub w: [L; 4],
}

/// Per-row scales of one 32-block: a float scale `da` (and min `m`) for 32-value scales, or
/// the integer scales (and mins) of its two 16-value halves.
#[derive(Clone, Copy)]
pub(crate) struct Scales<L: Lanes> {
    pub da: L::F,
    pub m: L::F,
    pub sc: [L; 2],
    pub mn: [L; 2],
}

/// Loads the header of the superblock at `sb` for the rows starting at `row0`.
///
/// # Safety
/// `sb` must address a whole superblock of `ty` and `row0 + lanes <= 16`.
#[inline(always)]
pub(crate) unsafe fn header<L: Lanes>(ty: SbType, sb: *const u8, row0: usize) -> Header<L> {
    let desc = ty.desc();
    let at = |f: usize| sb.add(desc.field_off(f) + row0 * desc.fields[f]);
    let mut d = if ty == SbType::MXFP4 {
        L::u8s(at(0)).e8m0_half()
    } else {
        L::f16s(at(0))
    };
    let mut w = [L::zero(); 4];
    let mut f1 = L::zero_f();
    match ty {
        SbType::Q5_0 | SbType::IQ4_NL => {}
        SbType::Q5_1 => f1 = L::f16s(at(1)),
        SbType::Q4_K | SbType::Q5_K | SbType::Q2_K => {
            f1 = L::f16s(at(1));
            for (i, wi) in w.iter_mut().enumerate().take(desc.n_fields - 2) {
                *wi = L::u32s(at(2 + i));
            }
        }
        SbType::Q3_K | SbType::Q6_K => {
            for (i, wi) in w.iter_mut().enumerate().take(desc.n_fields - 1) {
                *wi = L::u32s(at(1 + i));
            }
        }
        SbType::IQ4_XS => {
            w[0] = L::u16s(at(1));
            w[1] = L::u32s(at(2));
        }
        SbType::MXFP4 | SbType::TQ1_0 | SbType::TQ2_0 => {}
        // The IQ1 codes are 8x the grid values (see `sb_format`): d / 8, exact.
        SbType::IQ1_S | SbType::IQ1_M => {
            d = L::fmul(d, L::splat_f(0.125));
            for (i, wi) in w.iter_mut().enumerate().take(desc.n_fields - 1) {
                *wi = L::u32s(at(1 + i));
            }
        }
        SbType::IQ2_XXS | SbType::IQ2_XS | SbType::IQ2_S | SbType::IQ3_XXS | SbType::IQ3_S => {
            if ty.d_factor() != 1.0 {
                d = L::fmul(d, L::splat_f(ty.d_factor()));
            }
            for (i, wi) in w.iter_mut().enumerate().take(desc.n_fields - 1) {
                *wi = L::u32s(at(1 + i));
            }
        }
    }
    debug_assert!(row0 < PANEL);
    Header { d, f1, w }
}

/// Q4_K / Q5_K's integer scale and min of 32-block `sub` (`SbType::int_superblock`).
#[inline(always)]
pub(crate) fn scale_min<L: Lanes>(h: &Header<L>, sub: usize) -> (L, L) {
    scale_min_k4(&h.w, sub)
}

/// The integer scales of the two 16-value halves of 32-block `sub` of an
/// `SbType::int_superblock` type: Q4_K / Q5_K's one 6-bit scale twice, Q6_K's two signed
/// bytes.
#[inline(always)]
pub(crate) fn int_scales<L: Lanes>(ty: SbType, h: &Header<L>, sub: usize) -> [L; 2] {
    match ty {
        SbType::Q6_K => scales(ty, h, sub).sc,
        _ => {
            let sc = scale_min_k4(&h.w, sub).0;
            [sc, sc]
        }
    }
}

/// Q4_K / Q5_K's mins of 32-blocks `2p` and `2p + 1` as the low and high i16 of each
/// lane: the `vpdpwssd` / `vpmaddwd` operands of the superblock min term.
#[inline(always)]
pub(crate) fn min_pairs<L: Lanes>(h: &Header<L>) -> [L; 4] {
    let mut out = [L::zero(); 4];
    for (p, o) in out.iter_mut().enumerate() {
        let (lo, hi) = (scale_min_k4(&h.w, 2 * p).1, scale_min_k4(&h.w, 2 * p + 1).1);
        *o = lo.or(hi.shl(16));
    }
    out
}

/// ggml's `get_scale_min_k4` on whole words: 6-bit scale and min of sub-block `j`.
#[inline(always)]
fn scale_min_k4<L: Lanes>(w: &[L; 4], j: usize) -> (L, L) {
    if j < 4 {
        let s = 8 * j as u32;
        (w[0].shr(s).and(63), w[1].shr(s).and(63))
    } else {
        let s = 8 * (j as u32 - 4);
        (
            w[2].shr(s).and(15).or(w[0].shr(s + 6).and(3).shl(4)),
            w[2].shr(s + 4).and(15).or(w[1].shr(s + 6).and(3).shl(4)),
        )
    }
}

/// Q3_K's 6-bit scale `s` (0..16) as ggml unpacks it with kmask1/kmask2, minus 32.
#[inline(always)]
fn scale_q3<L: Lanes>(w: &[L; 4], s: usize) -> L {
    let (a, b) = (s / 4, 8 * (s % 4) as u32);
    let lo = w[a % 2].shr(b + 4 * (a as u32 / 2)).and(15);
    let hi = w[2].shr(b + 2 * a as u32).and(3).shl(4);
    lo.or(hi).sub(32)
}

/// Byte `s` (0..16) of four little-endian words.
#[inline(always)]
fn byte<L: Lanes>(w: &[L; 4], s: usize) -> L {
    w[s / 4].shr(8 * (s % 4) as u32).and(255)
}

/// The scales of 32-block `sub` of a superblock (see [`Scales`]).
#[inline(always)]
pub(crate) fn scales<L: Lanes>(ty: SbType, h: &Header<L>, sub: usize) -> Scales<L> {
    let z = L::zero();
    let mut out = Scales {
        da: h.d,
        m: L::zero_f(),
        sc: [z; 2],
        mn: [z; 2],
    };
    match ty {
        SbType::Q5_0 | SbType::IQ4_NL | SbType::MXFP4 | SbType::TQ1_0 | SbType::TQ2_0 => {}
        SbType::Q5_1 => out.m = h.f1,
        SbType::Q4_K | SbType::Q5_K => {
            let (sc, mn) = scale_min_k4(&h.w, sub);
            out.da = L::fmul(h.d, sc.to_f());
            out.m = L::fneg(L::fmul(h.f1, mn.to_f()));
        }
        SbType::IQ4_XS => {
            let j = sub as u32;
            let ls = h.w[1]
                .shr(4 * j)
                .and(15)
                .or(h.w[0].shr(2 * j).and(3).shl(4));
            out.da = L::fmul(h.d, ls.sub(32).to_f());
        }
        SbType::IQ2_XXS | SbType::IQ3_XXS | SbType::IQ3_S => {
            let ls = h.w[0].shr(4 * sub as u32).and(15);
            out.da = L::fmul(h.d, ls.shl(1).sub(-1).to_f());
        }
        SbType::IQ2_XS | SbType::IQ2_S => {
            for hf in 0..2 {
                let ls = h.w[sub / 4]
                    .shr(8 * (sub % 4) as u32 + 4 * hf as u32)
                    .and(15);
                out.sc[hf] = ls.shl(1).sub(-1);
            }
        }
        SbType::Q6_K => {
            for hf in 0..2 {
                let s = 2 * sub + hf;
                // Sign-extend byte s: shift it to the top, then arithmetic right.
                out.sc[hf] = h.w[s / 4].shl(24 - 8 * (s % 4) as u32).sar(24);
            }
        }
        SbType::Q3_K => {
            for hf in 0..2 {
                out.sc[hf] = scale_q3(&h.w, 2 * sub + hf);
            }
        }
        SbType::Q2_K => {
            for hf in 0..2 {
                let b = byte(&h.w, 2 * sub + hf);
                out.sc[hf] = b.and(15);
                out.mn[hf] = b.shr(4);
            }
        }
        // 2s + 1 of the 3-bit scale s (for 32 values: packed 3 bits each by the packer).
        SbType::IQ1_S => {
            let s = h.w[0].shr(3 * sub as u32).and(7);
            out.da = L::fmul(h.d, s.shl(1).sub(-1).to_f());
        }
        // ggml's u16 sc[sub / 2], bits 6 (sub % 2) + 3 hf.
        SbType::IQ1_M => {
            for hf in 0..2 {
                let at = 16 * ((sub / 2) % 2) + 6 * (sub % 2) + 3 * hf;
                out.sc[hf] = h.w[sub / 4].shr(at as u32).and(7).shl(1).sub(-1);
            }
        }
    }
    out
}

//! The matmul kernels on the superblock layout (see `sb_format`), one per ISA.
//!
//! Per 32-block of a row and activation row j (codes `u`, activation codes `x`, scale
//! `dx`, code sums `X` per 32 and `X0`, `X1` per 16):
//! ```text
//! 32-value scales: I = sum_k u[k] x[k] - offset * X                     (int32, exact)
//!                  acc = fma(f32(I), da * dx, acc);  acc = fma(f32(X), m * dx, acc)  (with mins)
//! 16-value scales: I = sc0 (D0 - offset X0) + sc1 (D1 - offset X1)      (exact; the SIMD
//!                  tiles form f32(I) as fma(f32(D0'), sc0, f32(D1') sc1), the same bits:
//!                  `SbType::sub16_products_exact_in_f32`)
//!                  acc = fma(f32(I), d * dx, acc);  acc = fma(-f32(mn0 X0 + mn1 X1), dmin * dx, acc)
//! Q4_K, Q5_K, Q6_K: per superblock instead (`SbType::int_superblock`: one activation scale
//!                  per 256 values), A = sum_g sc (sum_k u[k] x[k] - offset X_g) over the
//!                  scale groups g, B = sum_sub mn X (exact; Q4_K, Q5_K)
//!                  acc = fma(f32(A), d * dx, acc);  acc = fma(f32(B), -dmin * dx, acc)
//! ```
//! with `da`, `m`, `sc`, `mn` from `sb_lanes::scales`. That is the f32 dot product of the
//! exactly dequantized weights with the int8 activations, up to float summation order:
//! the integer part is exact, `da = d * sc` is exact in f32 (an f16 times a 6-bit integer),
//! so the only roundings are one product and one FMA per block. Every ISA performs the same
//! f32 operations in the same order, so SIMD results equal the scalar reference bit for bit.

use super::sb_format::{codes32, MinKind, SbPacked, SbType};
use super::sb_lanes::{header, int_scales, scale_min, scales, One};
use super::tile::{for_each_tile, Span, Tile};
use crate::cpu::Isa;

/// Activation rows per pass over a panel (the codes are unpacked once per pass). On
/// AVX-512, 16 (the 32 zmm registers hold 16 accumulators beside a block's 8 code operands):
/// measured on an Intel Xeon (AMX host, 2 threads, 16 activation rows, weights from DRAM),
/// types with 16-value scales went from 8 to 16 rows first (Q6_K 151,936 x 1,536 143 -> 161
/// GMAC/s, 1,536 x 8,960 160 -> 192), then the rest once the weight prefetches were spread
/// over the superblock (8,960 x 1,536: Q4_K 207-226 -> 259-262, Q5_K 208-215 -> 233-241,
/// Q5_0 206-208 -> 252-260, IQ4_XS 216-243 -> 250-284; Q4_K 1,536 x 8,960 207-216 ->
/// 242-244).
///
/// Tried at 16 rows and not kept (Intel Xeon, CPUID family 6 model 167, Q4_K, cache-hot,
/// interleaved in one binary, GMAC/s): two panels per tile at 8 rows, so each broadcast
/// activation word feeds two `vpdpbusd` (one thread 1,536 x 1,536 161-163 against 164-168,
/// two threads 8,960 x 1,536 308-311 against 319-326); Q4_K's superblock sum formed in
/// f32 by FMA in two exact halves instead of `vpmulld` + `vpaddd` (153-158 against
/// 157-159); the 16 rows' activation words interleaved so every broadcast is one base
/// register plus a constant (no change). A bare loop of the 16 rows' chains with their
/// broadcasts from L1 reads 314-321 on one thread (419 with register operands, 351-361
/// with two panels a broadcast), so this kernel's ~160 is spent neither on the broadcast
/// loads nor on the integer multiplies alone; the VM exposes no counters to say where.
/// Ablations instead (timing only, the same matrix and host, one thread, µs a call):
/// 243-250 as built; without the weight prefetches 236-241, without the mins' term 223,
/// without unpacking the codes 229-231, without the sub-scales' `vpmulld` 214-225, without
/// all four 184-187 (204 GMAC/s). Each costs 3-10%, together a quarter; what remains (the
/// chains, header and scale decoding, the f32 epilogue, 40 live vectors for 32 registers)
/// keeps the stripped kernel at two thirds of the bare loop.
fn tile_rows(isa: Isa) -> usize {
    match isa {
        Isa::Avx2 => 4,
        _ => 16,
    }
}

/// Computes the output rows of the span's panels for every activation row.
///
/// # Safety
/// As [`for_each_tile`]; `isa` must be supported (VNNI for `Avx512`). The span's
/// activations must hold the 16-sums when the type's scales cover 16 values.
pub(crate) unsafe fn run_panels(isa: Isa, packed: &SbPacked, span: &Span) {
    let ty = packed.ty;
    let desc = ty.desc();
    debug_assert_eq!(span.acts.cols(), packed.nb * 32);
    let panels = (
        packed.bytes().as_ptr(),
        packed.nb / desc.subs() * desc.sb_bytes(),
    );
    for_each_tile(panels, span, desc.sub16, tile_rows(isa), |t, nr| {
        run_tile(isa, ty, t, nr)
    });
}

unsafe fn run_tile(isa: Isa, ty: SbType, t: &Tile, nr: usize) {
    macro_rules! types {
        ($m:ident) => {
            match ty {
                SbType::Q5_0 => $m::tile::<0>(t, nr),
                SbType::Q5_1 => $m::tile::<1>(t, nr),
                SbType::IQ4_NL => $m::tile::<2>(t, nr),
                SbType::Q2_K => $m::tile::<3>(t, nr),
                SbType::Q3_K => $m::tile::<4>(t, nr),
                SbType::Q4_K => $m::tile::<5>(t, nr),
                SbType::Q5_K => $m::tile::<6>(t, nr),
                SbType::Q6_K => $m::tile::<7>(t, nr),
                SbType::IQ4_XS => $m::tile::<8>(t, nr),
                SbType::MXFP4 => $m::tile::<9>(t, nr),
                SbType::TQ1_0 => $m::tile::<10>(t, nr),
                SbType::TQ2_0 => $m::tile::<11>(t, nr),
                SbType::IQ1_S => $m::tile::<12>(t, nr),
                SbType::IQ1_M => $m::tile::<13>(t, nr),
                SbType::IQ2_XXS => $m::tile::<14>(t, nr),
                SbType::IQ2_XS => $m::tile::<15>(t, nr),
                SbType::IQ2_S => $m::tile::<16>(t, nr),
                SbType::IQ3_XXS => $m::tile::<17>(t, nr),
                SbType::IQ3_S => $m::tile::<18>(t, nr),
            }
        };
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => types!(avx512),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => types!(avx2),
        _ => tile_scalar(ty, t, nr),
    }
}

/// The reference kernel: the arithmetic of the module doc, one row at a time.
unsafe fn tile_scalar(ty: SbType, t: &Tile, nr: usize) {
    let desc = ty.desc();
    let (subs, sbb, hb, cb) = desc.strides();
    let nsb = t.nb / subs;
    let cols = t.nb * 32;
    for j in 0..nr {
        for r in 0..t.valid {
            let mut acc = 0f32;
            for s in 0..nsb {
                let sbp = t.w.add(s * sbb);
                let h = header::<One>(ty, sbp, r);
                if ty.int_superblock() {
                    // `SbType::int_superblock`: the superblock in integers, then one FMA
                    // (two with mins).
                    let (mut a, mut m) = (0i32, 0i32);
                    for sub in 0..subs {
                        let sc = int_scales::<One>(ty, &h, sub);
                        let blk = std::slice::from_raw_parts(sbp.add(hb + sub * cb), cb);
                        let b = s * subs + sub;
                        let jb = j * t.nb + b;
                        let x = std::slice::from_raw_parts(t.xq.add(j * cols + b * 32), 32);
                        let u = codes32(&desc, blk, r);
                        for (hf, sc) in sc.iter().enumerate() {
                            let dot: i32 =
                                (16 * hf..16 * hf + 16).map(|k| u[k] * x[k] as i32).sum();
                            let off = if desc.offset != 0 {
                                desc.offset * *t.xh.add(2 * jb + hf)
                            } else {
                                0
                            };
                            a += sc.0 * (dot - off);
                        }
                        if desc.min == MinKind::Float {
                            m += scale_min::<One>(&h, sub).1 .0 * *t.xi.add(jb);
                        }
                    }
                    let dx = *t.xd.add(j * t.nb + s * subs);
                    acc = (a as f32).mul_add(h.d.0 * dx, acc);
                    if desc.min == MinKind::Float {
                        acc = (m as f32).mul_add(-h.f1.0 * dx, acc);
                    }
                    continue;
                }
                for sub in 0..subs {
                    let sc = scales::<One>(ty, &h, sub);
                    let blk = std::slice::from_raw_parts(sbp.add(hb + sub * cb), cb);
                    let b = s * subs + sub;
                    let jb = j * t.nb + b;
                    let x = std::slice::from_raw_parts(t.xq.add(j * cols + b * 32), 32);
                    let dx = *t.xd.add(jb);
                    let u = codes32(&desc, blk, r);
                    let dot =
                        |k0: usize| -> i32 { (k0..k0 + 16).map(|k| u[k] * x[k] as i32).sum() };
                    if desc.sub16 {
                        let xh = [*t.xh.add(2 * jb), *t.xh.add(2 * jb + 1)];
                        let mut i = 0i32;
                        for (hf, xh) in xh.iter().enumerate() {
                            i += sc.sc[hf].0 * (dot(16 * hf) - desc.offset * xh);
                        }
                        acc = (i as f32).mul_add(h.d.0 * dx, acc);
                        if desc.min == MinKind::Int16 {
                            let m = sc.mn[0].0 * xh[0] + sc.mn[1].0 * xh[1];
                            acc = (-(m as f32)).mul_add(h.f1.0 * dx, acc);
                        }
                    } else {
                        let i = dot(0) + dot(16) - desc.offset * *t.xi.add(jb);
                        acc = (i as f32).mul_add(sc.da.0 * dx, acc);
                        if desc.min == MinKind::Float {
                            acc = (*t.xi.add(jb) as f32).mul_add(sc.m.0 * dx, acc);
                        }
                    }
                }
            }
            *t.out.add(j * t.ostride + r) = acc;
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx512 {
    use super::super::sb_format::{Desc, MinKind, SbType};
    use super::super::sb_lanes::{header, int_scales, min_pairs, scales, Header, Z};
    use super::super::sb_planes::planes;
    use super::super::tile::{block_dots, mask16, unroll_rows};
    use super::Tile;
    use std::arch::x86_64::*;

    pub(super) unsafe fn tile<const T: u8>(t: &Tile, nr: usize) {
        unroll_rows!(
            nr,
            tile_n(T)(t),
            [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
            16
        )
    }

    /// The 8 `vpdpbusd` operands (16 rows x 4 k each) of one 32-block's code planes.
    #[inline(always)]
    pub(in crate::matmul) unsafe fn unpack(
        desc: &Desc,
        p: *const u8,
        lut: __m512i,
    ) -> [__m512i; 8] {
        let mut u = planes::<__m512i>(desc, p);
        if desc.lut {
            for ug in u.iter_mut() {
                *ug = _mm512_shuffle_epi8(lut, *ug);
            }
        }
        u
    }

    /// The type's value table (IQ4's levels, MXFP4's, IQ1's, an i-quant's signed
    /// magnitudes) as `v + 128`
    /// (unsigned), in every 128-bit lane.
    #[inline(always)]
    pub(in crate::matmul) unsafe fn lut(desc: &Desc) -> __m512i {
        let mut b = [0u8; 16];
        for (o, v) in b.iter_mut().zip(desc.values) {
            *o = (v as i32 + 128) as u8;
        }
        _mm512_broadcast_i32x4(_mm_loadu_si128(b.as_ptr() as *const _))
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn tile_n<const T: u8, const NR: usize>(t: &Tile) {
        let ty = const { SbType::from_id(T) };
        let desc = const { SbType::from_id(T).desc() };
        let (subs, sbb, hb, cb) = desc.strides();
        let nsb = t.nb / subs;
        let cols = t.nb * 32;
        let lut = if desc.lut {
            lut(&desc)
        } else {
            _mm512_setzero_si512()
        };
        let mut acc = [_mm512_setzero_ps(); NR];
        for s in 0..nsb {
            let sbp = t.w.add(s * sbb);
            let h = header::<Z>(ty, sbp, 0);
            if ty.int_superblock() {
                int_superblock::<T, NR>(t, &h, s, &mut acc, lut);
                continue;
            }
            for sub in 0..subs {
                prefetch::<NR>(sbp, sbb, t.ahead, sub, subs);
                let u = unpack(&desc, sbp.add(hb + sub * cb), lut);
                let sc = scales::<Z>(ty, &h, sub);
                let scf = [
                    _mm512_cvtepi32_ps(sc.sc[0].0),
                    _mm512_cvtepi32_ps(sc.sc[1].0),
                ];
                let b = s * subs + sub;
                if !desc.sub16 {
                    // Every row's chain (`block_dots`), each starting at `-offset X` (no
                    // subtraction after it).
                    let mut dps = [_mm512_setzero_si512(); NR];
                    if desc.offset != 0 {
                        for (j, d) in dps.iter_mut().enumerate() {
                            *d = _mm512_set1_epi32(-desc.offset * *t.xi.add(j * t.nb + b));
                        }
                    }
                    let dps = block_dots(&u, t.xq.add(b * 32), cols, dps);
                    for (j, (accj, dp)) in acc.iter_mut().zip(dps).enumerate() {
                        let jb = j * t.nb + b;
                        let dx = _mm512_set1_ps(*t.xd.add(jb));
                        *accj = _mm512_fmadd_ps(
                            _mm512_cvtepi32_ps(dp),
                            _mm512_mul_ps(sc.da, dx),
                            *accj,
                        );
                        if desc.min == MinKind::Float {
                            let xi = _mm512_set1_ps(*t.xf.add(jb));
                            *accj = _mm512_fmadd_ps(xi, _mm512_mul_ps(sc.m, dx), *accj);
                        }
                    }
                    continue;
                }
                for (j, accj) in acc.iter_mut().enumerate() {
                    let xp = t.xq.add(j * cols + b * 32) as *const i32;
                    let jb = j * t.nb + b;
                    let dx = _mm512_set1_ps(*t.xd.add(jb));
                    let (x0, x1) = (*t.xh.add(2 * jb), *t.xh.add(2 * jb + 1));
                    let (d0, d1) = half_chains(&u, xp, desc.offset, x0, x1);
                    // f32(sc0 d0 + sc1 d1), exactly (`sub16_products_exact_in_f32`).
                    let i = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(d0),
                        scf[0],
                        _mm512_mul_ps(_mm512_cvtepi32_ps(d1), scf[1]),
                    );
                    *accj = _mm512_fmadd_ps(i, _mm512_mul_ps(h.d, dx), *accj);
                    if desc.min == MinKind::Int16 {
                        let m = _mm512_add_epi32(
                            _mm512_mullo_epi32(sc.mn[0].0, _mm512_set1_epi32(x0)),
                            _mm512_mullo_epi32(sc.mn[1].0, _mm512_set1_epi32(x1)),
                        );
                        let md = _mm512_mul_ps(h.f1, dx);
                        *accj = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), md, *accj);
                    }
                }
            }
        }
        let mask: __mmask16 = mask16(t.valid);
        for (j, a) in acc.iter().enumerate() {
            _mm512_mask_storeu_ps(t.out.add(j * t.ostride), mask, *a);
        }
    }

    /// Prefetches, at 32-block `sub` of the superblock at `sbp` (`sbb` bytes), its share of
    /// the lines `ahead` bytes on (none when `ahead` is 0). From the batched row count
    /// (where the batched prefetch distance starts) a share per 32-block: a burst of all 36
    /// (Q4_K) at the superblock's start filled the line-fill buffers and stalled the loop on
    /// them. Measured on an Intel Xeon (AMX host, 2 threads, 16 rows, weights from DRAM):
    /// Q4_K 8,960 x 1,536 187-207 -> 236-240 GMAC/s, the 1.5B's Q6_K output head 22.5 ->
    /// 17.1-17.4 ms. With fewer rows a superblock passes quickly and the burst measured ~5%
    /// faster (Q4_K, 4 rows).
    #[inline(always)]
    unsafe fn prefetch<const NR: usize>(
        sbp: *const u8,
        sbb: usize,
        ahead: usize,
        sub: usize,
        subs: usize,
    ) {
        let share = if NR >= crate::cpu::BATCHED_ROWS {
            subs
        } else {
            1
        };
        if ahead > 0 && sub < share {
            let (first, lines) = crate::cpu::lines_in(sbp.wrapping_add(ahead) as usize, sbb);
            for line in sub * lines / share..(sub + 1) * lines / share {
                crate::cpu::prefetch_weights::<NR>((first + 64 * line) as *const u8);
            }
        }
    }

    /// One activation row's integer sums over the two 16-value halves of a 32-block, for
    /// the types with 16-value scales: `(D0 - offset X0, D1 - offset X1)`, each chain
    /// starting at `-offset X` (no subtraction after it). One row's two chains of 4 at a
    /// time: all 16 rows' 32 chains at once would not fit the registers beside the 8 code
    /// vectors ([`block_dots`] interleaves rows for the one-chain types).
    ///
    /// # Safety
    /// AVX-512 VNNI; `xp` must hold the row's 32 activation codes.
    #[inline(always)]
    unsafe fn half_chains(
        u: &[__m512i; 8],
        xp: *const i32,
        offset: i32,
        x0: i32,
        x1: i32,
    ) -> (__m512i, __m512i) {
        let x = |k: usize| _mm512_set1_epi32(xp.add(k).read_unaligned());
        let mut d0 = _mm512_set1_epi32(-offset * x0);
        let mut d1 = _mm512_set1_epi32(-offset * x1);
        for k in 0..4 {
            d0 = _mm512_dpbusd_epi32(d0, u[k], x(k));
            d1 = _mm512_dpbusd_epi32(d1, u[k + 4], x(k + 4));
        }
        (d0, d1)
    }

    /// Superblock `s` of an `SbType::int_superblock` type into `acc` (the formula there):
    /// per 32-block the rows' integer sums times the sub-scales (`vpmulld`: Q4_K / Q5_K one
    /// per 32-block sum, Q6_K one per 16-value chain started at `-offset X`), the mins'
    /// term once per superblock from the block-sum pairs (`vpdpwssd`).
    #[inline(always)]
    unsafe fn int_superblock<const T: u8, const NR: usize>(
        t: &Tile,
        h: &Header<Z>,
        s: usize,
        acc: &mut [__m512; NR],
        lut: __m512i,
    ) {
        let ty = const { SbType::from_id(T) };
        let desc = const { SbType::from_id(T).desc() };
        let (subs, sbb, hb, cb) = desc.strides();
        let cols = t.nb * 32;
        let sbp = t.w.add(s * sbb);
        let mut ai = [_mm512_setzero_si512(); NR];
        for sub in 0..subs {
            prefetch::<NR>(sbp, sbb, t.ahead, sub, subs);
            let u = unpack(&desc, sbp.add(hb + sub * cb), lut);
            let sc = int_scales::<Z>(ty, h, sub).map(|v| v.0);
            let b = s * subs + sub;
            if desc.sub16 {
                for (j, a) in ai.iter_mut().enumerate() {
                    let xp = t.xq.add(j * cols + b * 32) as *const i32;
                    let jb = j * t.nb + b;
                    let (x0, x1) = (*t.xh.add(2 * jb), *t.xh.add(2 * jb + 1));
                    let (d0, d1) = half_chains(&u, xp, desc.offset, x0, x1);
                    let p = _mm512_add_epi32(
                        _mm512_mullo_epi32(d0, sc[0]),
                        _mm512_mullo_epi32(d1, sc[1]),
                    );
                    *a = _mm512_add_epi32(*a, p);
                }
            } else {
                let dps = block_dots(&u, t.xq.add(b * 32), cols, [_mm512_setzero_si512(); NR]);
                for (a, dp) in ai.iter_mut().zip(dps) {
                    *a = _mm512_add_epi32(*a, _mm512_mullo_epi32(dp, sc[0]));
                }
            }
        }
        for (j, (accj, a)) in acc.iter_mut().zip(ai).enumerate() {
            let jb = j * t.nb + s * subs;
            let dx = _mm512_set1_ps(*t.xd.add(jb));
            *accj = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(h.d, dx), *accj);
        }
        if desc.min == MinKind::Float {
            // The mins of blocks 2p, 2p + 1 as the i16 halves of one lane.
            let mnp = min_pairs::<Z>(h).map(|v| v.0);
            let nd = _mm512_castsi512_ps(_mm512_xor_si512(
                _mm512_castps_si512(h.f1),
                _mm512_set1_epi32(i32::MIN),
            ));
            for (j, accj) in acc.iter_mut().enumerate() {
                let jb = j * t.nb + s * subs;
                let dx = _mm512_set1_ps(*t.xd.add(jb));
                let mut m = _mm512_setzero_si512();
                for (p, mp) in mnp.iter().enumerate() {
                    m = _mm512_dpwssd_epi32(m, *mp, _mm512_set1_epi32(*t.xp.add(jb / 2 + p)));
                }
                *accj = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(nd, dx), *accj);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::sb_format::{MinKind, SbType};
    use super::super::sb_lanes::{header, int_scales, min_pairs, scales, Lanes, Y};
    use super::super::sb_planes::planes;
    use super::super::tile::{store8, unroll_rows};
    use super::Tile;
    use std::arch::x86_64::*;

    pub(super) unsafe fn tile<const T: u8>(t: &Tile, nr: usize) {
        unroll_rows!(nr, tile_n(T)(t), [1, 2, 3], 4)
    }

    /// Without VNNI: `vpmaddubsw` (u8 x i8 -> i16 pairs, exact for codes below 64:
    /// 2 * 63 * 127 fits) then `vpmaddwd` give `vpdpbusd`'s 4-value lane sums. IQ4 codes are
    /// the signed table values instead (sign trick: |w| x sign(x, w)), so their offset is
    /// already applied; the integer results are the same.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile_n<const T: u8, const NR: usize>(t: &Tile) {
        let ty = const { SbType::from_id(T) };
        let desc = const { SbType::from_id(T).desc() };
        let (subs, sbb, hb, cb) = desc.strides();
        let nsb = t.nb / subs;
        let cols = t.nb * 32;
        let offset = if desc.lut { 0 } else { desc.offset };
        let lut = {
            let mut b = [0u8; 16];
            for (o, v) in b.iter_mut().zip(desc.values) {
                *o = v as u8;
            }
            _mm256_broadcastsi128_si256(_mm_loadu_si128(b.as_ptr() as *const _))
        };
        let ones = _mm256_set1_epi16(1);
        // Groups of 4 products whose `vpmaddubsw` pair sums add up in i16 without overflow:
        // each pair sum is at most 2 * max|w| * 127.
        let chunk = {
            let maxw = if desc.lut {
                desc.values
                    .iter()
                    .map(|v| v.unsigned_abs() as i32)
                    .max()
                    .unwrap_or(127)
            } else {
                (1i32 << (desc.lo + desc.hi)) - 1
            };
            ((32767 / (254 * maxw)) as usize).clamp(1, 4)
        };
        let mut acc = [[_mm256_setzero_ps(); NR]; 2];
        for s in 0..nsb {
            let sbp = t.w.add(s * sbb);
            // No software prefetch here: measured on an AVX2-only host (AMD Zen 3), 36
            // prefetches per superblock cut batch-1 decode by ~25%; its hardware prefetcher
            // keeps up with this stream by itself.
            for (hf, acch) in acc.iter_mut().enumerate() {
                let h = header::<Y>(ty, sbp, 8 * hf);
                // `SbType::int_superblock`: the rows' superblock sums `A`.
                let mut ai = [_mm256_setzero_si256(); NR];
                for sub in 0..subs {
                    let p = sbp.add(hb + sub * cb + 32 * hf);
                    let mut u = planes::<__m256i>(&desc, p);
                    let mut a = [_mm256_setzero_si256(); 8];
                    if desc.lut {
                        for (ug, ag) in u.iter_mut().zip(a.iter_mut()) {
                            *ug = _mm256_shuffle_epi8(lut, *ug);
                            *ag = _mm256_abs_epi8(*ug);
                        }
                    }
                    let sc = scales::<Y>(ty, &h, sub);
                    let scf = [
                        _mm256_cvtepi32_ps(sc.sc[0].0),
                        _mm256_cvtepi32_ps(sc.sc[1].0),
                    ];
                    let isc = if ty.int_superblock() {
                        int_scales::<Y>(ty, &h, sub)
                    } else {
                        [Y::zero(); 2]
                    };
                    let b = s * subs + sub;
                    for (j, accj) in acch.iter_mut().enumerate() {
                        let xp = t.xq.add(j * cols + b * 32) as *const i32;
                        let jb = j * t.nb + b;
                        let dx = _mm256_set1_ps(*t.xd.add(jb));
                        // u8 x i8 pair products, summed in i16 over `chunk` groups (as many
                        // as cannot overflow), then widened once per chunk.
                        let prod = |g: usize| {
                            let x = _mm256_set1_epi32(xp.add(g).read_unaligned());
                            if desc.lut {
                                _mm256_maddubs_epi16(a[g], _mm256_sign_epi8(x, u[g]))
                            } else {
                                _mm256_maddubs_epi16(u[g], x)
                            }
                        };
                        let half = |g0: usize| {
                            let mut d = _mm256_setzero_si256();
                            for c0 in (g0..g0 + 4).step_by(chunk) {
                                let mut s16 = prod(c0);
                                for g in c0 + 1..(c0 + chunk).min(g0 + 4) {
                                    s16 = _mm256_add_epi16(s16, prod(g));
                                }
                                d = _mm256_add_epi32(d, _mm256_madd_epi16(s16, ones));
                            }
                            d
                        };
                        let mut d0 = half(0);
                        let mut d1 = half(4);
                        if desc.sub16 {
                            let (x0, x1) = (*t.xh.add(2 * jb), *t.xh.add(2 * jb + 1));
                            if offset != 0 {
                                d0 = _mm256_sub_epi32(d0, _mm256_set1_epi32(offset * x0));
                                d1 = _mm256_sub_epi32(d1, _mm256_set1_epi32(offset * x1));
                            }
                            if ty.int_superblock() {
                                let p = _mm256_add_epi32(
                                    _mm256_mullo_epi32(d0, isc[0].0),
                                    _mm256_mullo_epi32(d1, isc[1].0),
                                );
                                ai[j] = _mm256_add_epi32(ai[j], p);
                                continue;
                            }
                            // f32(sc0 d0 + sc1 d1), exactly (`sub16_products_exact_in_f32`).
                            let i = _mm256_fmadd_ps(
                                _mm256_cvtepi32_ps(d0),
                                scf[0],
                                _mm256_mul_ps(_mm256_cvtepi32_ps(d1), scf[1]),
                            );
                            *accj = _mm256_fmadd_ps(i, _mm256_mul_ps(h.d, dx), *accj);
                            if desc.min == MinKind::Int16 {
                                let m = _mm256_add_epi32(
                                    _mm256_mullo_epi32(sc.mn[0].0, _mm256_set1_epi32(x0)),
                                    _mm256_mullo_epi32(sc.mn[1].0, _mm256_set1_epi32(x1)),
                                );
                                let md = _mm256_mul_ps(h.f1, dx);
                                *accj = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), md, *accj);
                            }
                        } else if ty.int_superblock() {
                            let dp = _mm256_add_epi32(d0, d1);
                            ai[j] = _mm256_add_epi32(ai[j], _mm256_mullo_epi32(dp, isc[0].0));
                        } else {
                            let mut dp = _mm256_add_epi32(d0, d1);
                            if offset != 0 {
                                dp =
                                    _mm256_sub_epi32(dp, _mm256_set1_epi32(offset * *t.xi.add(jb)));
                            }
                            *accj = _mm256_fmadd_ps(
                                _mm256_cvtepi32_ps(dp),
                                _mm256_mul_ps(sc.da, dx),
                                *accj,
                            );
                            if desc.min == MinKind::Float {
                                let xi = _mm256_set1_ps(*t.xf.add(jb));
                                *accj = _mm256_fmadd_ps(xi, _mm256_mul_ps(sc.m, dx), *accj);
                            }
                        }
                    }
                }
                if ty.int_superblock() {
                    for (j, (accj, a)) in acch.iter_mut().zip(ai).enumerate() {
                        let dx = _mm256_set1_ps(*t.xd.add(j * t.nb + s * subs));
                        *accj =
                            _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), _mm256_mul_ps(h.d, dx), *accj);
                    }
                }
                if ty.int_superblock() && desc.min == MinKind::Float {
                    // The mins of blocks 2p, 2p + 1 as the i16 halves of one lane.
                    let mnp = min_pairs::<Y>(&h).map(|v| v.0);
                    let nd = Y::fneg(h.f1);
                    for (j, accj) in acch.iter_mut().enumerate() {
                        let jb = j * t.nb + s * subs;
                        let dx = _mm256_set1_ps(*t.xd.add(jb));
                        let mut m = _mm256_setzero_si256();
                        for (p, mp) in mnp.iter().enumerate() {
                            let xp = _mm256_set1_epi32(*t.xp.add(jb / 2 + p));
                            m = _mm256_add_epi32(m, _mm256_madd_epi16(*mp, xp));
                        }
                        *accj =
                            _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(nd, dx), *accj);
                    }
                }
            }
        }
        for (hf, acch) in acc.iter().enumerate() {
            let lo = hf * 8;
            if t.valid <= lo {
                break;
            }
            let n = (t.valid - lo).min(8);
            for (j, a) in acch.iter().enumerate() {
                store8(t.out.add(j * t.ostride + lo), *a, n);
            }
        }
    }
}

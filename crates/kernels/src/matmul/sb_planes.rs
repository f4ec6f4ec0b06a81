//! The bit planes of one superblock sub-block, unpacked into the 8 code vectors the SIMD
//! tiles multiply (16 rows x 4 codes each in 512 bits, 8 rows x 4 in 256 bits). The shifts
//! and masks are the same at both widths, so they are written once over [`Bytes`]; only
//! the loads and byte operations differ per ISA.

#![cfg(target_arch = "x86_64")]

use super::sb_format::Desc;
use std::arch::x86_64::*;

/// A SIMD register of bytes (callers are functions compiled for its ISA).
pub(crate) trait Bytes: Copy {
    unsafe fn load(p: *const u8) -> Self;
    unsafe fn splat(b: i8) -> Self;
    unsafe fn zero() -> Self;
    unsafe fn and(self, o: Self) -> Self;
    unsafe fn or(self, o: Self) -> Self;
    /// Logical shifts of each 16-bit lane.
    unsafe fn srl16(self, n: u32) -> Self;
    unsafe fn sll16(self, n: u32) -> Self;
}

impl Bytes for __m512i {
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        _mm512_loadu_si512(p as *const _)
    }
    #[inline(always)]
    unsafe fn splat(b: i8) -> Self {
        _mm512_set1_epi8(b)
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        _mm512_setzero_si512()
    }
    #[inline(always)]
    unsafe fn and(self, o: Self) -> Self {
        _mm512_and_si512(self, o)
    }
    #[inline(always)]
    unsafe fn or(self, o: Self) -> Self {
        _mm512_or_si512(self, o)
    }
    #[inline(always)]
    unsafe fn srl16(self, n: u32) -> Self {
        _mm512_srl_epi16(self, _mm_cvtsi32_si128(n as i32))
    }
    #[inline(always)]
    unsafe fn sll16(self, n: u32) -> Self {
        _mm512_sll_epi16(self, _mm_cvtsi32_si128(n as i32))
    }
}

impl Bytes for __m256i {
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        _mm256_loadu_si256(p as *const _)
    }
    #[inline(always)]
    unsafe fn splat(b: i8) -> Self {
        _mm256_set1_epi8(b)
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        _mm256_setzero_si256()
    }
    #[inline(always)]
    unsafe fn and(self, o: Self) -> Self {
        _mm256_and_si256(self, o)
    }
    #[inline(always)]
    unsafe fn or(self, o: Self) -> Self {
        _mm256_or_si256(self, o)
    }
    #[inline(always)]
    unsafe fn srl16(self, n: u32) -> Self {
        _mm256_srl_epi16(self, _mm_cvtsi32_si128(n as i32))
    }
    #[inline(always)]
    unsafe fn sll16(self, n: u32) -> Self {
        _mm256_sll_epi16(self, _mm_cvtsi32_si128(n as i32))
    }
}

/// The 8 code vectors (before any IQ4 table lookup) of the planes at `p`: the low planes
/// (`desc.lo` bits per code) then the high bits merged in above them. Plane i of either
/// kind starts 64 bytes after plane i - 1.
#[inline(always)]
pub(crate) unsafe fn planes<V: Bytes>(desc: &Desc, p: *const u8) -> [V; 8] {
    let mut u = [V::zero(); 8];
    let per = 8 / desc.lo as usize;
    let lmask = V::splat(((1u32 << desc.lo) - 1) as i8);
    for i in 0..desc.lo as usize {
        let v = V::load(p.add(64 * i));
        for t in 0..per {
            u[i * per + t] = v.srl16(t as u32 * desc.lo).and(lmask);
        }
    }
    if desc.hi > 0 {
        let hp = p.add(64 * desc.lo as usize);
        let hper = 8 / desc.hi as usize;
        let hmask = V::splat((((1u32 << desc.hi) - 1) << desc.lo) as i8);
        for i in 0..desc.hi as usize {
            let v = V::load(hp.add(64 * i));
            for t in 0..hper {
                let shift = t as u32 * desc.hi;
                let moved = if shift >= desc.lo {
                    v.srl16(shift - desc.lo)
                } else {
                    v.sll16(desc.lo - shift)
                };
                let g = i * hper + t;
                u[g] = u[g].or(moved.and(hmask));
            }
        }
    }
    u
}

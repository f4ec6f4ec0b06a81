//! The low-rank update of a LoRA adapter on one activation row:
//! `y += scale · Bᵀ·(A·x)`, with `A` as `rank` rows of `x.len()` and `B` stored transposed
//! (`bt`: `rank` rows of `y.len()`), so both halves stream rows: `rank` dot products, then
//! one pass over `y` that sums `rank` scaled rows per lane.
//!
//! NOTE: hand-written rather than a BLAS call because the shapes are tiny (rank 8–64, one
//! row per request at decode) and the caller runs many adapters' rows in one pool
//! dispatch; a library call per row would cost more than the arithmetic.
//!
//! The order follows llama.cpp's graph (`build_lora_mm`): `t = A·x`, `u = B·t`, then
//! `y += scale · u`.

use crate::cpu::{isa, Isa};

/// Most rank a row update handles without allocating (`--max-lora-rank`'s ceiling).
pub const MAX_RANK: usize = 256;

/// `y += scale · Bᵀ·(A·x)`; `a` is `rank × x.len()`, `bt` is `rank × y.len()`.
///
/// # Panics
/// On slice lengths that do not match `rank` (caller bugs) or `rank > MAX_RANK`.
pub fn lowrank_add(x: &[f32], a: &[f32], bt: &[f32], rank: usize, scale: f32, y: &mut [f32]) {
    lowrank_add_with(isa(), x, a, bt, rank, scale, y)
}

/// [`lowrank_add`] with an explicit ISA.
pub fn lowrank_add_with(
    isa: Isa,
    x: &[f32],
    a: &[f32],
    bt: &[f32],
    rank: usize,
    scale: f32,
    y: &mut [f32],
) {
    assert!(
        rank <= MAX_RANK && a.len() == rank * x.len() && bt.len() == rank * y.len(),
        "lowrank_add: rank {rank}, a {} (want {}), bt {} (want {})",
        a.len(),
        rank * x.len(),
        bt.len(),
        rank * y.len()
    );
    let mut t = [0f32; MAX_RANK];
    let t = &mut t[..rank];
    match isa.clamp() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: clamp() guarantees AVX2 and FMA (an AVX-512 CPU has both); lengths
        // checked above. The AVX-512 path runs the AVX2 code: at these ranks the update is a
        // few percent of the step and not worth a second hand-written form.
        Isa::Avx512 | Isa::Avx2 => unsafe { x86::lowrank_add(x, a, bt, t, scale, y) },
        _ => scalar(x, a, bt, t, scale, y),
    }
}

/// The scalar reference.
fn scalar(x: &[f32], a: &[f32], bt: &[f32], t: &mut [f32], scale: f32, y: &mut [f32]) {
    let (n, m) = (x.len(), y.len());
    for (k, tk) in t.iter_mut().enumerate() {
        *tk = a[k * n..(k + 1) * n]
            .iter()
            .zip(x)
            .map(|(p, q)| p * q)
            .sum();
    }
    for (j, yj) in y.iter_mut().enumerate() {
        let mut u = 0f32;
        for (k, &tk) in t.iter().enumerate() {
            u += tk * bt[k * m + j];
        }
        *yj += scale * u;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot(a: &[f32], x: &[f32]) -> f32 {
        let n = x.len();
        let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i + 16 <= n {
            s0 = _mm256_fmadd_ps(
                _mm256_loadu_ps(a.as_ptr().add(i)),
                _mm256_loadu_ps(x.as_ptr().add(i)),
                s0,
            );
            s1 = _mm256_fmadd_ps(
                _mm256_loadu_ps(a.as_ptr().add(i + 8)),
                _mm256_loadu_ps(x.as_ptr().add(i + 8)),
                s1,
            );
            i += 16;
        }
        let mut s = hsum(_mm256_add_ps(s0, s1));
        while i < n {
            s += a[i] * x[i];
            i += 1;
        }
        s
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn lowrank_add(
        x: &[f32],
        a: &[f32],
        bt: &[f32],
        t: &mut [f32],
        scale: f32,
        y: &mut [f32],
    ) {
        let (n, m) = (x.len(), y.len());
        for (k, tk) in t.iter_mut().enumerate() {
            *tk = dot(&a[k * n..(k + 1) * n], x);
        }
        let vs = _mm256_set1_ps(scale);
        let mut j = 0;
        while j + 8 <= m {
            let mut u = _mm256_setzero_ps();
            for (k, &tk) in t.iter().enumerate() {
                u = _mm256_fmadd_ps(
                    _mm256_set1_ps(tk),
                    _mm256_loadu_ps(bt.as_ptr().add(k * m + j)),
                    u,
                );
            }
            let p = y.as_mut_ptr().add(j);
            _mm256_storeu_ps(p, _mm256_fmadd_ps(vs, u, _mm256_loadu_ps(p)));
            j += 8;
        }
        while j < m {
            let mut u = 0f32;
            for (k, &tk) in t.iter().enumerate() {
                u += tk * bt[k * m + j];
            }
            y[j] += scale * u;
            j += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rand(seed: &mut u64, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Every ISA agrees with the plain definition `y + scale·B·A·x` on odd shapes (tails
    /// of both loops) and ranks.
    #[test]
    fn every_isa_matches_the_definition() {
        let mut seed = 7;
        for &(n, m, r) in &[(576, 960, 8), (13, 29, 3), (64, 8, 16), (1536, 576, 1)] {
            let (x, a, bt, y0) = (
                rand(&mut seed, n),
                rand(&mut seed, r * n),
                rand(&mut seed, r * m),
                rand(&mut seed, m),
            );
            let mut want = y0.clone();
            for (j, w) in want.iter_mut().enumerate() {
                let mut u = 0f64;
                for k in 0..r {
                    let t: f64 = (0..n).map(|i| a[k * n + i] as f64 * x[i] as f64).sum();
                    u += t * bt[k * m + j] as f64;
                }
                *w += (0.5 * u) as f32;
            }
            for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                let mut y = y0.clone();
                lowrank_add_with(isa, &x, &a, &bt, r, 0.5, &mut y);
                for (j, (&g, &w)) in y.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-4 * (1.0 + w.abs()) * (n as f32).sqrt(),
                        "{isa:?} n {n} m {m} r {r} col {j}: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "lowrank_add: rank 2")]
    fn mismatched_lengths_panic_with_the_shapes() {
        let mut y = vec![0.0; 4];
        lowrank_add(&[1.0; 3], &[0.0; 5], &[0.0; 8], 2, 1.0, &mut y);
    }
}

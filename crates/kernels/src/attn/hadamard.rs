//! The normalized Walsh–Hadamard transform of one head's row, the rotation of the `q4h` and
//! `q8h` KV formats.
//!
//! `H = H_n / √n` (Sylvester's construction, `n` a power of two) is orthonormal and
//! symmetric, so `H = H⁻¹`: the same routine rotates a key before it is stored, a query
//! before it is scored, a value before it is stored, and the attention output back. It
//! spreads a few large channels (Qwen2's key outliers) over all `n`, so a 32-value group's
//! one scale no longer has to span them.
//!
//! The butterflies run in a fixed order on plain f32 adds, then one multiply by `1/√n`
//! (rounded once to f32): every ISA calls this same code, so rotated attention is
//! bit-identical across ISAs as the unrotated one is.

/// Whether [`fwht`] covers a row of `n` values.
pub fn supported(n: usize) -> bool {
    n.is_power_of_two() && (2..=512).contains(&n)
}

/// Rotates `x` in place by the normalized Walsh–Hadamard matrix (its own inverse).
///
/// # Panics
/// If `x.len()` is not a power of two in 2..=512 (the formats refuse such heads at start).
pub fn fwht(x: &mut [f32]) {
    let n = x.len();
    assert!(
        supported(n),
        "fwht: {n} values; a power of two in 2..=512 is needed"
    );
    let mut h = 1;
    while h < n {
        for i in (0..n).step_by(2 * h) {
            let (a, b) = x[i..i + 2 * h].split_at_mut(h);
            for (u, v) in a.iter_mut().zip(b.iter_mut()) {
                let (s, d) = (*u + *v, *u - *v);
                *u = s;
                *v = d;
            }
        }
        h *= 2;
    }
    let k = (1.0 / (n as f64).sqrt()) as f32;
    for v in x {
        *v *= k;
    }
}

/// [`fwht`] on every `n`-value row of `x`.
pub fn fwht_rows(n: usize, x: &mut [f32]) {
    for row in x.chunks_exact_mut(n) {
        fwht(row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_is_orthonormal_and_its_own_inverse() {
        // H_4 / 2 of a basis vector: its column, ±1/2.
        let mut e = [1.0f32, 0.0, 0.0, 0.0];
        fwht(&mut e);
        assert_eq!(e, [0.5; 4]);
        let mut e = [0.0f32, 1.0, 0.0, 0.0];
        fwht(&mut e);
        assert_eq!(e, [0.5, -0.5, 0.5, -0.5]);
        let x: Vec<f32> = (0..128)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let mut y = x.clone();
        fwht(&mut y);
        let norm = |v: &[f32]| v.iter().map(|a| (*a as f64).powi(2)).sum::<f64>();
        assert!((norm(&x) - norm(&y)).abs() < 1e-9 * norm(&x) * 1e3);
        fwht(&mut y);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        assert!(!supported(96) && supported(64) && !supported(1024));
    }
}

//! Least-squares fits of measured round times.

/// Solves the weighted least-squares problem `min Σ w_i (a·x_i − y_i)²` for `a` by the
/// normal equations (Gaussian elimination with partial pivoting); `None` when singular.
pub fn least_squares(xs: &[Vec<f64>], ys: &[f64], ws: &[f64]) -> Option<Vec<f64>> {
    let k = xs.first()?.len();
    let mut m = vec![vec![0.0; k + 1]; k];
    for ((x, &y), &w) in xs.iter().zip(ys).zip(ws) {
        for i in 0..k {
            for j in 0..k {
                m[i][j] += w * x[i] * x[j];
            }
            m[i][k] += w * x[i] * y;
        }
    }
    for c in 0..k {
        let p = (c..k).max_by(|&a, &b| m[a][c].abs().total_cmp(&m[b][c].abs()))?;
        if m[p][c].abs() < 1e-300 {
            return None;
        }
        m.swap(c, p);
        let pivot = m[c].clone();
        for (r, row) in m.iter_mut().enumerate() {
            if r != c {
                let f = row[c] / pivot[c];
                for (x, p) in row.iter_mut().zip(&pivot).skip(c) {
                    *x -= f * p;
                }
            }
        }
    }
    Some((0..k).map(|i| m[i][k] / m[i][i]).collect())
}

/// `round = fixed + per_token·tokens + per_pair·pairs` fitted to `(tokens, pairs, seconds)`
/// points, minimizing **relative** error (each point weighted by 1/seconds²) so a 2 s
/// prefill does not drown 10 ms decode rounds. A negative coefficient (noise) is dropped
/// and the rest refitted, so the fit never predicts less time for more work.
pub fn round_fit(points: &[(f64, f64, f64)]) -> Option<(f64, f64, f64)> {
    let mut use_col = [true; 3];
    for _ in 0..3 {
        let cols: Vec<usize> = (0..3).filter(|&c| use_col[c]).collect();
        let xs: Vec<Vec<f64>> = points
            .iter()
            .map(|&(t, p, _)| {
                let all = [1.0, t, p];
                cols.iter().map(|&c| all[c]).collect()
            })
            .collect();
        let ys: Vec<f64> = points.iter().map(|p| p.2).collect();
        let ws: Vec<f64> = points
            .iter()
            .map(|p| 1.0 / (p.2 * p.2).max(1e-18))
            .collect();
        let a = least_squares(&xs, &ys, &ws)?;
        let mut coef = [0.0; 3];
        for (i, &c) in cols.iter().enumerate() {
            coef[c] = a[i];
        }
        match (0..3).find(|&c| use_col[c] && coef[c] < 0.0) {
            Some(c) => use_col[c] = false,
            None => return Some((coef[0], coef[1], coef[2])),
        }
    }
    None
}

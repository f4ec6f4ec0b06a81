//! Pins ΣT/ΣN accounting and the exactness of rejection sampling.

use folio_spec::{verify_sampled, SpecStats};
use rand::rngs::StdRng;
use rand::SeedableRng;

#[test]
fn time_per_token_is_sum_over_sum() {
    let mut s = SpecStats::default();
    s.record(4, 0, 1, 0.0015);
    s.record(4, 4, 5, 0.0015);
    assert!(
        (s.time_per_token_s() - 0.0005).abs() < 1e-12,
        "ΣT/ΣN = 3 ms / 6 = 0.5 ms"
    );
    let mean_of_ratios: f64 = (0.0015 / 1.0 + 0.0015 / 5.0) / 2.0;
    assert!((mean_of_ratios - 0.0009).abs() < 1e-12);
    assert_ne!(s.time_per_token_s(), mean_of_ratios);
    assert_eq!(s.tokens_per_round(), 3.0);
    assert_eq!(s.acceptance_rate(), 0.5);
    assert_eq!(s.accepted_by_position, vec![1, 1, 1, 1]);
    assert_eq!(s.drafted_by_position, vec![2, 2, 2, 2]);
}

/// Chi-square statistic of observed counts against expected probabilities.
fn chi2(counts: &[u64], probs: &[f64]) -> f64 {
    let n: u64 = counts.iter().sum();
    counts
        .iter()
        .zip(probs)
        .map(|(&c, &p)| {
            let e = p * n as f64;
            (c as f64 - e).powi(2) / e
        })
        .sum()
}

#[test]
fn two_symbol_example_keeps_the_target_distribution() {
    // p(A) = 1/4, p(B) = 3/4; always-A drafts accept 1/4 of the time, always-B 3/4
    // (DESIGN.md §speculation): same output distribution, different speed.
    let (a, b) = (0u32, 1u32);
    let p = vec![(a, 0.25f32), (b, 0.75f32)];
    for (draft, want_accept) in [(a, 0.25), (b, 0.75)] {
        let mut rng = StdRng::seed_from_u64(11 + draft as u64);
        let mut counts = [0u64; 2];
        let mut accepted = 0u64;
        let n = 40_000;
        for _ in 0..n {
            let v = verify_sampled(
                &[draft],
                &[p.clone(), p.clone()],
                &[vec![(draft, 1.0)]],
                &mut rng,
            );
            counts[v.tokens[0] as usize] += 1;
            accepted += v.accepted as u64;
        }
        let rate = accepted as f64 / n as f64;
        assert!(
            (rate - want_accept).abs() < 0.01,
            "draft {draft}: acceptance {rate}"
        );
        // 1 degree of freedom: 10.83 is the 0.1% critical value.
        let x = chi2(&counts, &[0.25, 0.75]);
        assert!(x < 10.83, "draft {draft}: chi2 {x} for counts {counts:?}");
    }
}

#[test]
fn random_vocabulary_with_a_sampled_drafter_keeps_the_target_distribution() {
    use rand::Rng;
    let mut rng = StdRng::seed_from_u64(5);
    let v = 6;
    let norm = |w: Vec<f32>| {
        let s: f32 = w.iter().sum();
        w.into_iter()
            .enumerate()
            .map(|(i, x)| (i as u32, x / s))
            .collect::<Vec<_>>()
    };
    let p = norm((0..v).map(|_| rng.gen::<f32>() + 0.05).collect());
    let q = norm((0..v).map(|_| rng.gen::<f32>() + 0.05).collect());
    let mut counts = vec![0u64; v];
    let n = 60_000;
    for _ in 0..n {
        // Draw the draft from q, verify against p.
        let r: f32 = rng.gen();
        let mut acc = 0.0;
        let mut d = q[v - 1].0;
        for &(t, pr) in &q {
            acc += pr;
            if r < acc {
                d = t;
                break;
            }
        }
        let out = verify_sampled(
            &[d],
            &[p.clone(), p.clone()],
            std::slice::from_ref(&q),
            &mut rng,
        );
        counts[out.tokens[0] as usize] += 1;
    }
    let probs: Vec<f64> = p.iter().map(|e| e.1 as f64).collect();
    // 5 degrees of freedom: 20.52 is the 0.1% critical value.
    let x = chi2(&counts, &probs);
    assert!(x < 20.52, "chi2 {x}: counts {counts:?} vs p {probs:?}");
}

/// A 32,768-token vocabulary whose draft distribution differs from the target's (their
/// heavy tokens only partly overlap, so drafts are often rejected): the first emitted
/// token still follows the target exactly (rejection is linear in the vocabulary; a
/// quadratic residual would take 32,768² steps per rejection here).
#[test]
fn large_vocabulary_with_real_rejections_keeps_the_target_distribution() {
    use rand::Rng;
    let v = 32_768;
    let mut rng = StdRng::seed_from_u64(9);
    // Heavy tokens 0..16 for the target, 8..24 for the draft; the rest share a thin floor.
    let dist = |heavy: std::ops::Range<usize>, rng: &mut StdRng| {
        let w: Vec<f32> = (0..v)
            .map(|t| {
                if heavy.contains(&t) {
                    1.0 + rng.gen::<f32>()
                } else {
                    1e-4
                }
            })
            .collect();
        let s: f32 = w.iter().sum();
        w.into_iter()
            .enumerate()
            .map(|(i, x)| (i as u32, x / s))
            .collect::<Vec<_>>()
    };
    let p = dist(0..16, &mut rng);
    let q = dist(8..24, &mut rng);
    let cdf: Vec<f32> = q
        .iter()
        .scan(0.0, |acc, e| {
            *acc += e.1;
            Some(*acc)
        })
        .collect();
    // Buckets: each of the 24 heavy tokens, then everything else.
    let bucket = |t: u32| (t as usize).min(24);
    let mut counts = vec![0u64; 25];
    let (n, mut rejected) = (10_000, 0);
    let targets = [p.clone(), p.clone()];
    for _ in 0..n {
        let r: f32 = rng.gen();
        let d = cdf.partition_point(|&c| c <= r).min(v - 1) as u32;
        let out = verify_sampled(&[d], &targets, std::slice::from_ref(&q), &mut rng);
        rejected += (out.accepted == 0) as u64;
        counts[bucket(out.tokens[0])] += 1;
    }
    let mut probs = vec![0f64; 25];
    for &(t, pt) in &p {
        probs[bucket(t)] += pt as f64;
    }
    assert!(rejected > n / 5, "only {rejected} of {n} drafts rejected");
    // 24 degrees of freedom: 51.18 is the 0.1% critical value.
    let x = chi2(&counts, &probs);
    assert!(x < 51.18, "chi2 {x}: counts {counts:?} vs p {probs:?}");
}

/// The rule's decisions are counted per plan: considered, declined (no draft), planned.
#[test]
fn plan_decisions_are_counted() {
    let mut s = folio_spec::SpecStats::default();
    s.record_plan(&[0, 3, 0, 1]);
    s.record_plan(&[2]);
    assert_eq!(
        (s.rule_considered, s.rule_declined, s.rule_planned_tokens),
        (5, 2, 6)
    );
}

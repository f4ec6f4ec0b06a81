//! The arithmetic behind `folio bench spec`: the per-proposer row, the median over
//! repetitions, the adaptive-versus-fixed comparison and the table. Kept apart from the
//! engine-driving loop (in the cli, which owns the engine flags) so it is testable alone.

use serde::Serialize;

#[derive(Serialize, Clone)]
pub struct SpecRow {
    pub workload: String,
    pub proposer: String,
    /// The fixed draft length (`--spec-tokens`), or `None` for the adaptive rule.
    pub k: Option<usize>,
    pub batch: usize,
    pub output_tokens: usize,
    pub decode_tok_s: f64,
    pub tokens_per_step: f64,
    pub acceptance: f64,
    /// Share of speculating decodes the draft-length rule gave no draft.
    pub declined: f64,
    /// Time spent proposing (planning, lookups, draft passes) as a share of the decode
    /// window: what speculation costs outside the verifying forward, measured rather than
    /// read off a noisy speed ratio.
    pub propose_share: f64,
    pub speedup: f64,
    /// The lowest and highest per-repeat speed-up behind the median: how far this
    /// machine's noise moves the ratio between runs of the same configurations.
    pub speedup_range: (f64, f64),
    /// Decode tok/s of each round (one batch of new prompts), over every repeat in order
    /// once medians are taken.
    pub round_tok_s: Vec<f64>,
    /// Each round's tok/s over spec off's in the same round (run beside it).
    pub round_speedup: Vec<f64>,
}

/// The middle value (the mean of the two middle ones for an even count; 0 for none).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

/// Each row's figures as the median over repeats; speed-ups are the median over every
/// round of every repeat of that round's ratio to spec off run beside it (this machine's
/// speed drifts over seconds, ±15% between windows of identical work, so only windows
/// run side by side compare, and a stalled window must not decide a figure).
pub fn median_rows(reps: &[Vec<SpecRow>]) -> Vec<SpecRow> {
    let Some(first) = reps.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|i| {
            let field = |f: fn(&SpecRow) -> f64| median(reps.iter().map(|r| f(&r[i])).collect());
            let round_speedup = rounds(reps, i, |r| &r.round_speedup);
            SpecRow {
                decode_tok_s: field(|r| r.decode_tok_s),
                tokens_per_step: field(|r| r.tokens_per_step),
                acceptance: field(|r| r.acceptance),
                declined: field(|r| r.declined),
                propose_share: field(|r| r.propose_share),
                speedup: median(round_speedup.clone()),
                round_tok_s: rounds(reps, i, |r| &r.round_tok_s),
                round_speedup,
                speedup_range: reps
                    .iter()
                    .map(|r| r[i].speedup)
                    .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
                        (lo.min(x), hi.max(x))
                    }),
                ..first[i].clone()
            }
        })
        .collect()
}

/// Row `i`'s per-round figures over every repeat, in order.
fn rounds(reps: &[Vec<SpecRow>], i: usize, f: fn(&SpecRow) -> &Vec<f64>) -> Vec<f64> {
    reps.iter().flat_map(|r| f(&r[i]).iter().copied()).collect()
}

/// The adaptive draft length against the best fixed one, per workload, proposer and batch.
#[derive(Serialize)]
pub struct Versus {
    pub workload: String,
    pub proposer: String,
    pub batch: usize,
    /// The fixed k with the highest speed-up over spec off.
    pub best_k: usize,
    /// Median over every round of adaptive tok/s ÷ the best fixed k's tok/s.
    pub vs_best_fixed: f64,
    /// The adaptive row's speed-up: median over every round of its tok/s ÷ spec off's.
    pub vs_off: f64,
}

/// One [`Versus`] per (workload, proposer, batch) that has an adaptive row and fixed ones.
pub fn adaptive_vs_fixed(reps: &[Vec<SpecRow>]) -> Vec<Versus> {
    let med = median_rows(reps);
    let mut out = Vec::new();
    for (ai, a) in med.iter().enumerate() {
        if a.k.is_some() || a.proposer == "off" {
            continue;
        }
        let best = med
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                r.workload == a.workload
                    && r.proposer == a.proposer
                    && r.batch == a.batch
                    && r.k.is_some()
            })
            // By speed-up (each round against spec off beside it), not by tok/s medians
            // taken over whole runs, which this machine's drift moves more.
            .max_by(|x, y| x.1.speedup.total_cmp(&y.1.speedup));
        if let Some((bi, b)) = best {
            out.push(Versus {
                workload: a.workload.clone(),
                proposer: a.proposer.clone(),
                batch: a.batch,
                best_k: b.k.unwrap_or(0),
                vs_best_fixed: median(
                    rounds(reps, ai, |r| &r.round_tok_s)
                        .iter()
                        .zip(rounds(reps, bi, |r| &r.round_tok_s))
                        .map(|(a, b)| a / b.max(1e-9))
                        .collect(),
                ),
                vs_off: a.speedup,
            });
        }
    }
    out
}

pub fn print(rows: &[SpecRow], versus: &[Versus]) {
    println!(
        "{:<10} {:<8} {:>5} {:>5} {:>8} {:>12} {:>11} {:>10} {:>9} {:>8} {:>8} {:>11}",
        "workload",
        "proposer",
        "k",
        "batch",
        "tokens",
        "decode tok/s",
        "tokens/step",
        "acceptance",
        "declined",
        "propose",
        "speedup",
        "runs"
    );
    for r in rows {
        println!(
            "{:<10} {:<8} {:>5} {:>5} {:>8} {:>12.1} {:>11.2} {:>10.2} {:>8.0}% {:>7.1}% {:>7.2}x {:>5.2}-{:<5.2}",
            r.workload,
            r.proposer,
            r.k.map_or("adapt".to_string(), |k| k.to_string()),
            r.batch,
            r.output_tokens,
            r.decode_tok_s,
            r.tokens_per_step,
            r.acceptance,
            r.declined * 100.0,
            r.propose_share * 100.0,
            r.speedup,
            r.speedup_range.0,
            r.speedup_range.1
        );
    }
    println!("= medians over --repeat runs; decode tok/s over the window where every request has its first token; tokens/step = emitted / verification rounds (ΣN/Σrounds); declined = speculating decodes the draft-length rule gave no draft; propose = time spent planning and drafting after steps, as a share of the window; speedup = median over rounds (a batch of prompts each configuration runs in turn) of the ratio to spec off in the same round; runs = the lowest and highest per-run speed-up");
    for v in versus {
        println!(
            "adaptive vs best fixed k: {:<10} {:<6} batch {:>3}: {:.2}x of k={} ({:.2}x of spec off)",
            v.workload, v.proposer, v.batch, v.vs_best_fixed, v.best_k, v.vs_off
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(proposer: &str, k: Option<usize>, tok_s: f64, speedup: f64) -> SpecRow {
        SpecRow {
            workload: "list".into(),
            proposer: proposer.into(),
            k,
            batch: 1,
            output_tokens: 100,
            decode_tok_s: tok_s,
            tokens_per_step: 1.0,
            acceptance: 0.0,
            declined: 0.0,
            propose_share: 0.0,
            speedup,
            speedup_range: (speedup, speedup),
            round_tok_s: vec![tok_s],
            round_speedup: vec![speedup],
        }
    }

    #[test]
    fn versus_takes_the_best_median_k_and_the_median_ratio() {
        // Repeat 2 stalled during the adaptive row; k=4 is best by median speed-up (3.0
        // vs 2.5).
        let reps = vec![
            vec![
                row("off", None, 100.0, 1.0),
                row("ngram", None, 290.0, 2.9),
                row("ngram", Some(2), 250.0, 2.5),
                row("ngram", Some(4), 300.0, 3.0),
            ],
            vec![
                row("off", None, 100.0, 1.0),
                row("ngram", None, 150.0, 1.5),
                row("ngram", Some(2), 400.0, 4.0),
                row("ngram", Some(4), 310.0, 3.1),
            ],
            vec![
                row("off", None, 100.0, 1.0),
                row("ngram", None, 280.0, 2.8),
                row("ngram", Some(2), 240.0, 2.4),
                row("ngram", Some(4), 290.0, 2.9),
            ],
        ];
        let v = adaptive_vs_fixed(&reps);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].best_k, 4);
        // Ratios 290/300, 150/310, 280/290: the median is 280/290.
        assert!((v[0].vs_best_fixed - 280.0 / 290.0).abs() < 1e-12);
        assert_eq!(v[0].vs_off, 2.8);
        assert_eq!(median_rows(&reps)[1].speedup_range, (1.5, 2.9));
        assert_eq!(median_rows(&reps)[2].decode_tok_s, 250.0);
    }

    #[test]
    fn speedups_are_medians_over_every_round_of_every_repeat() {
        let with_rounds = |tok: Vec<f64>, off: &[f64]| {
            let mut r = row("ngram", None, 0.0, 0.0);
            r.round_speedup = tok.iter().zip(off).map(|(a, o)| a / o).collect();
            r.round_tok_s = tok;
            r
        };
        let fixed = |tok: Vec<f64>, off: &[f64]| {
            let mut r = with_rounds(tok, off);
            r.k = Some(4);
            r
        };
        let off = [100.0, 100.0, 50.0];
        // Repeat 1's rounds: 1.1, 0.9, 1.2; repeat 2's: 1.0, 3.0, 0.95. Over all six the
        // median is (1.0 + 1.1) / 2, whatever each repeat's own median (1.1, 1.0).
        let reps = vec![
            vec![
                with_rounds(vec![110.0, 90.0, 60.0], &off),
                fixed(vec![100.0, 100.0, 50.0], &off),
            ],
            vec![
                with_rounds(vec![100.0, 300.0, 47.5], &off),
                fixed(vec![100.0, 100.0, 50.0], &off),
            ],
        ];
        let med = median_rows(&reps);
        assert!((med[0].speedup - 1.05).abs() < 1e-12, "{}", med[0].speedup);
        let v = adaptive_vs_fixed(&reps);
        assert_eq!(v.len(), 1);
        assert!(
            (v[0].vs_best_fixed - 1.05).abs() < 1e-12,
            "{}",
            v[0].vs_best_fixed
        );
    }
}

//! Speculative decoding arithmetic (DESIGN.md §speculation): expected tokens per round, time per token,
//! break-even draft cost, setup payback, and the best draft length by the marginal rule.

use serde::Serialize;

use crate::error::{fraction, positive, Result};
use crate::table::Table;
use crate::units::fx;

/// `E[N_m] = 1 + Σ_{j≤m} Π_{i≤j} a_i`.
pub fn expected_tokens(a: &[f64]) -> f64 {
    let mut p = 1.0;
    let mut n = 1.0;
    for &ai in a {
        p *= ai;
        n += p;
    }
    n
}

/// `E[N]` with the same acceptance `a` at every one of `m` positions.
pub fn expected_tokens_const(a: f64, m: u64) -> f64 {
    expected_tokens(&vec![a; m as usize])
}

/// One draft pattern against plain decoding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpecRow {
    pub label: String,
    pub accept: f64,
    pub draft_len: u64,
    pub expected_tokens: f64,
    /// Verify round + draft cost.
    pub round_s: f64,
    /// `t̄ = T_round / E[N]`.
    pub per_token_s: f64,
    pub plain_s: f64,
    /// Largest draft cost still beating plain decoding: `E[N]·T_plain − T_verify`.
    pub break_even_draft_s: f64,
}

pub fn spec_row(
    label: &str,
    a: f64,
    m: u64,
    verify_s: f64,
    draft_s: f64,
    plain_s: f64,
) -> Result<SpecRow> {
    fraction("acceptance", a)?;
    positive("verify time", verify_s)?;
    let n = expected_tokens_const(a, m);
    let round = verify_s + draft_s;
    Ok(SpecRow {
        label: label.into(),
        accept: a,
        draft_len: m,
        expected_tokens: n,
        round_s: round,
        per_token_s: round / n,
        plain_s,
        break_even_draft_s: n * plain_s - verify_s,
    })
}

/// A one-off setup (e.g. a context index) paid back by the per-token saving.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Payback {
    pub setup_s: f64,
    pub saving_per_token_s: f64,
    pub payback_tokens: u64,
    pub tokens: u64,
    pub plain_total_s: f64,
    pub spec_total_s: f64,
}

pub fn payback(setup_s: f64, row: &SpecRow, tokens: u64) -> Payback {
    let saving = row.plain_s - row.per_token_s;
    Payback {
        setup_s,
        saving_per_token_s: saving,
        payback_tokens: if saving > 0.0 {
            (setup_s / saving).ceil() as u64
        } else {
            u64::MAX
        },
        tokens,
        plain_total_s: tokens as f64 * row.plain_s,
        spec_total_s: setup_s + tokens as f64 * row.per_token_s,
    }
}

/// How drafting time grows with draft length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum DraftCost {
    /// `T_m = verify + per_draft·m` (a sequential drafter).
    Sequential { verify_s: f64, per_draft_s: f64 },
    /// `T_m = verify + per_draft·g·ceil(m/g)` (drafts computed in groups of `g`).
    Grouped {
        verify_s: f64,
        per_draft_s: f64,
        group: u64,
    },
}

impl DraftCost {
    pub fn round_s(&self, m: u64) -> f64 {
        match *self {
            DraftCost::Sequential {
                verify_s,
                per_draft_s,
            } => verify_s + per_draft_s * m as f64,
            DraftCost::Grouped {
                verify_s,
                per_draft_s,
                group,
            } => verify_s + per_draft_s * (group * m.div_ceil(group.max(1))) as f64,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DraftRow {
    pub m: u64,
    pub expected_tokens: f64,
    pub round_s: f64,
    pub per_token_s: f64,
    /// `ΔT/ΔN` of lengthening from `m − 1` to `m`, with `ΔN = a^m`.
    pub marginal_s: f64,
    /// `T/N` at `m − 1`.
    pub prev_per_token_s: f64,
    /// The marginal rule: lengthening to `m` pays iff `ΔT/ΔN < T/N`.
    pub step_pays: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DraftLength {
    pub label: String,
    pub accept: f64,
    pub cost: DraftCost,
    pub rows: Vec<DraftRow>,
    /// Length in `1..=max_m` with the least time per token.
    pub best_m: u64,
    pub best_per_token_s: f64,
}

pub fn draft_length(
    label: &str,
    a: f64,
    cost: DraftCost,
    ms: &[u64],
    max_m: u64,
) -> Result<DraftLength> {
    fraction("acceptance", a)?;
    let row = |m: u64| {
        let n = expected_tokens_const(a, m);
        let t = cost.round_s(m);
        let (n0, t0) = (
            expected_tokens_const(a, m.saturating_sub(1)),
            cost.round_s(m.saturating_sub(1)),
        );
        let dn = a.powi(m as i32);
        let marginal = (t - t0) / dn;
        DraftRow {
            m,
            expected_tokens: n,
            round_s: t,
            per_token_s: t / n,
            marginal_s: marginal,
            prev_per_token_s: t0 / n0,
            step_pays: marginal < t0 / n0,
        }
    };
    let (best_m, best) = (1..=max_m.max(1))
        .map(|m| (m, cost.round_s(m) / expected_tokens_const(a, m)))
        .fold(
            (1, f64::INFINITY),
            |acc, x| if x.1 < acc.1 { x } else { acc },
        );
    Ok(DraftLength {
        label: label.into(),
        accept: a,
        cost,
        rows: ms.iter().map(|&m| row(m)).collect(),
        best_m,
        best_per_token_s: best,
    })
}

/// Sequential drafter vs a parallel (one-forward) drafter.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DraftSources {
    pub verify_s: f64,
    pub forward_s: f64,
    pub drafts: u64,
    /// `(label, draft time, tokens per round, time per token)`.
    pub rows: Vec<(String, f64, f64, f64)>,
}

pub fn draft_sources(
    verify_s: f64,
    forward_s: f64,
    drafts: u64,
    cases: &[(&str, bool, f64)],
) -> DraftSources {
    DraftSources {
        verify_s,
        forward_s,
        drafts,
        rows: cases
            .iter()
            .map(|&(l, parallel, n)| {
                let d = if parallel {
                    forward_s
                } else {
                    forward_s * drafts as f64
                };
                (l.into(), d, n, (verify_s + d) / n)
            })
            .collect(),
    }
}

/// The whole section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Spec {
    pub rows: Vec<SpecRow>,
    pub payback: Payback,
    pub lengths: Vec<DraftLength>,
    pub sources: DraftSources,
}

impl Spec {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "Speculative decoding: tokens per round and time per token",
            &[
                "draft",
                "a",
                "m",
                "E[N]",
                "round ms",
                "ms/token",
                "plain ms/token",
                "break-even draft ms",
            ],
        );
        for r in &self.rows {
            t.push(vec![
                r.label.clone(),
                fx(r.accept, 2),
                r.draft_len.to_string(),
                fx(r.expected_tokens, 2),
                fx(r.round_s * 1e3, 2),
                fx(r.per_token_s * 1e3, 2),
                fx(r.plain_s * 1e3, 2),
                fx(r.break_even_draft_s * 1e3, 1),
            ]);
        }
        let mut t = t.explain(
            "E[N] = 1 + a + … + a^m; t̄ = ΣT/ΣN; break-even draft cost = E[N]·T_plain − T_verify",
        );
        let p = &self.payback;
        t.explanation.push_str(&format!(
            "; a {} s setup pays back after {} tokens; {} tokens: {} s plain vs {} s",
            fx(p.setup_s, 0),
            p.payback_tokens,
            p.tokens,
            fx(p.plain_total_s, 2),
            fx(p.spec_total_s, 2)
        ));
        let mut out = vec![t];
        for d in &self.lengths {
            let mut l = Table::new(
                format!(
                    "Draft length, {} (a = {}): best m = {} at {} ms/token",
                    d.label,
                    fx(d.accept, 2),
                    d.best_m,
                    fx(d.best_per_token_s * 1e3, 2)
                ),
                &[
                    "m",
                    "E[N]",
                    "T_m ms",
                    "ms/token",
                    "ΔT/ΔN ms",
                    "T/N before ms",
                    "step pays",
                ],
            );
            for r in &d.rows {
                l.push(vec![
                    r.m.to_string(),
                    fx(r.expected_tokens, 2),
                    fx(r.round_s * 1e3, 1),
                    fx(r.per_token_s * 1e3, 2),
                    fx(r.marginal_s * 1e3, 1),
                    fx(r.prev_per_token_s * 1e3, 2),
                    if r.step_pays { "yes" } else { "no" }.into(),
                ]);
            }
            out.push(l.explain("lengthen m−1 → m only if ΔT/ΔN < T/N, ΔN = a^m"));
        }
        let s = &self.sources;
        let mut d = Table::new(
            format!(
                "Draft sources: {} drafts, drafter forward {} ms, verify {} ms",
                s.drafts,
                fx(s.forward_s * 1e3, 2),
                fx(s.verify_s * 1e3, 2)
            ),
            &["drafter", "draft ms", "tokens/round", "ms/token"],
        );
        for (l, dt, n, t) in &s.rows {
            d.push(vec![l.clone(), fx(dt * 1e3, 2), fx(*n, 0), fx(t * 1e3, 1)]);
        }
        out.push(
            d.explain("sequential: m forwards; parallel: one forward; t̄ = (T_verify + T_draft)/N"),
        );
        out
    }
}

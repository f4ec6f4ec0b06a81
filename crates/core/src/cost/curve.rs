//! The measured step-cost model: wall time of one forward step by rows computed, learned
//! online from the engine's own steps. The draft planner, the ITL budget, admission rates
//! and the KV manager's eviction values all read it, so every decision prices a step the
//! same way, from this machine's measurements rather than constants.

use super::{CostModel, StepTime};

/// Online least-squares fit of step wall time against tokens computed, exponentially
/// forgetting old steps so it follows the machine's current state.
#[derive(Debug, Clone)]
pub struct CostFit {
    n: f64,
    sx: f64,
    sy: f64,
    sxx: f64,
    sxy: f64,
}

impl Default for CostFit {
    fn default() -> Self {
        Self::new()
    }
}

impl CostFit {
    pub fn new() -> CostFit {
        CostFit {
            n: 0.0,
            sx: 0.0,
            sy: 0.0,
            sxx: 0.0,
            sxy: 0.0,
        }
    }

    pub fn add(&mut self, tokens: usize, wall_s: f64) {
        let d = 0.98;
        let x = tokens as f64;
        self.n = self.n * d + 1.0;
        self.sx = self.sx * d + x;
        self.sy = self.sy * d + wall_s;
        self.sxx = self.sxx * d + x * x;
        self.sxy = self.sxy * d + x * wall_s;
    }

    /// Whether enough steps were seen for [`CostFit::cost`] to be a fit, not its seed.
    pub fn is_measured(&self) -> bool {
        self.n >= 4.0
    }

    /// The fitted cost; a conservative default until the data spans several batch sizes.
    pub fn cost(&self) -> CostModel {
        let default = CostModel {
            fixed_s: 0.003,
            per_token_s: 0.0002,
            per_pair_s: 0.0,
        };
        if self.n < 4.0 {
            return default;
        }
        let var = self.sxx / self.n - (self.sx / self.n).powi(2);
        if var < 1.0 {
            return CostModel {
                fixed_s: (self.sy / self.n).max(1e-5) * 0.8,
                per_token_s: default.per_token_s,
                per_pair_s: 0.0,
            };
        }
        let beta = ((self.sxy / self.n - self.sx / self.n * self.sy / self.n) / var).max(1e-6);
        let alpha = (self.sy / self.n - beta * self.sx / self.n).max(1e-5);
        CostModel {
            fixed_s: alpha,
            per_token_s: beta,
            per_pair_s: 0.0,
        }
    }
}

/// Measured step time by rows computed: per bin, a smoothed time and the smoothed row
/// count it was measured at (bins are exact row counts up to 64, then 16 rows wide);
/// between measured bins the time is interpolated by those row counts (never flat inside a
/// wide bin) and beyond them extended with the linear fit's slope. The draft planner needs
/// the curve's shape: on a CPU the first extra rows ride on the weight read almost free,
/// later ones cost full compute, and a single line through all steps gets both ends wrong.
#[derive(Debug, Clone)]
pub struct StepCurve {
    bins: Vec<Bin>,
    /// Steps added so far (the clock bins' freshness is read on).
    steps: u64,
    /// Fallback and slope for extrapolation.
    pub fit: CostFit,
}

/// One bin of the curve.
#[derive(Debug, Clone, Copy, Default)]
struct Bin {
    /// Smoothed seconds.
    secs: f64,
    /// Smoothed row count those seconds were measured at.
    rows: f64,
    /// Steps seen.
    seen: u32,
    /// `StepCurve::steps` when the bin last saw a step.
    last: u64,
}

impl Default for StepCurve {
    fn default() -> Self {
        Self::new()
    }
}

impl StepCurve {
    const EXACT: usize = 64;
    const WIDE: usize = 16;
    const BINS: usize = Self::EXACT + 64;
    /// Weight of a new step time below a bin's value, and of one above it.
    const FASTER_WEIGHT: f64 = 0.5;
    const SLOWER_WEIGHT: f64 = 0.1;
    /// A bin no step refreshed in this many steps counts as a guess for
    /// [`StepTime::measured`]: the draft planner then tries its row count once more. A
    /// bin first measured while the process was cold (first-touch page faults in the KV
    /// pool, a neighbour's burst) would otherwise keep that row count priced out for good,
    /// since the planner never chooses it again and so never re-measures it.
    const FRESH_STEPS: u64 = 64;

    pub fn new() -> StepCurve {
        StepCurve {
            bins: vec![Bin::default(); Self::BINS + 1],
            steps: 0,
            fit: CostFit::new(),
        }
    }

    fn bin(rows: usize) -> usize {
        if rows <= Self::EXACT {
            rows
        } else {
            (Self::EXACT + 1 + (rows - Self::EXACT - 1) / Self::WIDE).min(Self::BINS)
        }
    }

    pub fn add(&mut self, rows: usize, wall_s: f64) {
        self.fit.add(rows, wall_s);
        if rows == 0 {
            return;
        }
        self.steps += 1;
        let b = &mut self.bins[Self::bin(rows)];
        let x = rows as f64;
        if b.seen == 0 {
            (b.secs, b.rows) = (wall_s, x);
        } else {
            // Step times are noisy one way: an interrupt, a page fault or another process
            // makes a step slower, nothing makes it faster. A bin follows a faster step
            // quickly and a slower one slowly, so one stalled step cannot keep a row
            // count priced out of the draft planner's reach (it would then never be run,
            // so never re-measured) while a real slow-down still moves the bin within a
            // few steps.
            let w = if wall_s < b.secs {
                Self::FASTER_WEIGHT
            } else {
                Self::SLOWER_WEIGHT
            };
            b.secs = (1.0 - w) * b.secs + w * wall_s;
            b.rows = (1.0 - w) * b.rows + w * x;
        }
        b.seen = b.seen.saturating_add(1);
        b.last = self.steps;
    }
}

impl StepCurve {
    /// Row counts on each side pooled by [`StepCurve::local_line`].
    const LOCAL: usize = 3;
    /// A bin's weight in the local line grows with the steps it saw, up to this.
    const MAX_WEIGHT: f64 = 16.0;

    /// Among small row counts (decode steps, drafts), the time at `rows` from a weighted
    /// least-squares line through the measured bins within [`StepCurve::LOCAL`] rows of it.
    /// Single bins there are as noisy as one step (a millisecond on a 5 ms step here),
    /// while a draft row's cost is about that size: read bin by bin, the curve is not even
    /// monotone, and the draft planner's ΔT would follow the noise. `None` where fewer than
    /// two row counts nearby were measured.
    fn local_line(&self, rows: usize) -> Option<f64> {
        if rows == 0 || rows > Self::EXACT {
            return None;
        }
        let lo = rows.saturating_sub(Self::LOCAL).max(1);
        let hi = (rows + Self::LOCAL).min(Self::EXACT);
        // One pass of weighted sums (the draft planner reads the curve many times a step).
        let (mut n, mut w, mut wx, mut wy, mut wxx, mut wxy) = (0, 0.0, 0.0, 0.0, 0.0, 0.0);
        for b in self.bins[lo..=hi].iter().filter(|b| b.seen > 0) {
            let k = f64::from(b.seen).min(Self::MAX_WEIGHT);
            n += 1;
            w += k;
            wx += k * b.rows;
            wy += k * b.secs;
            wxx += k * b.rows * b.rows;
            wxy += k * b.rows * b.secs;
        }
        if n < 2 {
            return None;
        }
        let (mx, my) = (wx / w, wy / w);
        let sxx = wxx - w * mx * mx;
        let sxy = wxy - w * mx * my;
        if sxx <= 1e-9 * wxx {
            return None;
        }
        // A step never gets cheaper with more rows.
        let slope = (sxy / sxx).max(0.0);
        Some((my + slope * (rows as f64 - mx)).max(1e-6))
    }
}

impl StepTime for StepCurve {
    /// Measured, and recently (see [`StepCurve::FRESH_STEPS`]).
    fn measured(&self, rows: usize) -> bool {
        let b = &self.bins[Self::bin(rows)];
        b.seen > 0 && self.steps - b.last <= Self::FRESH_STEPS
    }

    fn step_s(&self, rows: usize) -> f64 {
        let line = self.fit.cost();
        let x = rows as f64;
        if let Some(t) = self.local_line(rows) {
            return t;
        }
        // Measured points (row count, seconds) in bin order, which is row order.
        let points = self
            .bins
            .iter()
            .filter(|b| b.seen > 0)
            .map(|b| (b.rows, b.secs));
        let (mut below, mut above) = (None, None);
        for (px, py) in points {
            if px <= x {
                below = Some((px, py));
            } else if above.is_none() {
                above = Some((px, py));
            }
        }
        match (below, above) {
            (Some((xl, yl)), _) if xl == x => yl,
            (Some((xl, yl)), Some((xh, yh))) => yl + (yh - yl) * (x - xl) / (xh - xl),
            (Some((xl, yl)), None) => yl + line.per_token_s * (x - xl),
            (None, Some((xh, yh))) => (yh - line.per_token_s * (xh - x)).max(1e-6),
            (None, None) => line.step_s(rows),
        }
    }
}

/// The most tokens in `lo..=hi` whose step time on `curve` is at most `target_s` (`lo` when
/// even that does not fit: running decodes always get their row). Step time grows with
/// tokens, so a binary search finds it.
pub fn budget_for_step_time(curve: &impl StepTime, target_s: f64, lo: usize, hi: usize) -> usize {
    let (mut a, mut b) = (lo, hi.max(lo));
    if curve.step_s(b) <= target_s {
        return b;
    }
    // Invariant: a fits (or is the floor), b does not.
    while b - a > 1 {
        let m = a + (b - a) / 2;
        if curve.step_s(m) <= target_s {
            a = m;
        } else {
            b = m;
        }
    }
    a
}

/// Prompt tokens a step carries at least while prompts wait, whatever the ITL target: a
/// decode-only step slower than the target must not starve prefill (one KV block).
pub const MIN_PREFILL_TOKENS: usize = 16;

/// When the decodes alone take longer than the ITL target (a large batch on a small CPU),
/// the prompt tokens riding along may lengthen the step by this fraction of its
/// decode-only time. A fixed token floor instead costs a fixed time per token: 64 prompt
/// tokens added ~400 ms to every 170 ms step of 16 Qwen2.5-1.5B decodes on 2 cores, and
/// those steps set the ITL p99 while later prompts prefilled.
pub const PREFILL_STRETCH: f64 = 0.5;

/// A step's token budget while `decoding` requests decode (of `running` in all) under an
/// ITL target of `itl_s`: the most tokens `curve` fits in the target, or in the decode-only
/// step times 1 + [`PREFILL_STRETCH`] where that is longer; never fewer than `running` +
/// [`MIN_PREFILL_TOKENS`], never more than `token_budget`.
///
/// The decode-only time comes from the curve's linear fit over recent steps, and only once
/// that fit is measured: the curve's bins, extrapolated down from a single measured
/// 2,048-row prefill, put 64 decodes at 14 s and would let a whole-budget prefill stall them.
pub fn step_budget(
    curve: &StepCurve,
    itl_s: f64,
    running: usize,
    decoding: usize,
    token_budget: usize,
) -> usize {
    let decode_s = if curve.fit.is_measured() {
        curve.fit.cost().step_s(decoding)
    } else {
        0.0
    };
    let target = itl_s.max(decode_s * (1.0 + PREFILL_STRETCH));
    budget_for_step_time(curve, target, running + MIN_PREFILL_TOKENS, token_budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_the_most_tokens_that_fit_the_step_time() {
        // 2 ms fixed + 0.5 ms per token.
        let line = CostModel {
            fixed_s: 0.002,
            per_token_s: 0.0005,
            per_pair_s: 0.0,
        };
        // 50 ms: (50 - 2) / 0.5 = 96 tokens.
        assert_eq!(budget_for_step_time(&line, 0.050, 1, 2048), 96);
        // Never above the configured budget, never below the running decodes + 1.
        assert_eq!(budget_for_step_time(&line, 10.0, 1, 2048), 2048);
        assert_eq!(budget_for_step_time(&line, 0.001, 17, 2048), 17);
        // On a measured curve: 16 rows measured at 10 ms, 512 at 400 ms; 100 ms fits
        // 16 + (90 / 390) * 496 = 130.4 rows.
        let mut c = StepCurve::new();
        c.add(16, 0.010);
        c.add(512, 0.400);
        assert_eq!(budget_for_step_time(&c, 0.100, 1, 2048), 130);
    }

    #[test]
    fn curve_interpolates_between_measured_row_counts() {
        let mut c = StepCurve::new();
        c.add(1, 0.003);
        c.add(5, 0.004);
        c.add(16, 0.016);
        assert_eq!(c.step_s(1), 0.003);
        assert!((c.step_s(3) - 0.0035).abs() < 1e-12);
        // 10.5 steps of 1 ms between 5 and 16 rows.
        assert!((c.step_s(10) - (0.004 + 0.012 * 5.0 / 11.0)).abs() < 1e-12);
        // Smoothing: a slower sample moves the bin a tenth of the way, a faster one half.
        c.add(1, 0.013);
        assert!((c.step_s(1) - 0.004).abs() < 1e-12);
        c.add(1, 0.002);
        assert!((c.step_s(1) - 0.003).abs() < 1e-12);
        c.add(1, 0.013);
        assert!((c.step_s(1) - 0.004).abs() < 1e-12);
        // Beyond the last measured count: the line's slope from there.
        let slope = c.fit.cost().per_token_s;
        assert!((c.step_s(20) - (0.016 + 4.0 * slope)).abs() < 1e-12);
        // Wide bins above 64 rows: a bin is a point at its measured row count, and the
        // curve is interpolated through it, not flat across the bin.
        c.add(100, 0.1);
        assert_eq!(c.step_s(100), 0.1);
        assert!(c.step_s(99) < 0.1 && c.step_s(99) > c.step_s(98));
        // 65 rows is a bin of its own (not shared with 64).
        assert!(!c.measured(65));
        assert!(c.measured(97) && !c.measured(96 + 17));
        // A bin nobody refreshed for FRESH_STEPS steps is a guess again, though its time
        // still shapes the curve.
        for _ in 0..=StepCurve::FRESH_STEPS {
            c.add(1, 0.004);
        }
        assert!(c.measured(1) && !c.measured(100));
        assert_eq!(c.step_s(100), 0.1);
        c.add(100, 0.1);
        assert!(c.measured(100));
    }

    #[test]
    fn small_row_counts_are_read_through_their_neighbours() {
        // 5 ms + 1 ms a row, each bin off by ±0.8 ms (one noisy step each): bin by bin the
        // 4th row would look 0.6 ms cheaper than nothing.
        let truth = |r: usize| 0.005 + 0.001 * (r as f64 - 1.0);
        let mut c = StepCurve::new();
        for r in 1..=8 {
            let noise = if r % 2 == 0 { 0.0008 } else { -0.0008 };
            c.add(r, truth(r) + noise);
        }
        for r in 1..8 {
            assert!(c.step_s(r + 1) > c.step_s(r), "not monotone at {r}");
        }
        for r in 2..=7 {
            assert!(
                (c.step_s(r) - truth(r)).abs() < 0.0005,
                "{r}: {}",
                c.step_s(r)
            );
        }
    }

    #[test]
    fn step_budget_stretches_past_a_target_the_decodes_alone_exceed() {
        // A 2-core CPU: ~40 ms weight read, ~6.5 ms a row (compute-bound).
        let (fixed, per) = (0.040, 0.0065);
        let mut c = StepCurve::new();
        // Before the fit is measured: one big prefill step only; the budget is the floor,
        // whatever the curve extrapolates for the decodes.
        c.add(2048, fixed + per * 2048.0);
        assert_eq!(step_budget(&c, 0.120, 64, 8, 2048), 64 + MIN_PREFILL_TOKENS);
        for rows in [80, 96, 2048, 24, 30] {
            c.add(rows, fixed + per * rows as f64);
        }
        assert!(c.fit.is_measured());
        // 64 decodes take 456 ms > 120 ms: the step may take 1.5 x 456 = 684 ms, that is
        // (0.684 - 0.040) / 0.0065 = 99 rows on this line, past the floor of 64 + 16.
        let b = step_budget(&c, 0.120, 64, 64, 2048);
        let target = 1.5 * (fixed + per * 64.0);
        assert!(b > 64 + MIN_PREFILL_TOKENS, "budget {b}");
        assert!(
            c.step_s(b) <= target + 1e-9 && c.step_s(b + 1) > target,
            "budget {b}"
        );
        // 16 decodes (144 ms) may stretch to 216 ms = 27 rows, under the floor of 32.
        assert_eq!(
            step_budget(&c, 0.120, 16, 16, 2048),
            16 + MIN_PREFILL_TOKENS
        );
        // One decode (46.5 ms) under a 300 ms target: the target rules, 40 rows.
        let b1 = step_budget(&c, 0.300, 1, 1, 2048);
        assert!(b1 > 1 + MIN_PREFILL_TOKENS, "budget {b1}");
        assert!(
            c.step_s(b1) <= 0.300 && c.step_s(b1 + 1) > 0.300,
            "budget {b1}"
        );
        // Never above the configured budget.
        assert_eq!(step_budget(&c, 100.0, 4, 4, 512), 512);
    }
}

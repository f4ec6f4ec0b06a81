//! The quality study's result file: configurations, their grids against the baseline,
//! totals and the printed table.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

use super::{Cell, ConfigRun, QualityTask};

/// One configuration's cells and figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QualityConfig {
    /// `kv_format/attn_precision` for in-process engines, the label or URL for servers.
    pub label: String,
    pub kv_format: Option<String>,
    pub attn_precision: Option<String>,
    pub base_url: Option<String>,
    /// Everything this configuration took: engine start (model load), warm-up, grid.
    pub wall_s: f64,
    pub start_s: f64,
    pub warmup_s: f64,
    pub grid_s: f64,
    pub cells: Vec<Cell>,
    /// Computed by [`QualityFile::finish`].
    #[serde(default)]
    pub totals: Totals,
}

impl QualityConfig {
    pub fn new(label: String, run: ConfigRun, start_s: f64) -> QualityConfig {
        QualityConfig {
            label,
            kv_format: None,
            attn_precision: None,
            base_url: None,
            wall_s: start_s + run.warmup_s + run.grid_s,
            start_s,
            warmup_s: run.warmup_s,
            grid_s: run.grid_s,
            cells: run.cells,
            totals: Totals::default(),
        }
    }
}

/// A configuration's totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub cells: usize,
    /// Cells right at the first (greedy) attempt: the grid's count.
    pub correct: usize,
    /// Cells right at some attempt.
    pub correct_after_retries: usize,
    /// Cells whose first attempt's right/wrong differs from the baseline's.
    pub differ_from_baseline: usize,
    /// Tasks wrong (first attempt) in at least one cell, in task order.
    pub wrong_tasks: Vec<String>,
    /// Tasks whose right/wrong differs from the baseline in at least one cell.
    pub flipped_tasks: Vec<String>,
    /// Tasks whose greedy answer text differs between concurrency levels or runs (greedy
    /// decoding must give none).
    pub unstable_tasks: Vec<String>,
    /// Time to a correct answer over all cells, every attempt counted; a cell never right
    /// counts as infinitely slow, so a percentile that falls on one is `None` ("inf").
    pub ttc_p50_s: Option<f64>,
    pub ttc_p90_s: Option<f64>,
    pub never_correct: usize,
    pub attempts: usize,
    /// The retries' cost: attempts after the first, their seconds and tokens.
    pub retry_attempts: usize,
    pub retry_seconds: f64,
    pub retry_output_tokens: u64,
    pub retry_prompt_tokens: u64,
    /// The first attempts' seconds and output tokens, for scale.
    pub first_seconds: f64,
    pub first_output_tokens: u64,
    pub errors: usize,
}

/// Linear-interpolation percentile of ascending `v`, where `inf` stands for "never": any
/// interpolation touching an infinite value is `None`.
fn percentile_inf(v: &[f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let h = (v.len() - 1) as f64 * p / 100.0;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(v.len() - 1);
    let frac = h - lo as f64;
    if !v[lo].is_finite() || (frac > 0.0 && !v[hi].is_finite()) {
        return None;
    }
    Some(if frac > 0.0 {
        v[lo] + frac * (v[hi] - v[lo])
    } else {
        v[lo]
    })
}

/// Tasks (in `tasks` order) for which `pick` holds in some cell.
fn tasks_where(tasks: &[QualityTask], cells: &[Cell], pick: impl Fn(&Cell) -> bool) -> Vec<String> {
    tasks
        .iter()
        .filter(|t| cells.iter().any(|c| c.task == t.id && pick(c)))
        .map(|t| t.id.clone())
        .collect()
}

impl Totals {
    pub fn of(tasks: &[QualityTask], cells: &[Cell]) -> Totals {
        let mut ttc: Vec<f64> = cells
            .iter()
            .map(|c| c.time_to_correct().unwrap_or(f64::INFINITY))
            .collect();
        ttc.sort_by(|a, b| a.total_cmp(b));
        let retries = || cells.iter().flat_map(|c| c.attempts.iter().skip(1));
        let firsts = || cells.iter().filter_map(|c| c.attempts.first());
        let unstable = tasks
            .iter()
            .filter(|t| {
                let mut answers = cells.iter().filter(|c| c.task == t.id).map(Cell::answer);
                answers.next().is_some_and(|a0| answers.any(|a| a != a0))
            })
            .map(|t| t.id.clone())
            .collect();
        Totals {
            cells: cells.len(),
            correct: cells.iter().filter(|c| c.first_correct()).count(),
            correct_after_retries: cells.iter().filter(|c| c.correct()).count(),
            differ_from_baseline: cells.iter().filter(|c| c.differs_from_baseline).count(),
            wrong_tasks: tasks_where(tasks, cells, |c| !c.first_correct()),
            flipped_tasks: tasks_where(tasks, cells, |c| c.differs_from_baseline),
            unstable_tasks: unstable,
            ttc_p50_s: percentile_inf(&ttc, 50.0),
            ttc_p90_s: percentile_inf(&ttc, 90.0),
            never_correct: cells.iter().filter(|c| !c.correct()).count(),
            attempts: cells.iter().map(|c| c.attempts.len()).sum(),
            retry_attempts: retries().count(),
            retry_seconds: retries().fold(0.0, |s, a| s + a.seconds),
            retry_output_tokens: retries().map(|a| a.output_tokens).sum(),
            retry_prompt_tokens: retries().map(|a| a.prompt_tokens).sum(),
            first_seconds: firsts().fold(0.0, |s, a| s + a.seconds),
            first_output_tokens: firsts().map(|a| a.output_tokens).sum(),
            errors: cells
                .iter()
                .flat_map(|c| &c.attempts)
                .filter(|a| a.error.is_some())
                .count(),
        }
    }
}

/// `folio bench quality --json`: the study, every configuration against the first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QualityFile {
    /// Always `"quality"` (how `folio bench plot` tells it from a serve result file).
    pub kind: String,
    pub model: String,
    pub seed: u64,
    pub records: Vec<usize>,
    pub concurrency: Vec<usize>,
    pub runs: usize,
    pub retries: usize,
    pub max_tokens: usize,
    pub retry_temperature: f32,
    /// The configuration the others are compared with (the first).
    pub baseline: String,
    pub tasks: Vec<QualityTask>,
    pub configs: Vec<QualityConfig>,
}

/// The grid's mark of a cell: `ok` right, `XX` wrong, `x1`/`x2`… wrong but right at that
/// retry; `*` when it differs from the baseline.
pub fn mark(c: &Cell) -> String {
    let m = if c.first_correct() {
        "ok".to_string()
    } else {
        match c.fixed_by_retry() {
            Some(k) => format!("x{k}"),
            None => "XX".into(),
        }
    };
    if c.differs_from_baseline {
        m + "*"
    } else {
        m
    }
}

fn secs(v: Option<f64>) -> String {
    v.map_or("inf".into(), |s| format!("{s:.2}"))
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

impl QualityFile {
    /// Marks every cell that differs from the baseline's same (task, concurrency, run)
    /// cell and computes each configuration's totals.
    pub fn finish(&mut self) {
        self.baseline = self
            .configs
            .first()
            .map_or(String::new(), |c| c.label.clone());
        let base: Vec<Cell> = self.configs.first().map_or(Vec::new(), |c| c.cells.clone());
        for cfg in &mut self.configs {
            for cell in &mut cfg.cells {
                cell.differs_from_baseline = base
                    .iter()
                    .find(|b| {
                        b.task == cell.task
                            && b.concurrency == cell.concurrency
                            && b.run == cell.run
                    })
                    .is_some_and(|b| b.first_correct() != cell.first_correct());
            }
            cfg.totals = Totals::of(&self.tasks, &cfg.cells);
        }
    }

    /// The cell of `cfg` for (task, concurrency, run).
    pub fn cell<'a>(
        cfg: &'a QualityConfig,
        task: &str,
        concurrency: usize,
        run: usize,
    ) -> Option<&'a Cell> {
        cfg.cells
            .iter()
            .find(|c| c.task == task && c.concurrency == concurrency && c.run == run)
    }

    /// The grid (task rows; per configuration a column per concurrency level and run) and
    /// the totals table.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let cols: Vec<(usize, usize)> = self
            .concurrency
            .iter()
            .flat_map(|&c| (1..=self.runs).map(move |r| (c, r)))
            .collect();
        let width = cols.len() * 6;
        let _ = writeln!(
            t,
            "Quality grid: {} | ok = right, XX = wrong, xK = wrong, right at retry K, * = differs from {} | columns c<concurrency>.<run>",
            self.model, self.baseline
        );
        let mut head = format!("{:<10}{:>6}{:>8} ", "task", "key", "answer");
        let mut sub = format!("{:<25}", "");
        for cfg in &self.configs {
            let _ = write!(head, "| {:<w$}", cfg.label, w = width);
            sub.push_str("| ");
            for (c, r) in &cols {
                let _ = write!(sub, "{:<6}", format!("c{c}.{r}"));
            }
        }
        let _ = writeln!(t, "{head}\n{sub}");
        for task in &self.tasks {
            let mut line = format!("{:<10}{:>6}{:>8} ", task.id, task.key, task.expected);
            for cfg in &self.configs {
                line.push_str("| ");
                for &(c, r) in &cols {
                    let m = Self::cell(cfg, &task.id, c, r).map_or("-".into(), mark);
                    let _ = write!(line, "{m:<6}");
                }
            }
            let _ = writeln!(t, "{}", line.trim_end());
        }
        let _ = writeln!(
            t,
            "\n{:<16}{:>8}{:>9}{:>7}{:>9}{:>9}{:>9}{:>9}{:>10}{:>8}{:>8}{:>8}",
            "config",
            "right",
            "+retries",
            "differ",
            "TTCp50 s",
            "TTCp90 s",
            "retries",
            "retry s",
            "retry tok",
            "wall s",
            "warm s",
            "grid s"
        );
        for cfg in &self.configs {
            let s = &cfg.totals;
            let _ = writeln!(
                t,
                "{:<16}{:>8}{:>9}{:>7}{:>9}{:>9}{:>9}{:>9.2}{:>10}{:>8.1}{:>8.1}{:>8.1}",
                cfg.label,
                format!("{}/{}", s.correct, s.cells),
                format!("{}/{}", s.correct_after_retries, s.cells),
                s.differ_from_baseline,
                secs(s.ttc_p50_s),
                secs(s.ttc_p90_s),
                s.retry_attempts,
                s.retry_seconds,
                s.retry_output_tokens,
                cfg.wall_s,
                cfg.warmup_s,
                cfg.grid_s
            );
        }
        t.push('\n');
        for cfg in &self.configs {
            let s = &cfg.totals;
            let _ = writeln!(
                t,
                "{}: wrong on {}; flips vs {}: {}; answers changed with concurrency or run: {}{}",
                cfg.label,
                list(&s.wrong_tasks),
                self.baseline,
                list(&s.flipped_tasks),
                list(&s.unstable_tasks),
                if s.errors > 0 {
                    format!("; {} attempts failed", s.errors)
                } else {
                    String::new()
                }
            );
        }
        let _ = writeln!(
            t,
            "= TTC: time to a correct answer per cell, every attempt's seconds counted (inf: a percentile on a cell never right); retries: {} at most per cell, temperature {}, seeded per task",
            self.retries, self.retry_temperature
        );
        t
    }
}

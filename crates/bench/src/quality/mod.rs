//! `folio bench quality`: the quality constraint (DESIGN.md §compression), KV storage format and compute
//! precision compared task by task.
//!
//! A fixed task set ([`tasks`]): one seeded retrieval document per record count
//! (`key NNNN: DDDDDD` records, [`crate::workload::retrieval_document`]), and questions
//! about records spread evenly through it, each with one exact six-digit answer judged by
//! [`crate::workload::grade`]. Every task of a document shares the document as its prompt
//! prefix, so a prefix-caching engine computes the document's KV once per configuration.
//!
//! [`run_config`] asks one configuration (an in-process engine, or a server) every task at
//! each concurrency level, `runs` times: a grid of cells (task × concurrency × run), each
//! right or wrong on its first, greedy attempt. A wrong answer is retried up to `retries`
//! times (sampled, seeded per task and attempt, so retries too are the same whatever the
//! batching); the time to a correct answer counts every attempt's seconds, and the retries'
//! seconds and tokens are totalled apart. [`grid`] compares configurations against the
//! first (the baseline): cells whose right/wrong differs are marked, totals and
//! time-to-correct percentiles per configuration; [`svg`] draws the grid.
//!
//! The runner is generic over [`Answerer`], so a fake with known wrong answers tests the
//! grid without a model.

pub mod grid;
pub mod svg;

use crate::error::Result;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::workload::{grade, retrieval_document, retrieval_question};

pub use grid::{QualityConfig, QualityFile, Totals};

/// One question about one document, with its exact answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QualityTask {
    /// `r<records>-t<index>`, e.g. `r512-t3`.
    pub id: String,
    /// Records in the task's document.
    pub records: usize,
    /// The task's number within its document.
    pub index: usize,
    /// The asked key and where its record sits in the document (0 = first line, 1 = last).
    pub key: usize,
    pub depth: f64,
    /// The six-digit value.
    pub expected: String,
    /// Document and question (left out of result files: the seed regenerates it).
    #[serde(skip)]
    pub prompt: String,
}

/// Splits `total` tasks over the record counts: the first counts get one more when it
/// does not divide evenly.
pub fn tasks_per_document(total: usize, documents: usize) -> Vec<usize> {
    (0..documents)
        .map(|i| total / documents.max(1) + usize::from(i < total % documents.max(1)))
        .collect()
}

/// The fixed task set: for each record count, one document from `seed` and its share of
/// `total` questions ([`tasks_per_document`]), question `i` of `m` asking about a record
/// drawn from the `i`-th of `m` equal slices of the document (so the answers lie at every
/// depth). The same arguments always give the same documents, keys and answers.
pub fn tasks(records: &[usize], total: usize, seed: u64) -> Vec<QualityTask> {
    let mut out = Vec::new();
    for (&n, m) in records.iter().zip(tasks_per_document(total, records.len())) {
        let mix = (seed ^ 0x9e37_79b9_7f4a_7c15)
            .wrapping_mul(0x100_0000_01b3)
            .rotate_left(23)
            ^ (n as u64).wrapping_mul(0xff51_afd7_ed55_8ccd);
        let mut rng = StdRng::seed_from_u64(mix);
        let doc = retrieval_document(n, &mut rng);
        let n = doc.keys.len();
        let m = m.min(n);
        for i in 0..m {
            let (lo, hi) = (i * n / m, ((i + 1) * n / m).max(i * n / m + 1));
            let r = rng.gen_range(lo..hi);
            out.push(QualityTask {
                id: format!("r{n}-t{i}"),
                records: n,
                index: i,
                key: doc.keys[r],
                depth: if n > 1 {
                    r as f64 / (n - 1) as f64
                } else {
                    0.0
                },
                expected: doc.values[r].to_string(),
                prompt: doc.text.clone() + &retrieval_question(doc.keys[r]),
            });
        }
    }
    out
}

/// One request to an answerer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ask<'a> {
    pub prompt: &'a str,
    pub max_tokens: usize,
    /// 0 = greedy.
    pub temperature: f32,
    pub seed: Option<u64>,
}

/// What an answerer returned for one [`Ask`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    pub text: String,
    pub output_tokens: u64,
    pub prompt_tokens: u64,
    /// Prompt tokens served from a prefix cache, when reported.
    pub cached_tokens: u64,
    /// Submit to last token.
    pub seconds: f64,
}

/// Something that answers prompts: an in-process engine, a server, a fake. Called from
/// several threads at once (one per concurrent request).
pub trait Answerer: Sync {
    fn answer(&self, ask: &Ask) -> Result<Answer>;
}

/// One attempt at a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub text: String,
    pub correct: bool,
    pub seconds: f64,
    pub output_tokens: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// The answerer's error (the attempt counts as wrong).
    #[serde(default)]
    pub error: Option<String>,
}

/// One cell of the grid: a task at one concurrency level in one run, all its attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub task: String,
    pub concurrency: usize,
    /// 1-based.
    pub run: usize,
    pub attempts: Vec<Attempt>,
    /// Whether the first attempt's right/wrong differs from the baseline configuration's
    /// same cell (set by [`QualityFile::finish`]).
    #[serde(default)]
    pub differs_from_baseline: bool,
}

impl Cell {
    /// The grid's mark: the first (greedy) attempt was right.
    pub fn first_correct(&self) -> bool {
        self.attempts.first().is_some_and(|a| a.correct)
    }

    /// Right at some attempt.
    pub fn correct(&self) -> bool {
        self.attempts.iter().any(|a| a.correct)
    }

    /// The retry (1-based) that first got it right, when the first attempt did not.
    pub fn fixed_by_retry(&self) -> Option<usize> {
        let i = self.attempts.iter().position(|a| a.correct)?;
        (i > 0).then_some(i)
    }

    /// Seconds of every attempt up to and including the first right one; `None` when no
    /// attempt was right.
    pub fn time_to_correct(&self) -> Option<f64> {
        let i = self.attempts.iter().position(|a| a.correct)?;
        Some(self.attempts[..=i].iter().map(|a| a.seconds).sum())
    }

    /// The first attempt's text (the greedy answer).
    pub fn answer(&self) -> &str {
        self.attempts.first().map_or("", |a| a.text.as_str())
    }
}

/// How one configuration is asked.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyPlan {
    pub concurrency: Vec<usize>,
    pub runs: usize,
    /// Extra attempts after a wrong answer.
    pub retries: usize,
    pub max_tokens: usize,
    /// Temperature of the retries (the first attempt is greedy).
    pub retry_temperature: f32,
    pub seed: u64,
}

/// What [`run_config`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigRun {
    pub cells: Vec<Cell>,
    /// The warm-up: one ungraded request per document (it computes the document's KV).
    pub warmup_s: f64,
    /// Seconds of the graded requests (every concurrency level and run).
    pub grid_s: f64,
}

/// The sampling seed of `task`'s attempt `k` (≥ 1): independent of the run and of the
/// concurrency level, so the whole grid is reproducible.
pub fn retry_seed(seed: u64, task: &QualityTask, k: usize) -> u64 {
    let mut h = seed ^ 0x2545_f491_4f6c_dd1d;
    for x in [task.records as u64, task.index as u64, k as u64] {
        h = (h ^ x).wrapping_mul(0x100_0000_01b3).rotate_left(29);
    }
    h
}

fn attempt(a: &(impl Answerer + ?Sized), task: &QualityTask, ask: &Ask) -> Attempt {
    let t0 = Instant::now();
    match a.answer(ask) {
        Ok(ans) => Attempt {
            correct: grade(&ans.text, &task.expected),
            text: ans.text,
            seconds: ans.seconds,
            output_tokens: ans.output_tokens,
            prompt_tokens: ans.prompt_tokens,
            cached_tokens: ans.cached_tokens,
            error: None,
        },
        Err(e) => Attempt {
            text: String::new(),
            correct: false,
            seconds: t0.elapsed().as_secs_f64(),
            output_tokens: 0,
            prompt_tokens: 0,
            cached_tokens: 0,
            error: Some(format!("{e:#}")),
        },
    }
}

/// A task's attempts: greedy first, then up to `plan.retries` seeded samples while wrong.
fn attempts(a: &(impl Answerer + ?Sized), task: &QualityTask, plan: &StudyPlan) -> Vec<Attempt> {
    let mut out = Vec::new();
    for k in 0..=plan.retries {
        let ask = Ask {
            prompt: &task.prompt,
            max_tokens: plan.max_tokens,
            temperature: if k == 0 { 0.0 } else { plan.retry_temperature },
            seed: (k > 0).then(|| retry_seed(plan.seed, task, k)),
        };
        let at = attempt(a, task, &ask);
        let done = at.correct;
        out.push(at);
        if done {
            break;
        }
    }
    out
}

/// Asks every task at every concurrency level (at most that many requests in flight, in
/// task order), `plan.runs` times, after one warm-up request per document. `progress` gets
/// a line per round.
pub fn run_config(
    a: &(impl Answerer + ?Sized),
    tasks: &[QualityTask],
    plan: &StudyPlan,
    progress: &dyn Fn(&str),
) -> Result<ConfigRun> {
    let t0 = Instant::now();
    let mut seen = Vec::new();
    for t in tasks.iter().filter(|t| {
        let new = !seen.contains(&t.records);
        seen.push(t.records);
        new
    }) {
        a.answer(&Ask {
            prompt: &t.prompt,
            max_tokens: 1,
            temperature: 0.0,
            seed: None,
        })?;
        progress(&format!(
            "warm-up: document of {} records in {:.1} s",
            t.records,
            t0.elapsed().as_secs_f64()
        ));
    }
    let warmup_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut cells = Vec::new();
    for &c in &plan.concurrency {
        for run in 1..=plan.runs {
            let tr = Instant::now();
            let next = AtomicUsize::new(0);
            let done: Mutex<Vec<Option<Vec<Attempt>>>> = Mutex::new(vec![None; tasks.len()]);
            std::thread::scope(|s| {
                for _ in 0..c.clamp(1, tasks.len().max(1)) {
                    s.spawn(|| loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(task) = tasks.get(i) else { break };
                        let at = attempts(a, task, plan);
                        done.lock().expect("no worker panics holding it")[i] = Some(at);
                    });
                }
            });
            let done = done.into_inner().expect("workers joined");
            let mut right = 0;
            for (task, at) in tasks.iter().zip(done) {
                let cell = Cell {
                    task: task.id.clone(),
                    concurrency: c,
                    run,
                    attempts: at.expect("every task was answered"),
                    differs_from_baseline: false,
                };
                right += usize::from(cell.first_correct());
                cells.push(cell);
            }
            progress(&format!(
                "concurrency {c}, run {run}: {right}/{} right in {:.1} s",
                tasks.len(),
                tr.elapsed().as_secs_f64()
            ));
        }
    }
    Ok(ConfigRun {
        cells,
        warmup_s,
        grid_s: t1.elapsed().as_secs_f64(),
    })
}

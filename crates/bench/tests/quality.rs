//! `folio bench quality` without a model: the task generator, the grader, and the grid,
//! totals, baseline marks and time-to-correct from fake answerers with known wrong answers.

use folio_bench::quality::{
    self, grid, Answer, Answerer, Ask, QualityConfig, QualityFile, StudyPlan,
};
use folio_bench::workload::grade;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

#[test]
fn the_task_set_is_deterministic_and_its_answers_are_in_the_documents() {
    let a = quality::tasks(&[128, 512], 8, 7);
    let b = quality::tasks(&[128, 512], 8, 7);
    assert_eq!(a, b);
    assert_eq!(
        a.iter().map(|t| &t.prompt).collect::<Vec<_>>(),
        b.iter().map(|t| &t.prompt).collect::<Vec<_>>()
    );
    assert_ne!(quality::tasks(&[128, 512], 8, 8), a);
    // 8 tasks over two documents: 4 each, ids in order.
    let ids: Vec<&str> = a.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        ["r128-t0", "r128-t1", "r128-t2", "r128-t3", "r512-t0", "r512-t1", "r512-t2", "r512-t3"]
    );
    assert_eq!(quality::tasks_per_document(9, 2), vec![5, 4]);
    for t in &a {
        assert_eq!(t.expected.len(), 6);
        let record = format!("\nkey {}: {}\n", t.key, t.expected);
        assert_eq!(t.prompt.matches(&record).count(), 1, "{}", t.id);
        assert_eq!(t.prompt.matches("\nkey ").count(), t.records);
        assert!(t
            .prompt
            .ends_with(&format!("the value of key {} is", t.key)));
        // Question i asks about the i-th quarter of the document.
        let q = t.index as f64 / 4.0;
        assert!(
            t.depth >= q - 0.01 && t.depth <= q + 0.26,
            "{} {}",
            t.id,
            t.depth
        );
    }
    // The tasks of a document share it as their prefix (the prefix cache reuses it).
    let doc = |t: &quality::QualityTask| t.prompt.split("\nQuestion:").next().unwrap().to_string();
    assert!(a[..4].iter().all(|t| doc(t) == doc(&a[0])));
    assert!(a[4..].iter().all(|t| doc(t) == doc(&a[4])));
    assert_ne!(doc(&a[0]), doc(&a[4]));
}

#[test]
fn the_grader_accepts_exactly_the_right_six_digits() {
    for ok in [
        "123456",
        " 123456.",
        " 123456\n\nQuestion: what",
        "The value of key 4821 is 123456.",
        "key 4821: 123456",
        "123456 (that is, 123456)",
    ] {
        assert!(grade(ok, "123456"), "{ok:?}");
    }
    for bad in [
        "",
        " 123457",
        " 654321",
        " 1234567", // the right digits inside a longer number
        " 0123456",
        " 12345", // five of the six digits
        " 23456",
        " 123 456",
        " 123456 or 123457",
        " 999999, no, 123456",
        "the value is unknown",
    ] {
        assert!(!grade(bad, "123456"), "{bad:?}");
    }
}

/// A reader that finds the asked key's value in the prompt, and answers a configured set
/// of tasks wrongly: `wrong[task] = Some(k)`: right again at retry k; `None`: never.
struct Fake {
    wrong: HashMap<String, Option<usize>>,
    in_flight: AtomicUsize,
    max_in_flight: Mutex<HashMap<usize, usize>>,
    level: AtomicUsize,
    tasks: Vec<quality::QualityTask>,
}

impl Fake {
    fn new(tasks: &[quality::QualityTask], wrong: &[(&str, Option<usize>)]) -> Fake {
        Fake {
            wrong: wrong.iter().map(|(t, k)| (t.to_string(), *k)).collect(),
            in_flight: AtomicUsize::new(0),
            max_in_flight: Mutex::new(HashMap::new()),
            level: AtomicUsize::new(0),
            tasks: tasks.to_vec(),
        }
    }
}

impl Answerer for Fake {
    fn answer(&self, ask: &Ask) -> folio_bench::Result<Answer> {
        let task = self
            .tasks
            .iter()
            .find(|t| t.prompt == ask.prompt)
            .expect("a task's prompt");
        if ask.max_tokens == 1 {
            return Ok(Answer::default()); // the warm-up
        }
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        std::thread::sleep(Duration::from_millis(15));
        {
            let mut m = self.max_in_flight.lock().unwrap();
            let e = m.entry(self.level.load(Ordering::SeqCst)).or_default();
            *e = (*e).max(now);
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let retry = ask.temperature > 0.0;
        assert_eq!(retry, ask.seed.is_some());
        let attempt = match ask.seed {
            None => 0,
            // Which retry this is: the seeds are a function of (task, k).
            Some(s) => (1..10)
                .find(|&k| quality::retry_seed(3, task, k) == s)
                .expect("a seed of this plan"),
        };
        let right = match self.wrong.get(&task.id) {
            None => true,
            Some(Some(k)) => attempt >= *k,
            Some(None) => false,
        };
        let value: u32 = task.expected.parse().unwrap();
        Ok(Answer {
            text: if right {
                format!(" {value}.")
            } else {
                format!(" {}.", value + 1)
            },
            output_tokens: 7,
            prompt_tokens: 100,
            cached_tokens: 90,
            seconds: if retry { 0.5 } else { 1.0 },
        })
    }
}

fn plan(retries: usize) -> StudyPlan {
    StudyPlan {
        concurrency: vec![1, 4],
        runs: 2,
        retries,
        max_tokens: 12,
        retry_temperature: 0.7,
        seed: 3,
    }
}

/// A fake configuration: its label and its wrong tasks (`Fake::wrong`).
type FakeConfig<'a> = (&'a str, &'a [(&'a str, Option<usize>)]);

fn study(retries: usize, configs: &[FakeConfig]) -> QualityFile {
    let tasks = quality::tasks(&[128, 512], 8, 1);
    let mut file = QualityFile {
        kind: "quality".into(),
        model: "fake".into(),
        seed: 1,
        records: vec![128, 512],
        concurrency: vec![1, 4],
        runs: 2,
        retries,
        max_tokens: 12,
        retry_temperature: 0.7,
        baseline: String::new(),
        tasks: tasks.clone(),
        configs: Vec::new(),
    };
    for (label, wrong) in configs {
        let fake = Fake::new(&tasks, wrong);
        let p = plan(retries);
        // Run each level on its own to record its in-flight maximum.
        let mut cells = Vec::new();
        for &c in &p.concurrency {
            fake.level.store(c, Ordering::SeqCst);
            let one = StudyPlan {
                concurrency: vec![c],
                ..p.clone()
            };
            cells.extend(
                quality::run_config(&fake, &tasks, &one, &|_| {})
                    .unwrap()
                    .cells,
            );
        }
        let m = fake.max_in_flight.lock().unwrap().clone();
        assert_eq!(m[&1], 1);
        assert!((2..=4).contains(&m[&4]), "{m:?}");
        let run = quality::ConfigRun {
            cells,
            warmup_s: 0.0,
            grid_s: 0.0,
        };
        file.configs
            .push(QualityConfig::new(label.to_string(), run, 0.0));
    }
    file.finish();
    file
}

#[test]
fn fake_answerers_give_the_expected_grid_totals_and_baseline_marks() {
    let f = study(
        0,
        &[
            ("bf16", &[("r128-t1", None)]),
            ("fp8", &[("r128-t1", None), ("r512-t2", None)]),
            ("fp8/bf16q", &[("r512-t0", None)]),
        ],
    );
    assert_eq!(f.baseline, "bf16");
    let t: Vec<&grid::Totals> = f.configs.iter().map(|c| &c.totals).collect();
    assert_eq!(
        t.iter().map(|t| (t.cells, t.correct)).collect::<Vec<_>>(),
        [(32, 28), (32, 24), (32, 28)]
    );
    assert_eq!(
        t.iter().map(|t| t.differ_from_baseline).collect::<Vec<_>>(),
        [0, 4, 8]
    );
    assert_eq!(t[1].wrong_tasks, ["r128-t1", "r512-t2"]);
    assert_eq!(t[1].flipped_tasks, ["r512-t2"]);
    // Same count as the baseline, wrong on different tasks.
    assert_eq!(t[2].wrong_tasks, ["r512-t0"]);
    assert_eq!(t[2].flipped_tasks, ["r128-t1", "r512-t0"]);
    for t in &t {
        assert!(t.unstable_tasks.is_empty());
        assert_eq!((t.retry_attempts, t.attempts), (0, 32));
        assert_eq!(t.ttc_p50_s, Some(1.0));
        // 4 (or 8) of 32 cells are never right: p90 falls on one.
        assert_eq!(t.ttc_p90_s, None);
    }
    let cfg = &f.configs[2];
    let cell = |id: &str| QualityFile::cell(cfg, id, 4, 2).unwrap();
    assert_eq!(grid::mark(cell("r512-t0")), "XX*");
    assert_eq!(grid::mark(cell("r128-t1")), "ok*");
    assert_eq!(grid::mark(cell("r128-t0")), "ok");
    let table = f.table();
    eprintln!("{table}");
    assert!(
        table.contains("28/32") && table.contains("24/32"),
        "{table}"
    );
    let row = table.lines().find(|l| l.starts_with("r512-t0")).unwrap();
    assert_eq!(row.matches("XX*").count(), 4, "{row}");
    assert_eq!(row.matches("XX").count(), 4, "{row}");
    // The JSON round-trips.
    let back: QualityFile = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
    assert_eq!(back.configs, f.configs);
}

#[test]
fn time_to_correct_counts_every_retry() {
    let f = study(
        2,
        &[
            ("a", &[("r128-t1", Some(2))]),
            ("b", &[("r128-t1", Some(2)), ("r512-t2", None)]),
            ("c", &[("r512-t0", Some(1))]),
        ],
    );
    let (a, b, c) = (&f.configs[0], &f.configs[1], &f.configs[2]);
    // a: r128-t1 wrong, wrong at retry 1, right at retry 2: 1.0 + 0.5 + 0.5 s.
    let cell = QualityFile::cell(a, "r128-t1", 1, 1).unwrap();
    assert_eq!(cell.attempts.len(), 3);
    assert_eq!(cell.time_to_correct(), Some(2.0));
    assert_eq!(grid::mark(cell), "x2");
    let t = &a.totals;
    assert_eq!((t.correct, t.correct_after_retries), (28, 32));
    assert_eq!((t.retry_attempts, t.retry_output_tokens), (8, 56));
    assert!((t.retry_seconds - 4.0).abs() < 1e-9);
    assert_eq!(t.ttc_p50_s, Some(1.0));
    // 28 cells at 1.0 s, 4 at 2.0: rank 27.9 between 1.0 and 2.0.
    assert!((t.ttc_p90_s.unwrap() - 1.9).abs() < 1e-9);
    assert_eq!(t.first_seconds, 32.0);
    // b: r512-t2 never right after 2 retries.
    let t = &b.totals;
    assert_eq!(
        (t.correct, t.correct_after_retries, t.never_correct),
        (24, 28, 4)
    );
    assert_eq!(t.retry_attempts, 16);
    assert_eq!(t.ttc_p90_s, None);
    // c: fixed at the first retry, 1.5 s.
    assert_eq!(
        QualityFile::cell(c, "r512-t0", 4, 1)
            .unwrap()
            .time_to_correct(),
        Some(1.5)
    );
    assert_eq!(c.totals.retry_attempts, 4);
    assert!(f.table().contains("x1*"));
}

#[test]
fn the_grid_plots_as_an_svg() {
    let f = study(1, &[("f16", &[]), ("q4_0", &[("r128-t3", None)])]);
    let dir = std::env::temp_dir().join(format!("folio-quality-plot-{}", std::process::id()));
    let path = dir.join("q.json");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(&path, serde_json::to_string(&f).unwrap()).unwrap();
    let written = folio_bench::plot::write_paths(&[path], &dir, false).unwrap();
    assert_eq!(written, [dir.join("quality_grid.svg")]);
    let svg = std::fs::read_to_string(&written[0]).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    // 8 tasks x 4 columns x 2 configurations; 4 red cells, each marked as differing.
    assert_eq!(svg.matches("<rect x=").count(), 64 + 4);
    assert_eq!(svg.matches("fill=\"#d62728\" stroke=\"black\"").count(), 4);
    assert!(svg.contains("28/32 right (4 differ)"));
    std::fs::remove_dir_all(&dir).unwrap();
}

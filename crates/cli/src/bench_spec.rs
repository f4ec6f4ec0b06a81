//! `folio bench spec`: speculative decoding on an extraction-style workload (a long input
//! whose answer copies spans of it), per proposer and batch size: decode tok/s, tokens per
//! verification step, acceptance, and speed-up over plain decoding.

use crate::engine_args::EngineArgs;
use anyhow::Result;
use folio_engine::{Event, GenerateRequest, SpecMethod, SpecStats};

use folio_tokenizer::ChatMessage;
use std::time::Instant;

use folio_bench::inproc::spec::median;
pub use folio_bench::inproc::spec::{adaptive_vs_fixed, median_rows, print, SpecRow};

/// The extraction-style workloads: a long input and a request whose answer copies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// Quote a paragraph of prose back (what quoting, summarising-by-extraction and
    /// document edits look like to a drafter): the model copies it nearly verbatim.
    Paragraph,
    /// Repeat a 20-line list of records: the 135M model miscopies some numbers, so the
    /// drafts break at every miscopied digit (a harder case for context lookup).
    List,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Paragraph => "paragraph",
            Workload::List => "list",
        }
    }

    /// Request `i`'s prompt (distinct per `i`, so a batch shares no prefix beyond the
    /// instruction).
    fn prompt(self, i: usize) -> Vec<ChatMessage> {
        let content = match self {
            Workload::Paragraph => paragraph_prompt(i),
            Workload::List => list_prompt(i),
        };
        vec![ChatMessage::new("user", content)]
    }
}

/// A list of records and a request to repeat it.
fn list_prompt(i: usize) -> String {
    let mut doc = String::from("Repeat the following list exactly, line by line.\n");
    for r in 1..=20 {
        doc.push_str(&format!(
            "Item {r}: order {} shipped to warehouse {} on March {}.\n",
            (r * 37 + i * 11) % 91,
            (r * 13 + i) % 7,
            (r + i) % 28 + 1
        ));
    }
    doc
}

/// One of four paragraphs with request-specific names and numbers, and a request to
/// repeat it exactly.
fn paragraph_prompt(i: usize) -> String {
    const TOWNS: [&str; 8] = [
        "Millbrook",
        "Ashford",
        "Riverton",
        "Kingsley",
        "Fairview",
        "Oakdale",
        "Westport",
        "Lakemont",
    ];
    const DAYS: [&str; 5] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"];
    let town = TOWNS[i % TOWNS.len()];
    let day = DAYS[i % DAYS.len()];
    let n = 1200 + 137 * i;
    let body = match i % 4 {
        0 => format!(
            "The committee of {town} met on {day} to review the budget for the new library. \
             After a long discussion, the members agreed to fund the reading room, the \
             children's section and the archive, but they postponed the decision on the cafe \
             until the next meeting. The chair thanked the volunteers who had collected \
             signatures from more than {n} residents, and she asked the treasurer to publish \
             the final figures on the town's website by the end of the month. The library is \
             expected to open next spring, and the old building on Main Street will become a \
             community hall."
        ),
        1 => format!(
            "On {day} morning the ferry from {town} left the harbour twenty minutes late \
             because of fog. The captain told the passengers that the crossing would take about \
             two hours and that the cafe on the upper deck would stay open until noon. About \
             {n} people were on board, most of them travelling to the market on the island. \
             When the fog lifted, the sea was calm and the ferry arrived only ten minutes \
             behind schedule. The harbour master said that a new radar system will be \
             installed before the summer season."
        ),
        2 => format!(
            "The school in {town} will change its timetable from {day} onwards. Classes will \
             start at half past eight instead of nine, and the lunch break will be shortened \
             to forty minutes so that the day ends earlier. The head teacher explained that \
             the change follows a survey of {n} parents and pupils, most of whom preferred \
             to finish before the evening traffic. The sports club will keep its usual hours, \
             and the library will stay open for one more hour after the last lesson."
        ),
        _ => format!(
            "Farmers near {town} reported a good harvest this year despite the dry summer. \
             The cooperative bought new storage tanks in the spring, which allowed its members \
             to keep their grain until prices rose in the autumn. At the annual meeting on \
             {day}, the director said that {n} tonnes of wheat had been sold, the highest \
             figure in ten years. She also announced that the cooperative will open a small \
             shop in the village where members can sell vegetables, eggs and honey directly \
             to visitors."
        ),
    };
    format!("Repeat the following paragraph exactly.\n\n{body}")
}

/// A drafter to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Proposer {
    /// Context lookup (`--spec ngram`).
    Ngram,
    /// The target's first layers (`--spec self`).
    #[value(name = "self")]
    SelfDraft,
}

/// What `folio bench spec` runs.
pub struct Plan {
    pub workloads: Vec<Workload>,
    pub batches: Vec<usize>,
    pub max_tokens: usize,
    /// Fixed draft lengths run beside the adaptive rule.
    pub fixed_k: Vec<usize>,
    pub proposers: Vec<Proposer>,
    /// Requests per (proposer, k, batch) at least, in batches of new prompts: a single
    /// 200-token answer decodes in well under a second, too short a window to time alone.
    pub requests: usize,
    /// Times the whole plan runs, each configuration in turn; figures are medians, so a
    /// stall of this machine during one configuration does not decide a comparison.
    pub repeat: usize,
}

/// Submits `prompts` at once and returns (tokens, seconds) of the window in which every
/// request has its first token: tokens emitted before that moment (while some request was
/// still prefilling) count neither tokens nor time.
///
/// The prompts are prefilled first (one token each, then finished), so the measured
/// requests find them in the prefix cache and all start decoding within a step. Without
/// that, how long a batch's prefill lasts would decide which requests' tokens fall in the
/// window: a configuration that finishes its first requests quickly (say, with drafts) is
/// left timing the last few alone.
fn decode_window(
    h: &folio_engine::EngineHandle,
    prompts: Vec<Vec<u32>>,
    max_tokens: usize,
) -> Result<(usize, f64)> {
    let prefills: Vec<_> = prompts
        .iter()
        .map(|p| h.submit(GenerateRequest::new(p.clone(), 1)))
        .collect::<Result<_, _>>()?;
    for mut s in prefills {
        while s.next_blocking().is_some() {}
    }
    let streams: Vec<_> = prompts
        .into_iter()
        .map(|p| h.submit(GenerateRequest::new(p, max_tokens)))
        .collect::<Result<_, _>>()?;
    let mut start: Option<Instant> = None;
    let mut emitted: Vec<(Instant, usize)> = Vec::new();
    for mut s in streams {
        let mut first = true;
        while let Some(ev) = s.next_blocking() {
            if let Event::Tokens { ids, at, .. } = ev {
                if first && !ids.is_empty() {
                    first = false;
                    start = Some(start.map_or(at, |f: Instant| f.max(at)));
                }
                emitted.push((at, ids.len()));
            }
        }
    }
    let Some(start) = start else {
        return Ok((0, 0.0));
    };
    let after: Vec<_> = emitted.iter().filter(|(at, _)| *at > start).collect();
    let tokens = after.iter().map(|(_, n)| n).sum();
    let end = after.iter().map(|(at, _)| *at).max().unwrap_or(start);
    Ok((tokens, (end - start).as_secs_f64()))
}

/// The plan's rows, once per repeat (same rows in the same order each time).
pub fn run(engine: &EngineArgs, plan: &Plan) -> Result<Vec<Vec<SpecRow>>> {
    let mut reps = Vec::new();
    for rep in 0..plan.repeat.max(1) {
        let mut rows: Vec<SpecRow> = Vec::new();
        for &w in &plan.workloads {
            run_workload(engine, w, plan, rep, &mut rows)?;
        }
        reps.push(rows);
    }
    Ok(reps)
}

/// Every configuration's engine runs at once and they take turns, one batch of requests
/// each, so a slow spell of this machine (other tenants, frequency changes) falls on all
/// of them alike rather than on whichever configuration was running then.
fn run_workload(
    engine: &EngineArgs,
    workload: Workload,
    plan: &Plan,
    rep: usize,
    rows: &mut Vec<SpecRow>,
) -> Result<()> {
    let mut runs = vec![("off", SpecMethod::Off, None)];
    for &p in &plan.proposers {
        let (name, method) = match p {
            Proposer::Ngram => ("ngram", SpecMethod::Ngram),
            Proposer::SelfDraft => ("self", SpecMethod::SelfDraft),
        };
        runs.push((name, method, None));
        runs.extend(plan.fixed_k.iter().map(|&k| (name, method, Some(k))));
    }
    let mut handles = Vec::with_capacity(runs.len());
    for &(_, method, k) in &runs {
        let mut cfg = engine.config()?;
        cfg.spec = method;
        cfg.spec_tokens = k;
        if let Some(k) = k {
            cfg.spec_max_tokens = cfg.spec_max_tokens.max(k);
        }
        handles.push(crate::engine_args::start_with(engine, cfg)?);
    }
    // tallies[run][batch]
    let mut tallies: Vec<Vec<Tally>> = vec![Vec::new(); runs.len()];
    let tok = &handles[0].tokenizer;
    for &b in &plan.batches {
        let prompts = |round: usize| -> Result<Vec<Vec<u32>>> {
            (0..b)
                .map(|i| {
                    let msgs = workload.prompt(round * b + i);
                    let text = tok.apply_chat_template(&msgs, true)?;
                    Ok(tok.encode(&text, true)?)
                })
                .collect()
        };
        let n_rounds = plan.requests.max(1).div_ceil(b);
        // Warm-up with the same shape so the controller has costs and rates.
        let mut before = Vec::with_capacity(handles.len());
        for h in &handles {
            let warm: Vec<_> = prompts(n_rounds)?
                .into_iter()
                .map(|p| h.submit(GenerateRequest::new(p, 8)))
                .collect::<Result<_, _>>()?;
            for mut s in warm {
                while s.next_blocking().is_some() {}
            }
            before.push(h.metrics.spec.lock().map(|s| s.clone()).unwrap_or_default());
        }
        let mut window = vec![(0usize, 0f64); handles.len()];
        // Each round's tok/s per configuration (speed-ups are taken round by round).
        let mut per_round = vec![Vec::with_capacity(n_rounds); handles.len()];
        for round in 0..n_rounds {
            // The turn order rotates by round and repeat, so no configuration always runs
            // first, or always right after the same other one (whose threads and caches
            // it would inherit).
            let n = handles.len();
            for j in 0..n {
                let i = (j + round + rep) % n;
                let (t, s) = decode_window(&handles[i], prompts(round)?, plan.max_tokens)?;
                window[i].0 += t;
                window[i].1 += s;
                per_round[i].push(t as f64 / s.max(1e-9));
            }
        }
        for (i, h) in handles.iter().enumerate() {
            let after = h.metrics.spec.lock().map(|s| s.clone()).unwrap_or_default();
            tallies[i].push(Tally {
                tokens: window[i].0,
                secs: window[i].1.max(1e-9),
                per_round: std::mem::take(&mut per_round[i]),
                spec: after.since(&before[i]),
            });
        }
    }
    for h in handles {
        h.shutdown();
    }
    for (i, &(name, _, k)) in runs.iter().enumerate() {
        for (bi, &b) in plan.batches.iter().enumerate() {
            let t = &tallies[i][bi];
            let off = &tallies[0][bi];
            let tok_s = t.tokens as f64 / t.secs;
            // Round by round, against spec off's window of the same prompts (see
            // `median_rows`).
            let round_speedup: Vec<f64> = t
                .per_round
                .iter()
                .zip(&off.per_round)
                .map(|(a, o)| a / o.max(1e-9))
                .collect();
            let speedup = median(round_speedup.clone());
            let st = &t.spec;
            let ratio = |num: u64, den: u64, none: f64| {
                if den > 0 {
                    num as f64 / den as f64
                } else {
                    none
                }
            };
            rows.push(SpecRow {
                workload: workload.name().into(),
                proposer: name.into(),
                k,
                batch: b,
                output_tokens: t.tokens,
                decode_tok_s: tok_s,
                tokens_per_step: ratio(st.emitted, st.rounds, 1.0),
                acceptance: ratio(st.accepted, st.drafted, 0.0),
                declined: ratio(st.rule_declined, st.rule_considered, 0.0),
                propose_share: st.propose_s / t.secs,
                speedup,
                speedup_range: (speedup, speedup),
                round_tok_s: t.per_round.clone(),
                round_speedup,
            });
        }
    }
    Ok(())
}

/// One configuration's measurement at one batch size.
#[derive(Clone)]
struct Tally {
    tokens: usize,
    secs: f64,
    /// Decode tok/s of each round (one batch of prompts).
    per_round: Vec<f64>,
    /// Speculation counters over the measured requests only.
    spec: SpecStats,
}

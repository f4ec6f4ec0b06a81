//! `folio bench spec`: speculative decoding on an extraction-style workload (a long input
//! whose answer copies spans of it), per proposer and batch size: decode tok/s, tokens per
//! verification step, acceptance, and speed-up over plain decoding.

use crate::engine_args::EngineArgs;
use anyhow::Result;
use folio_engine::{Event, GenerateRequest, SpecMethod};
use folio_tokenizer::ChatMessage;
use serde::Serialize;
use std::time::Instant;

#[derive(Serialize)]
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
    pub speedup: f64,
}

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

/// Requests per (proposer, batch size) at least, in batches of new prompts: a single
/// 200-token answer decodes in well under a second, too short a window to time alone.
const MIN_REQUESTS: usize = 4;

/// Submits `prompts` at once and returns (tokens, seconds) of the window in which every
/// request has its first token: tokens emitted before that moment (while some request was
/// still prefilling) count neither tokens nor time.
fn decode_window(
    h: &folio_engine::EngineHandle,
    prompts: Vec<Vec<u32>>,
    max_tokens: usize,
) -> Result<(usize, f64)> {
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

pub fn run(
    engine: &EngineArgs,
    workloads: &[Workload],
    batches: &[usize],
    max_tokens: usize,
    fixed_k: &[usize],
) -> Result<Vec<SpecRow>> {
    let mut rows: Vec<SpecRow> = Vec::new();
    for &w in workloads {
        run_workload(engine, w, batches, max_tokens, fixed_k, &mut rows)?;
    }
    Ok(rows)
}

/// The adaptive draft length against the best fixed one, per workload, proposer and batch.
#[derive(Serialize)]
pub struct Versus {
    pub workload: String,
    pub proposer: String,
    pub batch: usize,
    pub best_k: usize,
    /// Adaptive tok/s ÷ the best fixed k's tok/s.
    pub vs_best_fixed: f64,
    /// Adaptive tok/s ÷ speculation off.
    pub vs_off: f64,
}

/// One [`Versus`] per (workload, proposer, batch) that has an adaptive row and fixed ones.
pub fn adaptive_vs_fixed(rows: &[SpecRow]) -> Vec<Versus> {
    let mut out = Vec::new();
    for a in rows.iter().filter(|r| r.k.is_none() && r.proposer != "off") {
        let same = |r: &&SpecRow| {
            r.workload == a.workload && r.proposer == a.proposer && r.batch == a.batch
        };
        let best = rows
            .iter()
            .filter(same)
            .filter(|r| r.k.is_some())
            .max_by(|x, y| x.decode_tok_s.total_cmp(&y.decode_tok_s));
        if let Some(b) = best {
            out.push(Versus {
                workload: a.workload.clone(),
                proposer: a.proposer.clone(),
                batch: a.batch,
                best_k: b.k.unwrap_or(0),
                vs_best_fixed: a.decode_tok_s / b.decode_tok_s.max(1e-9),
                vs_off: a.speedup,
            });
        }
    }
    out
}

fn run_workload(
    engine: &EngineArgs,
    workload: Workload,
    batches: &[usize],
    max_tokens: usize,
    fixed_k: &[usize],
    rows: &mut Vec<SpecRow>,
) -> Result<()> {
    let mut runs = vec![("off", SpecMethod::Off, None)];
    for (name, method) in [
        ("ngram", SpecMethod::Ngram),
        ("self", SpecMethod::SelfDraft),
    ] {
        runs.push((name, method, None));
        runs.extend(fixed_k.iter().map(|&k| (name, method, Some(k))));
    }
    for (name, method, k) in runs {
        let mut cfg = engine.config()?;
        cfg.spec = method;
        cfg.spec_tokens = k;
        if let Some(k) = k {
            cfg.spec_max_tokens = cfg.spec_max_tokens.max(k);
        }
        let h = crate::engine_args::start_with(engine, cfg)?;
        for &b in batches {
            let prompts = |round: usize| -> Result<Vec<Vec<u32>>> {
                (0..b)
                    .map(|i| {
                        let msgs = workload.prompt(round * b + i);
                        let text = h.tokenizer.apply_chat_template(&msgs, true)?;
                        Ok(h.tokenizer.encode(&text, true)?)
                    })
                    .collect()
            };
            // Warm-up with the same shape so the controller has costs and rates.
            let n_rounds = MIN_REQUESTS.div_ceil(b);
            let warm: Vec<_> = prompts(n_rounds)?
                .into_iter()
                .map(|p| h.submit(GenerateRequest::new(p, 8)))
                .collect::<Result<_, _>>()?;
            for mut s in warm {
                while s.next_blocking().is_some() {}
            }
            let before = h.metrics.spec.lock().map(|s| s.clone()).unwrap_or_default();
            let (mut tokens, mut secs) = (0usize, 0f64);
            for round in 0..n_rounds {
                let (t, s) = decode_window(&h, prompts(round)?, max_tokens)?;
                tokens += t;
                secs += s;
            }
            let after = h.metrics.spec.lock().map(|s| s.clone()).unwrap_or_default();
            let (rounds, emitted, drafted, accepted) = (
                after.rounds - before.rounds,
                after.emitted - before.emitted,
                after.drafted - before.drafted,
                after.accepted - before.accepted,
            );
            let considered = after.rule_considered - before.rule_considered;
            let declined = after.rule_declined - before.rule_declined;
            let secs = secs.max(1e-9);
            let tok_s = tokens as f64 / secs;
            let base = rows
                .iter()
                .find(|r| r.workload == workload.name() && r.proposer == "off" && r.batch == b)
                .map(|r| r.decode_tok_s);
            rows.push(SpecRow {
                workload: workload.name().into(),
                proposer: name.into(),
                k,
                batch: b,
                output_tokens: tokens,
                decode_tok_s: tok_s,
                tokens_per_step: if rounds > 0 {
                    emitted as f64 / rounds as f64
                } else {
                    1.0
                },
                acceptance: if drafted > 0 {
                    accepted as f64 / drafted as f64
                } else {
                    0.0
                },
                declined: if considered > 0 {
                    declined as f64 / considered as f64
                } else {
                    0.0
                },
                speedup: base.map(|x| tok_s / x).unwrap_or(1.0),
            });
        }
        h.shutdown();
    }
    Ok(())
}

pub fn print(rows: &[SpecRow], versus: &[Versus]) {
    println!(
        "{:<10} {:<8} {:>5} {:>5} {:>8} {:>12} {:>11} {:>10} {:>9} {:>8}",
        "workload",
        "proposer",
        "k",
        "batch",
        "tokens",
        "decode tok/s",
        "tokens/step",
        "acceptance",
        "declined",
        "speedup"
    );
    for r in rows {
        println!(
            "{:<10} {:<8} {:>5} {:>5} {:>8} {:>12.1} {:>11.2} {:>10.2} {:>8.0}% {:>7.2}x",
            r.workload,
            r.proposer,
            r.k.map_or("adapt".to_string(), |k| k.to_string()),
            r.batch,
            r.output_tokens,
            r.decode_tok_s,
            r.tokens_per_step,
            r.acceptance,
            r.declined * 100.0,
            r.speedup
        );
    }
    println!("= decode tok/s over the window where every request has its first token; tokens/step = emitted / verification rounds (ΣN/Σrounds); declined = speculating decodes the draft-length rule gave no draft");
    for v in versus {
        println!(
            "adaptive vs best fixed k: {:<10} {:<6} batch {:>3}: {:.2}x of k={} ({:.2}x of spec off)",
            v.workload, v.proposer, v.batch, v.vs_best_fixed, v.best_k, v.vs_off
        );
    }
}

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
    pub proposer: String,
    pub batch: usize,
    pub output_tokens: usize,
    pub decode_tok_s: f64,
    pub tokens_per_step: f64,
    pub acceptance: f64,
    pub speedup: f64,
}

/// A list of records and a request to repeat it: the answer copies long spans of the input
/// (what extraction, quoting and code edits look like to a drafter).
fn extraction_prompt(i: usize) -> Vec<ChatMessage> {
    let mut doc = String::from("Repeat the following list exactly, line by line.\n");
    for r in 1..=20 {
        doc.push_str(&format!(
            "Item {r}: order {} shipped to warehouse {} on March {}.\n",
            (r * 37 + i * 11) % 91,
            (r * 13 + i) % 7,
            (r + i) % 28 + 1
        ));
    }
    vec![ChatMessage {
        role: "user".into(),
        content: doc,
    }]
}

pub fn run(engine: &EngineArgs, batches: &[usize], max_tokens: usize) -> Result<Vec<SpecRow>> {
    let mut rows: Vec<SpecRow> = Vec::new();
    for (name, method) in [
        ("off", SpecMethod::Off),
        ("ngram", SpecMethod::Ngram),
        ("self", SpecMethod::SelfDraft),
    ] {
        let mut cfg = engine.config()?;
        cfg.spec = method;
        let h = crate::engine_args::start_with(engine, cfg)?;
        for &b in batches {
            let prompts: Vec<Vec<u32>> = (0..b)
                .map(|i| {
                    let text = h
                        .tokenizer
                        .apply_chat_template(&extraction_prompt(i), true)?;
                    Ok(h.tokenizer.encode(&text, true)?)
                })
                .collect::<Result<_>>()?;
            // Warm-up with the same shape so the controller has costs and rates.
            let warm: Vec<_> = prompts
                .iter()
                .map(|p| h.submit(GenerateRequest::new(p.clone(), 8)))
                .collect::<Result<_, _>>()?;
            for mut s in warm {
                while s.next_blocking().is_some() {}
            }
            let before = h.metrics.spec.lock().map(|s| s.clone()).unwrap_or_default();
            let streams: Vec<_> = prompts
                .iter()
                .map(|p| h.submit(GenerateRequest::new(p.clone(), max_tokens)))
                .collect::<Result<_, _>>()?;
            let mut first: Option<Instant> = None;
            let mut last = Instant::now();
            let mut tokens = 0usize;
            let mut firsts = 0usize;
            for mut s in streams {
                let mut seen_first = false;
                while let Some(ev) = s.next_blocking() {
                    if let Event::Tokens { ids, at, .. } = ev {
                        if !seen_first && !ids.is_empty() {
                            seen_first = true;
                            firsts += 1;
                            first = Some(first.map_or(at, |f: Instant| f.max(at)));
                            tokens += ids.len() - 1;
                        } else {
                            tokens += ids.len();
                        }
                        last = last.max(at);
                    }
                }
            }
            let _ = firsts;
            let after = h.metrics.spec.lock().map(|s| s.clone()).unwrap_or_default();
            let (rounds, emitted, drafted, accepted) = (
                after.rounds - before.rounds,
                after.emitted - before.emitted,
                after.drafted - before.drafted,
                after.accepted - before.accepted,
            );
            // Decode rate from the moment every request has its first token.
            let secs = first
                .map(|f| (last - f).as_secs_f64())
                .unwrap_or(0.0)
                .max(1e-9);
            let tok_s = tokens as f64 / secs;
            let base = rows
                .iter()
                .find(|r| r.proposer == "off" && r.batch == b)
                .map(|r| r.decode_tok_s);
            rows.push(SpecRow {
                proposer: name.into(),
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
                speedup: base.map(|x| tok_s / x).unwrap_or(1.0),
            });
        }
        h.shutdown();
    }
    Ok(rows)
}

pub fn print(rows: &[SpecRow]) {
    println!(
        "{:<8} {:>5} {:>8} {:>12} {:>11} {:>10} {:>8}",
        "proposer", "batch", "tokens", "decode tok/s", "tokens/step", "acceptance", "speedup"
    );
    for r in rows {
        println!(
            "{:<8} {:>5} {:>8} {:>12.1} {:>11.2} {:>10.2} {:>7.2}x",
            r.proposer,
            r.batch,
            r.output_tokens,
            r.decode_tok_s,
            r.tokens_per_step,
            r.acceptance,
            r.speedup
        );
    }
    println!("= decode tok/s over the window where every request has its first token; tokens/step = emitted / verification rounds (ΣN/Σrounds)");
}

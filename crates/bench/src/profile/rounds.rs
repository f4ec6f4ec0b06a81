//! Decode rounds and prefills of the model, timed directly (no scheduler, no HTTP).
//!
//! NOTE: the decode context is not prefilled. Each sequence's KV blocks are allocated and
//! written (a small constant, so every page is real memory) and the decode tokens start at
//! position L, so attention reads L real
//! cached tokens per sequence: the same bytes and FLOPs as after a prefill, without the
//! minutes a 64 × 2048-token prefill would take on a CPU. Values do not matter for timing.

use crate::error::Result;
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvFormat, KvFormats, Model};
use serde::{Deserialize, Serialize};
use std::time::Instant;

const BLOCK: usize = 16;

/// One measured decode configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecodePoint {
    pub batch: usize,
    pub context: usize,
    pub steps: usize,
    /// Median round time (see [`decode_round`]).
    pub round_s: f64,
    /// Fastest round time.
    pub best_round_s: f64,
    pub weight_bytes: usize,
    pub kv_bytes: usize,
    pub flops: f64,
    /// New tokens per round (= batch) and causal query–key pairs per round.
    pub new_tokens: usize,
    pub pairs: u64,
}

/// One measured prefill from an empty cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrefillPoint {
    pub tokens: usize,
    pub seconds: f64,
    pub flops: f64,
    pub pairs: u64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A fixed pseudo-random "prompt" (an LCG): the same tokens every run, no tokenizer.
pub fn tokens(n: usize, seed: u64, vocab: usize) -> Vec<u32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % (vocab as u64 - 10)) as u32 + 5
        })
        .collect()
}

/// Times `steps` decode rounds (after one warm-up round) of `batch` sequences that hold
/// `context` tokens each in a `format` cache; reports the median round and the fastest.
///
/// NOTE: the median, not the best, drives MBU: on a shared machine the best round catches
/// rare quiet moments and jumps between runs (×1.5 seen here), while the median matched
/// `folio bench model`'s mean within a few percent from run to run.
///
/// Sequence `s` runs under the LoRA adapters `lora(s)`; `&|_| None` times the base model.
pub fn decode_round(
    model: &Model,
    pool: &ThreadPool,
    batch: usize,
    context: usize,
    steps: usize,
    format: KvFormats,
    lora: &dyn Fn(usize) -> Option<folio_model::LoraSet>,
) -> Result<DecodePoint> {
    let steps = steps.max(1);
    let sets: Vec<_> = (0..batch).map(lora).collect();
    let per_seq = (context + steps + 2).div_ceil(BLOCK);
    let mut kv = model.new_kv_cache(BLOCK, per_seq * batch, format);
    // 0x11 bytes everywhere (small finite values in every format): every page real (see
    // `KvCache::fill`).
    kv.fill(0x11);
    let kv_bpt = kv.bytes_per_token();
    let tables: Vec<Vec<u32>> = (0..batch)
        .map(|s| ((s * per_seq) as u32..((s + 1) * per_seq) as u32).collect())
        .collect();
    let vocab = model.config.vocab_size;
    let toks = tokens(
        batch * (steps + 1),
        batch as u64 * 31 + context as u64,
        vocab,
    );
    let mut times = Vec::with_capacity(steps);
    let mut first = None;
    for step in 0..=steps {
        let mut b = ForwardBatch::new();
        for (s, table) in tables.iter().enumerate() {
            b.push(&[toks[step * batch + s]], context + step, table.clone(), 1);
            b.seqs[s].lora = sets[s].clone();
        }
        if step == 1 {
            first = Some((model.stats(&b, kv_bpt), b.attention_pairs()));
        }
        let t = Instant::now();
        model.forward(&b, &mut kv, pool)?;
        if step > 0 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    let (st, pairs) = first.expect("steps >= 1, so step 1 ran");
    Ok(DecodePoint {
        batch,
        context,
        steps,
        round_s: median(times.clone()),
        best_round_s: times.iter().copied().fold(f64::INFINITY, f64::min),
        weight_bytes: st.weight_bytes,
        kv_bytes: st.kv_bytes_read,
        flops: st.flops,
        new_tokens: batch,
        pairs,
    })
}

/// Best-of-`reps` time of one `n`-token prefill from an empty cache.
pub fn prefill(model: &Model, pool: &ThreadPool, n: usize, reps: usize) -> Result<PrefillPoint> {
    let blocks = n.div_ceil(BLOCK);
    let mut kv = model.new_kv_cache(BLOCK, blocks, KvFormat::F16);
    let toks = tokens(n, 1, model.config.vocab_size);
    let mut b = ForwardBatch::new();
    b.push(&toks, 0, (0..blocks as u32).collect(), 1);
    let st = model.stats(&b, kv.bytes_per_token());
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        model.forward(&b, &mut kv, pool)?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(PrefillPoint {
        tokens: n,
        seconds: best,
        flops: st.flops,
        pairs: b.attention_pairs(),
    })
}

//! Greedy decoding straight on the model, and reading llama.cpp's reference files
//! (testdata/*greedy*.json): shared by the tests that compare folio with llama.cpp.

use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvFormat, Model};
use serde_json::Value;

/// Token ids of a JSON array.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// log-softmax of one row (before any masking, as llama.cpp reports it).
pub fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let lse = logits
        .iter()
        .map(|&v| (v as f64 - max).exp())
        .sum::<f64>()
        .ln()
        + max;
    logits.iter().map(|&v| v as f64 - lse).collect()
}

/// Greedy decode with end-of-generation tokens masked when `mask_eog`; also every step's
/// log-probabilities.
pub fn greedy(
    model: &Model,
    prompt: &[u32],
    n: usize,
    eog: &[u32],
    mask_eog: bool,
) -> (Vec<u32>, Vec<Vec<f64>>) {
    let pool = ThreadPool::global();
    let blocks = (prompt.len() + n).div_ceil(16);
    let mut kv = model.new_kv_cache(16, blocks, KvFormat::F16);
    let table: Vec<u32> = (0..blocks as u32).collect();
    let mut b = ForwardBatch::new();
    b.push(prompt, 0, table.clone(), 1);
    let mut logits = model.forward(&b, &mut kv, pool).expect("prefill");
    let mut out = Vec::new();
    let mut lps = Vec::new();
    loop {
        lps.push(log_softmax(&logits));
        if mask_eog {
            for &e in eog {
                logits[e as usize] = f32::NEG_INFINITY;
            }
        }
        let next = folio_engine::sampler::argmax(&logits) as u32;
        out.push(next);
        if out.len() == n || (!mask_eog && eog.contains(&next)) {
            return (out, lps);
        }
        let mut b = ForwardBatch::new();
        b.push(&[next], prompt.len() + out.len() - 1, table.clone(), 1);
        logits = model.forward(&b, &mut kv, pool).expect("decode");
    }
}

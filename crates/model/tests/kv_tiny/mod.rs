//! The tiny model and the run the KV-format tests share (`kv_formats.rs`,
//! `kv_formats_split.rs`): a GQA llama whose head_dim is a power of two, so every format
//! (the rotated ones included) applies, and the logits of a prefill, a chunk and decode
//! steps through a scattered block table.
#![allow(dead_code)]

use folio_gguf::{GgmlType, GgufFile};
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvFormats, Model};
use folio_testkit::tiny::{build, Shape};

/// A tiny llama shape with a GQA group of 3 (like SmolLM2) and head_dim 64.
pub const SHAPE: Shape = Shape {
    d: 384,
    heads: 6,
    kv_heads: 2,
    hd: 64,
    ffn: 512,
    vocab: 300,
    layers: 2,
    ctx: 128,
};
pub const HD: usize = SHAPE.hd;
pub const VOCAB: usize = SHAPE.vocab;

/// A tiny model of SHAPE with f32 weights.
pub fn tiny_model(seed: u64) -> Model {
    let f =
        GgufFile::from_bytes(build(&SHAPE, "llama", GgmlType::F32, seed)).expect("valid tiny gguf");
    Model::from_gguf(&f).expect("load tiny model")
}

pub fn prompt(seed: u64, n: usize) -> Vec<u32> {
    folio_testkit::tiny::prompt(seed, n, VOCAB)
}

/// Logits of every position: a 20-token prefill, a 6-token chunk, then 3 decode steps,
/// through a scattered block table (block size 4).
pub fn run(model: &Model, formats: impl Into<KvFormats>) -> Vec<Vec<f32>> {
    let toks = prompt(3, 29);
    let mut kv = model.new_kv_cache(4, 12, formats.into());
    let table: Vec<u32> = vec![7, 2, 11, 0, 5, 1, 9, 3];
    let pool = ThreadPool::global();
    let mut pos = 0;
    let mut rows = Vec::new();
    for len in [20usize, 6, 1, 1, 1] {
        let mut b = ForwardBatch::new();
        b.push(&toks[pos..pos + len], pos, table.clone(), len);
        let logits = model.forward(&b, &mut kv, pool).expect("forward");
        rows.extend(logits.chunks(VOCAB).map(|r| r.to_vec()));
        pos += len;
    }
    rows
}

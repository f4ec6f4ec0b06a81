//! Dumps next-token logits for comparing numerics with another engine:
//! `logits MODEL.gguf OUT.f32 PROMPT_IDS FOLLOW_IDS` (comma-separated ids) prefills the
//! prompt in one forward, then decodes each follow-up id one at a time, writing the logits
//! after the prompt and after every follow-up id (f32 little-endian, vocab values each).

use folio_gguf::GgufFile;
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvFormat, Model};
use std::io::Write;

fn parse(s: &str) -> Vec<u32> {
    s.split(',')
        .filter(|t| !t.is_empty())
        .map(|t| t.trim().parse().expect("token id"))
        .collect()
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    assert!(
        a.len() >= 4,
        "usage: logits MODEL OUT PROMPT_IDS [FOLLOW_IDS]"
    );
    let f = GgufFile::open(std::path::Path::new(&a[1])).expect("gguf");
    let mut model = Model::from_gguf(&f).expect("model");
    // llama.cpp's summation order (`--numerics llama`): the point is to compare bits.
    model.set_sums(folio_kernels::matmul::Sums::Ggml);
    let prompt = parse(&a[3]);
    let follow = a.get(4).map(|s| parse(s)).unwrap_or_default();
    let pool = ThreadPool::global();
    let n = prompt.len() + follow.len() + 1;
    let blocks = n.div_ceil(16);
    let mut kv = model.new_kv_cache(16, blocks, KvFormat::F16);
    let table: Vec<u32> = (0..blocks as u32).collect();
    let mut out = std::fs::File::create(&a[2]).expect("out");
    let mut b = ForwardBatch::new();
    b.push(&prompt, 0, table.clone(), 1);
    let mut write = |l: &[f32]| {
        for v in l {
            out.write_all(&v.to_le_bytes()).expect("write");
        }
    };
    write(&model.forward(&b, &mut kv, pool).expect("prefill"));
    for (i, &t) in follow.iter().enumerate() {
        let mut b = ForwardBatch::new();
        b.push(&[t], prompt.len() + i, table.clone(), 1);
        write(&model.forward(&b, &mut kv, pool).expect("decode"));
    }
}

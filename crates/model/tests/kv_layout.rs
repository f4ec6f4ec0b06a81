//! The hybrid KV layout (full layers in one page group, sliding-window layers in others,
//! pages shared by layers of different groups) gives exactly the single layout's logits,
//! also when the window tables' entries behind the window are poisoned (released).

use folio_testkit::tiny as common;

use common::{build, prompt, Shape, GEMMA_WINDOW};
use folio_gguf::{GgmlType, GgufFile};
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvFormat, KvLayout, Model};

const VOCAB: usize = 300;
const P: usize = 4;

/// Five layers, every other one windowed (0, 2, 4): two full layers per page, so the three
/// window layers take two pages per block, the second half empty.
const SHAPE: Shape = Shape {
    d: 128,
    heads: 4,
    kv_heads: 2,
    hd: 32,
    ffn: 256,
    vocab: VOCAB,
    layers: 5,
    ctx: 128,
};

#[test]
fn hybrid_layout_equals_single_layout() {
    let f = GgufFile::from_bytes(build(&SHAPE, "gemma3", GgmlType::F32, 5)).expect("tiny gguf");
    let model = Model::from_gguf(&f).expect("load");
    let layout = model.hybrid_kv_layout().expect("gemma3 has both kinds");
    assert_eq!((layout.slots(), layout.n_groups()), (2, 3));
    let pool = ThreadPool::global();
    let toks = prompt(9, 23, VOCAB);
    let n = toks.len();
    let blocks = (n + 1).div_ceil(P);

    // Single layout: one table.
    let mut single = model.new_kv_cache(P, blocks, KvFormat::F16);
    let mut b = ForwardBatch::new();
    b.push(&toks, 0, (0..blocks as u32).collect(), 1);
    let want_prefill = model.forward(&b, &mut single, pool).unwrap();
    let mut b = ForwardBatch::new();
    b.push(&[7], n, (0..blocks as u32).collect(), 1);
    let want_decode = model.forward(&b, &mut single, pool).unwrap();

    // Hybrid: pages of the three groups interleaved in one pool of 3 × blocks pages.
    let pages = |g: u32| -> Vec<u32> { (0..blocks as u32).map(|i| 3 * i + g).collect() };
    let mut hybrid = model.new_kv_cache_with(layout.clone(), P, 3 * blocks, KvFormat::F16);
    let mut b = ForwardBatch::new();
    b.push(&toks, 0, pages(0), 1);
    b.seqs[0].tables.extend([pages(1), pages(2)]);
    assert_eq!(model.forward(&b, &mut hybrid, pool).unwrap(), want_prefill);

    // Decode at position 23: its window (5 positions) starts at 19, block 4; poison the
    // window tables' blocks before it as the KV manager's released entries are.
    let first = (n + 1 - GEMMA_WINDOW) / P;
    assert_eq!(first, 4);
    let released = |g: u32| -> Vec<u32> {
        let mut t = pages(g);
        t[..first].fill(u32::MAX);
        t
    };
    let mut b = ForwardBatch::new();
    b.push(&[7], n, pages(0), 1);
    b.seqs[0].tables.extend([released(1), released(2)]);
    assert_eq!(model.forward(&b, &mut hybrid, pool).unwrap(), want_decode);

    // A batch missing its window tables is an error naming them, not a panic.
    let mut b = ForwardBatch::new();
    b.push(&[7], n, pages(0), 1);
    let err = model
        .forward(&b, &mut hybrid, pool)
        .unwrap_err()
        .to_string();
    assert!(err.contains("window block tables"), "{err}");
}

#[test]
fn page_bytes_follow_the_layout() {
    let window: Vec<bool> = (0..18).map(|l| (l + 1) % 6 != 0).collect();
    let hybrid = KvLayout::hybrid(&window).unwrap();
    let single = KvLayout::single(18);
    let bytes = |l: &KvLayout| folio_model::KvCache::page_bytes(l, 1, 256, 16, KvFormat::F16);
    // A hybrid page holds 3 layers, a single one 18.
    assert_eq!(bytes(&single), 6 * bytes(&hybrid));
    assert_eq!(bytes(&hybrid), 2 * 3 * 16 * 256 * 2);
}

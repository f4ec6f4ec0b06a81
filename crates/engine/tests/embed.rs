//! Embedding requests through the engine on the real model: the vector is the pooled,
//! normalized final-norm hidden rows the model computes for the prompt alone (checked
//! against `Model::forward_with_hidden` directly), and it does not depend on chunked
//! prefill or on the generations batched next to it.

mod common;

use folio_engine::{EngineConfig, EngineHandle, Event, FinishReason, Pooling};
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvFormat, Model};

/// The vector and the finish of one embedding request.
fn embed(h: &EngineHandle, prompt: &[u32], pooling: Pooling) -> (Vec<f32>, FinishReason, usize) {
    let mut s = h.embed(prompt.to_vec(), pooling, None).expect("submit");
    let mut vector = None;
    loop {
        match s.next_blocking().expect("stream ends with Finished") {
            Event::Embedding { vector: v, .. } => vector = Some(v),
            Event::Tokens { .. } => panic!("an embedding generates no tokens"),
            Event::Finished { reason, usage, .. } => {
                assert_eq!(usage.completion_tokens, 0);
                return (
                    vector.expect("a vector before Finished"),
                    reason,
                    usage.prompt_tokens,
                );
            }
        }
    }
}

/// The reference: the prompt alone in one forward, every row's hidden state back.
fn reference(prompt: &[u32], pooling: Pooling) -> Vec<f32> {
    let path = folio_fetch::test_model().expect("model");
    let model = Model::load(&path).expect("load");
    let bs = 16;
    let blocks = prompt.len().div_ceil(bs);
    let mut kv = model.new_kv_cache(bs, blocks, KvFormat::F16);
    let mut batch = ForwardBatch::new();
    batch.push(prompt, 0, (0..blocks as u32).collect(), 0);
    batch.seqs[0].n_hidden = prompt.len();
    let pool = ThreadPool::new(2);
    let out = model
        .forward_with_hidden(&batch, &mut kv, &pool)
        .expect("forward");
    let d = model.hidden_size();
    assert_eq!(out.hidden.len(), prompt.len() * d);
    assert!(out.logits.is_empty());
    let rows: Vec<&[f32]> = out.hidden.chunks_exact(d).collect();
    let v: Vec<f64> = match pooling {
        Pooling::Last => rows.last().unwrap().iter().map(|&x| x as f64).collect(),
        Pooling::Mean => (0..d)
            .map(|j| rows.iter().map(|r| r[j] as f64).sum::<f64>() / rows.len() as f64)
            .collect(),
    };
    let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    v.iter().map(|x| (x / n) as f32).collect()
}

#[test]
fn vectors_are_the_models_pooled_hidden_rows_whatever_the_batching() {
    let whole = common::engine(EngineConfig::default());
    // Chunks of 8 tokens: a 40-token prompt prefills over five steps.
    let chunked = common::engine(EngineConfig {
        max_chunk: 8,
        ..EngineConfig::default()
    });
    let prompt = whole
        .tokenizer
        .encode("An embedding is the model's summary of a text: this one is forty tokens or so, long enough to be chunked.", true)
        .unwrap();
    assert!(prompt.len() > 16, "{}", prompt.len());
    for pooling in [Pooling::Last, Pooling::Mean] {
        let want = reference(&prompt, pooling);
        let (v, reason, n) = embed(&whole, &prompt, pooling);
        assert_eq!((reason, n), (FinishReason::Stop, prompt.len()));
        assert_eq!(v.len(), whole.info.hidden_size);
        let diff = v
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            diff <= 1e-6,
            "{pooling:?}: engine vs direct forward, max difference {diff}"
        );
        let (c, ..) = embed(&chunked, &prompt, pooling);
        assert_eq!(c, v, "{pooling:?}: chunked prefill changed the vector");
        // Next to generations that decode in the same steps.
        let gens: Vec<_> = (0..3)
            .map(|i| {
                chunked
                    .submit(common::greedy(&prompt[..5 + i], 24))
                    .unwrap()
            })
            .collect();
        let (b, ..) = embed(&chunked, &prompt, pooling);
        for g in gens {
            assert!(!common::collect(g).ids.is_empty());
        }
        assert_eq!(b, v, "{pooling:?}: batching changed the vector");
    }
    assert_ne!(
        embed(&whole, &prompt, Pooling::Last).0,
        embed(&whole, &prompt, Pooling::Mean).0
    );
    whole.shutdown();
    chunked.shutdown();
}

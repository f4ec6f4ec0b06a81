//! Prompt scores (`GenerateRequest::prompt_logprobs`) on the real model: the same whatever
//! the prefill chunking and the prefix cache, and equal to the logprobs generation reports.

mod common;

use common::{engine, prompts};
use folio_engine::{
    EngineConfig, EngineHandle, Event, FinishReason, GenerateRequest, TokenLogprob,
};

/// The prompt scores and generated logprobs of one request.
fn run(
    h: &EngineHandle,
    prompt: &[u32],
    max_tokens: usize,
) -> (Vec<TokenLogprob>, Vec<TokenLogprob>, FinishReason, usize) {
    let mut r = GenerateRequest::new(prompt.to_vec(), max_tokens);
    r.prompt_logprobs = Some(2);
    r.logprobs = Some(0);
    let mut s = h.submit(r).expect("submit");
    let (mut scores, mut gen) = (Vec::new(), Vec::new());
    while let Some(ev) = s.next_blocking() {
        match ev {
            Event::Tokens {
                logprobs,
                prompt_logprobs,
                ..
            } => {
                scores.extend(prompt_logprobs);
                gen.extend(logprobs);
            }
            // Generation streams carry no embedding.
            Event::Embedding { .. } => {}
            Event::Finished { reason, usage, .. } => {
                return (scores, gen, reason, usage.completion_tokens)
            }
        }
    }
    panic!("no Finished");
}

#[test]
fn scores_do_not_depend_on_chunking_or_the_prefix_cache() {
    let whole = engine(EngineConfig::default());
    let chunked = engine(EngineConfig {
        max_chunk: 7,
        ..Default::default()
    });
    let ps = prompts(&whole, 12);
    let p = ps.iter().max_by_key(|p| p.len()).unwrap().clone();
    assert!(p.len() > 100, "{}", p.len());
    let (a, gen_a, reason, n) = run(&whole, &p, 0);
    assert_eq!((reason, n, gen_a.len()), (FinishReason::Length, 0, 0));
    assert_eq!(a.len(), p.len() - 1);
    for (i, s) in a.iter().enumerate() {
        assert_eq!(s.token, p[i + 1]);
        assert_eq!(s.top.len(), 2);
        assert!(s.logprob <= s.top[0].1 && s.top[0].1 >= s.top[1].1);
    }
    // Again on the same engine: the prompt's blocks are cached now.
    let (again, ..) = run(&whole, &p, 0);
    let (b, ..) = run(&chunked, &p, 0);
    for (x, y) in [(&a, &again), (&a, &b)] {
        assert_eq!(x.len(), y.len());
        for (i, (s, t)) in x.iter().zip(y.iter()).enumerate() {
            assert_eq!(
                (s.token, s.top[0].0),
                (t.token, t.top[0].0),
                "position {}",
                i + 1
            );
            assert!(
                (s.logprob - t.logprob).abs() < 1e-4,
                "position {}: {} vs {}",
                i + 1,
                s.logprob,
                t.logprob
            );
        }
    }
    // Scoring prompt + its greedy continuation gives the logprobs generation reported.
    let (_, gen, _, _) = run(&whole, &p, 3);
    let mut longer = p.clone();
    longer.extend(gen.iter().map(|g| g.token));
    let (c, ..) = run(&whole, &longer, 0);
    for (k, g) in gen.iter().enumerate() {
        let s = &c[p.len() - 1 + k];
        assert_eq!(s.token, g.token);
        assert!(
            (s.logprob - g.logprob).abs() < 1e-4,
            "output {k}: {} vs {}",
            s.logprob,
            g.logprob
        );
    }
    whole.shutdown();
    chunked.shutdown();
}

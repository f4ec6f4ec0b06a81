//! `folio generate`: one prompt, streamed to stdout, figures to stderr.

use anyhow::{bail, Result};
use folio_engine::{Sampler, SamplingParams};
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvFormat, Model};
use folio_tokenizer::{ChatMessage, IncrementalDecoder, Tokenizer};
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

/// What to generate.
pub struct GenerateArgs {
    pub prompt: String,
    pub chat: bool,
    pub max_tokens: usize,
    pub params: SamplingParams,
    pub ignore_eos: bool,
}

/// Prefill chunk: bounds the activation scratch of one forward call.
const PREFILL_CHUNK: usize = 512;
const BLOCK: usize = 16;

pub fn run(model: &Model, tok: Arc<Tokenizer>, args: &GenerateArgs) -> Result<()> {
    let text = if args.chat {
        let msgs = [ChatMessage {
            role: "user".into(),
            content: args.prompt.clone(),
        }];
        tok.apply_chat_template(&msgs, true)?
    } else {
        args.prompt.clone()
    };
    let prompt = tok.encode(&text, true)?;
    if prompt.is_empty() {
        bail!("--prompt: the prompt has 0 tokens; at least 1 is needed");
    }
    let ctx = model.config.context_length;
    if prompt.len() + args.max_tokens > ctx {
        bail!(
            "--prompt/--max-tokens: prompt tokens ({}) + max_tokens ({}) = {} exceeds the model's context length {ctx}",
            prompt.len(),
            args.max_tokens,
            prompt.len() + args.max_tokens
        );
    }
    let total = prompt.len() + args.max_tokens;
    let n_blocks = total.div_ceil(BLOCK).max(1);
    let mut kv = model.new_kv_cache(BLOCK, n_blocks, KvFormat::F16);
    let table: Vec<u32> = (0..n_blocks as u32).collect();
    let pool = ThreadPool::global();
    let mut sampler = Sampler::new(args.params.clone());
    let mut decoder = IncrementalDecoder::new(tok.clone(), true);
    let eog: Vec<u32> = tok.eog_ids().to_vec();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();

    let t0 = Instant::now();
    let mut logits = Vec::new();
    for (ci, chunk) in prompt.chunks(PREFILL_CHUNK).enumerate() {
        let mut b = ForwardBatch::new();
        let last = (ci + 1) * PREFILL_CHUNK >= prompt.len();
        b.push(chunk, ci * PREFILL_CHUNK, table.clone(), usize::from(last));
        logits = model.forward(&b, &mut kv, pool)?;
    }
    let prefill_s = t0.elapsed().as_secs_f64();
    let mut history = prompt.clone();
    let mut generated = 0usize;
    let t1 = Instant::now();
    loop {
        let mut l = logits;
        if args.ignore_eos {
            for &e in &eog {
                l[e as usize] = f32::NEG_INFINITY;
            }
        }
        sampler.apply_penalties(&mut l, &history[prompt.len()..]);
        let next = sampler.sample(&l);
        generated += 1;
        if eog.contains(&next) {
            break;
        }
        let piece = decoder.push(next);
        out.write_all(piece.as_bytes())?;
        out.flush()?;
        history.push(next);
        if generated >= args.max_tokens {
            break;
        }
        let mut b = ForwardBatch::new();
        b.push(&[next], history.len() - 1, table.clone(), 1);
        logits = model.forward(&b, &mut kv, pool)?;
    }
    let decode_s = t1.elapsed().as_secs_f64();
    out.write_all(decoder.flush().as_bytes())?;
    writeln!(out)?;
    // Decode rate counts the forward steps after the first token (which prefill produced).
    let steps = generated.saturating_sub(1).max(1) as f64;
    eprintln!(
        "prompt_tokens={} prefill_tok_s={:.1} output_tokens={} decode_tok_s={:.1}",
        prompt.len(),
        prompt.len() as f64 / prefill_s,
        generated,
        if generated > 1 { steps / decode_s } else { 0.0 }
    );
    Ok(())
}

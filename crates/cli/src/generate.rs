//! `folio generate`: one prompt through the engine, streamed to stdout, figures to stderr.

use anyhow::{bail, Result};
use folio_engine::{EngineHandle, Event, FinishReason, GenerateRequest, SamplingParams};
use folio_tokenizer::ChatMessage;
use std::io::Write;
use std::time::Instant;

/// What to generate.
pub struct GenerateArgs {
    pub prompt: String,
    pub chat: bool,
    pub max_tokens: usize,
    pub params: SamplingParams,
    pub ignore_eos: bool,
}

pub fn run(h: &EngineHandle, args: &GenerateArgs) -> Result<()> {
    let tok = &h.tokenizer;
    let text = if args.chat {
        let msgs = [ChatMessage::new("user", args.prompt.clone())];
        tok.apply_chat_template(&msgs, true)?
    } else {
        args.prompt.clone()
    };
    // Special-token text in a raw prompt is parsed as the token, as llama.cpp does.
    let prompt = tok.encode(&text, true)?;
    let n_prompt = prompt.len();
    let mut req = GenerateRequest::new(prompt, args.max_tokens);
    req.params = args.params.clone();
    req.ignore_eos = args.ignore_eos;
    let t0 = Instant::now();
    let mut stream = h.submit(req)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let (mut first, mut last, mut n) = (None, t0, 0usize);
    while let Some(ev) = stream.next_blocking() {
        match ev {
            Event::Tokens { ids, text, at, .. } => {
                out.write_all(text.as_bytes())?;
                out.flush()?;
                n += ids.len();
                first.get_or_insert(at);
                last = at;
            }
            // Generation streams carry no embedding.
            Event::Embedding { .. } => {}
            Event::Finished { reason, usage, .. } => {
                writeln!(out)?;
                match &reason {
                    FinishReason::Error(e) => bail!("generation failed: {e}"),
                    FinishReason::Rejected(r) => bail!("generation failed: {r}"),
                    _ => {}
                }
                let first = first.unwrap_or(last);
                let prefill_s = (first - t0).as_secs_f64();
                let decode_s = (last - first).as_secs_f64();
                eprintln!(
                    "prompt_tokens={} prefill_tok_s={:.1} output_tokens={} decode_tok_s={:.1}",
                    n_prompt,
                    n_prompt as f64 / prefill_s.max(1e-9),
                    usage.completion_tokens,
                    if n > 1 {
                        (n - 1) as f64 / decode_s.max(1e-9)
                    } else {
                        0.0
                    }
                );
                return Ok(());
            }
        }
    }
    bail!("engine stopped before the request finished")
}

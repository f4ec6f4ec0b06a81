//! `folio generate`: one prompt through the engine, streamed to stdout, figures to stderr.
//! Its prompt encoding and event printing ([`encode`], [`Printer`]) are also what
//! `folio run` uses when it runs the model in-process.

use anyhow::{bail, Result};
use folio_engine::{EngineHandle, Event, FinishReason, GenerateRequest, SamplingParams, Usage};
use folio_tokenizer::{ChatMessage, Tokenizer};
use std::io::Write;
use std::time::Instant;

/// The sampling flags of `generate` and `run`.
#[derive(clap::Args, Clone, Debug)]
pub struct SamplingArgs {
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            seed: self.seed,
            ..Default::default()
        }
    }
}

/// What to generate.
pub struct GenerateArgs {
    pub prompt: String,
    pub chat: bool,
    pub max_tokens: usize,
    pub params: SamplingParams,
    pub ignore_eos: bool,
}

/// The token ids of a raw prompt (`messages` = None) or of chat messages through the
/// model's template with the assistant turn opened. Special-token text in the text is
/// parsed as the token, as llama.cpp does.
pub fn encode(tok: &Tokenizer, raw: Option<&str>, messages: &[ChatMessage]) -> Result<Vec<u32>> {
    let text = match raw {
        Some(t) => t.to_string(),
        None => tok.apply_chat_template(messages, true)?,
    };
    Ok(tok.encode(&text, true)?)
}

/// Writes a request's text events to `out` as they come (flushed each time) and notes
/// when tokens arrived.
pub struct Printer {
    pub started: Instant,
    pub first: Option<Instant>,
    pub last: Instant,
    /// Tokens received.
    pub tokens: usize,
    /// The text written so far.
    pub text: String,
}

impl Printer {
    pub fn new() -> Printer {
        let now = Instant::now();
        Printer {
            started: now,
            first: None,
            last: now,
            tokens: 0,
            text: String::new(),
        }
    }

    /// Handles one event: text is written, `Finished` ends the line and gives the usage
    /// (an engine error or rejection is an error).
    pub fn event(&mut self, ev: Event, out: &mut impl Write) -> Result<Option<Usage>> {
        match ev {
            Event::Tokens { ids, text, at, .. } => {
                out.write_all(text.as_bytes())?;
                out.flush()?;
                self.text.push_str(&text);
                self.tokens += ids.len();
                self.first.get_or_insert(at);
                self.last = at;
                Ok(None)
            }
            // Generation streams carry no embedding.
            Event::Embedding { .. } => Ok(None),
            Event::Finished { reason, usage, .. } => {
                writeln!(out)?;
                out.flush()?;
                match &reason {
                    FinishReason::Error(e) => bail!("generation failed: {e}"),
                    FinishReason::Rejected(r) => bail!("generation failed: {r}"),
                    _ => Ok(Some(usage)),
                }
            }
        }
    }
}

pub fn run(h: &EngineHandle, args: &GenerateArgs) -> Result<()> {
    let tok = &h.tokenizer;
    let msgs = [ChatMessage::new("user", args.prompt.clone())];
    let prompt = if args.chat {
        encode(tok, None, &msgs)?
    } else {
        encode(tok, Some(&args.prompt), &[])?
    };
    let n_prompt = prompt.len();
    let mut req = GenerateRequest::new(prompt, args.max_tokens);
    req.params = args.params.clone();
    req.ignore_eos = args.ignore_eos;
    let mut p = Printer::new();
    let mut stream = h.submit(req)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    while let Some(ev) = stream.next_blocking() {
        if let Some(usage) = p.event(ev, &mut out)? {
            let first = p.first.unwrap_or(p.last);
            let prefill_s = (first - p.started).as_secs_f64();
            let decode_s = (p.last - first).as_secs_f64();
            let n = p.tokens;
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
    bail!("engine stopped before the request finished")
}

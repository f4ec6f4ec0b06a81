//! Where `folio run`'s answers come from: a running server, or an engine in this process
//! (started as `folio generate` starts it, and printed by its [`Printer`]).

use super::interrupt::Answering;
use super::remote::Server;
use crate::generate::{self, Printer, SamplingArgs};
use anyhow::{bail, Result};
use folio_engine::{EngineHandle, GenerateRequest};
use folio_tokenizer::ChatMessage;
use std::io::Write;

/// Settings of every answer.
pub struct Opts {
    pub sampling: SamplingArgs,
    /// Most tokens an answer may have; `None`: up to the context's end.
    pub max_tokens: Option<usize>,
}

/// How an answer ended.
pub enum Outcome {
    /// Finished; its text.
    Done(String),
    /// Stopped by Ctrl-C.
    Stopped,
}

pub enum Backend {
    Local(EngineHandle),
    /// A server and the id of the model there.
    Remote(Server, String),
}

/// Completes when `stop` fires; never without one.
pub async fn pressed(stop: &mut Option<&mut Answering<'_>>) {
    match stop {
        Some(s) => s.pressed().await,
        None => std::future::pending().await,
    }
}

impl Backend {
    /// Streams the assistant's answer to `messages` into `out`, then a line end.
    pub async fn answer(
        &self,
        messages: &[ChatMessage],
        opts: &Opts,
        out: &mut impl Write,
        stop: Option<&mut Answering<'_>>,
    ) -> Result<Outcome> {
        match self {
            Backend::Local(h) => local(h, messages, opts, out, stop).await,
            Backend::Remote(server, model) => server.answer(model, messages, opts, out, stop).await,
        }
    }

    /// Stops an in-process engine.
    pub fn shutdown(&self) {
        if let Backend::Local(h) = self {
            h.shutdown();
        }
    }
}

async fn local(
    h: &EngineHandle,
    messages: &[ChatMessage],
    opts: &Opts,
    out: &mut impl Write,
    mut stop: Option<&mut Answering<'_>>,
) -> Result<Outcome> {
    let prompt = generate::encode(&h.tokenizer, None, messages)?;
    // `submit` bounds it by the context left after the prompt.
    let max = opts.max_tokens.unwrap_or(h.info.context_length);
    let mut req = GenerateRequest::new(prompt, max);
    req.params = opts.sampling.params();
    let mut stream = h.submit(req)?;
    let mut p = Printer::new();
    loop {
        tokio::select! {
            ev = stream.next() => match ev {
                Some(ev) => {
                    if p.event(ev, out)?.is_some() {
                        return Ok(Outcome::Done(p.text));
                    }
                }
                None => bail!("the engine stopped before the answer finished"),
            },
            // Dropping the stream aborts the request.
            _ = pressed(&mut stop) => {
                writeln!(out)?;
                out.flush()?;
                return Ok(Outcome::Stopped);
            }
        }
    }
}

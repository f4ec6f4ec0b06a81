//! `folio run NAME [PROMPT]`: one answer printed, or (no prompt, a terminal) a chat.
//! Through the server at `--host/--port` when one answers there and serves NAME, else
//! with the model loaded in this process, as `folio generate` loads it.

use super::answer::{Backend, Opts};
use super::remote::{self, Server};
use super::{chat, ServerArgs};
use crate::engine_args::EngineArgs;
use crate::generate::SamplingArgs;
use anyhow::{bail, Context, Result};
use folio_tokenizer::ChatMessage;
use std::io::{IsTerminal, Read};
use std::num::NonZeroUsize;

#[derive(clap::Args)]
pub struct RunArgs {
    /// A catalogue model (fetched on first use), a local GGUF file, or a model the
    /// running server serves.
    pub name: String,
    /// Answer this and exit (the words are joined by spaces); without it, a chat in the
    /// terminal, or the whole of stdin as the prompt when it is not a terminal.
    pub prompt: Vec<String>,
    /// Most tokens per answer; default: up to the context's end.
    #[arg(long)]
    pub max_tokens: Option<NonZeroUsize>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub server: ServerArgs,
    /// In-process engine settings (when no server serves NAME).
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub fn run(mut args: RunArgs) -> Result<()> {
    if !args.engine.model.is_empty() {
        bail!("folio run takes the model as its NAME argument, not --model");
    }
    let prompt = if !args.prompt.is_empty() {
        Some(args.prompt.join(" "))
    } else if !std::io::stdin().is_terminal() {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading the prompt from stdin")?;
        if s.trim().is_empty() {
            bail!("no prompt: give PROMPT, or run in a terminal for a chat");
        }
        Some(s)
    } else {
        None
    };
    // One worker: the Ctrl-C listener runs there while the main thread reads input.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    let backend = pick(&rt, &mut args)?;
    let opts = Opts {
        sampling: args.sampling.clone(),
        max_tokens: args.max_tokens.map(NonZeroUsize::get),
    };
    let r = match prompt {
        Some(p) => {
            let mut out = std::io::stdout().lock();
            let msgs = [ChatMessage::new("user", p)];
            rt.block_on(backend.answer(&msgs, &opts, &mut out, None))
                .map(drop)
        }
        None => chat::repl(&rt, &backend, &opts),
    };
    backend.shutdown();
    r
}

/// The server when it serves `args.name`, else an engine started here.
fn pick(rt: &tokio::runtime::Runtime, args: &mut RunArgs) -> Result<Backend> {
    let server = Server::new(&args.server);
    if let Some(cards) = rt.block_on(server.models())? {
        if let Some(id) = remote::find(&cards, &args.name) {
            return Ok(Backend::Remote(server, id));
        }
        eprintln!(
            "folio: the server at {} does not serve {:?}; running it in this process",
            server.url(),
            args.name
        );
    }
    args.engine.model = vec![args.name.clone().into()];
    Ok(Backend::Local(args.engine.start()?))
}

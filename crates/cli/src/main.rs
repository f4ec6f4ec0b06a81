//! `folio`: serve, generate, bench, profile and plan, in one binary.

mod bench_model;

mod generate;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use folio_engine::SamplingParams;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Parser)]
#[command(
    name = "folio",
    version,
    about = "An LLM inference engine and OpenAI-compatible server"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Clone)]
struct ModelArgs {
    /// A local GGUF file; default: SmolLM2-135M-Instruct Q4_1, fetched on first use.
    #[arg(long, global = true)]
    model: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate text for one prompt, streamed to stdout; figures go to stderr.
    Generate {
        #[command(flatten)]
        model: ModelArgs,
        /// The prompt; special-token text such as <|im_start|> is parsed as the token.
        #[arg(long)]
        prompt: String,
        /// Wrap the prompt as a user message in the model's chat template.
        #[arg(long)]
        chat: bool,
        #[arg(long, default_value_t = 128)]
        max_tokens: usize,
        /// 0 = greedy.
        #[arg(long, default_value_t = 0.0)]
        temperature: f32,
        #[arg(long, default_value_t = 0)]
        top_k: usize,
        #[arg(long, default_value_t = 1.0)]
        top_p: f32,
        #[arg(long, default_value_t = 0.0)]
        min_p: f32,
        #[arg(long)]
        seed: Option<u64>,
        /// Keep generating past end-of-generation tokens.
        #[arg(long)]
        ignore_eos: bool,
    },
    /// Benchmarks (commands that print figures).
    Bench {
        #[command(subcommand)]
        what: BenchCmd,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Forward-pass speed: pp512, tg128, aggregate decode at batch 1/4/16/64.
    Model {
        #[command(flatten)]
        model: ModelArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Fewer repetitions (a smoke run).
        #[arg(long)]
        quick: bool,
    },
}

fn load(model: &ModelArgs) -> Result<(folio_model::Model, Arc<folio_tokenizer::Tokenizer>)> {
    let path = folio_fetch::resolve_model(model.model.as_deref())?;
    let gguf =
        folio_gguf::GgufFile::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let m = folio_model::Model::from_gguf(&gguf)
        .with_context(|| format!("loading {}", path.display()))?;
    let tok = folio_tokenizer::Tokenizer::from_gguf(&gguf)
        .with_context(|| format!("tokenizer of {}", path.display()))?;
    Ok((m, Arc::new(tok)))
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Generate {
            model,
            prompt,
            chat,
            max_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            seed,
            ignore_eos,
        } => {
            let (m, tok) = load(&model)?;
            let params = SamplingParams {
                temperature,
                top_k,
                top_p,
                min_p,
                seed,
                ..Default::default()
            };
            generate::run(
                &m,
                tok,
                &generate::GenerateArgs {
                    prompt,
                    chat,
                    max_tokens,
                    params,
                    ignore_eos,
                },
            )
        }
        Cmd::Bench {
            what: BenchCmd::Model { model, json, quick },
        } => {
            let (m, _) = load(&model)?;
            let rows = bench_model::run(&m, quick)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                bench_model::print_table(&rows);
            }
            Ok(())
        }
    }
}

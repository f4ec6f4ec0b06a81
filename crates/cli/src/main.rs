//! `folio`: serve, generate, bench, profile and plan, in one binary.

mod bench_cmd;
mod bench_engine;
mod bench_model;
mod bench_quality;
mod bench_spec;
mod engine_args;
mod generate;
mod plan_cmd;
mod serve;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use engine_args::EngineArgs;
use folio_engine::SamplingParams;
use std::path::PathBuf;

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

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)]
enum Cmd {
    /// Serve the OpenAI-compatible HTTP API.
    Serve {
        #[command(flatten)]
        engine: EngineArgs,
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        #[arg(long, default_value_t = 8000)]
        port: u16,
    },
    /// Generate text for one prompt, streamed to stdout; figures go to stderr.
    Generate {
        #[command(flatten)]
        engine: EngineArgs,
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
    /// Measure this machine: the chapter's MBU/MFU table and a machine profile JSON.
    Profile(bench_cmd::ProfileArgs),
    /// Capacity, roofline, scheduling, cache, offload, speculation and design-desk arithmetic.
    Plan(plan_cmd::PlanArgs),
    /// The models `--model NAME` fetches on first use: name, size, whether downloaded, path.
    Models,
    /// Benchmarks (commands that print figures).
    Bench {
        #[command(subcommand)]
        what: BenchCmd,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    #[command(flatten)]
    Load(bench_cmd::BenchServeCmds),
    /// Forward-pass speed: pp512, tg128, aggregate decode at batch 1/4/16/64.
    Model {
        /// A local GGUF file or a catalogue model (`folio models`); default: the default model.
        #[arg(long)]
        model: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Fewer repetitions (a smoke run).
        #[arg(long)]
        quick: bool,
        /// Batch sizes of the aggregate decode rows.
        #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
        batch: Vec<usize>,
        /// Only the aggregate decode rows (skip pp512 and tg128), e.g. to profile one batch.
        #[arg(long)]
        decode_only: bool,
        /// Matmul arithmetic: `fast`, or `llama` for llama.cpp's exact outputs.
        #[arg(long, value_enum, default_value = "fast")]
        numerics: engine_args::NumericsArg,
        /// KV cache storage format of every row (`folio serve --kv-format`).
        #[arg(long, value_enum, default_value = "f16")]
        kv_format: engine_args::KvFormatArg,
    },
    /// Continuous batching through the engine: aggregate tok/s, TTFT and ITL per concurrency.
    Engine {
        #[command(flatten)]
        engine: EngineArgs,
        #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
        concurrency: Vec<usize>,
        #[arg(long, default_value_t = 256)]
        input_tokens: usize,
        #[arg(long, default_value_t = 128)]
        output_tokens: usize,
        #[arg(long)]
        json: bool,
    },
    /// Chapter 8.4's quality study: KV storage format and attention precision compared
    /// task by task on fixed retrieval tasks (right/wrong grid, totals, time to correct).
    Quality(bench_quality::QualityArgs),
    /// Speculative decoding on an extraction workload: per proposer and batch size.
    Spec {
        #[command(flatten)]
        engine: EngineArgs,
        /// Extraction-style workloads to run (a paragraph to quote back, a list to repeat).
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "paragraph,list"
        )]
        workload: Vec<bench_spec::Workload>,
        #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
        batch: Vec<usize>,
        #[arg(long, default_value_t = 200)]
        max_tokens: usize,
        #[arg(long)]
        json: bool,
    },
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FOLIO_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Serve { engine, host, port } => {
            let h = engine.start()?;
            serve::run(h, &host, port)
        }
        Cmd::Generate {
            engine,
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
            let h = engine.start()?;
            let params = SamplingParams {
                temperature,
                top_k,
                top_p,
                min_p,
                seed,
                ..Default::default()
            };
            let r = generate::run(
                &h,
                &generate::GenerateArgs {
                    prompt,
                    chat,
                    max_tokens,
                    params,
                    ignore_eos,
                },
            );
            h.shutdown();
            r
        }
        Cmd::Models => {
            print!("{}", folio_fetch::catalogue_table());
            Ok(())
        }
        Cmd::Plan(args) => plan_cmd::run(args),
        Cmd::Profile(a) => bench_cmd::run_profile(a),
        Cmd::Bench {
            what: BenchCmd::Load(bench_cmd::BenchServeCmds::Serve(a)),
        } => bench_cmd::run_serve(a),
        Cmd::Bench {
            what: BenchCmd::Load(bench_cmd::BenchServeCmds::Plot(a)),
        } => bench_cmd::run_plot(a),
        Cmd::Bench {
            what: BenchCmd::Quality(a),
        } => bench_quality::run(a),
        Cmd::Bench {
            what:
                BenchCmd::Engine {
                    engine,
                    concurrency,
                    input_tokens,
                    output_tokens,
                    json,
                },
        } => {
            let rows = bench_engine::run(&engine, &concurrency, input_tokens, output_tokens)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                bench_engine::print(&rows);
            }
            Ok(())
        }
        Cmd::Bench {
            what:
                BenchCmd::Spec {
                    engine,
                    workload,
                    batch,
                    max_tokens,
                    json,
                },
        } => {
            let rows = bench_spec::run(&engine, &workload, &batch, max_tokens)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                bench_spec::print(&rows);
            }
            Ok(())
        }
        Cmd::Bench {
            what:
                BenchCmd::Model {
                    model,
                    json,
                    quick,
                    batch,
                    decode_only,
                    numerics,
                    kv_format,
                },
        } => {
            let path = engine_args::resolve_model(model.as_deref())?;
            let gguf = folio_gguf::GgufFile::open(&path)
                .with_context(|| format!("opening {}", path.display()))?;
            let mut m = folio_model::Model::from_gguf(&gguf)
                .with_context(|| format!("loading {}", path.display()))?;
            m.set_sums(numerics.sums());
            let rows = bench_model::run(&m, quick, &batch, decode_only, kv_format.format())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                bench_model::print_table(&rows);
            }
            Ok(())
        }
    }
}

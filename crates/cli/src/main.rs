//! `folio`: serve, generate, run, the model cache (pull/list/rm), ps, bench, profile and
//! plan, in one binary.

mod bench_cmd;
mod bench_lora;
use folio_bench::inproc::model as bench_model;
mod bench_quality;
mod bench_spec;
mod engine_args;
mod generate;
mod kv_events_args;
mod logging;
mod models_cmd;
mod plan_cmd;
mod serve;
mod serve_models;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use engine_args::EngineArgs;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "folio",
    version,
    about = "An LLM inference engine and OpenAI-compatible server"
)]
struct Cli {
    /// Log lines on stderr: `text` (colour only on a terminal) or `json` (one object a line).
    #[arg(long, global = true, value_enum, default_value_t = logging::LogFormat::Text)]
    log_format: logging::LogFormat,
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
        #[command(flatten)]
        server: ServeArgs,
        #[command(flatten)]
        kv_events: kv_events_args::KvEventArgs,
        #[command(flatten)]
        models: serve_models::ModelsArgs,
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
        #[command(flatten)]
        sampling: generate::SamplingArgs,
        /// Keep generating past end-of-generation tokens.
        #[arg(long)]
        ignore_eos: bool,
    },
    /// Measure this machine: the MBU/MFU table (DESIGN.md §roofline) and a machine profile JSON.
    Profile(bench_cmd::ProfileArgs),
    /// Capacity, roofline, scheduling, cache, offload, speculation and design-desk arithmetic.
    Plan(plan_cmd::PlanArgs),
    /// The models `--model NAME` fetches on first use: name, size, whether downloaded, path.
    Models,
    /// Fetch a catalogue model into the model cache, or `hf:ORG/REPO[:QUANT]` from the
    /// Hugging Face Hub into its cache (`$HF_HOME/hub`).
    Pull {
        /// A catalogue name (`folio models` lists them) or `hf:ORG/REPO[:QUANT]`.
        name: String,
    },
    /// The models in the cache: name, size, when modified.
    List,
    /// Delete a model from the cache.
    Rm {
        /// A name `folio list` shows.
        name: String,
    },
    /// The models a running `folio serve` holds in memory.
    Ps(models_cmd::ServerArgs),
    /// Chat with a model: one answer to PROMPT, or a chat in the terminal.
    Run(models_cmd::run::RunArgs),
    /// LoRA adapter tooling.
    Lora {
        #[command(subcommand)]
        what: LoraCmd,
    },
    /// Benchmarks (commands that print figures).
    Bench {
        #[command(subcommand)]
        what: BenchCmd,
    },
}

/// HTTP settings of `folio serve` (names as vLLM's where it has one).
#[derive(clap::Args)]
struct ServeArgs {
    /// The model name clients see (/v1/models, `model` fields) and must send or omit;
    /// default: the model file's name.
    #[arg(long)]
    served_model_name: Option<String>,
    /// Require `Authorization: Bearer KEY` on /v1/*, /tokenize and /detokenize (default:
    /// the FOLIO_API_KEY environment variable; unset = no key).
    #[arg(long)]
    api_key: Option<String>,
    /// Require the API key on /metrics too (/health stays open).
    #[arg(long)]
    api_key_protects_metrics: bool,
    /// CORS: comma-separated origins browsers may call the API from, or `*`; off by default.
    #[arg(long, value_delimiter = ',')]
    allowed_origins: Vec<String>,
    /// DNS-rebinding check: comma-separated Host names accepted besides localhost and IP
    /// addresses (`.example.com` = it and its subdomains; `*` = any Host). Listening on
    /// loopback the check is on; on another address only when names are listed.
    #[arg(long, value_delimiter = ',')]
    allowed_hosts: Vec<String>,
    /// Execute POST bodies as JSON whatever their Content-Type; by default a POST without
    /// `Content-Type: application/json` gets 415 (browsers send text/plain and form
    /// bodies cross-site without a CORS preflight).
    #[arg(long)]
    allow_any_content_type: bool,
    /// Largest request body (suffixes k, m, g); larger bodies get 413. Default 32m.
    #[arg(long)]
    max_request_bytes: Option<String>,
    /// Most requests (choices) waiting for their first token; more get 429 with
    /// Retry-After. Default 1024.
    #[arg(long)]
    max_queued_requests: Option<usize>,
    /// A generation request running longer is aborted and ends with finish_reason
    /// "timeout"; default: no limit.
    #[arg(long)]
    request_timeout_s: Option<f64>,
    /// Most open connections; more are answered 503 and closed. Default 1000.
    #[arg(long)]
    max_connections: Option<usize>,
    /// A request's headers must arrive within this many seconds. Default 30.
    #[arg(long)]
    header_timeout_s: Option<f64>,
    /// Idle keep-alive connections are closed after this many seconds. Default 60.
    #[arg(long)]
    keep_alive_timeout_s: Option<f64>,
    /// A request's body must arrive within this many seconds of its headers (408 and
    /// close after). Default 30.
    #[arg(long)]
    body_timeout_s: Option<f64>,
    /// Most bytes of a stream's output held for a client that is not reading (suffixes
    /// k, m, g); past it the stream ends with finish_reason "slow_reader". Default 256k.
    #[arg(long)]
    stream_buffer_bytes: Option<String>,
    /// How tool calls are read from the model's text: hermes (`<tool_call>` JSON, Qwen),
    /// llama3_json, mistral (`[TOOL_CALLS]`), qwen3_coder, glm45, deepseek_v3, kimi_k2,
    /// openai (GPT-OSS harmony); default: from the chat template.
    #[arg(long)]
    tool_call_parser: Option<String>,
    /// Thinking models: `<think>…</think>` text goes to `reasoning_content` (chat) and a
    /// `reasoning` item (/v1/responses), the rest stays content: deepseek_r1 (the output
    /// starts inside the thought) or qwen3 (a `<think>` opens it); default: off.
    #[arg(long)]
    reasoning_parser: Option<String>,
    /// How /v1/embeddings pools the final hidden states: last (the last token's) or mean
    /// (over all tokens); default: the model file's pooling_type, else last.
    #[arg(long)]
    pooling: Option<String>,
    /// Allow POST /v1/load_lora_adapter and /v1/unload_lora_adapter (off by default: a
    /// load opens a file the client names). vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING=true
    /// turns it on too.
    #[arg(long)]
    allow_runtime_lora: bool,
    /// Runtime adapter loads may open only files inside this directory (symlinks
    /// followed); a relative lora_path is taken inside it. Default: any readable path.
    #[arg(long, value_name = "DIR")]
    lora_dir: Option<std::path::PathBuf>,
    /// Most /v1/responses answers kept in memory for previous_response_id and
    /// GET /v1/responses/{id} (least recently used out first; 0: none). Default 1024.
    #[arg(long)]
    responses_store_max: Option<usize>,
    /// Most bytes of stored responses (suffixes k, m, g). Default 64m.
    #[arg(long)]
    responses_store_bytes: Option<String>,
    /// A stored response is dropped after this many seconds. Default 86400.
    #[arg(long)]
    responses_store_max_age_s: Option<f64>,
}

impl ServeArgs {
    fn options(&self) -> Result<folio_server::ServerOptions> {
        let mut o = folio_server::ServerOptions::default();
        let secs = |flag: &str, s: f64| {
            if s.is_finite() && s > 0.0 && s <= 1e7 {
                Ok(std::time::Duration::from_secs_f64(s))
            } else {
                anyhow::bail!("{flag}: must be a positive number of seconds, got {s}")
            }
        };
        o.api_key = self.api_key.clone().or_else(|| {
            std::env::var("FOLIO_API_KEY")
                .ok()
                .filter(|k| !k.is_empty())
        });
        o.api_key_protects_metrics = self.api_key_protects_metrics;
        o.allowed_origins = self.allowed_origins.clone();
        o.allowed_hosts = self.allowed_hosts.clone();
        o.allow_any_content_type = self.allow_any_content_type;
        o.tool_call_parser = self.tool_call_parser.clone();
        o.allow_runtime_lora = self.allow_runtime_lora
            || std::env::var("VLLM_ALLOW_RUNTIME_LORA_UPDATING")
                .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true"));
        o.lora_dir = self.lora_dir.clone();
        o.reasoning_parser = self.reasoning_parser.clone();
        if let Some(p) = &self.pooling {
            o.pooling = Some(
                folio_engine::Pooling::parse(p)
                    .with_context(|| format!("--pooling: must be last or mean, got {p:?}"))?,
            );
        }
        if let Some(b) = &self.max_request_bytes {
            o.max_body_bytes = engine_args::parse_bytes("--max-request-bytes", b)?;
        }
        if let Some(n) = self.max_queued_requests {
            o.max_queued = n;
        }
        if let Some(s) = self.request_timeout_s {
            o.request_timeout = Some(secs("--request-timeout-s", s)?);
        }
        if let Some(n) = self.max_connections {
            o.max_connections = n;
        }
        if let Some(s) = self.header_timeout_s {
            o.header_timeout = secs("--header-timeout-s", s)?;
        }
        if let Some(s) = self.keep_alive_timeout_s {
            o.idle_timeout = secs("--keep-alive-timeout-s", s)?;
        }
        if let Some(s) = self.body_timeout_s {
            o.body_timeout = secs("--body-timeout-s", s)?;
        }
        if let Some(b) = &self.stream_buffer_bytes {
            o.stream_buffer_bytes = engine_args::parse_bytes("--stream-buffer-bytes", b)?;
        }
        if let Some(n) = self.responses_store_max {
            o.responses_store_max = n;
        }
        if let Some(b) = &self.responses_store_bytes {
            o.responses_store_bytes = engine_args::parse_bytes("--responses-store-bytes", b)?;
        }
        if let Some(s) = self.responses_store_max_age_s {
            o.responses_store_max_age = secs("--responses-store-max-age-s", s)?;
        }
        o.check()?;
        Ok(o)
    }
}

#[derive(Subcommand)]
enum LoraCmd {
    /// Write a random adapter (llama.cpp's LoRA GGUF) for a base model.
    Random(bench_lora::RandomLoraArgs),
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
        /// Tokens of context each sequence of the aggregate decode rows holds.
        #[arg(long, default_value_t = 256)]
        context: usize,
        /// Matmul arithmetic: `fast`, or `llama` for llama.cpp's exact outputs.
        #[arg(long, value_enum, default_value = "fast")]
        numerics: engine_args::NumericsArg,
        /// KV cache storage formats, rows for each (a comma list; `K:V` sets the two apart,
        /// as `folio serve --kv-format-k/-v`).
        #[arg(long, value_parser = engine_args::kv_formats_parser, value_delimiter = ',', default_value = "f16")]
        kv_format: Vec<folio_model::KvFormats>,
        /// Instead of speed: how many requests reaching --context tokens of KV the engine's
        /// pool of --kv-cache-bytes runs at once per format, through folio-core's scheduler
        /// (no forward pass), beside `folio plan`'s prediction.
        #[arg(long)]
        capacity: bool,
        /// KV cache memory of the --capacity pool (suffixes k, m, g), as `folio serve`.
        #[arg(long, default_value = "2g")]
        kv_cache_bytes: String,
        /// --capacity: tokens each request generates (the last of its --context tokens).
        #[arg(long, default_value_t = 256)]
        output_tokens: usize,
        /// Compute threads (default: every core), as `--threads` on `serve`.
        #[arg(long)]
        threads: Option<usize>,
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
        /// Every request under a JSON schema (structured output): the throughput cost of
        /// the grammar masks, and the mask time per token.
        #[arg(long)]
        json_mode: bool,
        #[arg(long)]
        json: bool,
    },
    /// The quality study (DESIGN.md §compression): KV storage format and attention precision compared
    /// task by task on fixed retrieval tasks (right/wrong grid, totals, time to correct).
    Quality(bench_quality::QualityArgs),
    /// Decode throughput with 0, 1, 4, 16 distinct LoRA adapters in a batch of 16 and 64.
    Lora(bench_lora::LoraBenchArgs),
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
        /// Fixed draft lengths run beside the adaptive one, for the "adaptive vs best
        /// fixed k" row of each workload, proposer and batch (`--fixed-k` alone: none).
        #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "2,4,8")]
        fixed_k: Vec<usize>,
        /// Proposers to run (spec off always runs, as the baseline).
        #[arg(long, value_enum, value_delimiter = ',', default_value = "ngram,self")]
        proposer: Vec<bench_spec::Proposer>,
        /// Requests per row (at least one batch): more requests, steadier figures.
        #[arg(long, default_value_t = 4)]
        requests: usize,
        /// Runs of the whole plan, configurations taking turns; figures are medians.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        #[arg(long)]
        json: bool,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse_from(std::env::args_os().map(engine_args::llama_spelling));
    logging::init(cli.log_format);
    match cli.cmd {
        Cmd::Serve {
            engine,
            host,
            port,
            server,
            kv_events,
            models,
        } => {
            let opts = server.options()?;
            if serve_models::wanted(&engine, &models) {
                if kv_events.config()?.is_some() || server.served_model_name.is_some() {
                    anyhow::bail!("--kv-events-endpoint and --served-model-name serve one model; with several (--models-dir, --model NAME=PATH) each is named by its NAME or file stem");
                }
                let reg = serve_models::registry(&engine, &models)?;
                return serve::run_models(reg, &host, port, opts);
            }
            let mut cfg = engine.config()?;
            cfg.served_name = server.served_model_name.clone();
            let events = kv_events.config()?.map(|c| {
                let (tx, rx) = folio_engine::kv_event_channel();
                cfg.kv_events = Some(tx);
                (c, rx)
            });
            let h = engine_args::start_with(&engine, cfg)?;
            serve::run(h, &host, port, opts, events)
        }
        Cmd::Generate {
            engine,
            prompt,
            chat,
            max_tokens,
            sampling,
            ignore_eos,
        } => {
            let h = engine.start()?;
            let r = generate::run(
                &h,
                &generate::GenerateArgs {
                    prompt,
                    chat,
                    max_tokens,
                    params: sampling.params(),
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
        Cmd::Pull { name } => models_cmd::pull::run(&name),
        Cmd::List => models_cmd::list::run(),
        Cmd::Rm { name } => models_cmd::rm::run(&name),
        Cmd::Ps(a) => models_cmd::ps::run(&a),
        Cmd::Run(a) => models_cmd::run::run(a),
        Cmd::Plan(args) => plan_cmd::run(args),
        Cmd::Lora {
            what: LoraCmd::Random(a),
        } => bench_lora::write_random(&a),
        Cmd::Bench {
            what: BenchCmd::Lora(a),
        } => {
            let rows = bench_lora::run(&a)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                bench_lora::print(&rows, a.rank);
            }
            Ok(())
        }
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
                    json_mode,
                    json,
                },
        } => {
            let rows = folio_bench::inproc::engine::run(
                engine.start()?,
                &concurrency,
                input_tokens,
                output_tokens,
                json_mode,
            )?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                folio_bench::inproc::engine::print(&rows);
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
                    fixed_k,
                    proposer,
                    requests,
                    repeat,
                    json,
                },
        } => {
            let plan = bench_spec::Plan {
                workloads: workload,
                batches: batch,
                max_tokens,
                fixed_k,
                proposers: proposer,
                requests,
                repeat,
            };
            let reps = bench_spec::run(&engine, &plan)?;
            let versus = bench_spec::adaptive_vs_fixed(&reps);
            let rows = bench_spec::median_rows(&reps);
            if json {
                let out = serde_json::json!({"rows": rows, "adaptive_vs_best_fixed": versus});
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                bench_spec::print(&rows, &versus);
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
                    context,
                    numerics,
                    kv_format,
                    capacity,
                    kv_cache_bytes,
                    output_tokens,
                    threads,
                },
        } => {
            engine_args::apply_threads(threads)?;
            let path = engine_args::resolve_model(model.as_deref())?;
            if capacity {
                return bench_capacity(
                    &path,
                    &kv_format,
                    context,
                    &kv_cache_bytes,
                    output_tokens,
                    json,
                );
            }
            let gguf = folio_gguf::GgufFile::open(&path)
                .with_context(|| format!("opening {}", path.display()))?;
            let mut m = folio_model::Model::from_gguf(&gguf)
                .with_context(|| format!("loading {}", path.display()))?;
            m.set_sums(numerics.sums());
            let rows = bench_model::run(&m, quick, &batch, context, decode_only, &kv_format)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                bench_model::print_table(&rows);
            }
            Ok(())
        }
    }
}

/// `folio bench model --capacity`: the engine's pool and scheduler per format, beside
/// `folio plan`'s count for the same pool.
fn bench_capacity(
    path: &std::path::Path,
    formats: &[folio_model::KvFormats],
    context: usize,
    kv_cache_bytes: &str,
    output_tokens: usize,
    json: bool,
) -> Result<()> {
    let gguf =
        folio_gguf::GgufFile::open(path).with_context(|| format!("opening {}", path.display()))?;
    let m = folio_model::Model::from_gguf(&gguf)
        .with_context(|| format!("loading {}", path.display()))?;
    let profile = plan_cmd::model_from_gguf(path)?;
    let cfg = folio_engine::EngineConfig {
        kv_cache_bytes: engine_args::parse_bytes("--kv-cache-bytes", kv_cache_bytes)?,
        ..folio_engine::EngineConfig::default()
    };
    let mut rows = Vec::new();
    for &f in formats {
        f.check_head_dim(m.config.head_dim)?;
        f.check_pages(cfg.block_size, m.config.mla.is_some())?;
        let fit = folio_plan::kv_fit::fit_row(
            &profile,
            f,
            context as u64,
            cfg.block_size as u64,
            cfg.kv_cache_bytes as u64,
        );
        // Enough queued that the pool, not the queue, is what stops admission.
        let queued = (fit.requests as usize + 4).max(1);
        let mut r =
            folio_bench::inproc::capacity::measure(&m, &cfg, f, context, output_tokens, queued)?;
        r.predicted = Some(fit.requests);
        rows.push(r);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        folio_bench::inproc::capacity::print_table(&rows);
        if rows.iter().any(|r| r.queued > cfg.max_running) {
            println!(
                "note: more requests fit than --max-running ({}) lets run",
                cfg.max_running
            );
        }
    }
    Ok(())
}

//! `folio bench serve`, `folio bench plot` and `folio profile`: flags as parsed, and the
//! calls into `folio-bench` that do the work.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use folio_bench::client::BaseUrl;
use folio_bench::replicas::{ReplicaCounters, ReplicaDelta};
use folio_bench::report::{ResultFile, RunReport, RunSetup};
use folio_bench::runner::{self, RunConfig};
use folio_bench::workload::{self, WorkloadKind, WorkloadSpec};
use folio_bench::Slo;
use std::path::PathBuf;
use std::time::Duration;

/// The `folio bench` subcommands this module provides.
#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum BenchServeCmds {
    /// Load-test any OpenAI-compatible server (streaming /v1/completions).
    Serve(ServeBenchArgs),
    /// Draw SVG charts from `folio bench serve --json` (and `bench quality --json`) files.
    Plot(PlotArgs),
}

#[derive(Args, Debug, Clone)]
pub struct ServeBenchArgs {
    /// Server root, e.g. http://127.0.0.1:8000 (no TLS).
    #[arg(long, visible_alias = "url", default_value = "http://127.0.0.1:8000")]
    pub base_url: String,
    /// Model id to send; default: the first one `GET /v1/models` lists.
    #[arg(long)]
    pub model: Option<String>,
    /// Series name in result files and plots; default: the base URL.
    #[arg(long)]
    pub label: Option<String>,
    /// random | shared-prefix | shared-prefix-shuffled (each round of prefixes in a fresh
    /// order, for comparing routers) | multi-turn | retrieval | json (a JSON schema per request,
    /// sent as response_format; correct = the answer parses and validates).
    #[arg(long, default_value = "random")]
    pub workload: String,
    /// Requests per second (Poisson when burstiness = 1), a comma list to sweep
    /// (`1,2,4,8`), or `inf` for all at once.
    #[arg(long, visible_alias = "rate", default_value = "inf")]
    pub request_rate: String,
    /// Gamma shape of inter-arrival times: 1 = Poisson, < 1 burstier, > 1 more regular.
    #[arg(long, default_value_t = 1.0)]
    pub burstiness: f64,
    /// Send N requests all at once (same as --request-rate inf --num-requests N).
    #[arg(long)]
    pub burst: Option<usize>,
    /// Requests per run (turns, for multi-turn).
    #[arg(long, default_value_t = 32)]
    pub num_requests: usize,
    /// Cap on requests in flight; a comma list sweeps (`1,4,16,64`).
    #[arg(long, visible_alias = "concurrency")]
    pub max_concurrency: Option<String>,
    /// With --max-concurrency: send K × C requests in the run at concurrency C instead of
    /// --num-requests (so a sweep 1,4,16,64 keeps every slot busy K times).
    #[arg(long)]
    pub per_concurrency: Option<usize>,
    /// Prompt length in tokens (approximate: common one-token words; usage has the exact
    /// count). For retrieval it sizes the document.
    #[arg(long, default_value_t = 128)]
    pub input_tokens: usize,
    /// max_tokens per request.
    #[arg(long, default_value_t = 64)]
    pub output_tokens: usize,
    /// Lengths drawn from [x(1−r), x(1+r)] (random and shared-prefix).
    #[arg(long, default_value_t = 0.0)]
    pub range_ratio: f64,
    /// Shared system prompt length (shared-prefix) or tool-definition length (multi-turn).
    #[arg(long, default_value_t = 512)]
    pub prefix_tokens: usize,
    /// Distinct shared prefixes (shared-prefix).
    #[arg(long, default_value_t = 4)]
    pub num_prefixes: usize,
    /// Turns per conversation (multi-turn).
    #[arg(long, default_value_t = 4)]
    pub turns: usize,
    /// Tool output appended per turn, in tokens (multi-turn).
    #[arg(long, default_value_t = 96)]
    pub tool_tokens: usize,
    /// Records per document (retrieval); default: from --input-tokens.
    #[arg(long, default_value_t = 0)]
    pub records: usize,
    /// Service-level objective for goodput, e.g. ttft=500,tpot=100,e2e=7000 (ms).
    #[arg(long)]
    pub slo: Option<String>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the result file (all runs of a sweep) here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Ask the server to ignore end-of-sequence (fixed output lengths).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Use /v1/chat/completions (prompt as one user message).
    #[arg(long)]
    pub chat: bool,
    /// Longest silence tolerated within one request, seconds.
    #[arg(long, default_value_t = 600.0)]
    pub timeout_s: f64,
    /// Stop sending new requests after this many seconds (a soak with a large
    /// --num-requests); unsent requests are left out of the report.
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Probe /health and /metrics every this many ms during the run.
    #[arg(long)]
    pub monitor_ms: Option<u64>,
    /// Behind a router: the replicas' roots, comma-separated (http://127.0.0.1:8001,…).
    /// Their /metrics are read before and after each run for the requests each served
    /// and its prefix-cache hit rate (the run's hit rate is then theirs combined).
    #[arg(long, value_delimiter = ',')]
    pub replica_metrics: Vec<String>,
    #[arg(long)]
    pub no_progress: bool,
    /// Exit 0 and write --json even when requests failed (by default any failed request
    /// makes the command fail, printing the first errors, and no result file is written).
    #[arg(long)]
    pub allow_failures: bool,
}

#[derive(Args, Debug, Clone)]
pub struct PlotArgs {
    /// Result files written by `folio bench serve --json` (one series per file) or
    /// `folio bench quality --json` (a grid chart each).
    #[arg(required = true)]
    pub results: Vec<PathBuf>,
    /// Directory for the SVG files.
    #[arg(long, default_value = "bench-plots")]
    pub out: PathBuf,
    /// Also write PNGs when rsvg-convert or ImageMagick's convert is installed.
    #[arg(long)]
    pub png: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ProfileArgs {
    /// A local GGUF file or a catalogue model (`folio models`); default: the default model.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Matmul arithmetic: `fast`, or `llama` for llama.cpp's exact outputs.
    #[arg(long, value_enum, default_value = "fast")]
    pub numerics: NumericsArg,
    /// Where to write the machine profile (the planner reads it with --hardware PATH).
    #[arg(long, default_value = "profile.json")]
    pub out: PathBuf,
    /// Also write every measurement (rounds, prefills, probes) as JSON here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Batches to time (comma list).
    #[arg(long, default_value = "1,4,16,64")]
    pub batches: String,
    /// Contexts to time (comma list).
    #[arg(long, default_value = "256,2048")]
    pub contexts: String,
    /// Fewer steps and repetitions (a smoke run).
    #[arg(long)]
    pub quick: bool,
}

fn parse_list<T: std::str::FromStr>(flag: &str, s: &str) -> Result<Vec<T>> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| {
            x.parse::<T>()
                .map_err(|_| anyhow::anyhow!("{flag}: {x:?} is not a valid value"))
        })
        .collect()
}

fn parse_rates(s: &str) -> Result<Vec<Option<f64>>> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| {
            if x.eq_ignore_ascii_case("inf") {
                return Ok(None);
            }
            match x.parse::<f64>() {
                Ok(r) if r.is_finite() && r > 0.0 => Ok(Some(r)),
                _ => bail!("--request-rate {x:?} must be a positive number or inf"),
            }
        })
        .collect()
}

/// One line per run of a sweep.
fn sweep_table(runs: &[RunReport]) -> String {
    let mut t = format!(
        "{:>6} {:>5} {:>5} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>6}\n",
        "rate",
        "conc",
        "done",
        "req/s",
        "out t/s",
        "TTFTp50",
        "TTFTp99",
        "TPOTp50",
        "TPOTp99",
        "ITLmean",
        "ITLp99",
        "E2Ep99",
        "goodput",
        "hit%"
    );
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    for r in runs {
        let s = &r.setup;
        t.push_str(&format!(
            "{:>6} {:>5} {:>5} {:>7.2} {:>8.1} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7.2} {:>6}\n",
            s.request_rate.map_or("inf".into(), |r| format!("{r}")),
            s.max_concurrency.map_or("-".into(), |c| c.to_string()),
            r.completed,
            r.request_throughput,
            r.output_throughput,
            f(r.ttft_ms.map(|s| s.p50)),
            f(r.ttft_ms.map(|s| s.p99)),
            f(r.tpot_ms.map(|s| s.p50)),
            f(r.tpot_ms.map(|s| s.p99)),
            f(r.itl_ms.map(|s| s.mean)),
            f(r.itl_ms.map(|s| s.p99)),
            f(r.e2e_ms.map(|s| s.p99)),
            r.goodput_rps,
            f(r
                .prefix_cache
                .and_then(|p| p.hit_rate)
                .map(|h| h * 100.0)),
        ));
    }
    t
}

/// `folio bench serve`.
pub fn run_serve(a: ServeBenchArgs) -> Result<()> {
    let base = BaseUrl::parse(&a.base_url)?;
    let kind = WorkloadKind::parse(&a.workload)?;
    let slo = match &a.slo {
        Some(s) => Slo::parse(s)?,
        None => Slo::default(),
    };
    if !(a.burstiness.is_finite() && a.burstiness > 0.0) {
        bail!("--burstiness {} must be a positive number", a.burstiness);
    }
    let (rates, num_requests) = match a.burst {
        Some(0) => bail!("--burst 0: at least one request is needed"),
        Some(n) => (vec![None], n),
        None => (parse_rates(&a.request_rate)?, a.num_requests),
    };
    if num_requests == 0 {
        bail!("--num-requests 0: at least one request is needed");
    }
    let concs: Vec<Option<usize>> = match &a.max_concurrency {
        Some(s) => {
            let v: Vec<usize> = parse_list("--max-concurrency", s)?;
            if v.contains(&0) {
                bail!("--max-concurrency 0: at least 1 request must be allowed in flight");
            }
            v.into_iter().map(Some).collect()
        }
        None => vec![None],
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let replicas: Vec<(String, BaseUrl)> = a
        .replica_metrics
        .iter()
        .map(|u| {
            BaseUrl::parse(u)
                .map(|b| (u.clone(), b))
                .with_context(|| format!("--replica-metrics {u:?}"))
        })
        .collect::<Result<_>>()?;
    rt.block_on(async move {
        let model = match &a.model {
            Some(m) => m.clone(),
            None => runner::detect_model(&base)
                .await
                .unwrap_or_else(|| "default".into()),
        };
        let mut runs = Vec::new();
        let mut index = 0u64;
        for &rate in &rates {
            for &conc in &concs {
                let num_requests = match (a.per_concurrency, conc) {
                    (Some(k), Some(c)) => (k * c).max(1),
                    _ => num_requests,
                };
                let seed = a.seed.wrapping_add(index);
                index += 1;
                let spec = WorkloadSpec {
                    kind,
                    num_requests,
                    input_tokens: a.input_tokens,
                    output_tokens: a.output_tokens,
                    range_ratio: a.range_ratio,
                    prefix_tokens: a.prefix_tokens,
                    num_prefixes: a.num_prefixes,
                    turns: a.turns,
                    tool_tokens: a.tool_tokens,
                    records: a.records,
                    seed,
                };
                let cfg = RunConfig {
                    base: base.clone(),
                    model: model.clone(),
                    chat: a.chat,
                    request_rate: rate,
                    burstiness: a.burstiness,
                    max_concurrency: conc,
                    ignore_eos: a.ignore_eos,
                    slo,
                    seed,
                    timeout: Duration::from_secs_f64(a.timeout_s.max(1.0)),
                    progress: !a.no_progress,
                    monitor: a.monitor_ms.map(Duration::from_millis),
                    duration: a
                        .duration_s
                        .filter(|d| d.is_finite() && *d > 0.0)
                        .map(Duration::from_secs_f64),
                };
                let setup = RunSetup {
                    workload: kind.name().into(),
                    request_rate: rate,
                    burstiness: a.burstiness,
                    max_concurrency: conc,
                    num_requests,
                    input_tokens: a.input_tokens,
                    output_tokens: a.output_tokens,
                    seed,
                };
                let before = read_replicas(&replicas).await?;
                let mut report = runner::run(&cfg, setup, workload::generate(&spec)).await?;
                if !replicas.is_empty() {
                    let after = read_replicas(&replicas).await?;
                    report.replicas = replicas
                        .iter()
                        .zip(before.into_iter().zip(after))
                        .map(|((url, _), (b, a))| ReplicaDelta::between(url, b, a))
                        .collect();
                    // NOTE: the replicas' counters replace the base URL's: vllm-router answers
                    // /metrics from one worker at a time, so through it a run shows some
                    // replica's counters, not the cluster's.
                    report.prefix_cache = folio_bench::replicas::combined(&report.replicas);
                }
                println!("{}", report.table());
                if !report.replicas.is_empty() {
                    println!("{}", folio_bench::replicas::table(&report.replicas));
                }
                runs.push(report);
            }
        }
        if runs.len() > 1 {
            println!("{}", sweep_table(&runs));
        }
        folio_bench::failures::check(&runs, a.allow_failures)?;
        if let Some(path) = &a.json {
            let file = ResultFile {
                label: a.label.clone().unwrap_or_else(|| a.base_url.clone()),
                base_url: a.base_url.clone(),
                model,
                runs,
            };
            std::fs::write(path, serde_json::to_string_pretty(&file)?)
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        Ok(())
    })
}

/// Every replica's counters, or the first one that cannot be read.
async fn read_replicas(replicas: &[(String, BaseUrl)]) -> Result<Vec<ReplicaCounters>> {
    let mut out = Vec::with_capacity(replicas.len());
    for (url, base) in replicas {
        out.push(
            folio_bench::replicas::read(url, base)
                .await
                .map_err(|e| anyhow::anyhow!("--replica-metrics: {e}"))?,
        );
    }
    Ok(out)
}

/// `folio bench plot`.
pub fn run_plot(a: PlotArgs) -> Result<()> {
    let written = folio_bench::plot::write_paths(&a.results, &a.out, a.png)?;
    if written.is_empty() {
        bail!(
            "no chart has data: the result files hold no runs with a request rate or a concurrency"
        );
    }
    for p in written {
        println!("{}", p.display());
    }
    Ok(())
}

/// `folio profile`.
pub fn run_profile(a: ProfileArgs) -> Result<()> {
    let path = folio_fetch::resolve_model_or_list(a.model.as_deref())?;
    let gguf =
        folio_gguf::GgufFile::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let mut m = folio_model::Model::from_gguf(&gguf)
        .with_context(|| format!("loading {}", path.display()))?;
    m.set_sums(a.numerics.sums());
    let batches: Vec<usize> = parse_list("--batches", &a.batches)?;
    let contexts: Vec<usize> = parse_list("--contexts", &a.contexts)?;
    if batches.is_empty() || batches.contains(&0) || contexts.is_empty() {
        bail!("--batches and --contexts need at least one value, batches ≥ 1");
    }
    let opts = folio_bench::profile::ProfileOptions {
        batches,
        contexts,
        quick: a.quick,
        model_name: path
            .file_stem()
            .map_or("model".into(), |s| s.to_string_lossy().into_owned()),
        ..Default::default()
    };
    let report = folio_bench::profile::run(&m, &opts, |line| eprintln!("{line}"))?;
    println!("{}", report.table());
    std::fs::write(&a.out, serde_json::to_string_pretty(&report.machine)?)
        .with_context(|| format!("writing {}", a.out.display()))?;
    println!("wrote machine profile {}", a.out.display());
    if let Some(p) = &a.report {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// How the quantized matmuls accumulate (everything else follows llama.cpp's arithmetic).
#[derive(Copy, Clone, Debug, Default, clap::ValueEnum)]
pub enum NumericsArg {
    /// Per 32-value block (per 256-value superblock for Q4_K, Q5_K and Q6_K), the integer sum
    /// then one FMA: batched steps (prefill, many decodes, speculative verification) ~2x
    /// faster than `llama`; last bits differ.
    #[default]
    Fast,
    /// llama.cpp's summation order, bit for bit: the same tokens and logits as llama.cpp
    /// (with the f16 KV cache; the README lists the weight types and models tested).
    Llama,
}

impl NumericsArg {
    pub fn sums(self) -> folio_kernels::matmul::Sums {
        match self {
            NumericsArg::Fast => folio_kernels::matmul::Sums::Block,
            NumericsArg::Llama => folio_kernels::matmul::Sums::Ggml,
        }
    }
}

//! `folio bench lora` and `folio lora random`: the flags; the measurement lives in
//! `folio_bench::inproc::lora`.

use anyhow::{Context, Result};
pub use folio_bench::inproc::lora::{print, Row};
use folio_model::Model;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct LoraBenchArgs {
    /// A local GGUF file or a catalogue model; default: the default model.
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    batch: Vec<usize>,
    /// Distinct adapters in each batch (0 = none).
    #[arg(long, value_delimiter = ',', default_value = "0,1,4,16")]
    adapters: Vec<usize>,
    #[arg(long, default_value_t = 8)]
    pub rank: usize,
    /// Decode steps per measurement.
    #[arg(long, default_value_t = 16)]
    steps: usize,
    /// Interleaved repetitions of every row (the median is kept).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: &LoraBenchArgs) -> Result<Vec<Row>> {
    let path = crate::engine_args::resolve_model(a.model.as_deref())?;
    let model = Model::load(&path).with_context(|| format!("loading {}", path.display()))?;
    Ok(folio_bench::inproc::lora::run(
        &model,
        &a.batch,
        &a.adapters,
        a.rank,
        a.steps,
        a.rounds,
    )?)
}

#[derive(clap::Args)]
pub struct RandomLoraArgs {
    /// The base model the adapter is for; default: the default model.
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long, default_value_t = 8)]
    rank: usize,
    /// `adapter.lora.alpha` (the scale is alpha / rank).
    #[arg(long, default_value_t = 16.0)]
    alpha: f32,
    /// Spread of `B`'s entries (`A`'s are ±1/√in). 0.15 changes SmolLM2's greedy outputs
    /// on most prompts without making them chaotic.
    #[arg(long, default_value_t = 0.15)]
    strength: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Base tensors to adapt (default: q, k, v, o and the FFN projections).
    #[arg(long, value_delimiter = ',')]
    targets: Vec<String>,
    #[arg(long)]
    out: PathBuf,
}

/// `folio lora random`: writes a random adapter in llama.cpp's LoRA GGUF (F32 tensors),
/// for tests, benchmarks and llama.cpp's `--lora` as an oracle.
pub fn write_random(a: &RandomLoraArgs) -> Result<()> {
    let path = crate::engine_args::resolve_model(a.model.as_deref())?;
    let f = folio_gguf::GgufFile::open(&path)?;
    let cfg = folio_model::ModelConfig::from_gguf(&f)?;
    let targets: Vec<&str> = if a.targets.is_empty() {
        folio_model::lora::default_targets(&cfg)
    } else {
        a.targets.iter().map(String::as_str).collect()
    };
    let w = folio_model::lora::random_adapter(&cfg, &targets, a.rank, a.alpha, a.strength, a.seed)?;
    w.write(&a.out)
        .with_context(|| format!("writing {}", a.out.display()))?;
    eprintln!(
        "wrote {} (rank {}, alpha {}, targets {})",
        a.out.display(),
        a.rank,
        a.alpha,
        targets.join(",")
    );
    Ok(())
}

//! `folio plan`: capacity, roofline, scheduling, cache, offload, speculation and
//! design-desk arithmetic for the reference case or the user's model, hardware and workload.

use anyhow::{Context, Result};
use folio_plan::schedule::WorkItem;
use folio_plan::units::parse_bytes;
use folio_plan::{HardwareProfile, KvFormat, MachineProfile, ModelProfile, PlanInput, Section};
use std::path::Path;

#[derive(clap::Args, Debug, Clone)]
pub struct PlanArgs {
    /// Section: capacity (kv), roofline, schedule, cache, compress, offload, spec, desk,
    /// serving, machine; all sections when omitted.
    pub section: Option<String>,
    /// Model: qwen3-8b, llama-3.1-8b, llama-2-13b, qwen3-235b-a22b, smollm2-135m, a JSON
    /// profile, or a GGUF file (shapes and bytes read from its header).
    #[arg(long, default_value = "qwen3-8b")]
    pub model: String,
    /// Hardware: rtx-pro-6000, h100, h200, a100-80gb, gh200, m2-max, or a machine profile
    /// JSON written by `folio profile`.
    #[arg(long, default_value = "rtx-pro-6000")]
    pub hardware: String,
    /// Prompt tokens per request (default: the reference 2K/8K cases).
    #[arg(long)]
    pub input_tokens: Option<u64>,
    /// Output tokens per request (default 256).
    #[arg(long)]
    pub output_tokens: Option<u64>,
    /// Requests in the batch (default 16).
    #[arg(long)]
    pub batch: Option<u64>,
    /// Prompt tokens shared by all requests (default 6144).
    #[arg(long)]
    pub shared_prefix: Option<u64>,
    /// Memory for KV and auxiliary buffers, e.g. 12GiB (default 12GiB; machine section 1GiB).
    #[arg(long)]
    pub kv_bytes: Option<String>,
    /// KV storage format of K and V, or `K:V` apart: f16, bf16, q8_0, q4_0, iq4_nl, q4h,
    /// q8h (default: the model's; a GGUF file: f16, as `folio serve`).
    #[arg(long, value_parser = crate::engine_args::kv_formats_parser)]
    pub kv_format: Option<folio_plan::KvFormats>,
    /// K's storage format (default: --kv-format); llama.cpp's -ctk/--cache-type-k.
    #[arg(long, visible_alias = "cache-type-k", value_parser = crate::engine_args::kv_format_parser())]
    pub kv_format_k: Option<KvFormat>,
    /// V's storage format (default: --kv-format); llama.cpp's -ctv/--cache-type-v.
    #[arg(long, visible_alias = "cache-type-v", value_parser = crate::engine_args::kv_format_parser())]
    pub kv_format_v: Option<KvFormat>,
    /// Tokens of KV one request holds at its longest, for the capacity section's table of
    /// how many such requests each format fits in --kv-bytes (default 8192).
    #[arg(long)]
    pub context: Option<u64>,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 16)]
    pub block: u64,
    /// Deadline for the whole batch, seconds (default 7).
    #[arg(long)]
    pub deadline_s: Option<f64>,
    /// Prefix-cache hit probability for the cache section.
    #[arg(long, default_value_t = 0.5)]
    pub hit_rate: f64,
    /// A request for the schedule section as arrival_ms:input:output (repeatable).
    #[arg(long = "request")]
    pub requests: Vec<String>,
    /// Most running requests in the schedule section (default 2).
    #[arg(long)]
    pub max_running: Option<usize>,
    /// Token budget per round for an extra "user" schedule mode.
    #[arg(long)]
    pub token_budget: Option<usize>,
    /// Largest prefill chunk for the "user" schedule mode.
    #[arg(long)]
    pub max_chunk: Option<usize>,
    /// Draft acceptance rate(s) for the spec section (repeatable; default 0.25 and 0.75).
    #[arg(long)]
    pub accept: Vec<f64>,
    /// Draft tokens per round.
    #[arg(long, default_value_t = 4)]
    pub draft_len: u64,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// List built-in model and hardware profiles and exit.
    #[arg(long)]
    pub list: bool,
}

/// A model profile from a GGUF header: shapes, tied output, QK-norm, and the bytes one decode
/// step reads (every tensor except an untied input embedding, which is only indexed).
pub(crate) fn model_from_gguf(path: &Path) -> Result<ModelProfile> {
    let f =
        folio_gguf::GgufFile::open(path).with_context(|| format!("opening {}", path.display()))?;
    let arch = f.get_str("general.architecture")?.to_string();
    let get = |k: &str| -> Result<u64> {
        f.get_u64(&format!("{arch}.{k}"))
            .with_context(|| format!("{}: {arch}.{k}", path.display()))
    };
    let hidden = get("embedding_length")?;
    let heads = get("attention.head_count")?;
    let kv_heads = get("attention.head_count_kv").unwrap_or(heads);
    let head_dim = get("attention.key_length").unwrap_or(hidden / heads.max(1));
    let embd = f
        .tensor("token_embd.weight")
        .with_context(|| format!("{}: no token_embd.weight tensor", path.display()))?;
    let tied = f.tensor("output.weight").is_none();
    let (experts, active) = (
        get("expert_count").unwrap_or(0),
        get("expert_used_count").unwrap_or(0),
    );
    let moe = experts > 1 && active > 0;
    // A MoE decode step reads `active` of each `*_exps` tensor's `experts` slices.
    let read: usize = f
        .tensors()
        .iter()
        .filter(|t| tied || t.name != "token_embd.weight")
        .map(|t| match moe && t.name.contains("_exps.") {
            true => (t.n_bytes as u64 * active / experts) as usize,
            false => t.n_bytes,
        })
        .sum();
    let dense_ffn = get("feed_forward_length")?;
    // One expert's width: the key, else llama.cpp's defaults (Qwen MoE: ffn / used).
    let ffn = match get("expert_feed_forward_length") {
        Ok(v) if moe => v,
        _ if moe && arch.ends_with("moe") => dense_ffn / active,
        _ => dense_ffn,
    };
    // Window layers as the model crate counts them (Gemma 3's pattern, Mistral's all).
    let (window, window_layers, mla) = match folio_model::ModelConfig::from_gguf(&f) {
        Ok(c) => (
            c.sliding_window.unwrap_or(0) as u64,
            c.window_layers.iter().filter(|&&w| w).count() as u64,
            c.mla,
        ),
        Err(_) => (0, 0, None),
    };
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "gguf".into());
    let m = ModelProfile {
        name: name.clone(),
        layers: get("block_count")?,
        hidden,
        heads,
        kv_heads,
        head_dim,
        ffn,
        vocab: embd.rows() as u64,
        tied_embeddings: tied,
        qk_norm: f.tensor("blk.0.attn_q_norm.weight").is_some(),
        experts,
        active_experts: active,
        weight_bytes_per_param: 2.0,
        weight_read_bytes: Some(read as u64),
        kv_format: KvFormat::F16,
        weight_files: vec![folio_plan::model::WeightFile {
            format: name,
            bytes: std::fs::metadata(path)?.len(),
        }],
        sliding_window: window,
        window_layers,
        mla: mla.map(|m| folio_plan::model::MlaKv {
            kv_lora_rank: m.kv_lora_rank as u64,
            rope_dim: m.qk_rope as u64,
            qk_head_dim: m.qk_head_dim() as u64,
            v_head_dim: m.v_head_dim as u64,
        }),
    };
    m.validate()?;
    Ok(m)
}

fn resolve_model(s: &str) -> Result<ModelProfile> {
    let p = Path::new(s);
    if p.is_file()
        && p.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    {
        return model_from_gguf(p);
    }
    Ok(ModelProfile::resolve(s)?)
}

pub fn run(args: PlanArgs) -> Result<()> {
    if args.list {
        println!("models:");
        for m in folio_plan::model::builtin_models() {
            println!(
                "  {:<16} {} layers, {} KV heads × {}, D_w {} B, KV {} B/token",
                m.name.to_lowercase(),
                m.layers,
                m.kv_heads,
                m.head_dim,
                m.weight_read_bytes(),
                m.kv_bytes_per_token()
            );
        }
        println!("hardware:");
        for h in folio_plan::hardware::builtin_hardware() {
            println!(
                "  {:<16} {:.0} GB/s, {:.1} TFLOP/s, {:.0} GiB, link {:.0} GB/s",
                h.name.to_lowercase(),
                h.mem_bw_bytes_s / 1e9,
                h.peak_flops / 1e12,
                h.memory_bytes as f64 / (1u64 << 30) as f64,
                h.host_link_bytes_s / 1e9
            );
        }
        return Ok(());
    }
    let mut p = PlanInput::reference();
    p.model = resolve_model(&args.model)?;
    p.hardware = HardwareProfile::resolve(&args.hardware)?;
    if Path::new(&args.hardware).is_file() {
        p.machine = Some(MachineProfile::from_json_file(&args.hardware)?);
    }
    p.input_tokens = args.input_tokens;
    p.output_tokens = args.output_tokens;
    p.batch = args.batch;
    p.shared_prefix = args.shared_prefix;
    p.kv_budget_bytes = args.kv_bytes.as_deref().map(parse_bytes).transpose()?;
    p.kv_format = match (args.kv_format, args.kv_format_k, args.kv_format_v) {
        (None, None, None) => None,
        (both, k, v) => {
            let base = both.unwrap_or_else(|| p.model.kv_format.into());
            Some(folio_plan::KvFormats {
                k: k.unwrap_or(base.k),
                v: v.unwrap_or(base.v),
            })
        }
    };
    p.context = args.context;
    p.block = args.block;
    p.deadline_s = args.deadline_s;
    p.hit_rate = args.hit_rate;
    p.requests = args
        .requests
        .iter()
        .map(|r| WorkItem::parse(r))
        .collect::<folio_plan::Result<_>>()?;
    p.max_running = args.max_running;
    p.token_budget = args.token_budget;
    p.max_chunk = args.max_chunk;
    p.accept = args.accept;
    p.draft_len = args.draft_len;
    let outs = match args.section.as_deref() {
        None | Some("all") => folio_plan::run_all(&p)?,
        Some(s) => vec![folio_plan::run_section(Section::parse(s)?, &p)?],
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&folio_plan::render_json(&outs))?
        );
    } else {
        print!("{}", folio_plan::render(&outs));
    }
    Ok(())
}

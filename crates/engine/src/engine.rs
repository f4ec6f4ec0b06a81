//! The engine loop: one thread owns the scheduler, the KV cache and every request's
//! sampler; each iteration is one fused forward over all scheduled tokens of all requests.
//!
//! ```text
//!  commands ──► add / abort ──► Scheduler::schedule ──► copies ──► Model::forward
//!      ▲                                                              │
//!  EngineHandle                     events ◄── sample, stop, detok ◄──┘ ──► Scheduler::update
//! ```

use crate::api::{
    Command, EngineHandle, EngineInfo, EngineMetrics, Event, FinishReason, TokenLogprob, Usage,
};
use crate::constraint::{Grammars, Guide};
use crate::prompt_scoring::{token_logprob, PromptScores};
use crate::sampler::Sampler;
use crate::speculate::{budget_for_step_time, SpecState, StepCurve};
use crate::tier::DiskTier;
use crate::{EngineConfig, GenerateRequest, RequestId, SpecMethod, StepStats};
use folio_core::kv::{KvConfig, WindowKv, RELEASED};
use folio_core::sched::admission::Rates;
use folio_core::{
    FinishReason as CoreFinish, Request, RequestResult, Scheduler, SchedulerConfig, SchedulerOutput,
};
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvCache, KvLayout, Model};
use folio_spec::StepTime;
use folio_tokenizer::{IncrementalDecoder, StopMatcher, Tokenizer};
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// The engine's view of one live request (what the scheduler does not keep).
struct Live {
    tx: UnboundedSender<Event>,
    sampler: Sampler,
    decoder: IncrementalDecoder,
    stop: StopMatcher,
    stop_ids: Vec<u32>,
    ignore_eos: bool,
    logprobs: Option<usize>,
    prompt_len: usize,
    output: Vec<u32>,
    cached_tokens: usize,
    spec: Option<SpecState>,
    /// Its LoRA adapters; held until the request ends (the registry cannot drop them).
    lora: Option<folio_model::LoraSet>,
    /// Structured output: the grammar's matcher, at the end of `output`.
    guide: Option<Guide>,
    /// `prompt_logprobs`: the prompt's scores, collected chunk by chunk.
    scores: Option<PromptScores>,
    /// `max_tokens` 0 (score only): the one token the scheduler runs for is not output.
    score_only: bool,
    /// An embedding request: its pooled hidden rows (nothing is sampled).
    embed: Option<crate::embed::Pooled>,
}

/// A sample of an `n > 1` group, not yet forked.
struct PendingChild {
    id: RequestId,
    req: GenerateRequest,
    tx: UnboundedSender<Event>,
}

impl Live {
    /// Ends the stream: text held back for a possible stop string is released (unless a
    /// stop string matched), then `Finished` with usage. Bytes of a character the last
    /// token left incomplete (a length cut mid-emoji) are dropped, not sent as U+FFFD.
    fn finish(mut self, reason: FinishReason, now: Instant) {
        let tail = if reason == FinishReason::Stop {
            String::new()
        } else {
            self.decoder.discard_incomplete();
            self.stop.push(&self.decoder.flush()).text_to_emit + &self.stop.flush()
        };
        if !tail.is_empty() {
            let _ = self.tx.send(Event::Tokens {
                ids: Vec::new(),
                text: tail,
                logprobs: Vec::new(),
                prompt_logprobs: Vec::new(),
                at: now,
            });
        }
        self.finish_silently(reason);
    }

    /// Ends the stream without releasing held-back text (cancellation, errors).
    fn finish_silently(mut self, reason: FinishReason) {
        // Release the adapters before the caller learns the request is over.
        self.lora = None;
        let usage = Usage {
            prompt_tokens: self.prompt_len,
            completion_tokens: self.output.len(),
            cached_tokens: self.cached_tokens,
        };
        let _ = self.tx.send(Event::Finished {
            reason,
            usage,
            at: Instant::now(),
        });
    }
}

pub(crate) struct Engine {
    model: Model,
    kv: KvCache,
    sched: Scheduler,
    live: HashMap<RequestId, Live>,
    tokenizer: Arc<Tokenizer>,
    eog: Vec<u32>,
    grammars: Arc<Grammars>,
    metrics: Arc<EngineMetrics>,
    info: Arc<EngineInfo>,
    pool: &'static ThreadPool,
    epoch: Instant,
    shutting_down: bool,
    /// Speculation defaults from the config.
    spec: (SpecMethod, Option<usize>, usize),
    /// Layers the self-draft runs through.
    draft_layers: usize,
    /// Scratch KV blocks for self-draft positions past a request's own blocks.
    scratch_base: usize,
    scratch_per_req: usize,
    scratch_slots: usize,
    /// Measured step time by rows: draft planning, the `max_itl_ms` budget, and (its
    /// linear fit) admission rates.
    step_curve: StepCurve,
    /// `EngineConfig::max_itl_ms` and the configured budget it may shrink.
    max_itl_ms: Option<f64>,
    token_budget: usize,
    /// A separate draft model (`--draft-model`), used instead of the first layers.
    draft: Option<DraftModel>,
    /// Measured seconds per self-draft token (per request); `None` until the first draft.
    draft_cost_s: Option<f64>,
    /// Samples waiting to be forked from their group's first request once its prompt is
    /// computed (OpenAI `n`): they share its KV blocks instead of recomputing the prompt.
    forks: HashMap<RequestId, Vec<PendingChild>>,
    /// The second KV tier, if configured.
    tier: Option<DiskTier>,
    salt: u64,
}

/// Builds the engine and starts its thread.
pub fn spawn_engine(
    model: Model,
    tokenizer: Arc<Tokenizer>,
    model_path: &std::path::Path,
    cfg: EngineConfig,
) -> anyhow::Result<EngineHandle> {
    spawn_engine_with_draft(model, None, tokenizer, model_path, cfg)
}

/// A separate draft model for speculation (`--draft-model`): it runs on every step's batch
/// too, so its own paged KV (the same block ids as the target's, its own bytes per token)
/// always holds the context it drafts from.
struct DraftModel {
    model: Model,
    kv: KvCache,
}

/// [`spawn_engine`] with a separate draft model: the model-based proposer (`--spec self`)
/// then drafts with it instead of the target's first layers. It must share the target's
/// vocabulary. Its KV is extra memory beside the target's.
pub fn spawn_engine_with_draft(
    model: Model,
    draft: Option<Model>,
    tokenizer: Arc<Tokenizer>,
    model_path: &std::path::Path,
    cfg: EngineConfig,
) -> anyhow::Result<EngineHandle> {
    if let Some(d) = &draft {
        anyhow::ensure!(
            d.config.vocab_size == model.config.vocab_size,
            "draft model: vocab_size {} differs from the target's {} (the draft must share the target's vocabulary)",
            d.config.vocab_size,
            model.config.vocab_size
        );
    }
    let c = &model.config;
    // Sliding-window layers get their own page groups, released behind the window
    // (folio_core::kv::window), unless the second tier is on: it spills whole pages of one
    // chain hash, and a hybrid block spans several pages.
    let layout = match (model.hybrid_kv_layout(), &cfg.kv_disk_dir) {
        (Some(l), None) => l,
        (Some(_), Some(_)) => {
            tracing::info!("kv: the disk tier keeps sliding-window layers' KV whole");
            KvLayout::single(c.n_layers)
        }
        (None, _) => KvLayout::single(c.n_layers),
    };
    let bytes_per_token = c.kv_bytes_per_token(cfg.kv_format.bytes_per_value());
    let block_bytes =
        bytes_per_token * cfg.block_size as f64 * layout.slots() as f64 / c.n_layers as f64;
    let num_blocks = (cfg.kv_cache_bytes as f64 / block_bytes).floor() as usize;
    if num_blocks < 2 {
        anyhow::bail!(
            "kv_cache_bytes: {} bytes hold {num_blocks} blocks of {} tokens ({block_bytes} bytes each); at least 2 are needed",
            cfg.kv_cache_bytes,
            cfg.block_size
        );
    }
    // Blocks match only under the same model file, KV format and numerics (the disk tier
    // keeps blocks across restarts: a `llama` server must not reuse a `fast` one's KV).
    let numerics = match model.weights.head().sums() {
        folio_kernels::matmul::Sums::Ggml => "llama",
        folio_kernels::matmul::Sums::Block => "fast",
    };
    let salt = folio_core::kv::fnv1a(
        format!(
            "{}\0{}\0{numerics}",
            model_path.to_string_lossy(),
            cfg.kv_format.name()
        )
        .as_bytes(),
    );
    let sched_cfg = SchedulerConfig {
        policy: cfg.policy,
        token_budget: cfg.token_budget,
        max_chunk: cfg.max_chunk,
        max_running: cfg.max_running,
        reservation: cfg.reservation,
        kv: KvConfig {
            num_blocks,
            block_size: cfg.block_size,
            prefix_cache: cfg.prefix_cache,
            eviction: cfg.eviction,
            salt,
            // Fetching a block from local disk is far cheaper than recomputing it; the
            // estimate only ranks blocks for eviction, the engine measures real fetches.
            tier: cfg.kv_disk_dir.as_ref().map(|_| folio_core::TierCost {
                fetch_per_token_s: 2e-5,
                maintain_per_token_s: 2e-5,
            }),
            window: (layout.n_groups() > 1).then(|| WindowKv {
                tokens: match (cfg.swa_full, c.sliding_window) {
                    (false, Some(w)) => w,
                    _ => usize::MAX,
                },
                pages: layout.window_pages(),
            }),
            ..KvConfig::default()
        },
    };
    let sched = Scheduler::new(sched_cfg).map_err(|e| anyhow::anyhow!("scheduler config: {e}"))?;
    // Scratch blocks past the scheduler's pool hold self-draft K/V beyond a request's blocks
    // (that many per page group).
    let scratch_per_req =
        ((cfg.spec_max_tokens + 1).div_ceil(cfg.block_size) + 1) * layout.n_groups();
    let scratch_slots = if cfg.spec == SpecMethod::Off {
        cfg.max_running.min(16)
    } else {
        cfg.max_running
    };
    let kv = model.new_kv_cache_with(
        layout,
        cfg.block_size,
        num_blocks + scratch_per_req * scratch_slots,
        cfg.kv_format,
    );
    let draft = draft.map(|d| {
        let kv = d.new_kv_cache(cfg.block_size, kv.num_blocks, cfg.kv_format);
        DraftModel { model: d, kv }
    });
    let tier = match &cfg.kv_disk_dir {
        Some(dir) => Some(
            DiskTier::open(
                dir,
                cfg.kv_disk_bytes,
                salt,
                kv.block_payload_bytes(),
                cfg.block_size,
            )
            .map_err(|e| anyhow::anyhow!("kv_disk_dir {}: {e}", dir.display()))?,
        ),
        None => None,
    };
    let draft_layers = if cfg.spec_draft_layers == 0 {
        (c.n_layers * 3 / 4).max(1)
    } else {
        cfg.spec_draft_layers.min(c.n_layers)
    };
    let name = cfg.served_name.clone().unwrap_or_else(|| {
        model_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into())
    });
    let info = Arc::new(EngineInfo {
        model_name: name,
        model_path: model_path.display().to_string(),
        context_length: c.context_length,
        vocab_size: c.vocab_size,
        block_size: cfg.block_size,
        num_blocks,
        kv_capacity_tokens: sched.kv().max_seq_tokens(cfg.max_chunk),
        kv_layers_per_block: kv.layout.slots(),
        kv_block_bytes: block_bytes.round() as usize,
        kv_format: cfg.kv_format.name().into(),
        numerics: numerics.into(),
        hidden_size: c.d_model,
        gguf_pooling: crate::Pooling::from_gguf(c.pooling_type),
    });
    let mut lora = crate::LoraRegistry::new(
        model.config.clone(),
        &info.model_name,
        cfg.max_loras,
        cfg.max_lora_rank,
    );
    anyhow::ensure!(
        cfg.lora.len() <= cfg.max_loras,
        "--lora: {} adapters given, --max-loras is {}",
        cfg.lora.len(),
        cfg.max_loras
    );
    for (name, path) in &cfg.lora {
        lora.load(name, path)?;
    }
    let metrics = Arc::new(EngineMetrics::default());
    metrics.kv_blocks_total.store(num_blocks, Relaxed);
    let (tx, rx) = std::sync::mpsc::channel();
    let eog = tokenizer.eog_ids().to_vec();
    let grammars = Arc::new(Grammars::new(tokenizer.clone(), c.vocab_size));
    let mut engine = Engine {
        model,
        kv,
        draft,
        sched,
        live: HashMap::new(),
        tokenizer: tokenizer.clone(),
        eog,
        grammars: grammars.clone(),
        metrics: metrics.clone(),
        info: info.clone(),
        pool: ThreadPool::global(),
        epoch: Instant::now(),
        shutting_down: false,
        spec: (cfg.spec, cfg.spec_tokens, cfg.spec_max_tokens),
        draft_layers,
        scratch_base: num_blocks,
        scratch_per_req,
        scratch_slots,
        step_curve: StepCurve::new(),
        max_itl_ms: cfg.max_itl_ms,
        token_budget: cfg.token_budget,
        draft_cost_s: None,
        forks: HashMap::new(),
        tier,
        salt,
    };
    std::thread::Builder::new()
        .name("folio-engine".into())
        .spawn(move || engine.run(rx))?;
    Ok(EngineHandle {
        tx,
        next_id: Arc::new(std::sync::atomic::AtomicU64::new(1)),
        info,
        metrics,
        tokenizer,
        lora: Arc::new(std::sync::Mutex::new(lora)),
        grammars,
    })
}

impl Engine {
    fn run(&mut self, rx: Receiver<Command>) {
        loop {
            // Block when idle; otherwise take whatever commands arrived since the last step.
            if !self.sched.has_unfinished() {
                if self.shutting_down {
                    return;
                }
                match rx.recv() {
                    Ok(cmd) => self.command(cmd),
                    Err(_) => return,
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(cmd) => self.command(cmd),
                    Err(std::sync::mpsc::TryRecvError::Empty) => break,
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                        self.shutting_down = true;
                        break;
                    }
                }
            }
            self.drop_closed();
            if !self.sched.has_unfinished() {
                continue;
            }
            if let Some(ms) = self.max_itl_ms {
                let lo = self.sched.num_running() + 1;
                let b = budget_for_step_time(&self.step_curve, ms / 1e3, lo, self.token_budget);
                self.sched.set_token_budget(b);
            }
            let out = self.sched.schedule();
            if out.is_empty() {
                // Nothing can run right now (e.g. waiting on KV): wait briefly for commands.
                self.sched.release_step(out.step);
                match rx.recv_timeout(Duration::from_millis(2)) {
                    Ok(cmd) => self.command(cmd),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => self.shutting_down = true,
                }
                continue;
            }
            self.step(out);
        }
    }

    fn command(&mut self, cmd: Command) {
        self.apply(cmd);
        self.publish();
    }

    fn apply(&mut self, cmd: Command) {
        match cmd {
            Command::Add { id, req, tx } => self.add(id, *req, tx, 0),
            Command::AddGroup {
                ids,
                req,
                params,
                txs,
            } => {
                let mut group = ids.into_iter().zip(params).zip(txs).map(|((id, p), tx)| {
                    let mut r = (*req).clone();
                    r.params = p;
                    (id, r, tx)
                });
                let (pid, preq, ptx) = group.next().expect("a group has at least two samples");
                let children: Vec<PendingChild> = group
                    .map(|(id, req, tx)| PendingChild { id, req, tx })
                    .collect();
                self.add(pid, preq, ptx, children.len());
                if self.live.contains_key(&pid) {
                    self.forks.insert(pid, children);
                } else {
                    for c in children {
                        let why =
                            "the group's first request was refused; see its stream".to_string();
                        let _ = c.tx.send(Event::Finished {
                            reason: FinishReason::Rejected(why),
                            usage: Usage::default(),
                            at: Instant::now(),
                        });
                    }
                }
            }
            Command::Abort(id) => self.abort(id, FinishReason::Cancelled),
            Command::Shutdown => {
                self.shutting_down = true;
                let ids: Vec<RequestId> = self.live.keys().copied().collect();
                for id in ids {
                    self.abort(id, FinishReason::Cancelled);
                }
            }
        }
    }

    /// Queues request `id`; `forks` samples will be forked from it after its prompt.
    fn add(
        &mut self,
        id: RequestId,
        mut req: GenerateRequest,
        tx: UnboundedSender<Event>,
        forks: usize,
    ) {
        let finish = |tx: &UnboundedSender<Event>, reason| {
            let _ = tx.send(Event::Finished {
                reason,
                usage: Usage::default(),
                at: Instant::now(),
            });
        };
        if self.shutting_down {
            return finish(&tx, FinishReason::Error("engine is shutting down".into()));
        }
        let guide = match &req.constraint {
            None => None,
            Some(c) => match self.grammars.guide(c, self.metrics.clone()) {
                Ok(g) => Some(g),
                Err(e) => return finish(&tx, FinishReason::Error(format!("{}: {e}", c.kind()))),
            },
        };
        let ctx = self.info.context_length;
        let prompt_len = req.prompt.len();
        // The context bounds the output too: at most ctx − prompt tokens are generated.
        let max_tokens = req.max_tokens.min(ctx.saturating_sub(prompt_len)).max(1);
        let prompt = std::mem::take(&mut req.prompt);
        let ns = req.lora.as_ref().map_or(0, |l| l.key());
        let mut r = Request::new(id, prompt, max_tokens)
            .with_forks(forks)
            .with_cache_ns(ns)
            .with_prefix_cache(
                req.prompt_logprobs.is_none()
                    && req.embed.is_none_or(crate::Pooling::uses_prefix_cache),
            );
        let now = self.epoch.elapsed().as_secs_f64();
        r = r.with_arrival(req.arrival.map(|a| self.secs(a)).unwrap_or(now));
        if let Some(d) = req.deadline {
            r = r.with_deadline(self.secs(d));
            // Rates from the fitted step cost: prefill at 1/β tokens/s, decode at one token
            // per step of the current batch.
            let c = self.step_curve.fit.cost();
            let batch = (self.sched.num_running() + 1) as f64;
            let rates = Rates {
                prefill_tokens_per_s: 1.0 / c.per_token_s,
                decode_tokens_per_s: 1.0 / (c.fixed_s + c.per_token_s * batch),
            };
            if let Err(reason) = self.sched.check_admission(&r, now, &rates) {
                self.metrics.rejected.fetch_add(1, Relaxed);
                return finish(&tx, FinishReason::Rejected(reason.to_string()));
            }
        }
        self.restore_prefix(r.prompt(), ns);
        let live = self.new_live(req, r.prompt(), tx, guide);
        if let Err(reason) = self.sched.add_request(r) {
            self.metrics.rejected.fetch_add(1, Relaxed);
            return finish(&live.tx, FinishReason::Rejected(reason.to_string()));
        }
        self.live.insert(id, live);
        self.metrics
            .prompt_tokens
            .fetch_add(prompt_len as u64, Relaxed);
    }

    fn spill(&mut self, evicted: &[folio_core::kv::EvictedBlock]) {
        let Some(tier) = self.tier.as_mut() else {
            return;
        };
        for e in evicted {
            let payload = self.kv.export_block(e.block as usize);
            if let Err(err) = tier.spill(e.hash, e.parent, &e.tokens, &payload) {
                tracing::warn!("kv tier: spill failed: {err}");
            }
        }
        self.metrics.tier_spills.store(tier.stats.spills, Relaxed);
    }

    /// Brings back from the second tier the blocks of `prompt`'s prefix that are there but
    /// no longer in memory, when fetching is cheaper than recomputing (T_f < T_r).
    fn restore_prefix(&mut self, prompt: &[u32], ns: u64) {
        if self.tier.is_none() {
            return;
        }
        let bs = self.kv.block_size;
        // Like the prefix cache, leave the last prompt token to be computed for logits.
        let usable = prompt.len().saturating_sub(1) / bs * bs;
        let salt = folio_core::kv::chain_salt(self.salt, ns);
        let chain = folio_core::kv::chain_hashes(salt, &prompt[..usable], bs);
        let have = self.sched.kv().match_prefix_in(prompt, ns).num_blocks;
        let recompute_s = self.step_curve.fit.cost().per_token_s * bs as f64;
        for i in have..chain.len() {
            let tokens = &prompt[i * bs..(i + 1) * bs];
            let tier = self.tier.as_mut().expect("checked above");
            if !tier.contains(chain[i], tokens) {
                break;
            }
            let fetch_s = tier.stats.fetch_s_per_block;
            if fetch_s > 0.0 && fetch_s >= recompute_s {
                break;
            }
            let Some(payload) = tier.fetch(chain[i]) else {
                break;
            };
            let parent = if i == 0 { None } else { Some(chain[i - 1]) };
            let block = match self.sched.kv_mut().restore_block_in(parent, tokens, ns) {
                Ok(b) => b,
                Err(_) => break,
            };
            // Making room may have evicted other blocks: spill them before overwriting.
            let evicted = self.sched.kv_mut().take_evicted();
            self.spill(&evicted);
            if self.kv.import_block(block as usize, &payload).is_err() {
                break;
            }
            self.metrics.tier_fetches.fetch_add(1, Relaxed);
        }
    }

    /// The engine-side state of a request (sampler, detokenizer, stop strings, drafts).
    /// `guide`: the request's compiled constraint (compiled by the caller, which decides
    /// what a compile error means for it).
    fn new_live(
        &self,
        req: GenerateRequest,
        prompt: &[u32],
        tx: UnboundedSender<Event>,
        guide: Option<Guide>,
    ) -> Live {
        let method = req.spec.unwrap_or(self.spec.0);
        // An embedding decodes nothing, so it has nothing to draft.
        let spec = (method != SpecMethod::Off && req.embed.is_none()).then(|| {
            let fixed = req.spec_tokens.or(self.spec.1);
            SpecState::new(method, self.spec.2.max(fixed.unwrap_or(0)), fixed, prompt)
        });
        Live {
            tx,
            sampler: Sampler::new(req.params),
            decoder: IncrementalDecoder::new(self.tokenizer.clone(), true),
            stop: StopMatcher::new(req.stop),
            stop_ids: req.stop_token_ids,
            ignore_eos: req.ignore_eos,
            logprobs: req.logprobs,
            prompt_len: prompt.len(),
            output: Vec::new(),
            cached_tokens: 0,
            spec,
            lora: req.lora,
            guide,
            scores: req.prompt_logprobs.map(|k| PromptScores::new(prompt, k)),
            score_only: req.max_tokens == 0,
            embed: req
                .embed
                .map(|p| crate::embed::Pooled::new(p, prompt.len(), self.model.hidden_size())),
        }
    }

    /// Forks the waiting samples of `parent`'s group now that its prompt is computed: each
    /// draws its own first token from the same logits and shares the parent's KV blocks.
    fn fork_children(&mut self, parent: RequestId, logits: &[f32], cached: usize, now: Instant) {
        let Some(children) = self.forks.remove(&parent) else {
            return;
        };
        let vocab = self.model.config.vocab_size;
        let ctx = self.info.context_length;
        let parent_scores = self
            .live
            .get(&parent)
            .and_then(|l| l.scores.as_ref())
            .map(PromptScores::all)
            .unwrap_or_default();
        for c in children {
            let prompt = c.req.prompt.clone();
            let max_tokens = c
                .req
                .max_tokens
                .min(ctx.saturating_sub(prompt.len()))
                .max(1);
            let guide = c.req.constraint.as_ref().and_then(|g| {
                self.grammars
                    .guide(g, self.metrics.clone())
                    .map_err(|e| tracing::warn!("constraint of a forked sample: {e}"))
                    .ok()
            });
            let mut live = self.new_live(c.req, &prompt, c.tx, guide);
            live.cached_tokens = cached;
            live.scores = None;
            if live.score_only {
                let _ = live.tx.send(score_event(parent_scores.clone(), now));
                live.finish(FinishReason::Length, now);
                continue;
            }
            let (toks, logprobs) =
                choose_tokens(&mut live, &logits[..vocab], vocab, &[], &self.eog);
            let (kept, finish, mut event) = emit(&mut live, &toks, logprobs, &self.eog, now);
            if let Event::Tokens {
                prompt_logprobs, ..
            } = &mut event
            {
                prompt_logprobs.clone_from(&parent_scores);
            }
            let _ = live.tx.send(event);
            self.metrics
                .generation_tokens
                .fetch_add(kept.len() as u64, Relaxed);
            let done = finish
                .map(|_| FinishReason::Stop)
                .or((max_tokens == 1).then_some(FinishReason::Length));
            let result = match done {
                Some(reason) => Err(reason),
                None => self
                    .sched
                    .fork(parent, c.id, max_tokens, kept[0])
                    .map_err(|e| FinishReason::Error(e.to_string())),
            };
            match result {
                Ok(()) => {
                    self.live.insert(c.id, live);
                }
                Err(reason) => {
                    live.cached_tokens = cached;
                    live.finish(reason, now);
                }
            }
        }
    }

    /// Seconds since the engine's epoch (instants before it count as 0).
    fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.epoch).as_secs_f64()
    }

    fn abort(&mut self, id: RequestId, reason: FinishReason) {
        for c in self.forks.remove(&id).unwrap_or_default() {
            let _ = c.tx.send(Event::Finished {
                reason: reason.clone(),
                usage: Usage::default(),
                at: Instant::now(),
            });
        }
        self.sched.abort(id);
        if let Some(l) = self.live.remove(&id) {
            l.finish_silently(reason);
        }
    }

    /// Requests whose stream was dropped are aborted (client went away).
    fn drop_closed(&mut self) {
        let closed: Vec<RequestId> = self
            .live
            .iter()
            .filter(|(_, l)| l.tx.is_closed())
            .map(|(&id, _)| id)
            .collect();
        if closed.is_empty() {
            return;
        }
        for id in closed {
            self.abort(id, FinishReason::Cancelled);
        }
        self.publish();
    }

    fn step(&mut self, out: SchedulerOutput) {
        let t0 = Instant::now();
        // Evicted blocks still hold their data: spill before this step overwrites them.
        self.spill(&out.evicted);
        for c in &out.copies {
            self.kv
                .copy_block(c.src as usize, c.dst as usize, c.num_tokens);
            if let Some(d) = self.draft.as_mut() {
                d.kv.copy_block(c.src as usize, c.dst as usize, c.num_tokens);
            }
        }
        let mut batch = ForwardBatch::new();
        let mut rows_of = Vec::with_capacity(out.requests.len());
        let mut hidden_of = Vec::with_capacity(out.requests.len());
        for sr in &out.requests {
            let mut n_logits = if sr.sample {
                1 + sr.num_draft_tokens
            } else {
                0
            };
            // Prompt scoring: a row at every position of a chunk that still needs scores.
            if let Some(sc) = self.live.get(&sr.id).and_then(|l| l.scores.as_ref()) {
                if sc.wants(sr.start_pos, sr.token_ids.len()) {
                    n_logits = sr.token_ids.len();
                }
            }
            // Embeddings: hidden rows instead of logits (see `embed`).
            let embed = self.live.get(&sr.id).and_then(|l| l.embed.as_ref());
            let n_hidden = embed.map_or(0, |e| e.rows_wanted(sr.start_pos, sr.token_ids.len()));
            if embed.is_some() {
                n_logits = 0;
            }
            rows_of.push(n_logits);
            hidden_of.push(n_hidden);
            batch.push(
                &sr.token_ids,
                sr.start_pos,
                sr.block_table.clone(),
                n_logits,
            );
            if let Some(span) = batch.seqs.last_mut() {
                span.window_tables = sr.window_tables.clone();
                span.lora = self.live.get(&sr.id).and_then(|l| l.lora.clone());
                span.n_hidden = n_hidden;
            }
            // Output tokens attend as llama.cpp's decode steps do, prompt tokens as its
            // prompt batch does, however this step groups them (see `SeqSpan`).
            if let (Some(r), Some(span)) = (self.sched.request(sr.id), batch.seqs.last_mut()) {
                span.decode_from = r.num_prompt_tokens();
            }
        }
        let mut fstats = self.model.stats(&batch, self.kv.bytes_per_token());
        let (logits, hidden) = match self
            .model
            .forward_with_hidden(&batch, &mut self.kv, self.pool)
        {
            Ok(o) => (o.logits, o.hidden),
            Err(e) => {
                // A batch the model refuses is a bug upstream; fail its requests, keep serving.
                tracing::error!("forward failed: {e}");
                self.sched.release_step(out.step);
                for sr in &out.requests {
                    self.abort(
                        sr.id,
                        FinishReason::Error(format!("forward pass failed: {e}")),
                    );
                }
                return;
            }
        };
        if let Some(m) = self.model.moe_stats() {
            // MoE: the bytes this step read (the experts that got rows), not every expert.
            fstats.weight_bytes = m.last_step_weight_bytes;
        }
        if let Some(d) = self.draft.as_mut() {
            // The draft model computes the same tokens into its own KV (no logits needed).
            let mut db = batch.clone();
            for seq in &mut db.seqs {
                seq.n_logits = 0;
                seq.n_hidden = 0;
                // Adapters are shaped for the target; the draft model runs bare.
                seq.lora = None;
            }
            if let Err(e) = d.model.forward(&db, &mut d.kv, self.pool) {
                tracing::warn!("draft model forward failed: {e}");
            }
        }
        // The batch's adapter references go before any request can finish (the registry
        // frees an unloaded adapter's slot when its last request does).
        drop(batch);
        let vocab = self.model.config.vocab_size;
        let mut results = Vec::with_capacity(out.requests.len());
        let mut row = 0;
        let now = Instant::now();
        let forward_s = t0.elapsed().as_secs_f64();
        let mut fork_jobs: Vec<(RequestId, Vec<f32>, usize)> = Vec::new();
        let width = self.model.hidden_size();
        let mut hidden_row = 0;
        for ((sr, &n_rows), &n_hidden) in out.requests.iter().zip(&rows_of).zip(&hidden_of) {
            let all = &logits[row * vocab..(row + n_rows) * vocab];
            row += n_rows;
            let rows_h = &hidden[hidden_row * width..(hidden_row + n_hidden) * width];
            hidden_row += n_hidden;
            if let Some(live) = self.live.get_mut(&sr.id) {
                if let Some(e) = live.embed.as_mut() {
                    e.record(sr.start_pos + sr.token_ids.len(), rows_h);
                    // The chunk that ends the prompt: the vector goes out, the request ends.
                    let finish = sr.sample.then(|| {
                        match e.vector() {
                            Some(vector) => {
                                let _ = live.tx.send(Event::Embedding { vector, at: now });
                            }
                            None => tracing::error!(id = sr.id, "embedding rows missing"),
                        }
                        CoreFinish::Stop
                    });
                    if let Some(r) = self.sched.request(sr.id) {
                        live.cached_tokens = r.num_cached_tokens;
                    }
                    results.push(RequestResult {
                        id: sr.id,
                        new_token_ids: Vec::new(),
                        finish,
                    });
                    continue;
                }
            }
            let rows = if sr.sample {
                1 + sr.num_draft_tokens
            } else {
                0
            };
            if n_rows > rows {
                if let Some(sc) = self.live.get_mut(&sr.id).and_then(|l| l.scores.as_mut()) {
                    sc.record(sr.start_pos, all, vocab);
                }
            }
            if !sr.sample {
                results.push(RequestResult {
                    id: sr.id,
                    new_token_ids: Vec::new(),
                    finish: None,
                });
                continue;
            }
            let l = &all[(n_rows - rows) * vocab..];
            let cached = self
                .sched
                .request(sr.id)
                .map(|r| r.num_cached_tokens)
                .unwrap_or(0);
            let Some(live) = self.live.get_mut(&sr.id) else {
                results.push(RequestResult {
                    id: sr.id,
                    new_token_ids: Vec::new(),
                    finish: None,
                });
                continue;
            };
            live.cached_tokens = cached;
            if live.output.is_empty() && self.forks.contains_key(&sr.id) {
                fork_jobs.push((sr.id, l[..vocab].to_vec(), cached));
            }
            let drafts = &sr.token_ids[sr.token_ids.len() - sr.num_draft_tokens..];
            let prompt_lps = live
                .scores
                .as_mut()
                .map(PromptScores::take_ready)
                .unwrap_or_default();
            if live.score_only {
                // Scored, nothing to generate: the scheduler runs a request for one token,
                // which ends it here (max_tokens) without being output.
                let _ = live.tx.send(score_event(prompt_lps, now));
                results.push(RequestResult {
                    id: sr.id,
                    new_token_ids: vec![crate::sampler::argmax(&l[..vocab]) as u32],
                    finish: None,
                });
                continue;
            }
            let (toks, logprobs) = choose_tokens(live, l, vocab, drafts, &self.eog);
            if !drafts.is_empty() {
                let accepted = toks.len() - 1;
                if let Some(sp) = live.spec.as_mut() {
                    sp.control.observe(drafts.len(), accepted);
                }
                if let Ok(mut st) = self.metrics.spec.lock() {
                    st.record(drafts.len(), accepted, toks.len(), forward_s);
                }
            }
            let (kept, finish, mut event) = emit(live, &toks, logprobs, &self.eog, now);
            if let Event::Tokens {
                prompt_logprobs, ..
            } = &mut event
            {
                *prompt_logprobs = prompt_lps;
            }
            let _ = live.tx.send(event);
            // Tokens, not sampling steps: a verified draft step emits several.
            self.metrics
                .generation_tokens
                .fetch_add(kept.len() as u64, Relaxed);
            results.push(RequestResult {
                id: sr.id,
                new_token_ids: kept,
                finish,
            });
        }
        for (parent, row, cached) in fork_jobs {
            self.fork_children(parent, &row, cached, now);
        }
        let finished = self.sched.update(&out, &results);
        for r in finished {
            if let Some(l) = self.live.remove(&r.id) {
                let reason = match r.status {
                    folio_core::RequestStatus::Finished(CoreFinish::Stop) => FinishReason::Stop,
                    folio_core::RequestStatus::Finished(CoreFinish::Aborted) => {
                        FinishReason::Cancelled
                    }
                    _ => FinishReason::Length,
                };
                l.finish(reason, now);
            }
        }
        let wall = t0.elapsed().as_secs_f64();
        self.step_curve.add(out.num_tokens(), wall);
        self.record(&out, wall, fstats);
        self.propose();
    }

    /// Drafts for every decoding request that speculates, set on the scheduler for the
    /// next step. Draft lengths are planned jointly for the batch (`folio_spec::plan`, the
    /// marginal rule against the measured step curve).
    fn propose(&mut self) {
        // Candidates: requests whose every token but the newest sampled one is computed.
        let mut cands: Vec<(RequestId, folio_spec::Candidate)> = Vec::new();
        let mut others = 0usize;
        // Prefill rows the next step will likely carry (chunks of requests still
        // prefilling, within the token budget): drafts are priced at the step's real size.
        let mut prefill = 0usize;
        let ids: Vec<RequestId> = self.live.keys().copied().collect();
        for id in ids {
            let Some(r) = self.sched.request(id) else {
                continue;
            };
            if r.num_computed_tokens + 1 < r.num_tokens() {
                prefill +=
                    (r.num_tokens() - r.num_computed_tokens).min(self.sched.config().max_chunk);
                continue;
            }
            if r.num_computed_tokens + 1 != r.num_tokens() || r.num_output_tokens() == 0 {
                continue;
            }
            let room = r.max_tokens.saturating_sub(r.num_output_tokens() + 1);
            let live = self.live.get(&id).expect("listed above");
            let Some(sp) = live.spec.as_ref() else {
                // Decodes without speculation still take a row of the step.
                others += 1;
                continue;
            };
            let draft_s = if sp.method == SpecMethod::SelfDraft {
                // Before the first measurement: the draft's share of a 1-row step (its
                // weight bytes against the target's, or the layer fraction).
                self.draft_cost_s.unwrap_or_else(|| {
                    let share = match &self.draft {
                        Some(d) => {
                            d.model.weights.bytes_per_step() as f64
                                / self.model.weights.bytes_per_step().max(1) as f64
                        }
                        None => self.draft_layers as f64 / self.model.config.n_layers as f64,
                    };
                    self.step_curve.step_s(1) * share
                })
            } else {
                0.0
            };
            cands.push((id, sp.control.candidate(room, draft_s)));
        }
        if cands.is_empty() {
            return;
        }
        // Non-speculating decodes enter the plan as candidates that never draft.
        let idle = folio_spec::Candidate {
            acceptance: 0.0,
            max: 0,
            fixed: None,
            draft_s: 0.0,
        };
        let mut all: Vec<folio_spec::Candidate> = cands.iter().map(|c| c.1).collect();
        all.extend(std::iter::repeat_n(idle, others));
        let budget = self.sched.config().token_budget.saturating_sub(all.len());
        let plan = folio_spec::plan(&self.step_curve, prefill.min(budget), &all);
        if let Ok(mut st) = self.metrics.spec.lock() {
            st.record_plan(&plan[..cands.len()]);
        }
        let mut self_draft: Vec<(RequestId, usize)> = Vec::new();
        for ((id, _), &k) in cands.iter().zip(&plan) {
            if k == 0 {
                continue;
            }
            let live = self.live.get_mut(id).expect("listed above");
            let sp = live.spec.as_mut().expect("speculating");
            match sp.method {
                SpecMethod::Ngram => {
                    let mut d = sp.index.propose(k);
                    // Drafts stop at the first token the grammar refuses.
                    if let Some(g) = live.guide.as_mut() {
                        d.truncate(g.valid_prefix(&d));
                    }
                    if !d.is_empty() {
                        self.sched.set_draft(*id, d);
                    }
                }
                SpecMethod::SelfDraft => self_draft.push((*id, k)),
                SpecMethod::Off => {}
            }
        }
        if !self_draft.is_empty() {
            self.self_draft(&self_draft);
        }
    }

    /// Runs the target's first layers autoregressively for the listed requests (batched
    /// across requests), k steps at most, and sets the drafts.
    fn self_draft(&mut self, reqs: &[(RequestId, usize)]) {
        let t0 = Instant::now();
        let bs = self.kv.block_size;
        let vocab = self.model.config.vocab_size;
        let reqs: Vec<(RequestId, usize)> = reqs.iter().copied().take(self.scratch_slots).collect();
        // A separate draft model keeps its own single-layout cache, indexed by group 0's pages.
        let groups = match self.draft {
            Some(_) => 1,
            None => self.kv.layout.n_groups(),
        };
        let per_group = self.scratch_per_req / self.kv.layout.n_groups();
        let mut st: Vec<DraftRun> = Vec::new();
        for (i, &(id, k)) in reqs.iter().enumerate() {
            let r = self.sched.request(id).expect("running");
            let pos = r.num_tokens() - 1;
            let last = *r.tokens().last().expect("has tokens");
            let kvm = self.sched.kv();
            let mut reals = vec![kvm.table(id).map(|t| t.blocks.clone()).unwrap_or_default()];
            reals.extend(kvm.window_tables(id));
            reals.truncate(groups);
            let mut tables = Vec::with_capacity(groups);
            for (g, real) in reals.into_iter().enumerate() {
                // Drafts write positions pos.. . The block holding `pos` may be shared with
                // forked samples drafting in this same round: then, as copy-on-write would,
                // its first pos % bs slots are copied into this request's scratch and the
                // drafts go there. A block of this request alone takes the drafts in place
                // (verification writes those slots again); every later block is scratch.
                let first = pos / bs;
                let base = self.scratch_base + i * self.scratch_per_req + g * per_group;
                let shared = real.get(first).filter(|&&b| {
                    debug_assert_ne!(b, RELEASED, "the drafted position is in its window");
                    self.sched.kv().pool().refs(b).table_refs > 1
                });
                let mut table =
                    real[..(first + usize::from(shared.is_none())).min(real.len())].to_vec();
                if let (false, Some(&src)) = (pos.is_multiple_of(bs), shared) {
                    let cache = match self.draft.as_mut() {
                        Some(d) => &mut d.kv,
                        None => &mut self.kv,
                    };
                    cache.copy_block(src as usize, base, pos % bs);
                }
                let need = (pos + k).div_ceil(bs);
                let mut j = 0;
                while table.len() < need {
                    table.push((base + j) as u32);
                    j += 1;
                }
                tables.push(table);
            }
            st.push(DraftRun {
                tables,
                pos,
                last,
                drafts: Vec::new(),
                consumed: 0,
                done: false,
            });
            if let Some(l) = self.live.get_mut(&id) {
                if let Some(sp) = l.spec.as_mut() {
                    sp.draft_q.clear();
                }
            }
        }
        let kmax = reqs.iter().map(|r| r.1).max().unwrap_or(0);
        for step in 0..kmax {
            let mut batch = ForwardBatch::new();
            let mut who = Vec::new();
            for (i, &(id, k)) in reqs.iter().enumerate() {
                if step < k && !st[i].done {
                    let r = &st[i];
                    batch.push(&[r.last], r.pos, r.tables[0].clone(), 1);
                    if let Some(span) = batch.seqs.last_mut() {
                        span.window_tables = r.tables[1..].to_vec();
                        // The target's first layers draft under the request's adapters
                        // (their KV is the target's); a separate draft model has none.
                        if self.draft.is_none() {
                            span.lora = self.live.get(&id).and_then(|l| l.lora.clone());
                        }
                    }
                    who.push(i);
                }
            }
            let result = match self.draft.as_mut() {
                Some(d) => d.model.forward(&batch, &mut d.kv, self.pool),
                None => {
                    self.model
                        .forward_layers(&batch, &mut self.kv, self.pool, self.draft_layers)
                }
            };
            let logits = match result {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!("self-draft failed: {e}");
                    self.rewind_guides(&reqs, &st);
                    return;
                }
            };
            for (row, &i) in who.iter().enumerate() {
                let l = &logits[row * vocab..(row + 1) * vocab];
                let id = reqs[i].0;
                let live = self.live.get_mut(&id).expect("drafting a live request");
                let mut l = processed(live, l, &st[i].drafts, &self.eog);
                // Under a grammar, drafts are drawn from the masked row and consumed, so the
                // next draft sees the next position's mask; rolled back below.
                let tok = if live.sampler.params.is_greedy() {
                    greedy_pick(live, l)
                } else {
                    if let Some(g) = live.guide.as_mut() {
                        g.mask(&mut l);
                    }
                    let dist = live.sampler.distribution(&l);
                    let t = live.sampler.draw(&dist);
                    live.spec.as_mut().expect("speculating").draft_q.push(dist);
                    t
                };
                let s = &mut st[i];
                s.pos += 1;
                s.last = tok;
                s.drafts.push(tok);
                if let Some(g) = live.guide.as_mut() {
                    if g.commit(tok) {
                        s.consumed += 1;
                    }
                    if s.consumed < s.drafts.len() || g.is_done() || self.eog.contains(&tok) {
                        s.done = true;
                    }
                }
            }
        }
        self.rewind_guides(&reqs, &st);
        let n: usize = st.iter().map(|s| s.drafts.len()).sum();
        for (i, &(id, _)) in reqs.iter().enumerate() {
            let d = std::mem::take(&mut st[i].drafts);
            self.sched.set_draft(id, d);
        }
        let per_token = t0.elapsed().as_secs_f64() / n.max(1) as f64 * reqs.len() as f64;
        self.draft_cost_s = match self.draft_cost_s {
            None => Some(per_token),
            Some(c) => Some(0.8 * c + 0.2 * per_token),
        };
    }

    /// Rolls the grammars of drafting requests back to their output (the drafts they
    /// consumed are verified in the next step).
    fn rewind_guides(&mut self, reqs: &[(RequestId, usize)], st: &[DraftRun]) {
        for (&(id, _), s) in reqs.iter().zip(st) {
            if let Some(g) = self.live.get_mut(&id).and_then(|l| l.guide.as_mut()) {
                g.rollback(s.consumed);
            }
        }
    }

    /// Gauges and counters from the scheduler's state; called after every step and after
    /// every command, so an abort on an idle engine shows up in /metrics at once.
    fn publish(&self) {
        let m = &self.metrics;
        let kv = self.sched.kv_stats();
        let st = self.sched.stats();
        m.num_running.store(self.sched.num_running(), Relaxed);
        m.num_waiting.store(self.sched.num_waiting(), Relaxed);
        m.kv_blocks_used.store(kv.used_blocks, Relaxed);
        m.kv_blocks_cached.store(kv.cached_blocks, Relaxed);
        m.prefix_queries_tokens
            .store(kv.prefix_query_tokens, Relaxed);
        m.prefix_hits_tokens.store(kv.prefix_hit_tokens, Relaxed);
        m.preemptions.store(st.preemptions, Relaxed);
        m.recomputed_tokens.store(st.recomputed_tokens, Relaxed);
        m.cow_copies.store(kv.cow_copies, Relaxed);
        m.evictions.store(kv.evictions, Relaxed);
        m.kv_window_released_blocks
            .store(kv.window_released_blocks, Relaxed);
        m.tier_hit_tokens.store(kv.tier_hit_tokens, Relaxed);
        self.publish_lora();
    }

    /// Names of the adapters of running and waiting requests, for `vllm:lora_requests_info`.
    fn publish_lora(&self) {
        let (mut running, mut waiting) = (Vec::new(), Vec::new());
        for (id, live) in &self.live {
            let Some(set) = &live.lora else { continue };
            let into = match self.sched.request(*id).map(|r| r.status) {
                Some(folio_core::sched::RequestStatus::Running) => &mut running,
                _ => &mut waiting,
            };
            into.extend(set.items().iter().map(|(a, _)| a.name.clone()));
        }
        for v in [&mut running, &mut waiting] {
            v.sort();
            v.dedup();
        }
        let m = &self.metrics;
        for (slot, v) in [(&m.lora_running, running), (&m.lora_waiting, waiting)] {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = v;
        }
    }

    fn record(&mut self, out: &SchedulerOutput, wall_s: f64, f: folio_model::ForwardStats) {
        self.publish();
        let m = &self.metrics;
        let kv = self.sched.kv_stats();
        m.steps.fetch_add(1, Relaxed);
        let s = StepStats {
            step: out.step.0,
            requests: out.requests.len(),
            prefill_tokens: out.num_prefill_tokens,
            decode_tokens: out.num_decode_tokens,
            draft_tokens: out.num_draft_tokens,
            kv_blocks_used: kv.used_blocks,
            wall_s,
            weight_bytes: f.weight_bytes,
            kv_bytes: f.kv_bytes_read,
            flops: f.flops,
        };
        if let Ok(mut log) = m.step_log.lock() {
            if log.len() >= crate::step_stats::STEP_LOG_LEN {
                log.pop_front();
            }
            log.push_back(s);
        }
    }
}

/// One request's self-draft in progress.
struct DraftRun {
    /// Block tables, one per page group: the request's own blocks, then scratch.
    tables: Vec<Vec<u32>>,
    /// Position of the next token to draft.
    pos: usize,
    /// The token at `pos`.
    last: u32,
    /// Drafts so far.
    drafts: Vec<u32>,
    /// Drafts the request's grammar consumed (rolled back after drafting).
    consumed: usize,
    /// No more drafts: the grammar is complete (or refused the last one).
    done: bool,
}

/// The logits a request samples from: `row` with its end tokens masked (`ignore_eos`) and its
/// penalties over the output so far plus `pending` (drafts not yet verified). Drafting and
/// verification both go through it: a greedy draft from raw logits proposed end tokens that
/// an `ignore_eos` request can never take.
fn processed(live: &Live, row: &[f32], pending: &[u32], eog: &[u32]) -> Vec<f32> {
    let mut l = row.to_vec();
    if live.ignore_eos {
        for &e in eog {
            if let Some(x) = l.get_mut(e as usize) {
                *x = f32::NEG_INFINITY;
            }
        }
    }
    // The history is only built when a penalty or rule needs it (not on the common path).
    let rules = &live.sampler.params.rules;
    if live.sampler.has_penalties() || !rules.is_empty() {
        let mut hist = live.output.clone();
        hist.extend_from_slice(pending);
        live.sampler.apply_penalties(&mut l, &hist);
        if !rules.is_empty() {
            let mut ends = live.stop_ids.clone();
            if !live.ignore_eos {
                ends.extend_from_slice(eog);
            }
            rules.apply(&mut l, &hist, &ends);
        }
    }
    l
}

/// The event of a score-only request (`max_tokens` 0): the prompt's scores, no tokens.
fn score_event(prompt_logprobs: Vec<TokenLogprob>, at: Instant) -> Event {
    Event::Tokens {
        ids: Vec::new(),
        text: String::new(),
        logprobs: Vec::new(),
        prompt_logprobs,
        at,
    }
}

/// Chooses this step's tokens for one request: one sampled token, or the verified prefix of
/// its drafts plus the correction/bonus token. Returns them with their logprobs.
///
/// Under a grammar, the drafts are first cut at the first token it refuses, each row is
/// sampled under its own position's mask (the matcher steps over the drafts before it),
/// and afterwards the matcher is rolled back to the accepted drafts and given the
/// correction/bonus token, so it stands at the end of the chosen tokens. Tokens past the
/// grammar's end are dropped (the request then stops).
fn choose_tokens(
    live: &mut Live,
    rows: &[f32],
    vocab: usize,
    drafts: &[u32],
    eog: &[u32],
) -> (Vec<u32>, Vec<TokenLogprob>) {
    let sampled_drafts = live
        .spec
        .as_ref()
        .is_some_and(|sp| sp.draft_q.len() == drafts.len() && !drafts.is_empty());
    let drafts = match live.guide.as_mut() {
        Some(g) => &drafts[..g.valid_prefix(drafts)],
        None => drafts,
    };
    let n_rows = drafts.len() + 1;
    // Row i's logits: its history is the output so far plus the drafts before it; under a
    // grammar, masked at the matcher's current position (which must be row i's).
    let raw = |live: &Live, i: usize| {
        processed(live, &rows[i * vocab..(i + 1) * vocab], &drafts[..i], eog)
    };
    let prepare = |live: &mut Live, i: usize| {
        let mut l = raw(live, i);
        if let Some(g) = live.guide.as_mut() {
            g.mask(&mut l);
        }
        l
    };
    // Output position of row 0: rows are keyed by position (see `Sampler`).
    let pos = live.output.len();
    let greedy = live.sampler.params.is_greedy();
    // Row i's token: drawn with the position's own uniform, or the argmax (checked
    // against the grammar before any mask is computed).
    let pick = |live: &mut Live, i: usize| {
        if greedy {
            greedy_pick(live, raw(live, i))
        } else {
            let l = prepare(live, i);
            live.sampler.sample_at(&l, pos + i)
        }
    };
    // Drafts the matcher has stepped over to reach later rows' masks.
    let mut consumed = 0;
    let step = |live: &mut Live, tok: u32, consumed: &mut usize| {
        if let Some(g) = live.guide.as_mut() {
            if g.commit(tok) {
                *consumed += 1;
            }
        }
    };
    let mut toks: Vec<u32> = if drafts.is_empty() {
        vec![pick(live, 0)]
    } else if greedy || !sampled_drafts {
        // Greedy: accept up to the first mismatch with the argmax, then the argmax.
        // A deterministic proposer (n-gram lookup) puts all its mass on its draft: then
        // rejection sampling's test, accept d with probability p(d), is the same as drawing
        // the position's token from p and accepting iff it is d. Drawing it with the
        // position's own uniform gives exactly the tokens decoding without speculation
        // gives, whatever the draft lengths.
        let mut toks = Vec::with_capacity(n_rows);
        for i in 0..n_rows {
            let t = pick(live, i);
            toks.push(t);
            if drafts.get(i) != Some(&t) {
                break;
            }
            if i + 1 < n_rows {
                step(live, t, &mut consumed);
            }
        }
        toks
    } else {
        let mut p: Vec<Vec<(u32, f32)>> = Vec::with_capacity(n_rows);
        for i in 0..n_rows {
            let l = prepare(live, i);
            p.push(live.sampler.distribution(&l));
            if i < drafts.len() {
                step(live, drafts[i], &mut consumed);
            }
        }
        let q = &live.spec.as_ref().expect("sampled drafts").draft_q[..drafts.len()];
        let q = q.to_vec();
        folio_spec::verify_sampled(drafts, &p, &q, live.sampler.rng()).tokens
    };
    if let Some(g) = live.guide.as_mut() {
        // Back to the accepted drafts, then the correction/bonus token.
        let accepted = (toks.len() - 1).min(consumed);
        g.rollback(consumed - accepted);
        let taken = accepted + g.commit_all(&toks[accepted..]);
        toks.truncate(taken.max(1));
    }
    let logprobs = match live.logprobs {
        Some(k) => toks
            .iter()
            .enumerate()
            .map(|(i, &tok)| token_logprob(&rows[i * vocab..(i + 1) * vocab], tok, k))
            .collect(),
        None => Vec::new(),
    };
    (toks, logprobs)
}

/// The greedy token of `row` under the request's grammar: its raw argmax when the grammar
/// takes it (the masked argmax is then the same token, ties included), else the argmax of
/// the masked row.
fn greedy_pick(live: &mut Live, mut row: Vec<f32>) -> u32 {
    let t = crate::sampler::argmax(&row) as u32;
    let Some(g) = live.guide.as_mut() else {
        return t;
    };
    if g.accepts(t) {
        return t;
    }
    g.mask(&mut row);
    crate::sampler::argmax(&row) as u32
}

/// Appends chosen tokens to the request one by one, stopping at an end token, a stop token
/// id or a stop string; returns the tokens kept, the finish reason and the event.
fn emit(
    live: &mut Live,
    toks: &[u32],
    mut logprobs: Vec<TokenLogprob>,
    eog: &[u32],
    now: Instant,
) -> (Vec<u32>, Option<CoreFinish>, Event) {
    let mut kept = Vec::with_capacity(toks.len());
    let mut text = String::new();
    let mut finish = None;
    for &tok in toks {
        kept.push(tok);
        live.output.push(tok);
        if let Some(sp) = live.spec.as_mut() {
            if sp.method == SpecMethod::Ngram {
                sp.index.extend(&[tok]);
            }
        }
        if (!live.ignore_eos && eog.contains(&tok)) || live.stop_ids.contains(&tok) {
            finish = Some(CoreFinish::Stop);
            break;
        }
        let piece = live.decoder.push(tok);
        let so = live.stop.push(&piece);
        text.push_str(&so.text_to_emit);
        if so.stopped {
            finish = Some(CoreFinish::Stop);
            break;
        }
    }
    if finish.is_none() && live.guide.as_ref().is_some_and(Guide::is_done) {
        // The grammar is complete: the request stops here, with all its text.
        finish = Some(CoreFinish::Stop);
        live.decoder.discard_incomplete();
        let tail = live.stop.push(&live.decoder.flush()).text_to_emit + &live.stop.flush();
        text.push_str(&tail);
    }
    logprobs.truncate(kept.len());
    (
        kept.clone(),
        finish,
        Event::Tokens {
            ids: kept,
            text,
            logprobs,
            prompt_logprobs: Vec::new(),
            at: now,
        },
    )
}

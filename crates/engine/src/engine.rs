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
use crate::sampler::{log_softmax, Sampler};
use crate::{EngineConfig, GenerateRequest, RequestId, StepStats};
use folio_core::kv::KvConfig;
use folio_core::sched::admission::Rates;
use folio_core::{
    FinishReason as CoreFinish, Request, RequestResult, Scheduler, SchedulerConfig, SchedulerOutput,
};
use folio_kernels::pool::ThreadPool;
use folio_model::{ForwardBatch, KvCache, Model};
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
}

pub(crate) struct Engine {
    model: Model,
    kv: KvCache,
    sched: Scheduler,
    live: HashMap<RequestId, Live>,
    tokenizer: Arc<Tokenizer>,
    eog: Vec<u32>,
    metrics: Arc<EngineMetrics>,
    info: Arc<EngineInfo>,
    pool: &'static ThreadPool,
    epoch: Instant,
    rates: Option<Rates>,
    shutting_down: bool,
}

/// Builds the engine and starts its thread.
pub fn spawn_engine(
    model: Model,
    tokenizer: Arc<Tokenizer>,
    model_path: &std::path::Path,
    cfg: EngineConfig,
) -> anyhow::Result<EngineHandle> {
    let c = &model.config;
    let bytes_per_token = c.kv_bytes_per_token(cfg.kv_format.bytes_per_value());
    let block_bytes = bytes_per_token * cfg.block_size as f64;
    let num_blocks = (cfg.kv_cache_bytes as f64 / block_bytes).floor() as usize;
    if num_blocks < 2 {
        anyhow::bail!(
            "kv_cache_bytes: {} bytes hold {num_blocks} blocks of {} tokens ({block_bytes} bytes each); at least 2 are needed",
            cfg.kv_cache_bytes,
            cfg.block_size
        );
    }
    let salt = {
        // Blocks match only under the same model file and KV format.
        let mut h: u64 = 0xcbf29ce484222325;
        for b in model_path
            .to_string_lossy()
            .bytes()
            .chain(cfg.kv_format.name().bytes())
        {
            h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        }
        h
    };
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
            ..KvConfig::default()
        },
    };
    let sched = Scheduler::new(sched_cfg).map_err(|e| anyhow::anyhow!("scheduler config: {e}"))?;
    let kv = model.new_kv_cache(cfg.block_size, num_blocks, cfg.kv_format);
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
        kv_capacity_tokens: num_blocks * cfg.block_size,
        kv_format: cfg.kv_format.name().into(),
    });
    let metrics = Arc::new(EngineMetrics::default());
    metrics.kv_blocks_total.store(num_blocks, Relaxed);
    let (tx, rx) = std::sync::mpsc::channel();
    let eog = tokenizer.eog_ids().to_vec();
    let mut engine = Engine {
        model,
        kv,
        sched,
        live: HashMap::new(),
        tokenizer: tokenizer.clone(),
        eog,
        metrics: metrics.clone(),
        info: info.clone(),
        pool: ThreadPool::global(),
        epoch: Instant::now(),
        rates: None,
        shutting_down: false,
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
            Command::Add { id, req, tx } => self.add(id, *req, tx),
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

    fn add(&mut self, id: RequestId, req: GenerateRequest, tx: UnboundedSender<Event>) {
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
        let ctx = self.info.context_length;
        let prompt_len = req.prompt.len();
        // The context bounds the output too: at most ctx − prompt tokens are generated.
        let max_tokens = req.max_tokens.min(ctx.saturating_sub(prompt_len)).max(1);
        let mut r = Request::new(id, req.prompt, max_tokens);
        let now = self.epoch.elapsed().as_secs_f64();
        r = r.with_arrival(req.arrival.map(|a| self.secs(a)).unwrap_or(now));
        if let Some(d) = req.deadline {
            r = r.with_deadline(self.secs(d));
            if let Some(rates) = self.rates {
                if let Err(reason) = self.sched.check_admission(&r, now, &rates) {
                    self.metrics.rejected.fetch_add(1, Relaxed);
                    return finish(&tx, FinishReason::Rejected(reason.to_string()));
                }
            }
        }
        if let Err(reason) = self.sched.add_request(r) {
            self.metrics.rejected.fetch_add(1, Relaxed);
            return finish(&tx, FinishReason::Rejected(reason.to_string()));
        }
        self.live.insert(
            id,
            Live {
                tx,
                sampler: Sampler::new(req.params),
                decoder: IncrementalDecoder::new(self.tokenizer.clone(), true),
                stop: StopMatcher::new(req.stop),
                stop_ids: req.stop_token_ids,
                ignore_eos: req.ignore_eos,
                logprobs: req.logprobs,
                prompt_len,
                output: Vec::new(),
                cached_tokens: 0,
            },
        );
        self.metrics
            .prompt_tokens
            .fetch_add(prompt_len as u64, Relaxed);
    }

    /// Seconds since the engine's epoch (instants before it count as 0).
    fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.epoch).as_secs_f64()
    }

    fn abort(&mut self, id: RequestId, reason: FinishReason) {
        self.sched.abort(id);
        if let Some(l) = self.live.remove(&id) {
            let usage = Usage {
                prompt_tokens: l.prompt_len,
                completion_tokens: l.output.len(),
                cached_tokens: l.cached_tokens,
            };
            let _ = l.tx.send(Event::Finished {
                reason,
                usage,
                at: Instant::now(),
            });
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
        for c in &out.copies {
            self.kv
                .copy_block(c.src as usize, c.dst as usize, c.num_tokens);
        }
        let mut batch = ForwardBatch::new();
        for sr in &out.requests {
            let n_logits = if sr.sample {
                1 + sr.num_draft_tokens
            } else {
                0
            };
            batch.push(
                &sr.token_ids,
                sr.start_pos,
                sr.block_table.clone(),
                n_logits,
            );
        }
        let fstats = self.model.stats(&batch, self.kv.bytes_per_token());
        let logits = match self.model.forward(&batch, &mut self.kv, self.pool) {
            Ok(l) => l,
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
        let vocab = self.model.config.vocab_size;
        let mut results = Vec::with_capacity(out.requests.len());
        let mut row = 0;
        let now = Instant::now();
        for sr in &out.requests {
            if !sr.sample {
                results.push(RequestResult {
                    id: sr.id,
                    new_token_ids: Vec::new(),
                    finish: None,
                });
                continue;
            }
            let rows = 1 + sr.num_draft_tokens;
            let l = &logits[row * vocab..(row + rows) * vocab];
            row += rows;
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
            let (tok, finish, event) = sample_one(live, &l[..vocab], &self.eog, now);
            if let Some(ev) = event {
                let _ = live.tx.send(ev);
            }
            results.push(RequestResult {
                id: sr.id,
                new_token_ids: vec![tok],
                finish,
            });
        }
        let finished = self.sched.update(&out, &results);
        for r in finished {
            if let Some(mut l) = self.live.remove(&r.id) {
                let reason = match r.status {
                    folio_core::RequestStatus::Finished(CoreFinish::Stop) => FinishReason::Stop,
                    folio_core::RequestStatus::Finished(CoreFinish::Aborted) => {
                        FinishReason::Cancelled
                    }
                    _ => FinishReason::Length,
                };
                // Text held back for a possible stop string is released at the end.
                let tail = if reason == FinishReason::Stop {
                    String::new()
                } else {
                    l.stop.push(&l.decoder.flush()).text_to_emit + &l.stop.flush()
                };
                if !tail.is_empty() {
                    let _ = l.tx.send(Event::Tokens {
                        ids: Vec::new(),
                        text: tail,
                        logprobs: Vec::new(),
                        at: now,
                    });
                }
                let usage = Usage {
                    prompt_tokens: l.prompt_len,
                    completion_tokens: l.output.len(),
                    cached_tokens: l.cached_tokens,
                };
                let _ = l.tx.send(Event::Finished {
                    reason,
                    usage,
                    at: Instant::now(),
                });
            }
        }
        let wall = t0.elapsed().as_secs_f64();
        self.record(&out, wall, fstats);
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
    }

    fn record(&mut self, out: &SchedulerOutput, wall_s: f64, f: folio_model::ForwardStats) {
        self.publish();
        let m = &self.metrics;
        let kv = self.sched.kv_stats();
        m.steps.fetch_add(1, Relaxed);
        let sampled = out.requests.iter().filter(|r| r.sample).count();
        m.generation_tokens.fetch_add(sampled as u64, Relaxed);
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
        // Measured rates for deadline admission: exponentially smoothed.
        let mix = |old: f64, new: f64| {
            if old > 0.0 {
                0.8 * old + 0.2 * new
            } else {
                new
            }
        };
        let mut r = self.rates.unwrap_or(Rates {
            prefill_tokens_per_s: 0.0,
            decode_tokens_per_s: 0.0,
        });
        if out.num_prefill_tokens >= 64 {
            r.prefill_tokens_per_s = mix(
                r.prefill_tokens_per_s,
                out.num_prefill_tokens as f64 / wall_s,
            );
        }
        if out.num_decode_tokens > 0 && out.num_prefill_tokens == 0 {
            r.decode_tokens_per_s = mix(r.decode_tokens_per_s, 1.0 / wall_s);
        }
        if r.prefill_tokens_per_s > 0.0 && r.decode_tokens_per_s > 0.0 {
            self.rates = Some(r);
        }
    }
}

/// Samples one token for `live`, decides whether it ends the request and builds the event.
fn sample_one(
    live: &mut Live,
    logits: &[f32],
    eog: &[u32],
    now: Instant,
) -> (u32, Option<CoreFinish>, Option<Event>) {
    let mut l = logits.to_vec();
    if live.ignore_eos {
        for &e in eog {
            if let Some(x) = l.get_mut(e as usize) {
                *x = f32::NEG_INFINITY;
            }
        }
    }
    live.sampler.apply_penalties(&mut l, &live.output);
    let tok = live.sampler.sample(&l);
    live.output.push(tok);
    let logprobs = match live.logprobs {
        Some(k) => {
            let lp = log_softmax(logits);
            let mut top: Vec<(u32, f32)> = Vec::new();
            if k > 0 {
                let mut idx: Vec<u32> = (0..lp.len() as u32).collect();
                let k = k.min(idx.len());
                idx.select_nth_unstable_by(k - 1, |&a, &b| {
                    lp[b as usize].total_cmp(&lp[a as usize])
                });
                idx.truncate(k);
                idx.sort_by(|&a, &b| lp[b as usize].total_cmp(&lp[a as usize]));
                top = idx.into_iter().map(|i| (i, lp[i as usize])).collect();
            }
            vec![TokenLogprob {
                token: tok,
                logprob: lp[tok as usize],
                top,
            }]
        }
        None => Vec::new(),
    };
    let is_end = (!live.ignore_eos && eog.contains(&tok)) || live.stop_ids.contains(&tok);
    if is_end {
        let ev = Event::Tokens {
            ids: vec![tok],
            text: String::new(),
            logprobs,
            at: now,
        };
        return (tok, Some(CoreFinish::Stop), Some(ev));
    }
    let piece = live.decoder.push(tok);
    let so = live.stop.push(&piece);
    let finish = so.stopped.then_some(CoreFinish::Stop);
    (
        tok,
        finish,
        Some(Event::Tokens {
            ids: vec![tok],
            text: so.text_to_emit,
            logprobs,
            at: now,
        }),
    )
}

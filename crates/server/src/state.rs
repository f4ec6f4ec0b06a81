//! What every handler shares: the options, the models (reached only through
//! [`AppState::lease`]), the server-wide refusal counters, and the counters behind the
//! queue limit and the drain. What belongs to one model (its engine, name and request
//! metrics) is in `models::Served`.

use crate::error::ApiError;
use crate::metrics::Rejections;
use crate::models::{Lease, ModelEntry, Registry};
use crate::ServerOptions;
use folio_engine::EngineHandle;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Cheap to clone: one `Arc`.
#[derive(Clone)]
pub struct AppState(pub Arc<Shared>);

pub struct Shared {
    /// The known models, loaded and not.
    pub models: Arc<Registry>,
    pub opts: ServerOptions,
    /// Which Host headers are accepted (from `opts.allowed_hosts` and the bound address).
    pub hosts: crate::guard::HostPolicy,
    /// Requests refused with 429/503 (`/metrics`).
    pub rejections: Rejections,
    /// Unix seconds at startup (the `created` of /v1/models).
    pub started: u64,
    /// Set by the shutdown signal: /health answers 503, new generation requests 503.
    pub draining: AtomicBool,
    /// Engine requests (choices) submitted through this server that have not yet had
    /// their first event (waiting in the engine's queue or in prefill).
    queued: Arc<AtomicUsize>,
    /// Generation requests being answered (the drain waits for this to reach 0).
    active: Arc<AtomicUsize>,
    /// Large bodies parsed and large prompts tokenized at once: one per core (see
    /// [`AppState::prompt_permit`]).
    prompt_work: Arc<tokio::sync::Semaphore>,
    /// Where structured-output constraints are compiled (bounded, off the async threads).
    pub compiler: crate::grammar_compiler::GrammarCompiler,
    /// Stored /v1/responses answers (`previous_response_id`, `GET /v1/responses/{id}`).
    pub responses: crate::responses::Store,
    /// Requests finished per second (the `Retry-After` of a 429).
    pub drain: Arc<crate::drain_rate::DrainRate>,
}

/// Bodies and prompt texts from this size on take a [`AppState::prompt_permit`]; smaller
/// ones are cheap and never wait behind a large one.
pub const LARGE_PROMPT_BYTES: usize = 64 << 10;

/// `n` units of a counter, given back on drop.
pub struct Slots {
    counter: Arc<AtomicUsize>,
    n: usize,
    /// Where the release is recorded as a finished request (the active-request guard).
    finished: Option<Arc<crate::drain_rate::DrainRate>>,
}

impl Slots {
    fn take(counter: &Arc<AtomicUsize>, n: usize) -> (Slots, usize) {
        let before = counter.fetch_add(n, Ordering::Relaxed);
        let s = Slots {
            counter: counter.clone(),
            n,
            finished: None,
        };
        (s, before)
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.n, Ordering::Relaxed);
        if let Some(d) = &self.finished {
            d.record(std::time::Instant::now());
        }
    }
}

/// Concurrent large prompt jobs: the cores (tokenizing is CPU-bound; more at once would only
/// hold more memory).
fn prompt_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl AppState {
    /// The single-model server. `bound`: the address the server listens on (it decides
    /// the Host policy).
    pub fn new(engine: EngineHandle, opts: ServerOptions, bound: std::net::IpAddr) -> AppState {
        AppState::with_models(Registry::single(engine), opts, bound)
    }

    /// A server of the models in `models`.
    pub fn with_models(
        models: Arc<Registry>,
        opts: ServerOptions,
        bound: std::net::IpAddr,
    ) -> AppState {
        let hosts = crate::guard::HostPolicy::new(bound, &opts.allowed_hosts);
        AppState(Arc::new(Shared {
            models,
            hosts,
            rejections: Rejections::default(),
            started: crate::api::unix_now(),
            draining: AtomicBool::new(false),
            queued: Arc::new(AtomicUsize::new(0)),
            active: Arc::new(AtomicUsize::new(0)),
            prompt_work: Arc::new(tokio::sync::Semaphore::new(prompt_workers())),
            drain: Default::default(),
            compiler: crate::grammar_compiler::GrammarCompiler::new(
                opts.grammar_compiles,
                opts.grammar_compile_queue,
                opts.grammar_compile_budget,
            ),
            responses: crate::responses::Store::new(crate::responses::Limits {
                count: opts.responses_store_max,
                bytes: opts.responses_store_bytes,
                age: opts.responses_store_max_age,
            }),
            opts,
        }))
    }

    /// Waits for a turn to parse a body or tokenize prompts of `bytes` bytes, if that
    /// is large; the turn lasts until the permit drops. Parsing a JSON body costs up to
    /// ~16 bytes per byte (an array of token ids) and tokenizing ~90 bytes per byte of
    /// text, so without this, 40 concurrent 3.8 MB prompts took the process from 2.5 to
    /// 12.4 GB; with it, at most one such job per core runs and the others wait holding
    /// only their body.
    pub async fn prompt_permit(&self, bytes: usize) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if bytes < LARGE_PROMPT_BYTES {
            return None;
        }
        // The semaphore is never closed, so this cannot fail.
        self.0.prompt_work.clone().acquire_owned().await.ok()
    }

    pub fn draining(&self) -> bool {
        self.0.draining.load(Ordering::Relaxed)
    }

    /// The model `model` names for one request (`None`: the default model: the first
    /// `--model`, or the only one), loaded first if it is not (waiting up to
    /// `--load-timeout`). An unknown name is a 404 naming it; a LoRA adapter's name gives
    /// its base model. The model is not unloaded while the lease lives.
    pub async fn lease(&self, model: Option<&str>) -> Result<Lease, ApiError> {
        self.0.models.lease(model).await
    }

    /// Every known model, loaded or not.
    pub fn model_list(&self) -> Vec<ModelEntry> {
        self.0.models.list()
    }

    /// Loads `name` (waiting for it).
    pub async fn load_model(&self, name: &str) -> Result<(), ApiError> {
        self.0.models.load(name).await
    }

    /// Unloads `name` now if idle, else as soon as its running requests end.
    pub fn unload_model(&self, name: &str) -> Result<(), ApiError> {
        self.0.models.unload(name)
    }

    /// Ollama's per-request `keep_alive`: this model's idle lifetime from now on (0 =
    /// unload when idle).
    #[allow(dead_code)] // the Ollama routes call it (`keep_alive` per request)
    pub fn keep_alive(&self, name: &str, d: std::time::Duration) {
        self.0.models.keep_alive(name, d)
    }

    /// A request the engine refused (before its first token): counted, and its answer.
    pub fn refused(&self, reason: folio_engine::FinishReason) -> crate::error::ApiError {
        let e = crate::error::ApiError::refusal(reason);
        self.0.rejections.rejected(e.status.as_u16());
        let ahead = self.0.queued.load(Ordering::Relaxed);
        e.retry_after(self.retry_after(ahead))
    }

    /// A submit `engine` refused after `submitted` (earlier prompts of the same request)
    /// went in: those are aborted, the refusal counted.
    pub fn submit_failed(
        &self,
        engine: &EngineHandle,
        submitted: &[folio_engine::RequestStream],
        e: folio_engine::SubmitError,
    ) -> crate::error::ApiError {
        for rs in submitted {
            engine.abort(rs.id);
        }
        let e = crate::error::ApiError::from(e);
        self.0.rejections.rejected(e.status.as_u16());
        e
    }

    /// A new request's first check: while draining it is refused (503, counted).
    pub fn refuse_if_draining(&self) -> Result<(), crate::error::ApiError> {
        if self.draining() {
            self.0.rejections.rejected(503);
            return Err(crate::error::ApiError::shutting_down());
        }
        Ok(())
    }

    /// Generation requests being answered.
    pub fn active(&self) -> usize {
        self.0.active.load(Ordering::Relaxed)
    }

    /// Marks one generation request as being answered until the guard drops.
    pub fn begin(&self) -> Slots {
        let mut s = Slots::take(&self.0.active, 1).0;
        s.finished = Some(self.0.drain.clone());
        s
    }

    /// The `Retry-After` (seconds) for a client refused with `ahead` requests queued.
    pub fn retry_after(&self, ahead: usize) -> u64 {
        self.0.drain.retry_after(ahead, std::time::Instant::now())
    }

    /// Reserves `n` queue places (choices waiting for their first event), or explains why
    /// the server is overloaded (429).
    /// NOTE: this bound keeps a flood of clients from queueing unboundedly in the engine;
    /// the engine's own admission control decides about KV space.
    pub fn reserve(&self, n: usize) -> Result<Slots, crate::ApiError> {
        let s = &self.0;
        let max = s.opts.max_queued;
        let (slots, before) = Slots::take(&s.queued, n);
        if before + n > max {
            drop(slots);
            s.rejections.rejected(429);
            let e: crate::ApiError = crate::error::Error::Overloaded(format!("server overloaded: {before} requests queued, {n} more would exceed the limit of {max} (--max-queued-requests); retry later")).into();
            return Err(e.retry_after(self.retry_after(before + n)));
        }
        Ok(slots)
    }

    /// The JSON parse budget of a body (see `json_budget`), read before its model is
    /// known: the single-model server's limits; with several models, the widest of the
    /// loaded models' and at least 128 Ki tokens of context and a 256 Ki vocabulary (the
    /// model a body names may not be loaded yet).
    pub fn body_budget(&self) -> crate::json_budget::JsonBudget {
        let loaded = self.0.models.loaded();
        if let (true, [m]) = (self.0.models.is_single(), loaded.as_slice()) {
            let info = &m.engine.info;
            return crate::json_budget::JsonBudget::new(
                info.context_length,
                info.vocab_size,
                m.capacity().max_model_len(),
            );
        }
        let widest = |f: &dyn Fn(&crate::models::Served) -> usize, floor: usize| {
            loaded.iter().map(|m| f(m)).max().unwrap_or(0).max(floor)
        };
        crate::json_budget::JsonBudget::new(
            widest(&|m| m.engine.info.context_length, 1 << 17),
            widest(&|m| m.engine.info.vocab_size, 1 << 18),
            widest(&|m| m.capacity().max_model_len(), 1 << 17),
        )
    }
}

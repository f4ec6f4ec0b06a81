//! What every handler shares: the engine handle, the options, the server's metrics, and
//! the counters behind the queue limit and the drain.

use crate::metrics::ServerMetrics;
use crate::params::Limits;
use crate::ServerOptions;
use folio_engine::EngineHandle;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Cheap to clone: one `Arc`.
#[derive(Clone)]
pub struct AppState(pub Arc<Shared>);

pub struct Shared {
    pub engine: EngineHandle,
    pub opts: ServerOptions,
    /// Which Host headers are accepted (from `opts.allowed_hosts` and the bound address).
    pub hosts: crate::guard::HostPolicy,
    /// The name clients see in `model` fields and /v1/models: the engine's served name.
    pub model_name: String,
    pub metrics: ServerMetrics,
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
    /// `bound`: the address the server listens on (it decides the Host policy).
    pub fn new(engine: EngineHandle, opts: ServerOptions, bound: std::net::IpAddr) -> AppState {
        let model_name = engine.info.model_name.clone();
        let metrics = ServerMetrics::new(engine.info.context_length);
        let hosts = crate::guard::HostPolicy::new(bound, &opts.allowed_hosts);
        AppState(Arc::new(Shared {
            engine,
            hosts,
            model_name,
            metrics,
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

    /// A request the engine refused (before its first token): counted, and its answer.
    pub fn refused(&self, reason: folio_engine::FinishReason) -> crate::error::ApiError {
        let e = crate::error::ApiError::refusal(reason);
        self.0.metrics.rejected(e.status.as_u16());
        let ahead = self.0.queued.load(Ordering::Relaxed);
        e.retry_after(self.retry_after(ahead))
    }

    /// A submit the engine refused after `submitted` (earlier prompts of the same
    /// request) went in: those are aborted, the refusal counted.
    pub fn submit_failed(
        &self,
        submitted: &[folio_engine::RequestStream],
        e: folio_engine::SubmitError,
    ) -> crate::error::ApiError {
        for rs in submitted {
            self.0.engine.abort(rs.id);
        }
        let e = crate::error::ApiError::from(e);
        self.0.metrics.rejected(e.status.as_u16());
        e
    }

    /// A new request's first check: while draining it is refused (503, counted).
    pub fn refuse_if_draining(&self) -> Result<(), crate::error::ApiError> {
        if self.draining() {
            self.0.metrics.rejected(503);
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
            s.metrics.rejected(429);
            let e: crate::ApiError = crate::error::Error::Overloaded(format!("server overloaded: {before} requests queued, {n} more would exceed the limit of {max} (--max-queued-requests); retry later")).into();
            return Err(e.retry_after(self.retry_after(before + n)));
        }
        Ok(slots)
    }

    /// What one request can use (context vs. KV pool).
    pub fn capacity(&self) -> crate::capacity::Capacity {
        crate::capacity::Capacity::of(&self.0.engine.info)
    }

    pub fn limits(&self) -> Limits {
        let info = &self.0.engine.info;
        Limits {
            context_length: info.context_length,
            vocab_size: info.vocab_size,
            max_n: self.0.opts.max_n,
        }
    }
}

//! The models a server knows, which of them are loaded, and the one place that decides
//! when one loads and unloads.
//!
//! A request asks for a model by name ([`Registry::lease`]); an unloaded one is loaded
//! then, on a blocking thread, and every request for it waits on that one load (with
//! `--load-timeout`). Before a load, idle models are unloaded, least recently used first,
//! until the new one fits `--models-max` and `--models-memory` (its GGUF file's size plus
//! the KV pool its engine config allocates); a model with a running request (a live
//! [`Lease`]) is never unloaded: the load then waits for one to go idle. An idle model is
//! unloaded when its keep-alive runs out (`--keep-alive`, or Ollama's per-request
//! `keep_alive`; 0 = as soon as it goes idle).
//!
//! Unloading shuts the engine down and joins its thread (which drops the weights and the
//! KV pool), then hands freed heap pages back to the system.
//!
//! NOTE: every model's engine computes on the one process-wide kernel thread pool
//! (`folio_kernels::pool::ThreadPool::global`), so two models computing at once take
//! turns on the same cores rather than each spawning a pool of its own and
//! oversubscribing them: each gets about half the throughput while the other runs.

use super::entry::{ModelEntry, ModelSource, ModelStatus};
use super::lease::Lease;
use super::served::Served;
use crate::error::{ApiError, Error};
use folio_engine::EngineHandle;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;

/// Builds a model's engine (blocking: reads the file, starts the engine thread). The
/// message of an error is shown to clients.
pub type Loader = Arc<dyn Fn(&ModelSource) -> Result<EngineHandle, String> + Send + Sync>;

/// When models load and unload.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Most models loaded (or loading) at once; 0: no limit.
    pub max_loaded: usize,
    /// Most bytes of weights + KV pools loaded at once; `None`: no limit.
    pub memory_bytes: Option<u64>,
    /// How long an idle model stays loaded; `None`: for ever; zero: it unloads as soon as
    /// its last request ends.
    pub keep_alive: Option<Duration>,
    /// How long a request waits for its model to load (or for room to load it).
    pub load_timeout: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_loaded: 0,
            memory_bytes: None,
            keep_alive: Some(Duration::from_secs(300)),
            load_timeout: Duration::from_secs(600),
        }
    }
}

/// What a load's waiters learn at its end: `Ok` loaded, `Err` why not.
type Outcome = Option<Result<(), String>>;

enum State {
    Unloaded,
    Loading(watch::Receiver<Outcome>),
    Loaded(Arc<Served>),
}

struct Slot {
    source: ModelSource,
    state: State,
    /// Live leases (running requests).
    busy: usize,
    /// Requests waiting for this model's load: a just-loaded model is not unloaded
    /// before they get it.
    waiting: usize,
    /// When it last went idle or was loaded (LRU order and the keep-alive timer).
    last_used: Instant,
    /// Ollama's `keep_alive` of the latest request that gave one (else the policy's).
    keep_alive: Option<Option<Duration>>,
    /// `POST /models/unload` came while it was busy: it goes when idle.
    unload_requested: bool,
    /// Started with the server without a loader (the single-model server): never unloaded.
    pinned: bool,
}

impl Slot {
    fn served(&self) -> Option<&Arc<Served>> {
        match &self.state {
            State::Loaded(s) => Some(s),
            _ => None,
        }
    }

    fn idle(&self) -> bool {
        self.busy == 0 && self.waiting == 0 && !self.pinned
    }

    fn memory(&self) -> u64 {
        match &self.state {
            State::Unloaded => 0,
            State::Loading(_) => self.source.estimate(),
            State::Loaded(s) => s.memory_bytes,
        }
    }

    /// When an idle loaded model expires.
    fn expires(&self, default: Option<Duration>) -> Option<Instant> {
        let ka = self.keep_alive.unwrap_or(default)?;
        (self.served().is_some() && self.busy == 0 && !self.pinned).then(|| self.last_used + ka)
    }
}

/// The known models and their loaded engines. Shared as `Arc<Registry>`.
pub struct Registry {
    slots: Mutex<Vec<Slot>>,
    loader: Option<Loader>,
    policy: Policy,
    /// The model a request without `model` gets.
    default: Option<String>,
}

/// Why a load cannot start now.
enum NoRoom {
    /// Every loaded model serves a request: wait for one to go idle.
    Busy,
    /// The model alone is larger than the budget.
    Never(String),
}

impl Registry {
    /// The single-model server: one engine, loaded for the server's lifetime.
    pub fn single(engine: EngineHandle) -> Arc<Registry> {
        // The file it was loaded from (Ollama's /api/tags, /api/show read its header); an
        // engine built in memory (tests) has none on disk.
        let path = std::path::PathBuf::from(&engine.info.model_path);
        let size_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
        let served = Served::new(engine, size_bytes);
        let source = ModelSource {
            name: served.name.clone(),
            path: path.is_file().then_some(path),
            size_bytes,
            kv_bytes: 0,
        };
        let default = Some(served.name.clone());
        Arc::new(Registry {
            slots: Mutex::new(vec![Slot {
                source,
                state: State::Loaded(Arc::new(served)),
                busy: 0,
                waiting: 0,
                last_used: Instant::now(),
                keep_alive: None,
                unload_requested: false,
                pinned: true,
            }]),
            loader: None,
            policy: Policy {
                keep_alive: None,
                ..Policy::default()
            },
            default,
        })
    }

    /// Many models, loaded on demand by `loader`. `default`: the model of requests that
    /// name none (else the only model, if there is one).
    pub fn new(
        sources: Vec<ModelSource>,
        default: Option<String>,
        loader: Loader,
        policy: Policy,
    ) -> Arc<Registry> {
        let default = default.or_else(|| match sources.as_slice() {
            [one] => Some(one.name.clone()),
            _ => None,
        });
        let slots = sources
            .into_iter()
            .map(|source| Slot {
                source,
                state: State::Unloaded,
                busy: 0,
                waiting: 0,
                last_used: Instant::now(),
                keep_alive: None,
                unload_requested: false,
                pinned: false,
            })
            .collect();
        Arc::new(Registry {
            slots: Mutex::new(slots),
            loader: Some(loader),
            policy,
            default,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this is the single-model server (one engine, never unloaded).
    pub fn is_single(&self) -> bool {
        self.loader.is_none()
    }

    /// The names served, as a 404 lists them.
    fn served_names(slots: &[Slot]) -> String {
        slots
            .iter()
            .map(|s| s.source.name.as_str())
            .collect::<Vec<_>>()
            .join("`, `")
    }

    /// The slot of `name`: `None` the default model; a model's name; or a LoRA adapter
    /// of a loaded model (its base model).
    fn resolve(&self, slots: &[Slot], name: Option<&str>) -> Result<usize, ApiError> {
        let name = match (name, &self.default) {
            (Some(n), _) => n,
            (None, Some(d)) => d.as_str(),
            (None, None) => {
                return Err(ApiError::param(
                    "model",
                    format!(
                        "is required: this server serves several models (`{}`)",
                        Self::served_names(slots)
                    ),
                ))
            }
        };
        if let Some(i) = slots.iter().position(|s| s.source.name == name) {
            return Ok(i);
        }
        if let Some(i) = slots
            .iter()
            .position(|s| s.served().is_some_and(|m| m.has_adapter(name)))
        {
            return Ok(i);
        }
        Err(ApiError::model_not_found(name, &Self::served_names(slots)))
    }

    /// The model `name` for one request (see `AppState::lease`).
    pub async fn lease(self: &Arc<Self>, name: Option<&str>) -> Result<Lease, ApiError> {
        let deadline = tokio::time::Instant::now() + self.policy.load_timeout;
        let mut i = usize::MAX;
        loop {
            let (wait, _waiting) = {
                let mut slots = self.lock();
                if i == usize::MAX {
                    i = self.resolve(&slots, name)?;
                }
                let slot = &mut slots[i];
                let wait = match &slot.state {
                    State::Loaded(s) => {
                        let s = s.clone();
                        slot.busy += 1;
                        slot.last_used = Instant::now();
                        return Ok(Lease::new(s, self.clone(), i));
                    }
                    State::Loading(rx) => Some(rx.clone()),
                    State::Unloaded => match self.start_load(&mut slots, i) {
                        Ok(rx) => Some(rx),
                        Err(NoRoom::Busy) => None,
                        Err(NoRoom::Never(reason)) => {
                            return Err(unavailable(&slots[i].source.name, reason))
                        }
                    },
                };
                // Counted under the same lock that saw the state: a load finishing now
                // cannot be unloaded before this request gets it.
                (wait, Waiting::new(self, &mut slots, i))
            };
            let timed_out = match wait {
                Some(mut rx) => {
                    match tokio::time::timeout_at(deadline, rx.wait_for(Option::is_some)).await {
                        Ok(Ok(outcome)) => {
                            if let Some(Err(m)) = &*outcome {
                                return Err(Error::ModelLoadFailed {
                                    model: self.name_of(i),
                                    message: m.clone(),
                                }
                                .into());
                            }
                            false
                        }
                        // The load task ended without a word (it panicked): try again.
                        Ok(Err(_)) => false,
                        Err(_) => true,
                    }
                }
                // No room yet: look again shortly (a lease ending makes room).
                None => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    tokio::time::Instant::now() >= deadline
                }
            };
            if timed_out {
                let t = self.policy.load_timeout.as_secs_f64();
                let reason = match self.lock()[i].state {
                    State::Loading(_) => format!("still loading after {t} s (--load-timeout)"),
                    _ => format!(
                        "no room to load it within {t} s (--load-timeout): every loaded model is serving requests (--models-max {}, --models-memory {})",
                        self.policy.max_loaded,
                        self.policy.memory_bytes.map_or("none".into(), |b| b.to_string())
                    ),
                };
                return Err(unavailable(&self.name_of(i), reason));
            }
        }
    }

    fn name_of(&self, i: usize) -> String {
        self.lock()[i].source.name.clone()
    }

    /// Makes room for slot `i` (unloading idle models, least recently used first) and
    /// starts its load on a blocking thread; the receiver learns the outcome.
    fn start_load(
        self: &Arc<Self>,
        slots: &mut [Slot],
        i: usize,
    ) -> Result<watch::Receiver<Outcome>, NoRoom> {
        let Some(loader) = self.loader.clone() else {
            return Err(NoRoom::Never(
                "it is not loaded and this server loads no models".into(),
            ));
        };
        let need = slots[i].source.estimate();
        if let Some(b) = self.policy.memory_bytes {
            if need > b {
                return Err(NoRoom::Never(format!(
                    "it needs {need} bytes (its file and KV pool), more than --models-memory {b}"
                )));
            }
        }
        let mut victims = Vec::new();
        loop {
            let in_memory = slots
                .iter()
                .filter(|s| !matches!(s.state, State::Unloaded))
                .count();
            let used: u64 = slots.iter().map(Slot::memory).sum();
            let over_count = self.policy.max_loaded > 0 && in_memory >= self.policy.max_loaded;
            let over_memory = self.policy.memory_bytes.is_some_and(|b| used + need > b);
            if !over_count && !over_memory {
                break;
            }
            let lru = slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.served().is_some() && s.idle())
                .min_by_key(|(_, s)| s.last_used)
                .map(|(j, _)| j);
            match lru {
                Some(j) => {
                    tracing::info!(model = %slots[j].source.name, for_model = %slots[i].source.name, "unloading the least recently used idle model to make room");
                    victims.extend(take_loaded(&mut slots[j]));
                }
                None => {
                    spawn_unloads(victims);
                    return Err(NoRoom::Busy);
                }
            }
        }
        let (tx, rx) = watch::channel(None);
        slots[i].state = State::Loading(rx.clone());
        let source = slots[i].source.clone();
        let reg = self.clone();
        tracing::info!(model = %source.name, "loading");
        tokio::task::spawn_blocking(move || {
            // The memory of the models making room is free before the new one takes its own.
            for v in victims {
                unload_now(v);
            }
            let started = Instant::now();
            let built = loader(&source);
            let outcome = reg.finish_load(i, &source, built);
            match &outcome {
                Ok(()) => {
                    tracing::info!(model = %source.name, secs = started.elapsed().as_secs_f64(), "loaded")
                }
                Err(e) => tracing::warn!(model = %source.name, error = %e, "load failed"),
            }
            let _ = tx.send(Some(outcome));
        });
        Ok(rx)
    }

    fn finish_load(
        &self,
        i: usize,
        source: &ModelSource,
        built: Result<EngineHandle, String>,
    ) -> Result<(), String> {
        let mut slots = self.lock();
        let slot = &mut slots[i];
        match built {
            Ok(engine) => {
                let served = Served::new(engine, source.size_bytes);
                slot.state = State::Loaded(Arc::new(served));
                slot.last_used = Instant::now();
                slot.unload_requested = false;
                Ok(())
            }
            Err(e) => {
                slot.state = State::Unloaded;
                Err(e)
            }
        }
    }

    /// A lease of slot `i` ended.
    pub(super) fn release(&self, i: usize) {
        let victim = {
            let mut slots = self.lock();
            let slot = &mut slots[i];
            slot.busy = slot.busy.saturating_sub(1);
            slot.last_used = Instant::now();
            let zero = slot.keep_alive.unwrap_or(self.policy.keep_alive) == Some(Duration::ZERO);
            if slot.idle() && (slot.unload_requested || zero) {
                take_loaded(slot)
            } else {
                None
            }
        };
        spawn_unloads(victim.into_iter().collect());
    }

    /// Unloads every idle model whose keep-alive ran out (the reaper calls this).
    pub fn reap(&self) {
        let now = Instant::now();
        let victims: Vec<_> = {
            let mut slots = self.lock();
            slots
                .iter_mut()
                .filter(|s| s.idle() && s.expires(self.policy.keep_alive).is_some_and(|t| t <= now))
                .filter_map(take_loaded)
                .collect()
        };
        spawn_unloads(victims);
    }

    /// Every known model, in the order given at start.
    pub fn list(&self) -> Vec<ModelEntry> {
        let now = Instant::now();
        let wall = SystemTime::now();
        self.lock()
            .iter()
            .map(|s| {
                let status = match s.state {
                    State::Unloaded => ModelStatus::Unloaded,
                    State::Loading(_) => ModelStatus::Loading,
                    State::Loaded(_) => ModelStatus::Loaded,
                };
                ModelEntry {
                    name: s.source.name.clone(),
                    path: s.source.path.clone(),
                    size_bytes: s.source.size_bytes,
                    status,
                    expires_at: s
                        .expires(self.policy.keep_alive)
                        .map(|t| wall + t.saturating_duration_since(now)),
                    memory_bytes: s.served().map_or(0, |m| m.memory_bytes),
                    context_length: s.served().map(|m| m.engine.info.context_length),
                }
            })
            .collect()
    }

    /// The loaded models, for `/metrics` and the adapter cards.
    pub fn loaded(&self) -> Vec<Arc<Served>> {
        self.lock()
            .iter()
            .filter_map(|s| s.served().cloned())
            .collect()
    }

    /// Loads `name` now (waiting for it) and keeps it as a request would.
    pub async fn load(self: &Arc<Self>, name: &str) -> Result<(), ApiError> {
        self.lease(Some(name)).await.map(drop)
    }

    /// Unloads `name` now if idle, else as soon as its running requests end.
    pub fn unload(&self, name: &str) -> Result<(), ApiError> {
        let victim = {
            let mut slots = self.lock();
            let i = self.resolve(&slots, Some(name))?;
            let slot = &mut slots[i];
            if slot.pinned {
                return Err(ApiError::param(
                    "model",
                    format!("`{name}` is the model this server was started with; it cannot be unloaded (start with --models-dir or --model NAME=PATH to load and unload models)"),
                ));
            }
            if slot.busy == 0 {
                take_loaded(slot)
            } else {
                slot.unload_requested = true;
                None
            }
        };
        spawn_unloads(victim.into_iter().collect());
        Ok(())
    }

    /// Ollama's `keep_alive`: `name`'s idle lifetime from now on (zero: unload when idle).
    pub fn keep_alive(&self, name: &str, d: Duration) {
        let victim = {
            let mut slots = self.lock();
            let Ok(i) = self.resolve(&slots, Some(name)) else {
                return;
            };
            let slot = &mut slots[i];
            slot.keep_alive = Some(Some(d));
            slot.last_used = Instant::now();
            if d.is_zero() && slot.idle() {
                take_loaded(slot)
            } else {
                None
            }
        };
        spawn_unloads(victim.into_iter().collect());
    }

    /// Shuts every loaded engine down (the server stops).
    pub fn shutdown(&self) {
        for m in self.loaded() {
            m.engine.shutdown();
        }
    }
}

/// Counts a request waiting for slot `i` while it lives.
struct Waiting<'a> {
    reg: &'a Registry,
    i: usize,
}

impl<'a> Waiting<'a> {
    fn new(reg: &'a Registry, slots: &mut [Slot], i: usize) -> Waiting<'a> {
        slots[i].waiting += 1;
        Waiting { reg, i }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut slots = self.reg.lock();
        slots[self.i].waiting = slots[self.i].waiting.saturating_sub(1);
    }
}

fn unavailable(model: &str, reason: String) -> ApiError {
    Error::ModelUnavailable {
        model: model.into(),
        reason,
    }
    .into()
}

/// Takes a loaded model out of its slot (the slot is unloaded from now on).
fn take_loaded(slot: &mut Slot) -> Option<Arc<Served>> {
    if slot.served().is_none() || slot.pinned {
        return None;
    }
    slot.unload_requested = false;
    match std::mem::replace(&mut slot.state, State::Unloaded) {
        State::Loaded(s) => Some(s),
        _ => None,
    }
}

/// Unloads on a thread of their own (joining an engine thread blocks).
fn spawn_unloads(victims: Vec<Arc<Served>>) {
    if victims.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("folio-unload".into())
        .spawn(move || victims.into_iter().for_each(unload_now));
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the unload thread");
    }
}

/// Shuts the engine down, waits for its thread (which drops the weights and the KV
/// pool), drops the rest, and gives freed heap pages back to the system.
fn unload_now(served: Arc<Served>) {
    let name = served.name.clone();
    served.engine.shutdown_and_join();
    drop(served);
    give_back_heap();
    tracing::info!(model = %name, "unloaded");
}

/// glibc keeps freed memory in its arenas (the weights were allocated in large blocks
/// below the mmap threshold once it had grown); `malloc_trim` returns whole free pages.
fn give_back_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator.
    unsafe {
        libc::malloc_trim(0);
    }
}

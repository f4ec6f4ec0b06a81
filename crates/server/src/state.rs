//! What every handler shares: the engine handle, the options, the server's metrics.

use crate::metrics::ServerMetrics;
use crate::params::Limits;
use crate::ServerOptions;
use folio_engine::EngineHandle;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Cheap to clone: one `Arc`.
#[derive(Clone)]
pub struct AppState(pub Arc<Shared>);

pub struct Shared {
    pub engine: EngineHandle,
    pub opts: ServerOptions,
    /// The name clients see in `model` fields and /v1/models.
    pub model_name: String,
    pub metrics: ServerMetrics,
    /// Unix seconds at startup (the `created` of /v1/models).
    pub started: u64,
    /// Engine requests (choices) submitted through this server and not yet finished.
    in_flight: Arc<AtomicUsize>,
}

/// A reservation of `n` in-flight slots, returned on drop.
pub struct InFlight {
    counter: Arc<AtomicUsize>,
    n: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.n, Ordering::Relaxed);
    }
}

impl AppState {
    pub fn new(engine: EngineHandle, opts: ServerOptions) -> AppState {
        let model_name = opts
            .served_model_name
            .clone()
            .unwrap_or_else(|| engine.info.model_name.clone());
        let metrics = ServerMetrics::new(engine.info.context_length);
        AppState(Arc::new(Shared {
            engine,
            opts,
            model_name,
            metrics,
            started: crate::openai::unix_now(),
            in_flight: Arc::new(AtomicUsize::new(0)),
        }))
    }

    /// Reserves `n` in-flight slots, or explains why the server is overloaded (429).
    /// NOTE: this bound keeps a flood of clients from queueing unboundedly in the engine;
    /// the engine's own admission control decides about KV space.
    pub fn reserve(&self, n: usize) -> Result<InFlight, crate::ApiError> {
        let s = &self.0;
        let max = s.opts.max_in_flight;
        let before = s.in_flight.fetch_add(n, Ordering::Relaxed);
        let permit = InFlight {
            counter: s.in_flight.clone(),
            n,
        };
        if before + n > max {
            drop(permit);
            s.metrics.rejected(429);
            return Err(crate::ApiError::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                format!("server overloaded: {before} requests in flight, {n} more would exceed the limit of {max}; retry later"),
                "overloaded",
            ));
        }
        Ok(permit)
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

//! Where requests' grammars and schemas are compiled: a few at once, each on a detached
//! thread of its own with a large stack, with a bounded queue and a time budget.
//!
//! A compile is CPU-bound, can take seconds and ~200 MB (within
//! [`folio_engine::GrammarLimits`]), and cannot be interrupted once llguidance runs it.
//! So:
//! - at most `slots` run at once, so a flood of them cannot take every core from the
//!   engine thread (a running stream's tokens) or stack up their memory; at most `queue`
//!   more wait for a turn, and the rest are refused at once (503);
//! - the wait and the compile share one budget: a request is answered 503 if its turn did
//!   not come in time, 400 naming the budget if its compile did not finish in time;
//! - a client that leaves drops its wait: a compile that has not started never starts,
//!   one that has runs to its (bounded) end holding its slot, so the CPU in use stays
//!   bounded by `slots`;
//! - the thread is a detached `std::thread` with [`COMPILE_STACK_BYTES`] of stack, not a
//!   tokio blocking task: the runtime's shutdown never waits for a compile, and llguidance's
//!   recursion has room (a 2 MiB blocking-pool stack overflowed at 700 chained rules,
//!   aborting the process).

use crate::constraint::Structured;
use crate::error::ApiError;
use folio_engine::{CompileError, Compiled, Grammars, COMPILE_STACK_BYTES};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Bounds on the compiles of one server.
pub struct GrammarCompiler {
    slots: Arc<Semaphore>,
    n_slots: usize,
    /// Compiles running or waiting for a slot.
    pending: Arc<AtomicUsize>,
    max_queue: usize,
    budget: Duration,
}

/// Compiles at once by default: a quarter of the cores (at least one, at most four), so
/// the engine keeps most of the machine.
pub fn default_slots() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / 4).clamp(1, 4)
}

/// Sets the flag when the request's future is dropped (the client left) or done.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Gives a pending place back on drop.
struct Pending(Arc<AtomicUsize>);

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl GrammarCompiler {
    /// `slots` compiles at once (0: [`default_slots`]), `queue` more waiting, `budget` for
    /// the wait and the compile together.
    pub fn new(slots: usize, queue: usize, budget: Duration) -> GrammarCompiler {
        let n_slots = if slots == 0 { default_slots() } else { slots };
        GrammarCompiler {
            slots: Arc::new(Semaphore::new(n_slots)),
            n_slots,
            pending: Arc::new(AtomicUsize::new(0)),
            max_queue: queue,
            budget,
        }
    }

    /// Compiles `s` into the matcher every request of this call starts from. A constraint
    /// over a size limit or one llguidance refuses is a 400 naming the field; a full queue
    /// or a turn that did not come within the budget a 503.
    pub async fn compile(
        &self,
        grammars: &Arc<Grammars>,
        s: &Structured,
    ) -> Result<Compiled, ApiError> {
        // Over a limit: refused before it takes a place in the queue.
        grammars
            .limits()
            .check(&s.constraint)
            .map_err(|e| ApiError::param(&s.field, e))?;
        let deadline = tokio::time::Instant::now() + self.budget;
        let max = self.n_slots + self.max_queue;
        let before = self.pending.fetch_add(1, Ordering::Relaxed);
        let _pending = Pending(self.pending.clone());
        if before >= max {
            return Err(busy(format!(
                "grammar compiler busy: {before} compiles running or waiting, the limit is \
                 {max} ({} at once, {} waiting); retry later",
                self.n_slots, self.max_queue
            )));
        }
        let permit = tokio::time::timeout_at(deadline, self.slots.clone().acquire_owned())
            .await
            .map_err(|_| {
                busy(format!(
                    "grammar compiler busy: no compile slot came free within the budget of \
                     {:.0} s; retry later",
                    self.budget.as_secs_f64()
                ))
            })?
            .expect("the compile semaphore is never closed");
        let cancel = CancelOnDrop(Arc::new(AtomicBool::new(false)));
        let flag = cancel.0.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let g = grammars.clone();
        let c = s.constraint.clone();
        std::thread::Builder::new()
            .name("folio-grammar".into())
            .stack_size(COMPILE_STACK_BYTES)
            .spawn(move || {
                let _permit = permit;
                // The client left while the thread started: do not start the compile.
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                let _ = tx.send(g.compile(&c));
            })
            .map_err(|e| busy(format!("cannot start a grammar compile thread: {e}")))?;
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(Ok(compiled))) => Ok(compiled),
            Ok(Ok(Err(CompileError::Limit(e)))) => Err(ApiError::param(&s.field, e)),
            Ok(Ok(Err(e))) => Err(ApiError::param(
                &s.field,
                format!("cannot be compiled: {e}"),
            )),
            Ok(Err(_)) => Err(ApiError::from(crate::error::Error::Internal(
                "the grammar compile thread ended without an answer".into(),
            ))),
            Err(_) => Err(ApiError::param(
                &s.field,
                format!(
                    "cannot be compiled within the time budget of {:.0} s (waiting included); \
                     simplify it",
                    self.budget.as_secs_f64()
                ),
            )),
        }
    }
}

fn busy(message: String) -> ApiError {
    crate::error::Error::GrammarCompilerBusy(message).into()
}

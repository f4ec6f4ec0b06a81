//! A persistent thread pool for data-parallel kernels.
//!
//! Decode at batch 1 issues ~200 matmuls per token, each a few microseconds long, so a
//! per-call thread spawn (tens of microseconds) would dominate. Workers here stay alive,
//! spin for a short while after each job (the next matmul usually arrives within
//! microseconds) and then park on a condvar so an idle server costs no CPU.
//!
//! Protocol (one job at a time, callers serialized by `call_lock`). One atomic word
//! `state = epoch << 33 | closed << 32 | joined` orders everything:
//! ```text
//! caller: write job slot -> state = (epoch+1, open, 0) (Release) -> wake parked workers
//!         -> take tasks from `next` -> set `closed` -> wait until joined == 0
//! worker: sees a new open epoch -> CAS joined += 1 (joins; Acquire) -> take tasks
//!         -> joined -= 1 (Release). A worker that arrives after `closed` skips the job.
//! ```
//! Tasks are taken from a shared counter, so the job completes whoever shows up; the
//! caller never waits for a worker that is parked or descheduled (on a busy 2-core machine
//! that wait would cost a scheduler time slice), only for those that joined. The borrowed
//! closure's lifetime is erased in the slot, which is sound because no worker can join
//! after `closed` and the caller waits for every joined worker before returning.

use std::cell::{Cell, UnsafeCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking. Long enough to bridge the gap between
/// consecutive kernels of one decode step, short enough not to burn a core when idle.
const SPIN: Duration = Duration::from_micros(200);

/// The process-wide pool ([`ThreadPool::global`]) and the count it is to be built with.
static GLOBAL: OnceLock<ThreadPool> = OnceLock::new();
static GLOBAL_THREADS: OnceLock<usize> = OnceLock::new();

thread_local! {
    /// True while this thread executes pool tasks; a nested `run` then runs inline
    /// instead of waiting on a lock its own caller holds.
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
}

type Task = dyn Fn(usize) + Sync;

const CLOSED: u64 = 1 << 32;
const JOINED: u64 = CLOSED - 1;
const EPOCH_SHIFT: u32 = 33;

/// The job slot; written by the caller only while no worker is looking at it.
struct Job {
    f: Option<*const Task>,
    n_tasks: usize,
}

struct Shared {
    /// `epoch << 33 | closed << 32 | joined` (see the module doc).
    state: AtomicU64,
    job: UnsafeCell<Job>,
    next: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// Number of parked workers; a Mutex (not an atomic) so that "check epoch, then park"
    /// and "bump epoch, then notify" cannot interleave into a lost wake-up.
    sleepers: Mutex<usize>,
    wake: Condvar,
}

// SAFETY: `job` is only written while no worker has joined and none can (see module doc),
// and the closure it points to is `Sync`.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

/// Runs `f(first, chunk)` over `out` cut into runs of whole `unit`-element units (unit
/// `first` is the chunk's first), one run per core on scoped threads, each at least
/// `min_units` units (fewer units, or one core: all on the calling thread). For the
/// one-off work of loading a model (repacking, decoding weights), which runs before any
/// [`ThreadPool`] is configured and must not start one. Empty units (a matrix of no
/// columns) leave nothing to split: `f(0, out)` on the calling thread.
pub fn split_over_cores<T: Send>(
    out: &mut [T],
    unit: usize,
    min_units: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    if unit == 0 {
        return f(0, out);
    }
    assert!(
        out.len().is_multiple_of(unit),
        "split_over_cores: {} elements are not whole units of {unit}",
        out.len()
    );
    let units = out.len() / unit;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = units.div_ceil(cores).max(min_units).max(1);
    if units <= per {
        return f(0, out);
    }
    std::thread::scope(|scope| {
        for (i, chunk) in out.chunks_mut(per * unit).enumerate() {
            let f = &f;
            scope.spawn(move || f(i * per, chunk));
        }
    });
}

/// A fixed set of worker threads plus the calling thread, running `f(0..n_tasks)`.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serializes callers from different threads: one job slot.
    call_lock: Mutex<()>,
}

impl ThreadPool {
    /// A pool whose `run` uses `n_threads` threads in all (the caller is one of them), so
    /// `new(1)` starts no thread. `0` is treated as 1.
    pub fn new(n_threads: usize) -> ThreadPool {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(CLOSED),
            job: UnsafeCell::new(Job {
                f: None,
                n_tasks: 0,
            }),
            next: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            sleepers: Mutex::new(0),
            wake: Condvar::new(),
        });
        let workers = (1..n_threads.max(1))
            .map(|i| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("folio-worker-{i}"))
                    .spawn(move || worker_loop(&s))
                    .expect("spawning a pool worker thread (out of threads?)")
            })
            .collect();
        ThreadPool {
            shared,
            workers,
            call_lock: Mutex::new(()),
        }
    }

    /// The process-wide pool: the count given to [`ThreadPool::configure_global`] (the
    /// `--threads` flag), else `FOLIO_THREADS`, else `available_parallelism`.
    pub fn global() -> &'static ThreadPool {
        GLOBAL.get_or_init(|| {
            let n = GLOBAL_THREADS
                .get()
                .copied()
                .or_else(|| {
                    std::env::var("FOLIO_THREADS")
                        .ok()
                        .and_then(|s| s.trim().parse::<usize>().ok())
                })
                .filter(|&n| n > 0)
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            ThreadPool::new(n)
        })
    }

    /// Sets the global pool's thread count before its first use. Several replicas on one
    /// machine each want a share of the cores: pools whose spinning workers outnumber the
    /// cores wait on threads the scheduler has parked. Err(current count) once the pool
    /// exists with another count.
    pub fn configure_global(n: usize) -> Result<(), usize> {
        let n = n.max(1);
        let _ = GLOBAL_THREADS.set(n);
        let have = ThreadPool::global().n_threads();
        if have == n {
            Ok(())
        } else {
            Err(have)
        }
    }

    /// Threads taking part in `run` (workers + the caller).
    pub fn n_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Calls `f(i)` exactly once for each `i in 0..n_tasks`, spread over the workers and
    /// the calling thread; returns when all calls have finished. Tasks are handed out
    /// dynamically (an atomic counter), so uneven tasks balance themselves.
    ///
    /// Runs inline when `n_tasks <= 1`, when the pool has no workers, or when called from
    /// inside a pool task (nesting). If a task panics, the panic is re-raised here after
    /// every other task has finished.
    pub fn run(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if n_tasks == 0 {
            return;
        }
        if n_tasks == 1 || self.workers.is_empty() || IN_POOL.with(|c| c.get()) {
            (0..n_tasks).for_each(f);
            return;
        }
        let _serial = self.call_lock.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY: the previous job is closed with no joined worker (its caller waited for
        // that), and no worker can join before the state store below, so nobody reads
        // the slot now. The lifetime is erased; `run` waits for every worker before
        // returning, so the pointer is never used after `f` dies.
        unsafe {
            let ptr = std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const Task>(f);
            *s.job.get() = Job {
                f: Some(ptr),
                n_tasks,
            };
        }
        s.next.store(0, Ordering::Relaxed);
        s.panicked.store(false, Ordering::Relaxed);
        let epoch = (s.state.load(Ordering::Relaxed) >> EPOCH_SHIFT) + 1;
        s.state.store(epoch << EPOCH_SHIFT, Ordering::Release);
        {
            let sleepers = s.sleepers.lock().unwrap_or_else(|e| e.into_inner());
            if *sleepers > 0 {
                s.wake.notify_all();
            }
        }
        IN_POOL.with(|c| c.set(true));
        let mine = catch_unwind(AssertUnwindSafe(|| take_tasks(s, f, n_tasks)));
        IN_POOL.with(|c| c.set(false));
        s.state.fetch_or(CLOSED, Ordering::AcqRel);
        let mut spins = 0u32;
        while s.state.load(Ordering::Acquire) & JOINED != 0 {
            spins += 1;
            if spins < 1 << 16 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.load(Ordering::Relaxed) {
            panic!("a ThreadPool task panicked on a worker thread");
        }
    }
}

fn take_tasks(s: &Shared, f: &(dyn Fn(usize) + Sync), n_tasks: usize) {
    loop {
        let i = s.next.fetch_add(1, Ordering::Relaxed);
        if i >= n_tasks {
            return;
        }
        f(i);
    }
}

fn worker_loop(s: &Shared) {
    IN_POOL.with(|c| c.set(true));
    let mut seen = 0u64;
    loop {
        // Wait for a new epoch: spin first, then park.
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            let st = s.state.load(Ordering::Acquire);
            let epoch = st >> EPOCH_SHIFT;
            if epoch != seen {
                if st & CLOSED != 0 {
                    seen = epoch; // missed it: the caller already finished
                    continue;
                }
                if s.state
                    .compare_exchange_weak(st, st + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    seen = epoch;
                    break;
                }
                continue;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(64) || start.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            let mut sleepers = s.sleepers.lock().unwrap_or_else(|e| e.into_inner());
            if s.state.load(Ordering::Acquire) >> EPOCH_SHIFT != seen
                || s.shutdown.load(Ordering::Acquire)
            {
                continue;
            }
            *sleepers += 1;
            let mut sleepers = s.wake.wait(sleepers).unwrap_or_else(|e| e.into_inner());
            *sleepers -= 1;
        }
        // SAFETY: joining (the CAS above, Acquire) happened while the job was open, which
        // publishes the slot; the caller keeps the closure alive until `joined` is 0 again.
        let (f, n_tasks) = unsafe {
            let job = &*s.job.get();
            (
                &*job.f.expect("an open epoch always comes with a job"),
                job.n_tasks,
            )
        };
        if catch_unwind(AssertUnwindSafe(|| take_tasks(s, f, n_tasks))).is_err() {
            s.panicked.store(true, Ordering::Relaxed);
        }
        s.state.fetch_sub(1, Ordering::Release);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        {
            let _g = self
                .shared
                .sleepers
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("n_threads", &self.n_threads())
            .finish()
    }
}

/// A raw pointer that tasks may share to write disjoint parts of one buffer.
///
/// NOTE: `&mut` slices cannot express "task i writes rows i*16.. of every batch row"
/// (strided, interleaved regions), so kernels pass this and uphold disjointness by hand.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub *mut T);
impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the `Sync` wrapper, not the raw field).
    pub fn get(self) -> *mut T {
        self.0
    }
}
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

#[cfg(test)]
mod tests {
    use super::split_over_cores;

    /// Every unit is handed out once, at its own index, whatever the split; a unit of no
    /// elements runs once on the calling thread.
    #[test]
    fn split_over_cores_hands_out_every_unit_once_at_its_index() {
        for (units, unit, min_units) in [(0, 3, 1), (1, 3, 1), (7, 3, 1), (100, 5, 8), (9, 2, 64)] {
            let mut out = vec![usize::MAX; units * unit];
            split_over_cores(&mut out, unit, min_units, |first, chunk| {
                assert_eq!(chunk.len() % unit, 0);
                for (i, v) in chunk.iter_mut().enumerate() {
                    assert_eq!(*v, usize::MAX, "element written twice");
                    *v = (first + i / unit) * unit + i % unit;
                }
            });
            assert_eq!(
                out,
                (0..units * unit).collect::<Vec<_>>(),
                "{units} x {unit}"
            );
        }
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let mut empty: Vec<u8> = Vec::new();
        split_over_cores(&mut empty, 0, 8, |first, chunk| {
            assert_eq!((first, chunk.len()), (0, 0));
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        assert_eq!(calls.into_inner(), 1);
    }
}

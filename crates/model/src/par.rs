//! Row-parallel loops for the per-token work between matmuls (norms, RoPE, residual adds,
//! SwiGLU). Done on one thread, that work left the other core spinning in the pool at
//! every layer; spread over the pool it overlaps like the matmuls do.

use crate::attention::SyncPtr;
use folio_kernels::pool::ThreadPool;
use std::ops::Range;

/// Below this many rows the hand-off to the pool costs more than the work.
const MIN_ROWS: usize = 4;

/// Calls `f` on disjoint ranges of `0..n` covering it, in parallel on `pool` when `n` is
/// large enough.
pub(crate) fn ranges(pool: &ThreadPool, n: usize, f: &(dyn Fn(Range<usize>) + Sync)) {
    if n < MIN_ROWS || pool.n_threads() == 1 {
        return f(0..n);
    }
    let tasks = n.min(pool.n_threads() * 2);
    let per = n.div_ceil(tasks);
    pool.run(tasks, &|t| {
        let r = (t * per).min(n)..((t + 1) * per).min(n);
        if !r.is_empty() {
            f(r)
        }
    });
}

/// A row-major buffer whose rows tasks of [`ranges`] write, each its own rows. Holds the
/// buffer's mutable borrow for `'a`, so the buffer cannot be used or dropped meanwhile.
#[derive(Clone, Copy)]
pub(crate) struct Rows<'a> {
    ptr: SyncPtr,
    width: usize,
    n: usize,
    _buf: std::marker::PhantomData<&'a mut [f32]>,
}

impl<'a> Rows<'a> {
    pub fn new(buf: &'a mut [f32], width: usize) -> Rows<'a> {
        assert!(width > 0 && buf.len().is_multiple_of(width));
        Rows {
            ptr: SyncPtr(buf.as_mut_ptr()),
            width,
            n: buf.len() / width,
            _buf: std::marker::PhantomData,
        }
    }

    /// Row `t`.
    ///
    /// # Safety
    /// No other live reference to row `t` (tasks of [`ranges`] touch only their own rows).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn row(&self, t: usize) -> &mut [f32] {
        self.range(t..t + 1)
    }

    /// Rows `r`, contiguous.
    ///
    /// # Safety
    /// No other live reference to these rows (tasks of [`ranges`] touch only their own).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range(&self, r: Range<usize>) -> &mut [f32] {
        assert!(
            r.start <= r.end && r.end <= self.n,
            "rows {r:?} of {}",
            self.n
        );
        std::slice::from_raw_parts_mut(
            self.ptr.get().add(r.start * self.width),
            r.len() * self.width,
        )
    }
}

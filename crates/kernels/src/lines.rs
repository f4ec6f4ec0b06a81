//! f32 buffers that start on a 64-byte cache line, and the per-thread kept ones that hot
//! paths reuse from call to call.
//!
//! A matmul writes its large batched outputs with streaming stores where every output
//! line is a whole cache line (`matmul::amx_panels`); that needs the buffer's first value
//! to start a line, which `Vec<f32>` does not promise. The FFN's gate-up output is one.
//!
//! A batched forward needs a few large scratch buffers (the gate-up output, 36 MB at a
//! 512-token chunk of the 1.5B; prefill attention's widened K/V rows and score tiles).
//! Allocated per call, each would fault its pages in again every layer; so each lives in a
//! `thread_local!` [`KeptLines`] slot, and a call [`Kept::take`]s it, sized, and gives it
//! back when the [`Kept`] drops (also on an early return or an unwinding panic).

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::thread::LocalKey;

/// One cache line of floats.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// `len` zero-initialised f32 values, the first at a 64-byte boundary.
#[derive(Clone, Default)]
pub struct Lines {
    lines: Vec<Line>,
    len: usize,
}

impl Lines {
    /// `len` zeros.
    pub fn zeroed(len: usize) -> Lines {
        Lines {
            lines: vec![Line([0.0; 16]); len.div_ceil(16)],
            len,
        }
    }

    /// Sets the length to `len` values, keeping the allocation: below the largest length
    /// the buffer has had, the values are whatever it held; above, zeros. For a buffer
    /// reused across calls by a kernel that overwrites what it uses (no zeroing pass, no
    /// fresh pages to fault in per use).
    pub fn set_len(&mut self, len: usize) {
        let lines = len.div_ceil(16);
        if lines > self.lines.len() {
            self.lines.resize(lines, Line([0.0; 16]));
        }
        self.len = len;
    }

    /// Values the allocation holds (at least `len`): what the buffer keeps in memory.
    pub fn capacity(&self) -> usize {
        self.lines.len() * 16
    }
}

impl Deref for Lines {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        // SAFETY: `lines` holds at least `len` contiguous, initialised f32s (a `Line` is
        // 16 f32s with no padding: 64 bytes, align 64).
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast(), self.len) }
    }
}

impl DerefMut for Lines {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as in `deref`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast(), self.len) }
    }
}

/// A thread's slot for a kept buffer: `thread_local! { static B: RefCell<Lines> = ... }`.
pub type KeptLines = LocalKey<RefCell<Lines>>;

/// The buffer of a [`KeptLines`] slot, out of it for one call; back in it when dropped.
pub struct Kept {
    slot: &'static KeptLines,
    lines: Lines,
}

impl Kept {
    /// Takes the slot's buffer (an empty one if it is out already: a nested call) and sets
    /// its length to `len` values ([`Lines::set_len`]: the values are stale below the
    /// largest length it has had, for callers that overwrite what they read).
    pub fn take(slot: &'static KeptLines, len: usize) -> Kept {
        let mut lines = slot.with(|b| std::mem::take(&mut *b.borrow_mut()));
        lines.set_len(len);
        Kept { slot, lines }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let lines = std::mem::take(&mut self.lines);
        // (At thread exit the slot may be gone: the buffer is then simply freed.)
        let _ = self.slot.try_with(|b| *b.borrow_mut() = lines);
    }
}

impl Deref for Kept {
    type Target = Lines;
    fn deref(&self) -> &Lines {
        &self.lines
    }
}

impl DerefMut for Kept {
    fn deref_mut(&mut self) -> &mut Lines {
        &mut self.lines
    }
}

/// Frees the slot's buffer if it holds more than `bytes`: for a buffer whose size follows
/// the context (so one long request would otherwise keep its peak for the thread's life).
pub fn release_above(slot: &'static KeptLines, bytes: usize) {
    slot.with(|b| {
        let mut b = b.borrow_mut();
        if b.capacity() * std::mem::size_of::<f32>() > bytes {
            *b = Lines::default();
        }
    });
}

impl std::fmt::Debug for Lines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lines").field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_on_a_line_holds_len_values_and_keeps_them_across_lengths() {
        let mut b = Lines::zeroed(37);
        assert_eq!(b.as_ptr() as usize % 64, 0);
        assert_eq!(b.len(), 37);
        assert!(b.iter().all(|&v| v == 0.0));
        b.fill(3.0);
        b.set_len(20);
        assert_eq!(b.len(), 20);
        let at = b.as_ptr();
        b.set_len(40);
        assert_eq!(b.len(), 40);
        // The 3 lines held so far keep their values; the line it grows by is zero.
        assert_eq!(&b[..37], &[3.0; 37]);
        assert!(b[37..].iter().all(|&v| v == 0.0), "{:?}", &b[37..]);
        b.set_len(48);
        assert_eq!(b.as_ptr(), at, "no new allocation within the lines held");
        assert_eq!(b.as_ptr() as usize % 64, 0);
        assert_eq!(Lines::zeroed(0).len(), 0);
    }

    thread_local! {
        static SLOT: RefCell<Lines> = RefCell::new(Lines::default());
    }

    fn slot_capacity() -> usize {
        SLOT.with(|b| b.borrow().capacity())
    }

    #[test]
    fn a_kept_buffer_goes_back_to_its_slot_even_on_an_early_return() {
        let at = {
            let mut k = Kept::take(&SLOT, 40);
            assert_eq!(k.len(), 40);
            k.fill(2.0);
            assert_eq!(slot_capacity(), 0, "out of the slot while taken");
            k.as_ptr()
        };
        assert_eq!(slot_capacity(), 48);
        let early = || -> Result<(), ()> {
            let k = Kept::take(&SLOT, 20);
            assert_eq!(k.as_ptr(), at, "the same allocation again");
            assert_eq!(&k[..20], &[2.0; 20]);
            Err(())
        };
        assert!(early().is_err());
        assert_eq!(slot_capacity(), 48, "given back by the early return");
        // A nested take gets an empty buffer and the outer one is what stays.
        {
            let _outer = Kept::take(&SLOT, 16);
            let inner = Kept::take(&SLOT, 8);
            assert_ne!(inner.as_ptr(), at);
        }
        assert_eq!(slot_capacity(), 48);
        release_above(&SLOT, 48 * 4);
        assert_eq!(slot_capacity(), 48, "kept at the limit");
        release_above(&SLOT, 47 * 4);
        assert_eq!(slot_capacity(), 0, "freed above it");
    }
}

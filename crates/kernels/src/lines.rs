//! f32 buffers that start on a 64-byte cache line.
//!
//! A matmul writes its large batched outputs with streaming stores where every output
//! line is a whole cache line (`matmul::amx_panels`); that needs the buffer's first value
//! to start a line, which `Vec<f32>` does not promise. The FFN's gate-up output is one.

use std::ops::{Deref, DerefMut};

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
}

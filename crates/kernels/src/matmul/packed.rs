//! The repacked weight layout the quantized kernels stream.
//!
//! Rows are grouped into *panels* of 16 (the last one zero-padded). A panel stores its
//! 32-column blocks one after another, so one matmul reads every byte exactly once, in order:
//! ```text
//! panel p:  [block 0][block 1]...[block nb-1]
//! block:    [codes: 16 rows x 32 k][d: 16 x f16][m: 16 x f16, only with stored mins]
//! 8-bit codes: byte  t*64 + r*4 + b       = u[row r][k = 4t + b]            (t in 0..8)
//! 4-bit codes: byte  i*64 + r*4 + b  low  = u[row r][k = 8i + b]            (i in 0..4)
//!                                    high = u[row r][k = 8i + 4 + b]
//! ```
//! so one 64-byte load (after unpacking nibbles) is exactly the `u8` operand of one
//! `vpdpbusd`: 16 rows x 4 consecutive k, against 4 activation bytes broadcast to all lanes.

use super::ggml::SubBlock;
use half::f16;

/// Rows per panel (lanes of a 512-bit register of i32 / f32).
pub(crate) const PANEL: usize = 16;

/// Which packed block form a matrix uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// 4-bit codes, f16 d and m (Q4_1).
    Q4MinF16,
    /// 4-bit codes, f16 d, min implicit `-8 d` (Q4_0).
    Q4SymF16,
    /// 8-bit codes `q + 128`, f16 d, min implicit `-128 d` (Q8_0).
    Q8SymF16,
}

impl Layout {
    pub const fn code4(self) -> bool {
        !matches!(self, Layout::Q8SymF16)
    }
    pub const fn stored_min(self) -> bool {
        matches!(self, Layout::Q4MinF16)
    }
    /// Code offset of the symmetric forms: `w = d * (u - offset)`.
    pub const fn offset(self) -> i32 {
        if self.code4() {
            8
        } else {
            128
        }
    }
    fn geometry(self) -> Geometry {
        Geometry::of(self.code4(), self.stored_min())
    }
    pub fn code_bytes(self) -> usize {
        self.geometry().code_bytes
    }
    pub fn scale_bytes(self) -> usize {
        self.geometry().scale_bytes
    }
    pub fn block_bytes(self) -> usize {
        self.geometry().block_bytes
    }
}

/// Byte sizes of one packed block, from the layout's three properties (a `const fn`, so the
/// kernels' const parameters give them at compile time).
pub(crate) struct Geometry {
    pub code_bytes: usize,
    /// One set of scales (`d`, or `m`): PANEL values.
    pub scale_bytes: usize,
    pub block_bytes: usize,
}

impl Geometry {
    pub const fn of(code4: bool, stored_min: bool) -> Geometry {
        let code_bytes = if code4 { 256 } else { 512 };
        let scale_bytes = PANEL * 2; // f16
        Geometry {
            code_bytes,
            scale_bytes,
            block_bytes: code_bytes + scale_bytes * (1 + stored_min as usize),
        }
    }
}

/// 64-byte aligned storage so no code load splits a cache line (both weight layouts).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Line(pub [u8; 64]);

/// A whole matrix in panel layout.
pub(crate) struct Packed {
    pub layout: Layout,
    /// 32-column blocks per row.
    pub nb: usize,
    pub panels: usize,
    lines: Vec<Line>,
}

impl Packed {
    /// Packs `rows` rows; `decode_row(r, out)` fills row r's `nb` sub-blocks.
    pub fn build(
        layout: Layout,
        rows: usize,
        nb: usize,
        mut decode_row: impl FnMut(usize, &mut [SubBlock]),
    ) -> Packed {
        let panels = rows.div_ceil(PANEL);
        let bb = layout.block_bytes();
        let total = panels * nb * bb;
        let mut lines = vec![Line([0; 64]); total.div_ceil(64)];
        // SAFETY: Line is plain bytes; the slice covers exactly the allocation's prefix.
        let bytes = unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr() as *mut u8, total) };
        let mut sbs = vec![SubBlock::ZERO; PANEL * nb];
        for p in 0..panels {
            for r in 0..PANEL {
                let row = p * PANEL + r;
                let dst = &mut sbs[r * nb..(r + 1) * nb];
                if row < rows {
                    decode_row(row, dst);
                } else {
                    dst.fill(SubBlock::ZERO);
                }
            }
            for b in 0..nb {
                let blk = &mut bytes[(p * nb + b) * bb..(p * nb + b + 1) * bb];
                write_block(layout, blk, |r| &sbs[r * nb + b]);
            }
        }
        Packed {
            layout,
            nb,
            panels,
            lines,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        let total = self.panels * self.nb * self.layout.block_bytes();
        // SAFETY: as in build.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr() as *const u8, total) }
    }

    /// Dequantizes row `row` into `out` (`nb * 32` values).
    pub fn row_f32(&self, row: usize, out: &mut [f32]) {
        let (p, r) = (row / PANEL, row % PANEL);
        let l = self.layout;
        let bb = l.block_bytes();
        let bytes = self.bytes();
        for b in 0..self.nb {
            let blk = &bytes[(p * self.nb + b) * bb..(p * self.nb + b + 1) * bb];
            let (d, m) = scales(l, blk, r);
            for k in 0..32 {
                let u = code(l, blk, r, k) as f32;
                out[b * 32 + k] = if l.stored_min() {
                    d * u + m
                } else {
                    d * (u - l.offset() as f32)
                };
            }
        }
    }
}

fn write_block<'a>(l: Layout, blk: &mut [u8], sb: impl Fn(usize) -> &'a SubBlock) {
    for r in 0..PANEL {
        let s = sb(r);
        for b in 0..4 {
            if l.code4() {
                for i in 0..4 {
                    blk[i * 64 + r * 4 + b] = (s.u[8 * i + b] & 0x0f) | (s.u[8 * i + 4 + b] << 4);
                }
            } else {
                for t in 0..8 {
                    blk[t * 64 + r * 4 + b] = s.u[4 * t + b];
                }
            }
        }
        let cb = l.code_bytes();
        let sbytes = l.scale_bytes();
        blk[cb + r * 2..cb + r * 2 + 2].copy_from_slice(&f16::from_f32(s.d).to_le_bytes());
        if l.stored_min() {
            let o = cb + sbytes + r * 2;
            blk[o..o + 2].copy_from_slice(&f16::from_f32(s.m).to_le_bytes());
        }
    }
}

/// Code `u` of row `r`, column `k` (0..32) of a packed block.
pub(crate) fn code(l: Layout, blk: &[u8], r: usize, k: usize) -> u8 {
    if l.code4() {
        let (i, hi, b) = (k / 8, (k % 8) / 4, k % 4);
        let byte = blk[i * 64 + r * 4 + b];
        if hi == 1 {
            byte >> 4
        } else {
            byte & 0x0f
        }
    } else {
        blk[(k / 4) * 64 + r * 4 + k % 4]
    }
}

/// `(d, m)` of row `r` of a packed block (m = 0 for symmetric layouts).
pub(crate) fn scales(l: Layout, blk: &[u8], r: usize) -> (f32, f32) {
    let cb = l.code_bytes();
    let sb = l.scale_bytes();
    let get = |o: usize| f16::from_le_bytes([blk[o], blk[o + 1]]).to_f32();
    let d = get(cb + r * 2);
    let m = if l.stored_min() {
        get(cb + sb + r * 2)
    } else {
        0.0
    };
    (d, m)
}

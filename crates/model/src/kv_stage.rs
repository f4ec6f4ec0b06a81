//! The f16 rows of pages whose per-channel keys ([`KvFormat::Q4c`]) are not encoded yet:
//! KIVI's full-precision residual, kept per page.
//!
//! A q4c page group needs all 16 of its rows to set each channel's range, so rows wait
//! here until the page fills, and the page is then encoded once into the cache and its
//! staging slot returned. Attention reads a staged page's f16 rows directly
//! ([`folio_kernels::attn::Staged`]). Only the tail page of each growing sequence is
//! staged, so the area holds about one page per running sequence; it grows on demand up
//! to [`MAX_STAGED`] pages per layer slot, and past that the page written longest ago is
//! encoded early with the rows it has (a page whose sequence ended mid-page is never
//! written again, so this is how its slot comes back).
//!
//! A write into an encoded page (a rewrite after speculative decoding rolled back, or the
//! next row of a page encoded early) decodes its rows back into a staging slot first; those
//! rows then carry one extra rounding.

use folio_kernels::attn::channel::{self, G, NONE};
use folio_kernels::attn::Staged;
use half::f16;

/// Staged pages per layer slot before the oldest is encoded early (memory: this many
/// pages of f16 keys per layer, allocated as used).
pub const MAX_STAGED: usize = 256;

/// Every row of a page written.
const FULL: u16 = u16::MAX;

/// One layer slot's staged pages.
#[derive(Debug, Default)]
pub struct KeyStage {
    heads: usize,
    head_dim: usize,
    /// Per physical block: its staging slot, or [`NONE`].
    slot_of: Vec<u32>,
    /// Per staging slot: `heads × G × head_dim` f16 values.
    rows: Vec<f16>,
    /// Per staging slot and head: the rows written (bit r).
    filled: Vec<u16>,
    /// Per staging slot: its block, or [`NONE`] when free.
    owner: Vec<u32>,
    /// Per staging slot: the write clock of its last write (the oldest is encoded early).
    last: Vec<u64>,
    free: Vec<u32>,
    clock: u64,
}

impl KeyStage {
    pub fn new(num_blocks: usize, heads: usize, head_dim: usize) -> KeyStage {
        KeyStage {
            heads,
            head_dim,
            slot_of: vec![NONE; num_blocks],
            ..KeyStage::default()
        }
    }

    /// What attention reads.
    pub fn view(&self) -> Staged<'_> {
        Staged {
            slot_of: &self.slot_of,
            rows: &self.rows,
            heads: self.heads,
        }
    }

    /// Staged pages now (for tests and metrics).
    pub fn staged(&self) -> usize {
        self.owner.iter().filter(|&&o| o != NONE).count()
    }

    fn page_values(&self) -> usize {
        self.heads * G * self.head_dim
    }

    /// Writes head `head`'s row `slot` of block `block` (`k`, `head_dim` values), staging
    /// the page first if it is not. When every row of every head is written, the page is
    /// encoded into `keys` (this layer slot's K bytes, pages of `page_bytes`).
    pub fn write(
        &mut self,
        keys: &mut [u8],
        page_bytes: usize,
        block: usize,
        head: usize,
        slot: usize,
        k: &[f32],
    ) {
        let s = self.stage(keys, page_bytes, block, slot);
        let hd = self.head_dim;
        let at = (s * self.heads + head) * G * hd + slot * hd;
        for (d, &x) in self.rows[at..at + hd].iter_mut().zip(k) {
            *d = f16::from_f32(x);
        }
        self.filled[s * self.heads + head] |= 1 << slot;
        self.clock += 1;
        self.last[s] = self.clock;
        if self.filled[s * self.heads..(s + 1) * self.heads]
            .iter()
            .all(|&m| m == FULL)
        {
            self.seal(keys, page_bytes, s);
        }
    }

    /// Head `head`'s row `slot` of block `block` as attention sees it, if the page is
    /// staged.
    pub fn read(&self, block: usize, head: usize, slot: usize, out: &mut [f32]) -> bool {
        let Some(page) = self.view().page(block, head, self.head_dim) else {
            return false;
        };
        for (o, x) in out.iter_mut().zip(&page[slot * self.head_dim..]) {
            *o = x.to_f32();
        }
        true
    }

    /// The staging slot of `block`, taken if the page had none, and then filled with the
    /// page's rows before `keep` decoded from its encoding (the rows a write at slot `keep`
    /// follows; the later ones are to be written again).
    fn stage(&mut self, keys: &mut [u8], page_bytes: usize, block: usize, keep: usize) -> usize {
        if self.slot_of[block] != NONE {
            return self.slot_of[block] as usize;
        }
        let s = match self.free.pop() {
            Some(s) => s as usize,
            None if self.owner.len() < MAX_STAGED => {
                let n = self.page_values();
                self.rows.resize(self.rows.len() + n, f16::ZERO);
                self.filled.resize(self.filled.len() + self.heads, 0);
                self.owner.push(NONE);
                self.last.push(0);
                self.owner.len() - 1
            }
            None => {
                let oldest = (0..self.owner.len())
                    .min_by_key(|&s| self.last[s])
                    .expect("MAX_STAGED > 0");
                self.seal(keys, page_bytes, oldest);
                self.free.pop().expect("seal frees its slot") as usize
            }
        };
        self.owner[s] = block as u32;
        self.slot_of[block] = s as u32;
        let (hd, heads) = (self.head_dim, self.heads);
        let n = self.page_values();
        let page = &mut self.rows[s * n..(s + 1) * n];
        page.fill(f16::ZERO);
        self.filled[s * heads..(s + 1) * heads].fill(0);
        if keep > 0 {
            // Earlier rows of an encoded page: decoded back, to be encoded again with the
            // rest.
            let mut row = vec![0f32; hd];
            let hb = page_bytes / heads;
            for h in 0..heads {
                let group = &keys[block * page_bytes + h * hb..][..hb];
                for r in 0..keep {
                    channel::decode_row(hd, group, r, &mut row);
                    for (d, &x) in page[(h * G + r) * hd..][..hd].iter_mut().zip(&row) {
                        *d = f16::from_f32(x);
                    }
                }
                self.filled[s * heads + h] = (1u16 << keep) - 1;
            }
        }
        s
    }

    /// Encodes staging slot `s`'s page into `keys` (the rows written so far) and frees it.
    fn seal(&mut self, keys: &mut [u8], page_bytes: usize, s: usize) {
        let block = self.owner[s] as usize;
        let hb = page_bytes / self.heads;
        let dst = &mut keys[block * page_bytes..(block + 1) * page_bytes];
        self.encode(s, dst, hb);
        self.slot_of[block] = NONE;
        self.owner[s] = NONE;
        self.free.push(s as u32);
    }

    /// Staging slot `s`'s page encoded into `dst` (every head's group, `hb` bytes each).
    fn encode(&self, s: usize, dst: &mut [u8], hb: usize) {
        let (hd, n) = (self.head_dim, self.page_values());
        let page = &self.rows[s * n..(s + 1) * n];
        let mut rows = vec![0f32; G * hd];
        for h in 0..self.heads {
            for (d, x) in rows.iter_mut().zip(&page[h * G * hd..(h + 1) * G * hd]) {
                *d = x.to_f32();
            }
            let mask = self.filled[s * self.heads + h];
            channel::encode_group(hd, &rows, mask, &mut dst[h * hb..(h + 1) * hb]);
        }
    }

    /// Block `block`'s K page as it would be encoded now: `keys`' bytes, or, if the page is
    /// staged, its rows encoded into a copy (the disk tier's payload).
    pub fn export(&self, keys: &[u8], page_bytes: usize, block: usize) -> Vec<u8> {
        let mut out = keys[block * page_bytes..(block + 1) * page_bytes].to_vec();
        if self.slot_of[block] != NONE {
            self.encode(
                self.slot_of[block] as usize,
                &mut out,
                page_bytes / self.heads,
            );
        }
        out
    }

    /// Forgets block `block`'s staged rows (its bytes were replaced whole: an import).
    pub fn drop_block(&mut self, block: usize) {
        let s = self.slot_of[block];
        if s != NONE {
            self.slot_of[block] = NONE;
            self.owner[s as usize] = NONE;
            self.free.push(s);
        }
    }

    /// Copy-on-write of the first `n_slots` rows of `src` into `dst`: a staged page's rows
    /// go to a staging slot of `dst`'s, an encoded page's bytes are copied as they are.
    pub fn copy(
        &mut self,
        keys: &mut [u8],
        page_bytes: usize,
        src: usize,
        dst: usize,
        n_slots: usize,
    ) {
        self.drop_block(dst);
        let from = self.slot_of[src];
        if from == NONE {
            keys.copy_within(src * page_bytes..(src + 1) * page_bytes, dst * page_bytes);
            return;
        }
        let to = self.stage(keys, page_bytes, dst, 0);
        // `stage` may have encoded `src` early to free a slot: copy whichever it is now.
        let from = self.slot_of[src];
        if from == NONE {
            self.drop_block(dst);
            keys.copy_within(src * page_bytes..(src + 1) * page_bytes, dst * page_bytes);
            return;
        }
        let n = self.page_values();
        self.rows
            .copy_within(from as usize * n..(from as usize + 1) * n, to * n);
        let keep: u16 = if n_slots >= 16 {
            FULL
        } else {
            (1 << n_slots) - 1
        };
        for h in 0..self.heads {
            self.filled[to * self.heads + h] = self.filled[from as usize * self.heads + h] & keep;
        }
        self.clock += 1;
        self.last[to] = self.clock;
    }
}

//! Paged KV storage: the bytes of every physical block (page), per slot, K in one
//! [`KvFormat`] and V in another ([`KvFormats`]).
//!
//! A page holds the K/V of [`KvLayout::slots`] layers; in the single layout that is every
//! layer and a page is a block of the whole model. Layer `l` lives in slot
//! `layout.slot(l)` of the pages of its group's block table (see [`crate::kv_layout`]).
//!
//! ```text
//! slot s, K (V alike):   [page 0][page 1] ... [page N-1]
//! one block:             [kv_head 0: slot 0..p rows][kv_head 1: ...] ...
//! one row:               head_dim values in the format (q8_0/q4_0/iq4_nl: groups of 32
//!                        along head_dim, each with its f16 scale; q4h/q8h rotated first)
//! ```
//! A latent cache ([`KvCache::new_latent`], multi-head latent attention) stores K rows only:
//! one head whose row is the compressed latent plus the shared RoPE key, read as both K
//! and V.
//! K and V rows have the same index in their buffers (block, head, slot); each side's
//! byte offset is that index times its own row size.
//! Heads are outermost inside a block so attention streams one head's rows contiguously.
//! A per-channel key format (q4c) encodes a block's K a whole page at a time, when its 16
//! rows are written; rows wait in f16 in a [`KeyStage`] until then.
//! Values are encoded when written ([`KvCache::write_row`]) and decoded by the attention
//! kernel as it reads them. Ownership of blocks (tables, ref counts, prefix cache) lives
//! in folio-core; this type only stores values at the slots it is told to.

use crate::kv_layout::KvLayout;
use crate::kv_stage::KeyStage;
use folio_kernels::attn::{self, PagedKv, Paging};

pub use folio_kernels::attn::{KvFormat, KvFormatRefused, KvFormats, KvRows};

/// The paged cache of one model: `num_blocks` pages of `block_size` token slots.
pub struct KvCache {
    /// K's and V's storage formats.
    pub formats: KvFormats,
    pub block_size: usize,
    pub num_blocks: usize,
    pub n_layers: usize,
    pub layout: KvLayout,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Bytes of one (token, head) row of K: `formats.k.row_bytes(head_dim)`.
    k_row_bytes: usize,
    /// Bytes of one (token, head) row of V (0 in a latent cache).
    v_row_bytes: usize,
    /// Values are the K rows themselves (MLA's latent): `v` holds nothing.
    v_is_k: bool,
    k: Vec<Vec<u8>>,
    v: Vec<Vec<u8>>,
    /// Per layer slot, the staged pages of a per-channel K format (empty otherwise).
    k_stage: Vec<KeyStage>,
}

impl KvCache {
    /// A cache of `num_blocks` pages laid out as `layout` says ([`KvLayout::single`]: one
    /// page = one block of every layer).
    pub fn new(
        layout: KvLayout,
        n_kv_heads: usize,
        head_dim: usize,
        block_size: usize,
        num_blocks: usize,
        formats: impl Into<KvFormats>,
    ) -> KvCache {
        let formats = formats.into();
        let (k_row_bytes, v_row_bytes) =
            (formats.k.row_bytes(head_dim), formats.v.row_bytes(head_dim));
        let rows = num_blocks * block_size * n_kv_heads;
        let slots = layout.slots();
        assert!(
            !formats.v.per_channel()
                && (!formats.k.per_channel()
                    || (block_size == KvFormat::CHANNEL_GROUP && head_dim.is_multiple_of(32))),
            "KvCache::new: {} needs pages of {} tokens and a head_dim multiple of 32 \
             (block_size {block_size}, head_dim {head_dim}); KvFormats::check_pages refuses it",
            formats.name(),
            KvFormat::CHANNEL_GROUP
        );
        let k_stage = match formats.k.per_channel() {
            true => (0..slots)
                .map(|_| KeyStage::new(num_blocks, n_kv_heads, head_dim))
                .collect(),
            false => Vec::new(),
        };
        KvCache {
            formats,
            block_size,
            num_blocks,
            n_layers: layout.n_layers(),
            layout,
            n_kv_heads,
            head_dim,
            k_row_bytes,
            v_row_bytes,
            v_is_k: false,
            // Zero bytes decode to 0.0 in every format (a zero scale for the quantized ones).
            k: (0..slots).map(|_| zeroed(rows * k_row_bytes)).collect(),
            v: (0..slots).map(|_| zeroed(rows * v_row_bytes)).collect(),
            k_stage,
        }
    }

    /// A cache of one row of `row_dim` values per token per layer, which attention reads as
    /// both key and value (MLA: `kv_lora_rank + qk_rope`, see [`crate::mla`]): half the
    /// bytes of a K+V cache of that row, and a fraction of the decompressed K and V. Its
    /// rows are in K's format; V's is unused.
    pub fn new_latent(
        layout: KvLayout,
        row_dim: usize,
        block_size: usize,
        num_blocks: usize,
        format: KvFormat,
    ) -> KvCache {
        assert!(
            !format.per_channel(),
            "KvCache::new_latent: {format} keys cannot be a latent row (read as values too)"
        );
        let mut c = KvCache::new(layout, 1, row_dim, block_size, 0, format);
        c.num_blocks = num_blocks;
        c.v_is_k = true;
        c.v_row_bytes = 0;
        let per_slot = num_blocks * block_size * c.k_row_bytes;
        c.k = (0..c.layout.slots()).map(|_| zeroed(per_slot)).collect();
        c.v = (0..c.layout.slots()).map(|_| Vec::new()).collect();
        c
    }

    /// Whether values are read from the K rows (a latent cache).
    pub fn is_latent(&self) -> bool {
        self.v_is_k
    }

    /// Bytes of one page, K and V of every slot: what one pool block costs.
    pub fn page_bytes(
        layout: &KvLayout,
        n_kv_heads: usize,
        head_dim: usize,
        block_size: usize,
        formats: impl Into<KvFormats>,
    ) -> usize {
        layout.slots() * n_kv_heads * block_size * formats.into().row_pair_bytes(head_dim)
    }

    /// Sets every byte of K and V in every layer to `byte`. Benchmarks call it so that the
    /// whole cache is backed by real, distinct pages before timing: an untouched cache reads
    /// the kernel's shared zero page (always cached) and faults on every first write.
    pub fn fill(&mut self, byte: u8) {
        for buf in self.k.iter_mut().chain(self.v.iter_mut()) {
            buf.fill(byte);
        }
    }

    /// What one token stores here: the descriptor the engine's pool sizing and `folio
    /// plan` count with.
    pub fn rows(&self) -> KvRows {
        KvRows {
            layers: self.n_layers,
            kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            latent: self.v_is_k,
        }
    }

    /// Bytes of K+V one token occupies in this cache (all layers and heads).
    pub fn bytes_per_token(&self) -> usize {
        self.rows().bytes_per_token(self.formats) as usize
    }

    /// Bytes of K of one token in this cache (all layers and heads).
    pub fn k_bytes_per_token(&self) -> usize {
        self.rows().k_bytes_per_token(self.formats) as usize
    }

    /// Bytes of V of one token in this cache (all layers and heads).
    pub fn v_bytes_per_token(&self) -> usize {
        self.rows().v_bytes_per_token(self.formats) as usize
    }

    /// Bytes of one (token, head) row of K.
    pub fn k_row_bytes(&self) -> usize {
        self.k_row_bytes
    }

    /// Bytes of one (token, head) row of V.
    pub fn v_row_bytes(&self) -> usize {
        self.v_row_bytes
    }

    /// Rows of one block of one layer: every head's `block_size` rows.
    fn block_rows(&self) -> usize {
        self.n_kv_heads * self.block_size
    }

    /// Bytes of one block of one layer's K.
    pub fn k_block_bytes(&self) -> usize {
        self.block_rows() * self.k_row_bytes
    }

    /// Bytes of one block of one layer's V.
    pub fn v_block_bytes(&self) -> usize {
        self.block_rows() * self.v_row_bytes
    }

    /// Row index of (block, head, slot-in-block) in a layer buffer, K and V alike.
    #[inline]
    pub fn row_index(&self, block: usize, head: usize, slot: usize) -> usize {
        (block * self.n_kv_heads + head) * self.block_size + slot
    }

    /// One KV head of one layer as the attention kernel reads it (through the block table
    /// of the layer's group).
    pub fn head_view(&self, layer: usize, head: usize) -> PagedKv<'_> {
        let s = self.layout.slot(layer);
        PagedKv::new(
            &self.k[s],
            if self.v_is_k { &self.k[s] } else { &self.v[s] },
            (self.formats.k, self.formats.v),
            self.head_dim,
            Paging {
                block_size: self.block_size,
                block_rows: self.block_rows(),
                head_row: head * self.block_size,
            },
        )
        .with_staged(self.k_stage.get(s).map(KeyStage::view).unwrap_or_default())
    }

    /// Staged pages of a per-channel K format in layer `layer`'s slot (0 otherwise).
    pub fn staged_pages(&self, layer: usize) -> usize {
        self.k_stage
            .get(self.layout.slot(layer))
            .map_or(0, KeyStage::staged)
    }

    /// Encodes one token's K and V rows (`head_dim` values each) for one head into
    /// (layer, block, slot).
    ///
    /// # Panics
    /// If the position is outside the cache or a row is not `head_dim` long (caller bugs:
    /// the model validates block tables first).
    pub fn write_row(
        &mut self,
        layer: usize,
        block: usize,
        head: usize,
        slot: usize,
        k: &[f32],
        v: &[f32],
    ) {
        if self.formats.k.per_channel() {
            return self.write_row_staged(layer, block, head, slot, k, v);
        }
        // SAFETY: `&mut self` excludes every other writer.
        unsafe { self.layer_writer(layer).write_row(block, head, slot, k, v) }
    }

    /// [`KvCache::write_row`] for a per-channel K format: K through the layer slot's
    /// [`KeyStage`] (encoded when its page fills), V encoded here.
    fn write_row_staged(
        &mut self,
        layer: usize,
        block: usize,
        head: usize,
        slot: usize,
        k: &[f32],
        v: &[f32],
    ) {
        assert!(
            k.len() == self.head_dim
                && v.len() == self.head_dim
                && block < self.num_blocks
                && head < self.n_kv_heads
                && slot < self.block_size,
            "write_row: block {block} (of {}), head {head}, slot {slot}, k {} and v {} values \
             (head_dim {})",
            self.num_blocks,
            k.len(),
            v.len(),
            self.head_dim
        );
        let (s, kb, vr) = (
            self.layout.slot(layer),
            self.k_block_bytes(),
            self.v_row_bytes,
        );
        self.k_stage[s].write(&mut self.k[s], kb, block, head, slot, k);
        let i = self.row_index(block, head, slot);
        attn::store_row(self.formats.v, v, &mut self.v[s][i * vr..(i + 1) * vr]);
    }

    /// Encodes one token's latent row (`head_dim` values) into (layer, block, slot) of a
    /// latent cache ([`KvCache::new_latent`]).
    ///
    /// # Panics
    /// If the position is outside the cache, the row is not `head_dim` long or the cache
    /// is not latent (caller bugs).
    pub fn write_latent(&mut self, layer: usize, block: usize, slot: usize, row: &[f32]) {
        assert!(
            self.v_is_k && row.len() == self.head_dim,
            "write_latent: a latent cache and a row of head_dim = {} values (got {})",
            self.head_dim,
            row.len()
        );
        let (i, kr, s) = (
            self.row_index(block, 0, slot),
            self.k_row_bytes,
            self.layout.slot(layer),
        );
        attn::store_row(self.formats.k, row, &mut self.k[s][i * kr..(i + 1) * kr]);
    }

    /// Layer `layer`'s K and V for tasks that store rows in parallel, each its own slots
    /// (the forward pass writes every new token's rows from the task that finished it).
    pub fn layer_writer(&mut self, layer: usize) -> LayerWriter<'_> {
        let s = self.layout.slot(layer);
        LayerWriter {
            k: self.k[s].as_mut_ptr(),
            v: self.v[s].as_mut_ptr(),
            k_len: self.k[s].len(),
            v_len: self.v[s].len(),
            cache: self,
        }
    }

    /// Decodes the K and V rows at (layer, block, head, slot) into `k` and `v`
    /// (`head_dim` values each): what attention sees, for tests and inspection (a rotated
    /// format's rows rotated back, as written up to the format's rounding).
    #[allow(clippy::too_many_arguments)]
    pub fn read_row(
        &self,
        layer: usize,
        block: usize,
        head: usize,
        slot: usize,
        k: &mut [f32],
        v: &mut [f32],
    ) {
        let i = self.row_index(block, head, slot);
        let (kr, vr, s) = (self.k_row_bytes, self.v_row_bytes, self.layout.slot(layer));
        if self.formats.k.per_channel() {
            if !self.k_stage[s].read(block, head, slot, k) {
                let g = self.row_index(block, head, 0) * kr;
                attn::channel::decode_row(
                    self.head_dim,
                    &self.k[s][g..g + self.block_size * kr],
                    slot,
                    k,
                );
            }
        } else {
            attn::load_row_unrotated(self.formats.k, &self.k[s][i * kr..(i + 1) * kr], k);
        }
        if self.v_is_k {
            attn::load_row_unrotated(self.formats.k, &self.k[s][i * kr..(i + 1) * kr], v);
        } else {
            attn::load_row_unrotated(self.formats.v, &self.v[s][i * vr..(i + 1) * vr], v);
        }
    }

    /// Copies the first `n_slots` slots of page `src` into page `dst` in every layer slot
    /// (copy-on-write of a shared partial tail block). Encoded bytes are copied as they
    /// are, so the copy is exact in every format.
    ///
    /// # Panics
    /// If a block is `>= num_blocks` or `n_slots > block_size` (caller bugs).
    pub fn copy_block(&mut self, src: usize, dst: usize, n_slots: usize) {
        assert!(
            src < self.num_blocks && dst < self.num_blocks && n_slots <= self.block_size,
            "copy_block: src {src}, dst {dst} (num_blocks {}), n_slots {n_slots} (block_size {})",
            self.num_blocks,
            self.block_size
        );
        let (kr, vr, kb) = (self.k_row_bytes, self.v_row_bytes, self.k_block_bytes());
        for l in 0..self.k.len() {
            if let Some(stage) = self.k_stage.get_mut(l) {
                stage.copy(&mut self.k[l], kb, src, dst, n_slots);
            }
            for h in 0..self.n_kv_heads {
                let s = self.row_index(src, h, 0);
                let d = self.row_index(dst, h, 0);
                if self.k_stage.is_empty() {
                    self.k[l].copy_within(s * kr..(s + n_slots) * kr, d * kr);
                }
                self.v[l].copy_within(s * vr..(s + n_slots) * vr, d * vr);
            }
        }
    }
}

/// Whole-block export and import, for the second KV tier (spill to disk, fetch back).
impl KvCache {
    /// Bytes of one page across all its slots, K and V: the payload of a spilled block.
    pub fn block_payload_bytes(&self) -> usize {
        self.k.len() * (self.k_block_bytes() + self.v_block_bytes())
    }

    /// Copies out page `block` of every slot (K then V per slot), in the cache's formats,
    /// encoded bytes as they are (rotated rows stay rotated).
    pub fn export_block(&self, block: usize) -> Vec<u8> {
        let (kb, vb) = (self.k_block_bytes(), self.v_block_bytes());
        let mut out = Vec::with_capacity(self.block_payload_bytes());
        for l in 0..self.k.len() {
            match self.k_stage.get(l) {
                // A staged page leaves encoded as it would be now.
                Some(stage) => out.extend_from_slice(&stage.export(&self.k[l], kb, block)),
                None => out.extend_from_slice(&self.k[l][block * kb..(block + 1) * kb]),
            }
            out.extend_from_slice(&self.v[l][block * vb..(block + 1) * vb]);
        }
        out
    }

    /// Writes a payload produced by [`KvCache::export_block`] into block `block`.
    pub fn import_block(&mut self, block: usize, payload: &[u8]) -> Result<(), ImportError> {
        let (kb, vb) = (self.k_block_bytes(), self.v_block_bytes());
        if block >= self.num_blocks || payload.len() != self.block_payload_bytes() {
            return Err(ImportError {
                block,
                num_blocks: self.num_blocks,
                len: payload.len(),
                expected: self.block_payload_bytes(),
            });
        }
        for l in 0..self.k.len() {
            if let Some(stage) = self.k_stage.get_mut(l) {
                stage.drop_block(block);
            }
            let o = l * (kb + vb);
            self.k[l][block * kb..(block + 1) * kb].copy_from_slice(&payload[o..o + kb]);
            self.v[l][block * vb..(block + 1) * vb].copy_from_slice(&payload[o + kb..o + kb + vb]);
        }
        Ok(())
    }
}

/// A payload that does not fit the cache: a block id out of range or a payload of another
/// layout's size (a disk-tier file from another model or format).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("import_block: block {block} (num_blocks {num_blocks}), payload {len} bytes (expected {expected})")]
pub struct ImportError {
    pub block: usize,
    pub num_blocks: usize,
    pub len: usize,
    pub expected: usize,
}

/// A zeroed buffer, backed by transparent huge pages where the OS offers them: attention
/// jumps between blocks all over the cache, and with 4 KiB pages nearly every block costs
/// a TLB miss (a page walk) at large batch.
fn zeroed(n: usize) -> Vec<u8> {
    let v = vec![0u8; n];
    #[cfg(target_os = "linux")]
    advise_huge(&v);
    v
}

#[cfg(target_os = "linux")]
fn advise_huge(v: &[u8]) {
    const HUGE: usize = 2 << 20;
    const MADV_HUGEPAGE: i32 = 14;
    extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    let start = (v.as_ptr() as usize).next_multiple_of(HUGE);
    let end = (v.as_ptr() as usize + v.len()) / HUGE * HUGE;
    if end > start {
        // SAFETY: the range lies inside `v`'s allocation; MADV_HUGEPAGE only changes how
        // the kernel backs those pages, never their contents. A failure (no THP) is
        // harmless, so the result is ignored.
        unsafe {
            madvise(start as *mut std::ffi::c_void, end - start, MADV_HUGEPAGE);
        }
    }
}

/// Row writes into one layer of a [`KvCache`] from several threads at once (see
/// [`KvCache::layer_writer`]); holds the cache's mutable borrow meanwhile.
pub struct LayerWriter<'a> {
    k: *mut u8,
    v: *mut u8,
    k_len: usize,
    v_len: usize,
    cache: &'a KvCache,
}

// SAFETY: the pointers come from the exclusively borrowed cache; `write_row`'s contract
// keeps concurrent writers on disjoint rows.
unsafe impl Send for LayerWriter<'_> {}
unsafe impl Sync for LayerWriter<'_> {}

impl LayerWriter<'_> {
    /// [`KvCache::write_row`] for this layer.
    ///
    /// # Safety
    /// No other thread writes the same (block, head, slot) concurrently.
    ///
    /// # Panics
    /// If the position is outside the cache or a row is not `head_dim` long.
    pub unsafe fn write_row(&self, block: usize, head: usize, slot: usize, k: &[f32], v: &[f32]) {
        let c = self.cache;
        assert!(
            !c.formats.k.per_channel(),
            "LayerWriter: {} keys are staged a page at a time; write them with \
             KvCache::write_row",
            c.formats.k
        );
        assert!(
            k.len() == c.head_dim && v.len() == c.head_dim,
            "write_row: k ({}) and v ({}) must hold head_dim = {} values",
            k.len(),
            v.len(),
            c.head_dim
        );
        let i = c.row_index(block, head, slot);
        let (kr, vr) = (c.k_row_bytes, c.v_row_bytes);
        assert!(
            (i + 1) * kr <= self.k_len && (i + 1) * vr <= self.v_len,
            "write_row: block {block} slot {slot} lies outside the cache ({} blocks)",
            c.num_blocks
        );
        // SAFETY: in bounds (checked above); disjoint from other writers (contract).
        let (kd, vd) = unsafe {
            (
                std::slice::from_raw_parts_mut(self.k.add(i * kr), kr),
                std::slice::from_raw_parts_mut(self.v.add(i * vr), vr),
            )
        };
        // Encoded once, here: a rotated format rotates the row before its code.
        attn::store_row(c.formats.k, k, kd);
        attn::store_row(c.formats.v, v, vd);
    }
}

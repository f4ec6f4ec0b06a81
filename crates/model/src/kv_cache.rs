//! Paged KV storage: the bytes of every physical block, per layer, in one [`KvFormat`].
//!
//! ```text
//! layer l, K (V alike):  [block 0][block 1] ... [block N-1]
//! one block:             [kv_head 0: slot 0..p rows][kv_head 1: ...] ...
//! one row:               head_dim values in the format (q8_0/q4_0: groups of 32 along
//!                        head_dim, each with its f16 scale)
//! ```
//! Heads are outermost inside a block so attention streams one head's rows contiguously.
//! Values are encoded when written ([`KvCache::write_row`]) and decoded by the attention
//! kernel as it reads them. Ownership of blocks (tables, ref counts, prefix cache) lives
//! in folio-core; this type only stores values at the slots it is told to.

use folio_kernels::attn::{self, PagedKv};

pub use folio_kernels::attn::KvFormat;

/// The paged cache of one model: `num_blocks` blocks of `block_size` token slots.
pub struct KvCache {
    pub format: KvFormat,
    pub block_size: usize,
    pub num_blocks: usize,
    pub n_layers: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Bytes of one (token, head) row: `format.row_bytes(head_dim)`.
    row_bytes: usize,
    k: Vec<Vec<u8>>,
    v: Vec<Vec<u8>>,
}

impl KvCache {
    pub fn new(
        n_layers: usize,
        n_kv_heads: usize,
        head_dim: usize,
        block_size: usize,
        num_blocks: usize,
        format: KvFormat,
    ) -> KvCache {
        let row_bytes = format.row_bytes(head_dim);
        let per_layer = num_blocks * block_size * n_kv_heads * row_bytes;
        KvCache {
            format,
            block_size,
            num_blocks,
            n_layers,
            n_kv_heads,
            head_dim,
            row_bytes,
            // Zero bytes decode to 0.0 in every format (a zero scale for q8_0/q4_0).
            k: (0..n_layers).map(|_| zeroed(per_layer)).collect(),
            v: (0..n_layers).map(|_| zeroed(per_layer)).collect(),
        }
    }

    /// Sets every byte of K and V in every layer to `byte`. Benchmarks call it so that the
    /// whole cache is backed by real, distinct pages before timing: an untouched cache reads
    /// the kernel's shared zero page (always cached) and faults on every first write.
    pub fn fill(&mut self, byte: u8) {
        for buf in self.k.iter_mut().chain(self.v.iter_mut()) {
            buf.fill(byte);
        }
    }

    /// Bytes of K+V one token occupies in this cache (all layers and heads).
    pub fn bytes_per_token(&self) -> usize {
        2 * self.n_layers * self.n_kv_heads * self.row_bytes
    }

    /// Bytes of one (token, head) row of K or V.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Bytes of one block of one layer's K (or V): every head's `block_size` rows.
    pub fn block_bytes(&self) -> usize {
        self.n_kv_heads * self.block_size * self.row_bytes
    }

    /// Byte offset of (block, head, slot-in-block) in a layer buffer.
    #[inline]
    pub fn offset(&self, block: usize, head: usize, slot: usize) -> usize {
        ((block * self.n_kv_heads + head) * self.block_size + slot) * self.row_bytes
    }

    /// One KV head of one layer as the attention kernel reads it.
    pub fn head_view(&self, layer: usize, head: usize) -> PagedKv<'_> {
        PagedKv {
            k: &self.k[layer],
            v: &self.v[layer],
            format: self.format,
            head_dim: self.head_dim,
            block_size: self.block_size,
            block_stride: self.block_bytes(),
            head_offset: head * self.block_size * self.row_bytes,
        }
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
        // SAFETY: `&mut self` excludes every other writer.
        unsafe { self.layer_writer(layer).write_row(block, head, slot, k, v) }
    }

    /// Layer `layer`'s K and V for tasks that store rows in parallel, each its own slots
    /// (the forward pass writes every new token's rows from the task that finished it).
    pub fn layer_writer(&mut self, layer: usize) -> LayerWriter<'_> {
        LayerWriter {
            k: self.k[layer].as_mut_ptr(),
            v: self.v[layer].as_mut_ptr(),
            len: self.k[layer].len().min(self.v[layer].len()),
            cache: self,
        }
    }

    /// Decodes the K and V rows at (layer, block, head, slot) into `k` and `v`
    /// (`head_dim` values each): what attention sees, for tests and inspection.
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
        let off = self.offset(block, head, slot);
        let rb = self.row_bytes;
        attn::load_row_scalar(self.format, &self.k[layer][off..off + rb], k);
        attn::load_row_scalar(self.format, &self.v[layer][off..off + rb], v);
    }

    /// Copies the first `n_slots` slots of block `src` into block `dst` in every layer
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
        let n = n_slots * self.row_bytes;
        for l in 0..self.n_layers {
            for h in 0..self.n_kv_heads {
                let s = self.offset(src, h, 0);
                let d = self.offset(dst, h, 0);
                self.k[l].copy_within(s..s + n, d);
                self.v[l].copy_within(s..s + n, d);
            }
        }
    }
}

/// Whole-block export and import, for the second KV tier (spill to disk, fetch back).
impl KvCache {
    /// Bytes of one block across all layers, K and V: the payload of a spilled block.
    pub fn block_payload_bytes(&self) -> usize {
        2 * self.n_layers * self.block_bytes()
    }

    /// Copies out block `block` of every layer (K then V per layer), in the cache's format.
    pub fn export_block(&self, block: usize) -> Vec<u8> {
        let bb = self.block_bytes();
        let mut out = Vec::with_capacity(self.block_payload_bytes());
        for l in 0..self.n_layers {
            out.extend_from_slice(&self.k[l][block * bb..(block + 1) * bb]);
            out.extend_from_slice(&self.v[l][block * bb..(block + 1) * bb]);
        }
        out
    }

    /// Writes a payload produced by [`KvCache::export_block`] into block `block`.
    pub fn import_block(&mut self, block: usize, payload: &[u8]) -> Result<(), String> {
        let bb = self.block_bytes();
        if block >= self.num_blocks || payload.len() != self.block_payload_bytes() {
            return Err(format!(
                "import_block: block {block} (num_blocks {}), payload {} bytes (expected {})",
                self.num_blocks,
                payload.len(),
                self.block_payload_bytes()
            ));
        }
        for l in 0..self.n_layers {
            let o = 2 * l * bb;
            self.k[l][block * bb..(block + 1) * bb].copy_from_slice(&payload[o..o + bb]);
            self.v[l][block * bb..(block + 1) * bb].copy_from_slice(&payload[o + bb..o + 2 * bb]);
        }
        Ok(())
    }
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
    len: usize,
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
            k.len() == c.head_dim && v.len() == c.head_dim,
            "write_row: k ({}) and v ({}) must hold head_dim = {} values",
            k.len(),
            v.len(),
            c.head_dim
        );
        let (off, rb) = (c.offset(block, head, slot), c.row_bytes);
        assert!(
            off + rb <= self.len,
            "write_row: block {block} slot {slot} lies outside the cache ({} blocks)",
            c.num_blocks
        );
        // SAFETY: in bounds (checked above); disjoint from other writers (contract).
        let (kd, vd) = unsafe {
            (
                std::slice::from_raw_parts_mut(self.k.add(off), rb),
                std::slice::from_raw_parts_mut(self.v.add(off), rb),
            )
        };
        attn::store_row(c.format, k, kd);
        attn::store_row(c.format, v, vd);
    }
}

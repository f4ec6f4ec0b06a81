//! KV-cache events: which blocks entered and left the prefix cache, in order, for a router
//! outside the process (vLLM's `BlockStored` / `BlockRemoved` / `AllBlocksCleared`).
//!
//! NOTE: why a buffer in the manager and not a callback: core stays pure (no I/O, no
//! channels, no clock). The manager appends while it commits and evicts; the engine drains
//! the buffer once per step ([`KvManager::take_events`]) and hands it to a publisher off
//! the step's critical path. The buffer is off by default, so a server without a
//! subscriber pays one branch per commit or eviction and allocates nothing.
//!
//! What counts: a full block gets its chained hash and enters the prefix cache
//! (`commit`, or `restore_block` from the second tier) → stored; a cached block is evicted
//! → removed; [`KvManager::reset_prefix_cache`] → all cleared. A block that stays private
//! (its content is already cached under another block) is never announced, and a window
//! page set (hybrid models) is not a block of its own: it lives and dies with its chain
//! hash's full block as far as a router can tell.

use super::hash::BlockHash;
use super::manager::KvManager;

/// One change to the prefix cache's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvEvent {
    /// Consecutive full blocks of one chain entered the cache: `hashes[0]`'s parent is
    /// `parent` (`None`: the chain's first block), each later hash's parent is the one
    /// before it, and `tokens` holds the blocks' token ids back to back (`block_size` each).
    Stored {
        hashes: Vec<BlockHash>,
        parent: Option<BlockHash>,
        tokens: Vec<u32>,
        /// Namespace of the chain (0: the base model; else its adapters, see
        /// [`super::hash::chain_salt`]).
        ns: u64,
    },
    /// These cached blocks were evicted (their KV is gone; a hit through them is no more).
    Removed { hashes: Vec<BlockHash> },
    /// Every cached block is gone.
    AllCleared,
}

/// The manager's event buffer (see the module docs).
#[derive(Debug, Clone, Default)]
pub(super) struct EventLog {
    on: bool,
    events: Vec<KvEvent>,
}

impl EventLog {
    /// Block `hash` (parent `parent`, content `tokens`, namespace `ns`) entered the cache.
    /// It extends the last event when that stored this block's parent in the same
    /// namespace, so a prompt's blocks committed in one step are one event, as vLLM sends.
    pub(super) fn stored(
        &mut self,
        parent: Option<BlockHash>,
        hash: BlockHash,
        tokens: &[u32],
        ns: u64,
    ) {
        if !self.on {
            return;
        }
        if let Some(KvEvent::Stored {
            hashes,
            tokens: all,
            ns: last_ns,
            ..
        }) = self.events.last_mut()
        {
            if *last_ns == ns && parent.is_some() && hashes.last() == parent.as_ref() {
                hashes.push(hash);
                all.extend_from_slice(tokens);
                return;
            }
        }
        self.events.push(KvEvent::Stored {
            hashes: vec![hash],
            parent,
            tokens: tokens.to_vec(),
            ns,
        });
    }

    /// Block `hash` left the cache; consecutive removals are one event.
    pub(super) fn removed(&mut self, hash: BlockHash) {
        if !self.on {
            return;
        }
        if let Some(KvEvent::Removed { hashes }) = self.events.last_mut() {
            hashes.push(hash);
            return;
        }
        self.events.push(KvEvent::Removed { hashes: vec![hash] });
    }
}

impl KvManager {
    /// Starts (or stops) recording [`KvEvent`]s; off by default. Stopping drops what was
    /// recorded and not yet taken.
    pub fn enable_events(&mut self, on: bool) {
        self.events.on = on;
        if !on {
            self.events.events.clear();
        }
    }

    /// Whether events are being recorded.
    pub fn events_enabled(&self) -> bool {
        self.events.on
    }

    /// The events since the last call, oldest first.
    pub fn take_events(&mut self) -> Vec<KvEvent> {
        std::mem::take(&mut self.events.events)
    }

    /// Empties the prefix cache, as vLLM's `reset_prefix_cache`: refused (false, nothing
    /// changed) while any sequence or in-flight step still holds a block, because a
    /// referenced cached block cannot be dropped from under its table. Otherwise every
    /// cached block is evicted (reported through `take_evicted` for the second tier as
    /// any eviction) and one [`KvEvent::AllCleared`] is recorded instead of a removal per
    /// block. Returns whether the cache was reset.
    pub fn reset_prefix_cache(&mut self) -> bool {
        if !self.seqs.is_empty() || !self.steps.is_empty() || !self.pending_holds.is_empty() {
            return false;
        }
        // NOTE: the log is set aside (off) while evicting, so the reset is one event.
        let mut log = std::mem::take(&mut self.events);
        self.evict_all();
        if log.on {
            log.events.push(KvEvent::AllCleared);
        }
        self.events = log;
        true
    }
}

//! Moving KV blocks between memory and the second tier: evicted prefix blocks are spilled
//! before a step overwrites them, and a new request's prefix is fetched back when that is
//! cheaper than recomputing it.

use super::Engine;
use std::sync::atomic::Ordering::Relaxed;

impl Engine {
    pub(super) fn spill(&mut self, evicted: &[folio_core::kv::EvictedBlock]) {
        let Some(tier) = self.runner.tier.as_mut() else {
            return;
        };
        for e in evicted {
            let payload = self.runner.kv.export_block(e.block as usize);
            if let Err(err) = tier.spill(e.hash, e.parent, &e.tokens, &payload) {
                tracing::warn!("kv tier: spill failed: {err}");
            }
        }
        self.metrics.tier_spills.store(tier.stats.spills, Relaxed);
    }

    /// Brings back from the second tier the blocks of `prompt`'s prefix that are there but
    /// no longer in memory, when fetching is cheaper than recomputing (T_f < T_r).
    pub(super) fn restore_prefix(&mut self, prompt: &[u32], ns: u64) {
        if self.runner.tier.is_none() {
            return;
        }
        let bs = self.runner.kv.block_size;
        // Like the prefix cache, leave the last prompt token to be computed for logits.
        let usable = prompt.len().saturating_sub(1) / bs * bs;
        let salt = folio_core::kv::chain_salt(self.salt, ns);
        let chain = folio_core::kv::chain_hashes(salt, &prompt[..usable], bs);
        let have = self.sched.kv().match_prefix_in(prompt, ns).num_blocks;
        // Until steps have been measured the recompute time is only the fit's seed: then
        // the fetch is taken (a local disk read is far cheaper than a forward pass).
        let recompute_s = match self.step_curve.fit.is_measured() {
            true => self.step_curve.fit.cost().per_token_s * bs as f64,
            false => f64::INFINITY,
        };
        for i in have..chain.len() {
            let tokens = &prompt[i * bs..(i + 1) * bs];
            let tier = self.runner.tier.as_mut().expect("checked above");
            if !tier.contains(chain[i], tokens) {
                break;
            }
            let fetch_s = tier.stats.fetch_s_per_block;
            if fetch_s > 0.0 && fetch_s >= recompute_s {
                break;
            }
            let Some(payload) = tier.fetch(chain[i]) else {
                break;
            };
            let parent = if i == 0 { None } else { Some(chain[i - 1]) };
            let block = match self.sched.kv_mut().restore_block_in(parent, tokens, ns) {
                Ok(b) => b,
                Err(_) => break,
            };
            // Making room may have evicted other blocks: spill them before overwriting.
            let evicted = self.sched.kv_mut().take_evicted();
            self.spill(&evicted);
            if self
                .runner
                .kv
                .import_block(block as usize, &payload)
                .is_err()
            {
                break;
            }
            self.metrics.tier_fetches.fetch_add(1, Relaxed);
        }
    }
}

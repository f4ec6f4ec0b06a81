//! What the engine tells the outside after each step and command: gauges and counters for
//! `/metrics`, the adapters in use, and the step log.

use super::Engine;
use crate::StepStats;
use folio_core::SchedulerOutput;
use std::sync::atomic::Ordering::Relaxed;

impl Engine {
    /// Gauges and counters from the scheduler's state; called after every step and after
    /// every command, so an abort on an idle engine shows up in /metrics at once.
    pub(super) fn publish(&self) {
        let m = &self.metrics;
        let kv = self.sched.kv_stats();
        let st = self.sched.stats();
        m.num_running.store(self.sched.num_running(), Relaxed);
        m.num_waiting.store(self.sched.num_waiting(), Relaxed);
        m.kv_blocks_used.store(kv.used_blocks, Relaxed);
        m.kv_blocks_cached.store(kv.cached_blocks, Relaxed);
        m.prefix_queries_tokens
            .store(kv.prefix_query_tokens, Relaxed);
        m.prefix_hits_tokens.store(kv.prefix_hit_tokens, Relaxed);
        m.preemptions.store(st.preemptions, Relaxed);
        m.recomputed_tokens.store(st.recomputed_tokens, Relaxed);
        m.cow_copies.store(kv.cow_copies, Relaxed);
        m.evictions.store(kv.evictions, Relaxed);
        m.kv_window_released_blocks
            .store(kv.window_released_blocks, Relaxed);
        m.tier_hit_tokens.store(kv.tier_hit_tokens, Relaxed);
        self.publish_lora();
    }

    /// Names of the adapters of running and waiting requests, for `vllm:lora_requests_info`.
    fn publish_lora(&self) {
        let (mut running, mut waiting) = (Vec::new(), Vec::new());
        for (id, live) in &self.live {
            let Some(set) = &live.lora else { continue };
            let into = match self.sched.request(*id).map(|r| r.status.clone()) {
                Some(folio_core::sched::RequestStatus::Running) => &mut running,
                _ => &mut waiting,
            };
            into.extend(set.items().iter().map(|(a, _)| a.name.clone()));
        }
        for v in [&mut running, &mut waiting] {
            v.sort();
            v.dedup();
        }
        let m = &self.metrics;
        for (slot, v) in [(&m.lora_running, running), (&m.lora_waiting, waiting)] {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = v;
        }
    }

    pub(super) fn record(
        &mut self,
        out: &SchedulerOutput,
        wall_s: f64,
        f: folio_model::ForwardStats,
    ) {
        self.publish();
        let m = &self.metrics;
        let kv = self.sched.kv_stats();
        m.steps.fetch_add(1, Relaxed);
        let s = StepStats {
            step: out.step.0,
            requests: out.requests.len(),
            prefill_tokens: out.num_prefill_tokens,
            decode_tokens: out.num_decode_tokens,
            draft_tokens: out.num_draft_tokens,
            kv_blocks_used: kv.used_blocks,
            wall_s,
            weight_bytes: f.weight_bytes,
            kv_bytes: f.kv_bytes_read,
            flops: f.flops,
        };
        if let Ok(mut log) = m.step_log.lock() {
            if log.len() >= crate::step_stats::STEP_LOG_LEN {
                log.pop_front();
            }
            log.push_back(s);
        }
    }
}

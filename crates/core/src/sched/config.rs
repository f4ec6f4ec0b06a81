//! Scheduler settings.

use thiserror::Error;

use crate::kv::KvConfig;

/// How requests are grouped into steps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BatchPolicy {
    /// Re-form the batch every step: decodes first, the rest of the token budget on prefill
    /// chunks, admit FCFS while budget, `max_running` and KV allow (default).
    #[default]
    Continuous,
    /// Admit a group of up to `max_running` only when nothing runs; no one joins until the
    /// whole group finished.
    Fixed,
    /// One request at a time.
    Serial,
}

/// When KV is reserved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KvReservation {
    /// Admit only when the final KV (`prompt + max_tokens − 1`, in blocks, cached prefix
    /// counted once) fits beside what running requests may still grow into. No preemption
    /// is ever needed.
    ReserveFinal,
    /// Allocate as tokens are scheduled; when blocks run out, preempt the newest running
    /// request by recompute (default).
    #[default]
    OnDemand,
}

/// Scheduler settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    pub policy: BatchPolicy,
    /// Most tokens (all requests, all kinds) computed in one step.
    pub token_budget: usize,
    /// Most prompt (or recompute) tokens one request computes in one step.
    pub max_chunk: usize,
    /// Most requests running (holding KV) at once.
    pub max_running: usize,
    pub reservation: KvReservation,
    pub kv: KvConfig,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            policy: BatchPolicy::Continuous,
            token_budget: 2048,
            max_chunk: 512,
            max_running: 64,
            reservation: KvReservation::OnDemand,
            kv: KvConfig::default(),
        }
    }
}

/// A setting out of range.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid scheduler config: {field} = {value} ({why})")]
pub struct ConfigError {
    pub field: &'static str,
    pub value: usize,
    pub why: &'static str,
}

impl SchedulerConfig {
    /// Checks the scheduler's own fields (the KV manager checks its own).
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            ("token_budget", self.token_budget),
            ("max_chunk", self.max_chunk),
            ("max_running", self.max_running),
        ] {
            if value == 0 {
                return Err(ConfigError {
                    field,
                    value,
                    why: "must be at least 1",
                });
            }
        }
        Ok(())
    }

    /// Running limit after the policy: `Serial` runs one.
    pub fn effective_max_running(&self) -> usize {
        match self.policy {
            BatchPolicy::Serial => 1,
            _ => self.max_running,
        }
    }
}

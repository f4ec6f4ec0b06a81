//! What one engine iteration did: the step log from which MBU/MFU are computed.

/// One iteration's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepStats {
    pub step: u64,
    /// Requests in the forward batch.
    pub requests: usize,
    pub prefill_tokens: usize,
    pub decode_tokens: usize,
    pub draft_tokens: usize,
    /// KV blocks in use after scheduling.
    pub kv_blocks_used: usize,
    /// Wall time of the forward pass and sampling.
    pub wall_s: f64,
    /// Weight bytes streamed (every matrix once per step).
    pub weight_bytes: usize,
    /// KV bytes read by attention.
    pub kv_bytes: usize,
    pub flops: f64,
}

/// Most steps kept in [`crate::EngineMetrics::step_log`].
pub const STEP_LOG_LEN: usize = 4096;

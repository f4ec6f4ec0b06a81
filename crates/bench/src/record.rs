//! One request as the client saw it, and the reference per-request metrics derived from it.
//!
//! ```text
//!   scheduled      sent         chunk 1        chunk 2   …   chunk G      end
//!   t_a ───wait──── │ ───────────── t_1 ── ITL_1 ── t_2 … ── t_G ──────── │
//!   TTFT = t_1 − t_a        E2E = t_G − t_a        TPOT = (t_G − t_1)/(G − 1)
//! ```
//!
//! Every time is seconds since the start of the run. Latencies are measured from the
//! **scheduled arrival** `t_a`, not from when the request was sent: time spent waiting for a
//! concurrency slot or behind a slow client still counts (DESIGN.md §serving).

use serde::{Deserialize, Serialize};

use crate::slo::Slo;

/// What happened to one request (one turn of a conversation).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Index of the request in the run (conversation-major order of sending).
    pub id: usize,
    /// Conversation and turn, for multi-turn workloads (both 0 otherwise).
    pub conversation: usize,
    pub turn: usize,
    /// Scheduled arrival (the metric's `t_a`).
    pub scheduled_s: f64,
    /// When the request's bytes were written.
    pub sent_s: f64,
    /// Arrival time of every streamed chunk that carried output text, in order.
    pub chunk_times_s: Vec<f64>,
    /// When the response ended (after `[DONE]` or the error).
    pub end_s: f64,
    /// Prompt tokens as the server's usage reported them.
    pub prompt_tokens: Option<u64>,
    /// Prompt tokens served from the server's prefix cache (usage.prompt_tokens_details).
    pub cached_tokens: Option<u64>,
    /// Output tokens: the server's usage when reported, else the number of text chunks.
    pub output_tokens: u64,
    /// Whether the request completed without an error.
    pub ok: bool,
    pub error: Option<String>,
    /// Whether the answer was right, for workloads that know it.
    pub correct: Option<bool>,
}

impl RequestRecord {
    /// `t_1 − t_a`.
    pub fn ttft(&self) -> Option<f64> {
        if !self.ok {
            return None;
        }
        self.chunk_times_s.first().map(|t| t - self.scheduled_s)
    }

    /// `t_{j+1} − t_j` for every pair of consecutive chunks.
    pub fn itls(&self) -> Vec<f64> {
        if !self.ok {
            return Vec::new();
        }
        self.chunk_times_s.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// `t_G − t_a` (the last output chunk; the end of the stream when no text came back).
    pub fn e2e(&self) -> Option<f64> {
        if !self.ok {
            return None;
        }
        Some(self.chunk_times_s.last().copied().unwrap_or(self.end_s) - self.scheduled_s)
    }

    /// `(T_request − TTFT)/(G − 1)`; `None` for one-token outputs, which have no
    /// inter-token time (counting them as 0 would flatter TPOT).
    pub fn tpot(&self) -> Option<f64> {
        if self.output_tokens < 2 {
            return None;
        }
        let (first, last) = (self.chunk_times_s.first()?, self.chunk_times_s.last()?);
        self.ok
            .then(|| (last - first) / (self.output_tokens - 1) as f64)
    }

    /// Counts toward goodput: completed, not known to be wrong, and within the SLO.
    pub fn good(&self, slo: &Slo) -> bool {
        match (self.ttft(), self.e2e()) {
            (Some(ttft), Some(e2e)) => {
                self.correct != Some(false) && slo.met(ttft, self.tpot(), e2e)
            }
            _ => false,
        }
    }
}

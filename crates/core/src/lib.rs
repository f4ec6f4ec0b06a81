//! folio-core: the memory manager and scheduler of folio.
//!
//! Pure, synchronous and deterministic: no I/O, no model, no threads, no clock of its own
//! (times are passed in as arguments). The engine drives it with the real model; the
//! simulator drives the very same scheduler with a cost model.
//!
//! # Layout
//!
//! - [`cost`]: round-time model `a + b·tokens + c·pairs`, shared by the simulator and by the
//!   prefix cache's recompute value; second-tier costs.
//! - [`kv`]: paged KV memory.
//!   - `block_pool`: fixed blocks, table references and step holds, FIFO free list.
//!   - `block_table`: logical → physical blocks of one sequence; slot formula.
//!   - `hash`: chained, salted block hashes (stable across runs for the disk tier).
//!   - `prefix_cache`: exact-prefix reuse across requests, leaf-first eviction candidates.
//!   - `eviction`: `ValuePerByte` (expected saving `V_h = p_h(T_r − T_f) − T_m`) and `Lru`.
//!   - `events`: prefix-cache changes (stored / removed / all cleared) recorded for an
//!     outside router when enabled, drained by the engine each step.
//!   - `manager`: the only writer of refs, tables and cache; fork, copy-on-write, deferred
//!     release through step holds, spill/restore hooks.
//! - [`sched`]: vLLM-v1-style scheduling with no prefill/decode phases.
//!   - `request`: a request's tokens and counters (`num_computed_tokens` catches up).
//!   - `config`: policy (Continuous / Fixed / Serial), budget, chunk, KV reservation mode.
//!   - `output`: what one `schedule()` hands the executor; what `update()` takes back.
//!   - `admission`: pure deadline / capacity check with a reason.
//!   - `scheduler`: the budget loop, preemption by recompute, update, abort.
//! - [`sim`]: drives the scheduler with a cost model; per-request TTFT / ITL / E2E.

pub mod cost;
pub mod kv;
pub mod sched;
pub mod sim;

pub use cost::{CostModel, TierCost};
pub use kv::{KvConfig, KvManager, KvStats, StepId};
pub use sched::{
    FinishReason, Lookahead, MaxTokens, Request, RequestId, RequestResult, RequestStatus,
    ScheduledRequest, Scheduler, SchedulerConfig, SchedulerOutput,
};

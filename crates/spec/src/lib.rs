//! folio-spec: speculative decoding without the model: draft proposers, exact
//! verification, draft-length control and accounting.
//!
//! # Layout
//!
//! - [`ngram`]: context lookup: drafts copied from the request's own prompt and output after
//!   the latest earlier occurrence of its last n tokens (no weights, no KV).
//! - [`proposal_check`]: a lookup's continuation scored at its full length against the
//!   tokens the target emits, so acceptance is learned at positions the rule did not draft.
//! - [`verify`]: greedy acceptance (up to the first mismatch, then the target's token or a
//!   bonus) and rejection sampling (accept x with min(1, p/q), else resample from
//!   norm([p − q]+)), so outputs are distributed exactly as the target's.
//! - [`acceptance`]: acceptance by draft position, conditional on reaching it (context
//!   lookup's drafts are runs, not independent coins).
//! - [`control`]: adaptive draft length from observed acceptance and measured step costs by
//!   the marginal rule ΔT/ΔN < T/N; it turns speculation down when a large batch already
//!   shares the weight reads.
//! - [`stats`]: drafted / accepted counts, acceptance by position, and time per token as
//!   ΣT/ΣN (never a mean of per-step ratios).
//!
//! The self-draft proposer (a layer subset of the target) needs the model, so it lives in
//! the engine; it uses [`verify`] and [`control`] like the others.

pub mod acceptance;
pub mod control;
pub mod ngram;
pub mod proposal_check;
pub mod stats;
pub mod verify;

pub use acceptance::{Acceptance, AcceptanceCounts};
pub use control::{plan, plan_probing, Candidate, DraftControl, PROBE_SHARE};
pub use folio_core::cost::StepTime;
pub use ngram::NgramIndex;
pub use proposal_check::ProposalCheck;
pub use stats::SpecStats;
pub use verify::{verify_greedy, verify_sampled, Verdict};

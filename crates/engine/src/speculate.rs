//! A request's speculation state: its proposer, draft-length control, n-gram index and the
//! self-draft's distributions. Proposing is `engine/draft.rs`, verification
//! `engine/output.rs`; the step-time curve both price drafts with is `folio_core::cost`.

use crate::SpecMethod;
use folio_spec::{Acceptance, DraftControl, NgramIndex, ProposalCheck};

/// A request's speculation state.
pub(crate) struct SpecState {
    pub method: SpecMethod,
    pub control: DraftControl,
    /// Prompt + output tokens (n-gram lookup).
    pub index: NgramIndex,
    /// The self-draft's distribution for each pending draft (sampled requests only).
    pub draft_q: Vec<Vec<(u32, f32)>>,
    /// The n-gram lookup's full continuation, checked against the tokens the target emits;
    /// n-gram acceptance is learned from it rather than from the drafts verified.
    pub check: ProposalCheck,
}

impl SpecState {
    pub fn new(
        method: SpecMethod,
        max_tokens: usize,
        fixed: Option<usize>,
        prompt: &[u32],
        prior: Acceptance,
    ) -> SpecState {
        let mut index = NgramIndex::new(1, 4);
        if method == SpecMethod::Ngram {
            index.extend(prompt);
        }
        SpecState {
            method,
            control: DraftControl::new(max_tokens, fixed, prior),
            index,
            draft_q: Vec::new(),
            check: ProposalCheck::default(),
        }
    }
}

//! How many tokens a request may generate, decided once where the request is validated.

use std::num::NonZeroUsize;

/// A request's output bound. Built once (from the caller's count and the context left after
/// the prompt); the engine and the scheduler trust it and clamp nothing again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MaxTokens {
    /// Score the prompt, generate nothing: the scheduler still runs the request to its
    /// first sample (the logits of the last prompt position), which is not output.
    ScoreOnly,
    /// Generate at most this many tokens.
    Generate(NonZeroUsize),
}

impl MaxTokens {
    /// The bound of a request asking for `requested` tokens (0: score only) with `room`
    /// positions of context left after its prompt: at most `room`, at least one.
    pub fn new(requested: usize, room: usize) -> Self {
        Self::from(requested).within(room)
    }

    /// This bound with at most `room` tokens generated (at least one; score only stays).
    pub fn within(self, room: usize) -> Self {
        match self {
            Self::ScoreOnly => Self::ScoreOnly,
            Self::Generate(n) => {
                Self::Generate(n.min(NonZeroUsize::new(room).unwrap_or(NonZeroUsize::MIN)))
            }
        }
    }

    /// Tokens the scheduler runs the request for (score only: its one unseen sample).
    pub fn steps(self) -> usize {
        match self {
            Self::ScoreOnly => 1,
            Self::Generate(n) => n.get(),
        }
    }

    /// True for [`MaxTokens::ScoreOnly`].
    pub fn is_score_only(self) -> bool {
        self == Self::ScoreOnly
    }
}

/// A plain count: 0 is score only, any other count generates that many (no context bound:
/// callers that know the context use [`MaxTokens::new`]).
impl From<usize> for MaxTokens {
    fn from(n: usize) -> Self {
        NonZeroUsize::new(n).map_or(Self::ScoreOnly, Self::Generate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_scores_and_counts_fit_the_context() {
        assert_eq!(MaxTokens::new(0, 10), MaxTokens::ScoreOnly);
        assert_eq!(MaxTokens::new(50, 10).steps(), 10);
        assert_eq!(MaxTokens::new(5, 0).steps(), 1);
        assert_eq!(MaxTokens::ScoreOnly.steps(), 1);
        assert_eq!(MaxTokens::from(7).steps(), 7);
    }
}

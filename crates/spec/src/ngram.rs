//! Context lookup drafts ("prompt lookup decoding"): when the last n tokens occurred
//! earlier in the request, propose the tokens that followed them then. Extraction, code
//! edits and multi-turn chat copy spans of their context, so this costs an index update
//! per token and no model work.

use std::collections::HashMap;

/// Index of n-gram → latest start position, over one request's tokens, kept up to date
/// incrementally as tokens are appended.
#[derive(Debug, Clone)]
pub struct NgramIndex {
    /// Longest n-gram tried first; falls back to shorter ones down to `min_n`.
    max_n: usize,
    min_n: usize,
    tokens: Vec<u32>,
    /// For each n, the n-gram's tokens → the position just after its latest occurrence
    /// that is not the current suffix.
    maps: Vec<HashMap<Vec<u32>, usize>>,
}

impl NgramIndex {
    pub fn new(min_n: usize, max_n: usize) -> NgramIndex {
        let min_n = min_n.max(1);
        let max_n = max_n.max(min_n);
        NgramIndex {
            max_n,
            min_n,
            tokens: Vec::new(),
            maps: vec![HashMap::new(); max_n + 1],
        }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Appends tokens, indexing every n-gram that now ends before the last token.
    pub fn extend(&mut self, new: &[u32]) {
        for &t in new {
            // Before pushing t, the n-grams ending at the current last token get "followed
            // by" position len (where t goes).
            let len = self.tokens.len();
            for n in self.min_n..=self.max_n {
                if len >= n {
                    let key = self.tokens[len - n..].to_vec();
                    self.maps[n].insert(key, len);
                }
            }
            self.tokens.push(t);
        }
    }

    /// Truncates to `len` tokens (after rejected drafts were appended by mistake, or a
    /// rollback). Rebuilds the index; rare.
    pub fn truncate(&mut self, len: usize) {
        if len >= self.tokens.len() {
            return;
        }
        let keep: Vec<u32> = self.tokens[..len].to_vec();
        *self = NgramIndex::new(self.min_n, self.max_n);
        self.extend(&keep);
    }

    /// Up to `k` tokens that followed the latest earlier occurrence of the longest
    /// matching suffix n-gram.
    pub fn propose(&self, k: usize) -> Vec<u32> {
        let len = self.tokens.len();
        if k == 0 {
            return Vec::new();
        }
        for n in (self.min_n..=self.max_n).rev() {
            if len < n {
                continue;
            }
            let key = &self.tokens[len - n..];
            if let Some(&next) = self.maps[n].get(key) {
                // `next` is where the continuation of the earlier occurrence starts; it is
                // strictly before len because the current suffix is indexed only once
                // another token follows it.
                let end = (next + k).min(len);
                if next < end {
                    return self.tokens[next..end].to_vec();
                }
            }
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposes_the_continuation_of_the_latest_match() {
        let mut ix = NgramIndex::new(1, 3);
        // a b c d | x a b c → propose d (and what followed)
        ix.extend(&[1, 2, 3, 4, 9, 1, 2, 3]);
        assert_eq!(ix.propose(3), vec![4, 9, 1]);
        assert_eq!(ix.propose(1), vec![4]);
    }

    #[test]
    fn prefers_longer_ngrams_and_latest_occurrence() {
        let mut ix = NgramIndex::new(1, 2);
        ix.extend(&[5, 7, 1, 6, 7, 2, 6, 7]);
        // bigram (6,7) last seen at 3..5 followed by 2; unigram 7 latest followed by 2 too.
        assert_eq!(ix.propose(2), vec![2, 6]);
        let mut ix = NgramIndex::new(1, 2);
        ix.extend(&[5, 7, 1, 8, 7]);
        // no bigram (8,7) before; unigram 7 at position 1 followed by 1.
        assert_eq!(ix.propose(2), vec![1, 8]);
    }

    #[test]
    fn nothing_without_a_match_and_truncate_rebuilds() {
        let mut ix = NgramIndex::new(2, 3);
        ix.extend(&[1, 2, 3]);
        assert!(ix.propose(4).is_empty());
        ix.extend(&[1, 2]);
        assert_eq!(ix.propose(4), vec![3, 1, 2]);
        ix.truncate(3);
        assert_eq!(ix.len(), 3);
        assert!(ix.propose(4).is_empty());
    }
}

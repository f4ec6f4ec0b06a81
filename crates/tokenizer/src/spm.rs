//! [`Spm`]: llama.cpp's SentencePiece tokenizer (`tokenizer.ggml.model = "llama"`,
//! `llm_tokenizer_spm` in llama.cpp's `src/llama-vocab.cpp`), for Llama 2, Mistral,
//! Phi-3 and Gemma vocabularies.
//!
//! Hand-written rather than built on the `tokenizers` crate: its `Unigram` model picks
//! the segmentation of highest total score (Viterbi), while llama.cpp greedily merges the
//! adjacent pair whose merged text is the highest-scoring vocabulary entry, again and
//! again. The two disagree on many inputs, and the model was run (by llama.cpp, and by
//! the users comparing against it) with llama.cpp's ids.
//!
//! One plain-text fragment (special tokens are already split out by [`crate::special`])
//! is encoded as llama.cpp does:
//! 1. spaces become U+2581 `▁` (the caller prepends a space first when
//!    `add_space_prefix` asks for it);
//! 2. the text is split into UTF-8 chars, one symbol each;
//! 3. every adjacent pair whose concatenation is a token is queued by that token's score;
//!    the best pair (highest score, leftmost on ties) is merged, and the new symbol's
//!    pairs with its neighbours are queued, until no queued pair is left;
//! 4. each final symbol becomes its token; a symbol that is not a token (only a single
//!    char can be one: merges only ever produce tokens) is spelled as byte tokens
//!    `<0xNN>`, falling back to the one-char token for an ASCII byte, then to the
//!    unknown token.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use crate::error::{Result, TokenizerError};
use crate::spec::token_type;

/// SentencePiece's visible space, U+2581 LOWER ONE EIGHTH BLOCK.
pub(crate) const SPACE: char = '\u{2581}';

/// The SentencePiece vocabulary: token lookup, merge scores and byte fallback.
pub(crate) struct Spm {
    /// Token text → id; with duplicate texts the last id wins, as llama.cpp's
    /// `token_to_id`.
    ids: HashMap<String, u32>,
    /// `tokenizer.ggml.scores`, one per id.
    scores: Vec<f32>,
    /// The token that spells each byte when a char is not in the vocabulary.
    byte_ids: [Option<u32>; 256],
    /// `tokenizer.ggml.unknown_token_id`: last resort for a byte with no token.
    unk_id: Option<u32>,
}

/// One symbol of the text being merged: `text[start..start + len]`, linked to its
/// neighbours. A symbol merged into its left neighbour has `len == 0`.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A queued merge of symbols `left` and `right` (adjacent when queued) into a token of
/// `score` spanning `size` bytes.
#[derive(Clone, Copy)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl Ord for Bigram {
    /// llama.cpp's `llm_bigram_spm::comparator`: the queue's top is the highest score,
    /// and among equal scores the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

impl Spm {
    /// The tokenizer for `tokens` (id = position) with `scores` (empty: all 0, as
    /// llama.cpp) and `types` (already checked to be one per token).
    pub(crate) fn new(
        tokens: &[String],
        scores: &[f32],
        types: &[i32],
        unk_id: Option<u32>,
    ) -> Result<Spm> {
        let n = tokens.len();
        let scores = if scores.is_empty() {
            vec![0.0; n]
        } else if scores.len() == n {
            scores.to_vec()
        } else {
            return Err(TokenizerError::LengthMismatch {
                field: "tokenizer.ggml.scores",
                len: scores.len(),
                vocab: n,
            });
        };
        for (id, (text, &ty)) in tokens.iter().zip(types).enumerate() {
            if ty == token_type::BYTE && parse_byte_token(text).is_none() {
                return Err(TokenizerError::BadByteToken {
                    id: id as u32,
                    text: text.clone(),
                });
            }
        }
        let ids: HashMap<String, u32> = tokens
            .iter()
            .enumerate()
            .map(|(id, t)| (t.clone(), id as u32))
            .collect();
        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            let b = b as u8;
            *slot = ids.get(&format!("<0x{b:02X}>")).copied().or_else(|| {
                // llama.cpp then tries the byte itself as a one-char token; a NUL byte
                // would be its empty C string, which is never a token.
                (b != 0 && b.is_ascii())
                    .then(|| ids.get(&char::from(b).to_string()).copied())
                    .flatten()
            });
        }
        Ok(Spm {
            ids,
            scores,
            byte_ids,
            unk_id,
        })
    }

    /// Appends the ids of one plain-text fragment to `out`. `text` is raw text: spaces
    /// are escaped to `▁` here.
    pub(crate) fn encode_into(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let text = text.replace(' ', "\u{2581}");
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (i, (start, c)) in text.char_indices().enumerate() {
            let len = c.len_utf8();
            symbols.push(Symbol {
                start,
                len,
                prev: i.checked_sub(1),
                next: (start + len < text.len()).then_some(i + 1),
            });
        }

        let mut queue = BinaryHeap::with_capacity(symbols.len());
        for right in 1..symbols.len() {
            self.try_add_bigram(&text, &symbols, right - 1, right, &mut queue);
        }
        while let Some(bigram) = queue.pop() {
            let (left, right) = (symbols[bigram.left], symbols[bigram.right]);
            // Stale: one side was merged away or grew since this pair was queued.
            if left.len == 0 || right.len == 0 || left.len + right.len != bigram.size {
                continue;
            }
            symbols[bigram.left].len += right.len;
            symbols[bigram.left].next = right.next;
            symbols[bigram.right].len = 0;
            if let Some(next) = right.next {
                symbols[next].prev = Some(bigram.left);
            }
            if let Some(prev) = left.prev {
                self.try_add_bigram(&text, &symbols, prev, bigram.left, &mut queue);
            }
            if let Some(next) = right.next {
                self.try_add_bigram(&text, &symbols, bigram.left, next, &mut queue);
            }
        }

        let mut at = Some(0);
        while let Some(i) = at {
            let sym = symbols[i];
            let piece = &text[sym.start..sym.start + sym.len];
            match self.ids.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    for &b in piece.as_bytes() {
                        out.push(self.byte_token(b)?);
                    }
                }
            }
            at = sym.next;
        }
        Ok(())
    }

    /// Queues the merge of adjacent symbols `left` and `right` if their text is a token.
    fn try_add_bigram(
        &self,
        text: &str,
        symbols: &[Symbol],
        left: usize,
        right: usize,
        queue: &mut BinaryHeap<Bigram>,
    ) {
        let start = symbols[left].start;
        let size = symbols[left].len + symbols[right].len;
        if let Some(&id) = self.ids.get(&text[start..start + size]) {
            queue.push(Bigram {
                score: self.scores[id as usize],
                left,
                right,
                size,
            });
        }
    }

    /// The token for one byte of a char that is not in the vocabulary.
    fn byte_token(&self, b: u8) -> Result<u32> {
        self.byte_ids[usize::from(b)]
            .or(self.unk_id)
            .ok_or(TokenizerError::NoByteToken { byte: b })
    }
}

/// The byte a `<0xNN>` token stands for.
pub(crate) fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// What one token contributes to decoded text, as llama.cpp's `token_to_piece` for SPM
/// (with special tokens rendered): `▁` → space in normal tokens, the byte of a byte
/// token, the literal text of control, unknown and user-defined tokens, and nothing for
/// unused or undefined ones.
pub(crate) fn token_raw_bytes(text: &str, ty: i32) -> Vec<u8> {
    match ty {
        token_type::NORMAL => text.replace(SPACE, " ").into_bytes(),
        token_type::BYTE => parse_byte_token(text).map_or_else(Vec::new, |b| vec![b]),
        token_type::CONTROL | token_type::UNKNOWN | token_type::USER_DEFINED => {
            text.as_bytes().to_vec()
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_token_texts() {
        assert_eq!(parse_byte_token("<0x0A>"), Some(10));
        assert_eq!(parse_byte_token("<0xff>"), Some(255));
        assert_eq!(parse_byte_token("<0x1>"), None);
        assert_eq!(parse_byte_token("<0xZZ>"), None);
        assert_eq!(parse_byte_token("0x0A"), None);
    }

    #[test]
    fn queue_top_is_highest_score_then_leftmost() {
        let b = |score, left| Bigram {
            score,
            left,
            right: left + 1,
            size: 2,
        };
        let mut q: BinaryHeap<Bigram> = [b(1.0, 0), b(2.0, 5), b(2.0, 3), b(-1.0, 1)].into();
        let order: Vec<usize> = std::iter::from_fn(|| q.pop().map(|x| x.left)).collect();
        assert_eq!(order, [3, 5, 0, 1]);
    }
}

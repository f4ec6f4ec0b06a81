//! [`IncrementalDecoder`]: streaming detokenization that never splits a UTF-8 char.
//!
//! A byte-level token may end in the middle of a multi-byte char (an emoji is often two
//! or more tokens). Emitting each token's bytes lossily would print U+FFFD mid-stream, so
//! the decoder holds back an incomplete trailing sequence until the bytes that complete
//! it arrive.

use std::sync::Arc;

use crate::Tokenizer;

/// Turns a stream of token ids into a stream of complete UTF-8 text.
pub struct IncrementalDecoder {
    tok: Arc<Tokenizer>,
    skip_special: bool,
    /// Bytes of an incomplete UTF-8 sequence at the end of what was pushed so far
    /// (at most 3 bytes).
    pending: Vec<u8>,
}

impl IncrementalDecoder {
    /// A decoder over `tok`; with `skip_special`, special tokens produce no text.
    pub fn new(tok: Arc<Tokenizer>, skip_special: bool) -> Self {
        IncrementalDecoder {
            tok,
            skip_special,
            pending: Vec::new(),
        }
    }

    /// Adds one token and returns the text it completed (possibly empty). Bytes that can
    /// never become valid UTF-8 are emitted as U+FFFD right away.
    pub fn push(&mut self, id: u32) -> String {
        if self.skip_special && self.tok.is_special(id) {
            return String::new();
        }
        self.pending.extend_from_slice(self.tok.token_bytes_ref(id));
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = start + e.valid_up_to();
                    out.push_str(
                        std::str::from_utf8(&self.pending[start..valid])
                            .expect("from_utf8 said these bytes are valid"),
                    );
                    match e.error_len() {
                        // An incomplete sequence at the end: wait for more bytes.
                        None => {
                            start = valid;
                            break;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            start = valid + bad;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }

    /// Drops the held-back bytes of an incomplete trailing character (a stream cut before
    /// the tokens that would complete it); returns how many bytes were dropped.
    pub fn discard_incomplete(&mut self) -> usize {
        std::mem::take(&mut self.pending).len()
    }

    /// Ends the stream: whatever is held back, lossily decoded.
    pub fn flush(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

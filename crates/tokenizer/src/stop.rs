//! [`StopMatcher`]: stop strings over streamed text.
//!
//! A stop string may arrive split across chunks ("<|" then "end|>"), and it must never be
//! shown to the client. So the matcher holds back the longest tail of the text that could
//! still grow into a stop string, and emits everything before it.

/// What one [`StopMatcher::push`] produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopOutput {
    /// Text that is now safe to show: it contains no stop string and cannot be the start
    /// of one.
    pub text_to_emit: String,
    /// A stop string was found; generation should end. Text after it is discarded.
    pub stopped: bool,
}

/// Finds the first occurrence of any stop string in a stream of text chunks.
#[derive(Clone, Debug)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not emitted: a suffix that is a prefix of some stop string.
    held: String,
    stopped: bool,
}

impl StopMatcher {
    /// A matcher for `stops`; empty strings are ignored (they would match everywhere).
    pub fn new<S: Into<String>>(stops: impl IntoIterator<Item = S>) -> Self {
        StopMatcher {
            stops: stops
                .into_iter()
                .map(Into::into)
                .filter(|s: &String| !s.is_empty())
                .collect(),
            held: String::new(),
            stopped: false,
        }
    }

    /// Whether a stop string has been seen.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Adds a chunk of generated text. After a stop, every call returns nothing and
    /// `stopped: true`.
    pub fn push(&mut self, chunk: &str) -> StopOutput {
        if self.stopped {
            return StopOutput {
                text_to_emit: String::new(),
                stopped: true,
            };
        }
        self.held.push_str(chunk);
        let first_match = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(pos) = first_match {
            self.held.truncate(pos);
            self.stopped = true;
            return StopOutput {
                text_to_emit: std::mem::take(&mut self.held),
                stopped: true,
            };
        }
        let keep = self.partial_stop_len();
        let text_to_emit = self.held[..self.held.len() - keep].to_owned();
        self.held.drain(..self.held.len() - keep);
        StopOutput {
            text_to_emit,
            stopped: false,
        }
    }

    /// Ends the stream without a stop: returns the held-back text (empty after a stop).
    pub fn flush(&mut self) -> String {
        if self.stopped {
            self.held.clear();
            return String::new();
        }
        std::mem::take(&mut self.held)
    }

    /// Length in bytes of the longest suffix of `held` that is a proper prefix of some
    /// stop string.
    fn partial_stop_len(&self) -> usize {
        let held = self.held.as_str();
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        held.char_indices()
            .map(|(i, _)| i)
            .filter(|&i| held.len() - i < longest)
            .find(|&i| {
                let tail = &held[i..];
                self.stops
                    .iter()
                    .any(|s| s.len() > tail.len() && s.starts_with(tail))
            })
            .map_or(0, |i| held.len() - i)
    }
}

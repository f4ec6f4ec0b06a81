//! Embedding requests (`GenerateRequest::embed`): a prompt that prefills with the other
//! requests of each step and, instead of sampling, ends with the pooled final hidden state.
//!
//! Each chunk asks the forward for hidden rows (`SeqSpan::n_hidden`, after the output
//! norm): every position for mean pooling, the last prompt position for last-token
//! pooling, whose chunk is the one the scheduler marks as sampling. Mean pooling sums rows
//! in position order and skips positions it already has, so a chunk recomputed after a
//! preemption adds nothing twice; such a request skips the prefix cache (cached positions
//! have no rows). The vector is L2-normalized, as llama-server and vLLM return it.
//!
//! NOTE: the rows do not depend on what else is in the batch (the forward computes each
//! row the same way whatever its neighbours; see the README's numerics section), so an
//! input embeds to the same bits alone or batched with others.

/// How a sequence's hidden rows become one vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The last token's row: in a causal model the only one that has seen the whole input
    /// (vLLM's default for decoder models).
    Last,
    /// The mean over every token's row (sentence-transformers' usual pooling).
    Mean,
}

impl Pooling {
    pub fn parse(s: &str) -> Option<Pooling> {
        match s {
            "last" => Some(Pooling::Last),
            "mean" => Some(Pooling::Mean),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Pooling::Last => "last",
            Pooling::Mean => "mean",
        }
    }

    /// Whether such a request can start from prefix-cache blocks: last-token pooling needs
    /// only the last row, and the last prompt token is always computed; mean needs all.
    pub fn uses_prefix_cache(self) -> bool {
        self == Pooling::Last
    }

    /// The pooling a GGUF's `pooling_type` asks for (llama.cpp's enum: 1 mean, 3 last);
    /// `None` for absent or one folio does not pool by (cls, rank).
    pub fn from_gguf(pooling_type: Option<u64>) -> Option<Pooling> {
        match pooling_type {
            Some(1) => Some(Pooling::Mean),
            Some(3) => Some(Pooling::Last),
            _ => None,
        }
    }
}

/// One embedding request's pooling in progress.
#[derive(Clone, Debug)]
pub(crate) struct Pooled {
    pooling: Pooling,
    prompt_len: usize,
    /// Mean: the sum of the rows of positions `< covered`.
    sum: Vec<f64>,
    covered: usize,
    /// Last: the row of the last position.
    last: Option<Vec<f32>>,
}

impl Pooled {
    pub fn new(pooling: Pooling, prompt_len: usize, width: usize) -> Pooled {
        Pooled {
            pooling,
            prompt_len,
            sum: vec![0.0; width],
            covered: 0,
            last: None,
        }
    }

    /// Hidden rows the chunk of positions `[start, start + len)` must return (its last
    /// ones).
    pub fn rows_wanted(&self, start: usize, len: usize) -> usize {
        let end = start + len;
        match self.pooling {
            Pooling::Mean if end > self.covered => len,
            Pooling::Mean => 0,
            Pooling::Last => usize::from(end == self.prompt_len),
        }
    }

    /// Records the rows of the chunk's last `rows.len() / width` positions, the chunk
    /// ending before position `end`.
    pub fn record(&mut self, end: usize, rows: &[f32]) {
        let width = self.sum.len();
        let n = rows.len() / width;
        for (i, row) in rows.chunks_exact(width).enumerate() {
            let pos = end - n + i;
            match self.pooling {
                Pooling::Mean if pos == self.covered => {
                    self.sum
                        .iter_mut()
                        .zip(row)
                        .for_each(|(s, &x)| *s += x as f64);
                    self.covered += 1;
                }
                Pooling::Mean => {}
                Pooling::Last if pos + 1 == self.prompt_len => self.last = Some(row.to_vec()),
                Pooling::Last => {}
            }
        }
    }

    /// The normalized vector once every row it needs is in.
    pub fn vector(&self) -> Option<Vec<f32>> {
        let v: Vec<f64> = match self.pooling {
            Pooling::Mean if self.covered == self.prompt_len => {
                let n = self.prompt_len as f64;
                self.sum.iter().map(|s| s / n).collect()
            }
            Pooling::Mean => return None,
            Pooling::Last => self.last.as_ref()?.iter().map(|&x| x as f64).collect(),
        };
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
        Some(v.iter().map(|x| (x / norm) as f32).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_sums_each_position_once_and_last_keeps_the_last_row() {
        let mut m = Pooled::new(Pooling::Mean, 3, 2);
        assert!(!Pooling::Mean.uses_prefix_cache() && Pooling::Last.uses_prefix_cache());
        assert_eq!(m.rows_wanted(0, 2), 2);
        m.record(2, &[1.0, 0.0, 3.0, 0.0]);
        assert_eq!(m.vector(), None);
        // A preempted request recomputes from 0: the repeated rows are not added again.
        m.record(2, &[100.0, 0.0, 100.0, 0.0]);
        assert_eq!(m.rows_wanted(0, 2), 0);
        assert_eq!(m.rows_wanted(2, 1), 1);
        m.record(3, &[2.0, 3.0]);
        // mean (2, 1), normalized.
        let v = m.vector().unwrap();
        let n = 5f32.sqrt();
        assert!(
            (v[0] - 2.0 / n).abs() < 1e-6 && (v[1] - 1.0 / n).abs() < 1e-6,
            "{v:?}"
        );

        let mut l = Pooled::new(Pooling::Last, 3, 2);
        assert_eq!((l.rows_wanted(0, 2), l.rows_wanted(2, 1)), (0, 1));
        l.record(3, &[0.0, -4.0]);
        assert_eq!(l.vector(), Some(vec![0.0, -1.0]));
        assert_eq!(Pooling::from_gguf(Some(1)), Some(Pooling::Mean));
        assert_eq!(Pooling::from_gguf(Some(2)), None);
        assert_eq!(Pooling::parse("mean").map(Pooling::name), Some("mean"));
    }
}

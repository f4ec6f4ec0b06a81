//! One choice's progress: text and logprobs so far (non-streaming), timing for the
//! histograms, and how it ended.

use crate::api::Api;
use crate::metrics::ServerMetrics;
use crate::openai::{chat_logprobs, completion_logprobs, Job};
use folio_engine::{Event, FinishReason, TokenLogprob, Usage};
use folio_tokenizer::Tokenizer;
use serde_json::Value;
use std::time::Instant;

/// The finish reason of a choice the request timeout (`--request-timeout-s`) ended.
pub const TIMEOUT: &str = "timeout";
/// The finish reason of a choice its request's `deadline_ms` ended while it ran.
pub const DEADLINE: &str = "deadline";
/// The finish reason of a streamed choice whose client fell more than
/// `--stream-buffer-bytes` behind (see `outbox`).
pub const SLOW_READER: &str = "slow_reader";

#[derive(Clone, Debug, Default)]
pub struct ChoiceState {
    /// Text so far (non-streaming only; streams send it on).
    pub text: String,
    /// Logprobs so far (non-streaming only).
    pub logprobs: Vec<TokenLogprob>,
    /// The prompt's scores (echo with logprobs, non-streaming only).
    pub prompt_logprobs: Vec<TokenLogprob>,
    /// Char offset of the next token in the text (completions logprobs).
    text_offset: usize,
    /// Tokens seen in events (usage fallback when the engine ends a stream early).
    pub generated: usize,
    pub finish: Option<FinishReason>,
    pub usage: Option<Usage>,
    pub first_at: Option<Instant>,
    prev_at: Option<Instant>,
    /// Ended by the server at a cutoff (the request timeout or the request's deadline;
    /// the engine request was aborted): that finish reason.
    pub cut: Option<&'static str>,
    /// A streamed `echo` choice sent its prompt (with the first event).
    echoed: bool,
}

impl ChoiceState {
    /// Applies one event: records timings into `metrics`, and for a stream returns the
    /// chunk to send (None when there is nothing to say).
    pub fn apply(
        &mut self,
        index: usize,
        ev: Event,
        job: &Job,
        tok: &Tokenizer,
        metrics: &ServerMetrics,
    ) -> Option<Value> {
        match ev {
            Event::Tokens {
                ids,
                text,
                logprobs,
                prompt_logprobs,
                at,
            } => {
                match self.prev_at {
                    None => metrics
                        .ttft
                        .observe(at.saturating_duration_since(job.arrival).as_secs_f64()),
                    Some(prev) => metrics
                        .itl
                        .observe(at.saturating_duration_since(prev).as_secs_f64()),
                }
                self.first_at.get_or_insert(at);
                self.prev_at = Some(at);
                self.generated += ids.len();
                if !job.stream {
                    self.text.push_str(&text);
                    if job.logprobs.is_some() {
                        self.logprobs.extend(logprobs);
                        self.prompt_logprobs.extend(prompt_logprobs);
                    }
                    return None;
                }
                if let Some(e) = job.echo.get(index / job.n.max(1)).filter(|_| !self.echoed) {
                    // Echo streams the prompt (and its scores) in front of the first text.
                    self.echoed = true;
                    let lp = job.logprobs.map(|_| {
                        let v = crate::echo::logprobs(tok, e, &prompt_logprobs, &logprobs);
                        self.text_offset = v["tokens"].as_array().map_or(0, |t| {
                            t.iter()
                                .filter_map(Value::as_str)
                                .map(|s| s.chars().count())
                                .sum()
                        });
                        v
                    });
                    return Some(job.chunk(index, &crate::echo::text(e, &text), lp, None));
                }
                let lp = match job.logprobs {
                    Some(_) if !logprobs.is_empty() => {
                        Some(self.format_logprobs(job.api, tok, &logprobs))
                    }
                    _ => None,
                };
                if text.is_empty() && lp.is_none() {
                    return None;
                }
                Some(job.chunk(index, &text, lp, None))
            }
            // Only embedding requests get one; they are not read through here.
            Event::Embedding { .. } => None,
            Event::Finished { reason, usage, at } => {
                let reason_str = crate::api::finish_reason(&reason);
                metrics.finished(reason_str);
                if matches!(reason, FinishReason::Stop | FinishReason::Length) {
                    metrics
                        .e2e
                        .observe(at.saturating_duration_since(job.arrival).as_secs_f64());
                    metrics.prompt_tokens.observe(usage.prompt_tokens as f64);
                    metrics
                        .generation_tokens
                        .observe(usage.completion_tokens as f64);
                }
                self.finish = Some(reason);
                self.usage = Some(usage);
                job.stream
                    .then(|| job.chunk(index, "", None, Some(reason_str)))
            }
        }
    }

    /// The accumulated logprobs in the endpoint's shape (non-streaming).
    pub fn final_logprobs(&mut self, job: &Job, tok: &Tokenizer) -> Option<Value> {
        job.logprobs?;
        let lps = std::mem::take(&mut self.logprobs);
        self.text_offset = 0;
        Some(self.format_logprobs(job.api, tok, &lps))
    }

    fn format_logprobs(&mut self, api: Api, tok: &Tokenizer, lps: &[TokenLogprob]) -> Value {
        match api {
            Api::Completions => completion_logprobs(tok, lps, &mut self.text_offset),
            Api::Chat => Value::Array(chat_logprobs(tok, lps)),
        }
    }

    /// Records that a cutoff ended this choice with finish reason `reason`.
    pub fn cut_off(&mut self, reason: &'static str, metrics: &ServerMetrics) {
        self.cut = Some(reason);
        metrics.finished(reason);
    }

    /// The OpenAI finish reason; a stream that ended without `Finished` was aborted.
    pub fn finish_reason(&self) -> &'static str {
        if let Some(reason) = self.cut {
            return reason;
        }
        self.finish
            .as_ref()
            .map_or("abort", crate::api::finish_reason)
    }
}

/// Usage summed over choices: each prompt's tokens once (its first choice's cache hits),
/// every choice's completion tokens.
pub fn usage_sum(job: &Job, states: &[ChoiceState]) -> crate::openai::UsageSum {
    let mut u = crate::openai::UsageSum::default();
    for (i, &len) in job.prompt_lens.iter().enumerate() {
        u.prompt_tokens += len;
        u.cached_tokens += states
            .get(i * job.n)
            .and_then(|s| s.usage)
            .map_or(0, |x| x.cached_tokens);
    }
    u.completion_tokens = states
        .iter()
        .map(|s| s.usage.map_or(s.generated, |x| x.completion_tokens))
        .sum();
    u
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::UsageSum;

    fn job(n: usize, prompt_lens: Vec<usize>) -> Job {
        Job {
            api: Api::Completions,
            id: "cmpl-1".into(),
            created: 0,
            model: "m".into(),
            n,
            prompt_lens,
            logprobs: None,
            stream: false,
            include_usage: false,
            continuous_usage: false,
            arrival: Instant::now(),
            echo: Vec::new(),
            tools: None,
            reasoning: None,
        }
    }

    fn done(prompt: usize, completion: usize, cached: usize) -> ChoiceState {
        ChoiceState {
            finish: Some(FinishReason::Length),
            usage: Some(Usage {
                prompt_tokens: prompt,
                completion_tokens: completion,
                cached_tokens: cached,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn usage_counts_each_prompt_once_and_every_choice() {
        // Two prompts × n = 2: the second choice of each prompt hit the prefix cache.
        let states = vec![done(5, 3, 0), done(5, 4, 4), done(7, 1, 0), done(7, 2, 6)];
        assert_eq!(
            usage_sum(&job(2, vec![5, 7]), &states),
            UsageSum {
                prompt_tokens: 12,
                completion_tokens: 10,
                cached_tokens: 0
            }
        );
    }

    #[test]
    fn unfinished_choice_counts_seen_tokens_and_reads_abort() {
        let s = ChoiceState {
            generated: 3,
            ..Default::default()
        };
        assert_eq!(s.finish_reason(), "abort");
        assert_eq!(
            usage_sum(&job(1, vec![2]), &[s]),
            UsageSum {
                prompt_tokens: 2,
                completion_tokens: 3,
                cached_tokens: 0
            }
        );
    }
}

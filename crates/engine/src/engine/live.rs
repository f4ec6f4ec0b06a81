//! The engine's per-request state beside the scheduler's: sampler, detokenizer, stop
//! strings, drafts, grammar, prompt scores, adapters, and the stream the events go to.

use super::Engine;
use crate::api::{Event, FinishReason, Usage};
use crate::constraint::Guide;
use crate::prompt_scoring::PromptScores;
use crate::sampler::Sampler;
use crate::speculate::SpecState;
use crate::{GenerateRequest, RequestId, SpecMethod};
use folio_tokenizer::{IncrementalDecoder, StopMatcher};
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// The engine's view of one live request (what the scheduler does not keep).
pub(super) struct Live {
    pub tx: UnboundedSender<Event>,
    pub sampler: Sampler,
    pub decoder: IncrementalDecoder,
    pub stop: StopMatcher,
    pub stop_ids: Vec<u32>,
    pub ignore_eos: bool,
    pub logprobs: Option<usize>,
    pub prompt_len: usize,
    pub output: Vec<u32>,
    pub cached_tokens: usize,
    pub spec: Option<SpecState>,
    /// Its LoRA adapters; held until the request ends (the registry cannot drop them).
    pub lora: Option<folio_model::LoraSet>,
    /// Structured output: the grammar's matcher, at the end of `output`.
    pub guide: Option<Guide>,
    /// `prompt_logprobs`: the prompt's scores, collected chunk by chunk.
    pub scores: Option<PromptScores>,
    /// An embedding request: its pooled hidden rows (nothing is sampled, see `embed`).
    pub embed: Option<crate::embed::Pooled>,
}

/// A sample of an `n > 1` group, not yet forked.
pub(super) struct PendingChild {
    pub id: RequestId,
    pub req: GenerateRequest,
    pub tx: UnboundedSender<Event>,
}

impl Live {
    /// Ends the stream: text held back for a possible stop string is released (unless a
    /// stop string matched), then `Finished` with usage. Bytes of a character the last
    /// token left incomplete (a length cut mid-emoji) are dropped, not sent as U+FFFD.
    pub fn finish(mut self, reason: FinishReason, now: Instant) {
        let tail = if reason == FinishReason::Stop {
            String::new()
        } else {
            self.decoder.discard_incomplete();
            self.stop.push(&self.decoder.flush()).text_to_emit + &self.stop.flush()
        };
        if !tail.is_empty() {
            let _ = self.tx.send(Event::Tokens {
                ids: Vec::new(),
                text: tail,
                logprobs: Vec::new(),
                prompt_logprobs: Vec::new(),
                at: now,
            });
        }
        self.finish_silently(reason);
    }

    /// Ends the stream without releasing held-back text (cancellation, errors).
    pub fn finish_silently(mut self, reason: FinishReason) {
        // Release the adapters before the caller learns the request is over.
        self.lora = None;
        let usage = Usage {
            prompt_tokens: self.prompt_len,
            completion_tokens: self.output.len(),
            cached_tokens: self.cached_tokens,
        };
        let _ = self.tx.send(Event::Finished {
            reason,
            usage,
            at: Instant::now(),
        });
    }
}

impl Engine {
    /// The engine-side state of a request (sampler, detokenizer, stop strings, drafts).
    /// `guide`: the request's compiled constraint (compiled by the caller, which decides
    /// what a compile error means for it).
    pub(super) fn new_live(
        &self,
        req: GenerateRequest,
        prompt: &[u32],
        tx: UnboundedSender<Event>,
        guide: Option<Guide>,
    ) -> Live {
        let method = req.spec.unwrap_or(self.drafter.method);
        // An embedding decodes nothing, so it has nothing to draft.
        let spec = (method != SpecMethod::Off && req.embed.is_none()).then(|| {
            let fixed = req.spec_tokens.or(self.drafter.fixed_tokens);
            // Start from what this proposer achieved on earlier requests, not a guess: a
            // new request then drafts long at once where copying pays, and not at all
            // where its drafts were being rejected.
            let prior = self.drafter.prior(method).acceptance();
            SpecState::new(
                method,
                self.drafter.max_tokens.max(fixed.unwrap_or(0)),
                fixed,
                prompt,
                prior,
            )
        });
        Live {
            tx,
            sampler: Sampler::new(req.params).with_prompt(prompt),
            decoder: IncrementalDecoder::new(self.tokenizer.clone(), !req.special_text),
            stop: StopMatcher::new(req.stop),
            stop_ids: req.stop_token_ids,
            ignore_eos: req.ignore_eos,
            logprobs: req.logprobs,
            prompt_len: prompt.len(),
            output: Vec::new(),
            cached_tokens: 0,
            spec,
            lora: req.lora,
            guide,
            scores: req.prompt_logprobs.map(|k| PromptScores::new(prompt, k)),
            embed: req.embed.map(|p| {
                crate::embed::Pooled::new(p, prompt.len(), self.runner.model.hidden_size())
            }),
        }
    }
}

//! The output processor: turns a step's logit rows into tokens and events. Per request it
//! applies penalties and rules, masks by the grammar, samples or verifies drafts, appends
//! the tokens, detokenizes, checks end tokens and stop strings, computes logprobs and sends
//! the stream its event; the scheduler learns the kept tokens through `RequestResult`s.

use super::live::Live;
use super::Engine;
use crate::api::{Event, TokenLogprob};
use crate::constraint::Guide;
use crate::prompt_scoring::{token_logprob, PromptScores};
use crate::{RequestId, SpecMethod};
use folio_core::{FinishReason, RequestResult, SchedulerOutput};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

/// A group's first request whose prompt is computed: its samples fork from this row.
pub(super) type ForkJob = (RequestId, Vec<f32>, usize);

/// A step's forward output and how it divides among the scheduled requests: the i-th
/// gets `logits_of[i]` logit rows and `hidden_of[i]` hidden rows, in order.
pub(super) struct Rows<'a> {
    pub logits: &'a [f32],
    pub logits_of: &'a [usize],
    pub hidden: &'a [f32],
    pub hidden_of: &'a [usize],
}

impl Engine {
    /// Chooses and emits every sampled request's tokens of step `out` from its `rows`;
    /// embedding requests pool their hidden rows instead. Returns the scheduler's results
    /// and the groups ready to fork.
    pub(super) fn process_outputs(
        &mut self,
        out: &SchedulerOutput,
        rows: Rows,
        forward_s: f64,
        now: Instant,
    ) -> (Vec<RequestResult>, Vec<ForkJob>) {
        let vocab = self.runner.model.config.vocab_size;
        let width = self.runner.model.hidden_size();
        let mut results = Vec::with_capacity(out.requests.len());
        let (mut row, mut hidden_row) = (0, 0);
        let mut fork_jobs: Vec<ForkJob> = Vec::new();
        let per_request = rows.logits_of.iter().zip(rows.hidden_of);
        for (sr, (&n_rows, &n_hidden)) in out.requests.iter().zip(per_request) {
            let all = &rows.logits[row * vocab..(row + n_rows) * vocab];
            row += n_rows;
            let hidden = &rows.hidden[hidden_row * width..(hidden_row + n_hidden) * width];
            hidden_row += n_hidden;
            if let Some(r) = self.embed_step(sr, hidden, now) {
                results.push(r);
                continue;
            }
            let rows = if sr.sample {
                1 + sr.num_draft_tokens
            } else {
                0
            };
            if n_rows > rows {
                if let Some(sc) = self.live.get_mut(&sr.id).and_then(|l| l.scores.as_mut()) {
                    sc.record(sr.start_pos, all, vocab);
                }
            }
            if !sr.sample {
                results.push(RequestResult {
                    id: sr.id,
                    new_token_ids: Vec::new(),
                    finish: None,
                });
                continue;
            }
            let l = &all[(n_rows - rows) * vocab..];
            let sched_req = self.sched.request(sr.id);
            let cached = sched_req.map_or(0, |r| r.num_cached_tokens);
            let score_only = sched_req.is_some_and(|r| r.max_tokens.is_score_only());
            let Some(live) = self.live.get_mut(&sr.id) else {
                results.push(RequestResult {
                    id: sr.id,
                    new_token_ids: Vec::new(),
                    finish: None,
                });
                continue;
            };
            live.cached_tokens = cached;
            if live.output.is_empty() && self.forks.contains_key(&sr.id) {
                fork_jobs.push((sr.id, l[..vocab].to_vec(), cached));
            }
            let drafts = &sr.token_ids[sr.token_ids.len() - sr.num_draft_tokens..];
            let prompt_lps = live
                .scores
                .as_mut()
                .map(PromptScores::take_ready)
                .unwrap_or_default();
            if score_only {
                // Scored, nothing to generate: the scheduler runs a request for one token,
                // which ends it here (max_tokens) without being output.
                let _ = live.tx.send(score_event(prompt_lps, now));
                results.push(RequestResult {
                    id: sr.id,
                    new_token_ids: vec![crate::sampler::argmax(&l[..vocab]) as u32],
                    finish: None,
                });
                continue;
            }
            let (toks, logprobs) = choose_tokens(live, l, vocab, drafts, &self.eog);
            if !drafts.is_empty() {
                let accepted = toks.len() - 1;
                if let Some(sp) = live.spec.as_mut() {
                    // Context lookup learns from its full proposals (below), not from the
                    // drafts the rule chose to verify.
                    if sp.method != SpecMethod::Ngram {
                        sp.control.observe(drafts.len(), accepted);
                        // The engine-wide estimate new requests of this proposer start from.
                        self.drafter
                            .prior_mut(sp.method)
                            .observe(drafts.len(), accepted);
                    }
                }
                if let Ok(mut st) = self.metrics.spec.lock() {
                    st.record(drafts.len(), accepted, toks.len(), forward_s);
                }
            }
            let (kept, finish, mut event) = emit(live, &toks, logprobs, &self.eog, now);
            if let Some(sp) = live
                .spec
                .as_mut()
                .filter(|sp| sp.method == SpecMethod::Ngram)
            {
                for &t in &kept {
                    if let Some((proposed, accepted)) = sp.check.push(t) {
                        sp.control.observe(proposed, accepted);
                        self.drafter
                            .prior_mut(sp.method)
                            .observe(proposed, accepted);
                    }
                }
            }
            if let Event::Tokens {
                prompt_logprobs, ..
            } = &mut event
            {
                *prompt_logprobs = prompt_lps;
            }
            let _ = live.tx.send(event);
            // Tokens, not sampling steps: a verified draft step emits several.
            self.metrics
                .generation_tokens
                .fetch_add(kept.len() as u64, Relaxed);
            results.push(RequestResult {
                id: sr.id,
                new_token_ids: kept,
                finish,
            });
        }
        (results, fork_jobs)
    }
}

/// The logits a request samples from: `row` with its end tokens masked (`ignore_eos`) and its
/// penalties over the output so far plus `pending` (drafts not yet verified). Drafting and
/// verification both go through it: a greedy draft from raw logits proposed end tokens that
/// an `ignore_eos` request can never take.
pub(super) fn processed(live: &Live, row: &[f32], pending: &[u32], eog: &[u32]) -> Vec<f32> {
    let mut l = row.to_vec();
    if live.ignore_eos {
        for &e in eog {
            if let Some(x) = l.get_mut(e as usize) {
                *x = f32::NEG_INFINITY;
            }
        }
    }
    // The history is only built when a penalty or rule needs it (not on the common path).
    let rules = &live.sampler.params.rules;
    if live.sampler.has_penalties() || !rules.is_empty() {
        let mut hist = live.output.clone();
        hist.extend_from_slice(pending);
        live.sampler.apply_penalties(&mut l, &hist);
        if !rules.is_empty() {
            let mut ends = live.stop_ids.clone();
            if !live.ignore_eos {
                ends.extend_from_slice(eog);
            }
            rules.apply(&mut l, &hist, &ends);
        }
    }
    l
}

/// The event of a score-only request (`max_tokens` 0): the prompt's scores, no tokens.
impl Engine {
    /// An embedding request's share of the step: its hidden rows are pooled; on the chunk
    /// that ends its prompt (the one the scheduler marks as sampling) the vector goes out
    /// and the request ends, nothing sampled. `None` for any other request.
    fn embed_step(
        &mut self,
        sr: &folio_core::ScheduledRequest,
        hidden: &[f32],
        now: Instant,
    ) -> Option<RequestResult> {
        let live = self.live.get_mut(&sr.id)?;
        let e = live.embed.as_mut()?;
        e.record(sr.start_pos + sr.token_ids.len(), hidden);
        let finish = sr.sample.then(|| {
            match e.vector() {
                Some(vector) => {
                    let _ = live.tx.send(Event::Embedding { vector, at: now });
                }
                None => tracing::error!(id = sr.id, "embedding rows missing"),
            }
            FinishReason::Stop
        });
        if let Some(r) = self.sched.request(sr.id) {
            live.cached_tokens = r.num_cached_tokens;
        }
        Some(RequestResult {
            id: sr.id,
            new_token_ids: Vec::new(),
            finish,
        })
    }
}

pub(super) fn score_event(prompt_logprobs: Vec<TokenLogprob>, at: Instant) -> Event {
    Event::Tokens {
        ids: Vec::new(),
        text: String::new(),
        logprobs: Vec::new(),
        prompt_logprobs,
        at,
    }
}

/// Chooses this step's tokens for one request: one sampled token, or the verified prefix of
/// its drafts plus the correction/bonus token. Returns them with their logprobs.
///
/// Under a grammar, the drafts are first cut at the first token it refuses, each row is
/// sampled under its own position's mask (the matcher steps over the drafts before it),
/// and afterwards the matcher is rolled back to the accepted drafts and given the
/// correction/bonus token, so it stands at the end of the chosen tokens. Tokens past the
/// grammar's end are dropped (the request then stops).
pub(super) fn choose_tokens(
    live: &mut Live,
    rows: &[f32],
    vocab: usize,
    drafts: &[u32],
    eog: &[u32],
) -> (Vec<u32>, Vec<TokenLogprob>) {
    let sampled_drafts = live
        .spec
        .as_ref()
        .is_some_and(|sp| sp.draft_q.len() == drafts.len() && !drafts.is_empty());
    let drafts = match live.guide.as_mut() {
        Some(g) => &drafts[..g.valid_prefix(drafts)],
        None => drafts,
    };
    let n_rows = drafts.len() + 1;
    // Row i's logits: its history is the output so far plus the drafts before it; under a
    // grammar, masked at the matcher's current position (which must be row i's).
    let raw = |live: &Live, i: usize| {
        processed(live, &rows[i * vocab..(i + 1) * vocab], &drafts[..i], eog)
    };
    let prepare = |live: &mut Live, i: usize| {
        let mut l = raw(live, i);
        if let Some(g) = live.guide.as_mut() {
            g.mask(&mut l);
        }
        l
    };
    // Row 0's sampler state (its output position keys the draws, see `Sampler`); row
    // i + 1's follows from row i's as if its token were taken (Mirostat's `mu`).
    let mut steps = vec![live.sampler.step_at(live.output.len())];
    let greedy = live.sampler.params.is_greedy();
    // Row i's token: drawn with the position's own uniform, or the argmax (checked
    // against the grammar before any mask is computed).
    let pick = |live: &mut Live, i: usize, steps: &mut Vec<crate::sampler::Step>| {
        if greedy {
            greedy_pick(live, raw(live, i))
        } else {
            let l = prepare(live, i);
            let d = live.sampler.distribution_at(&l, &steps[i]);
            let t = live.sampler.draw_at(&d, &steps[i]);
            steps.push(live.sampler.next(&steps[i], t, &d));
            t
        }
    };
    // Drafts the matcher has stepped over to reach later rows' masks.
    let mut consumed = 0;
    let step = |live: &mut Live, tok: u32, consumed: &mut usize| {
        if let Some(g) = live.guide.as_mut() {
            if g.commit(tok) {
                *consumed += 1;
            }
        }
    };
    // The distributions of the rows when drafts were verified by rejection sampling.
    let mut p: Vec<Vec<(u32, f32)>> = Vec::new();
    let mut toks: Vec<u32> = if drafts.is_empty() {
        vec![pick(live, 0, &mut steps)]
    } else if greedy || !sampled_drafts {
        // Greedy: accept up to the first mismatch with the argmax, then the argmax.
        // A deterministic proposer (n-gram lookup) puts all its mass on its draft: then
        // rejection sampling's test, accept d with probability p(d), is the same as drawing
        // the position's token from p and accepting iff it is d. Drawing it with the
        // position's own uniform gives exactly the tokens decoding without speculation
        // gives, whatever the draft lengths.
        let mut toks = Vec::with_capacity(n_rows);
        for i in 0..n_rows {
            let t = pick(live, i, &mut steps);
            toks.push(t);
            if drafts.get(i) != Some(&t) {
                break;
            }
            if i + 1 < n_rows {
                step(live, t, &mut consumed);
            }
        }
        toks
    } else {
        for i in 0..n_rows {
            let l = prepare(live, i);
            p.push(live.sampler.distribution_at(&l, &steps[i]));
            if i < drafts.len() {
                step(live, drafts[i], &mut consumed);
                steps.push(live.sampler.next(&steps[i], drafts[i], &p[i]));
            }
        }
        let q = &live.spec.as_ref().expect("sampled drafts").draft_q[..drafts.len()];
        let q = q.to_vec();
        folio_spec::verify_sampled(drafts, &p, &q, live.sampler.rng()).tokens
    };
    if let Some(g) = live.guide.as_mut() {
        // Back to the accepted drafts, then the correction/bonus token.
        let accepted = (toks.len() - 1).min(consumed);
        g.rollback(consumed - accepted);
        let taken = accepted + g.commit_all(&toks[accepted..]);
        toks.truncate(taken.max(1));
    }
    if !greedy {
        // The state after the tokens taken (history-dependent samplers see only those).
        let n = toks.len();
        let after = if p.is_empty() {
            steps[n]
        } else {
            live.sampler.next(&steps[n - 1], toks[n - 1], &p[n - 1])
        };
        live.sampler.commit(&after);
    }
    let logprobs = match live.logprobs {
        Some(k) => toks
            .iter()
            .enumerate()
            .map(|(i, &tok)| token_logprob(&rows[i * vocab..(i + 1) * vocab], tok, k))
            .collect(),
        None => Vec::new(),
    };
    (toks, logprobs)
}

/// The greedy token of `row` under the request's grammar: its raw argmax when the grammar
/// takes it (the masked argmax is then the same token, ties included), else the argmax of
/// the masked row.
pub(super) fn greedy_pick(live: &mut Live, mut row: Vec<f32>) -> u32 {
    let t = crate::sampler::argmax(&row) as u32;
    let Some(g) = live.guide.as_mut() else {
        return t;
    };
    if g.accepts(t) {
        return t;
    }
    g.mask(&mut row);
    crate::sampler::argmax(&row) as u32
}

/// Appends chosen tokens to the request one by one, stopping at an end token, a stop token
/// id or a stop string; returns the tokens kept, the finish reason and the event.
pub(super) fn emit(
    live: &mut Live,
    toks: &[u32],
    mut logprobs: Vec<TokenLogprob>,
    eog: &[u32],
    now: Instant,
) -> (Vec<u32>, Option<FinishReason>, Event) {
    let mut kept = Vec::with_capacity(toks.len());
    let mut text = String::new();
    let mut finish = None;
    for &tok in toks {
        kept.push(tok);
        live.output.push(tok);
        if let Some(sp) = live.spec.as_mut() {
            if sp.method == SpecMethod::Ngram {
                sp.index.extend(&[tok]);
            }
        }
        if (!live.ignore_eos && eog.contains(&tok)) || live.stop_ids.contains(&tok) {
            finish = Some(FinishReason::Stop);
            break;
        }
        let piece = live.decoder.push(tok);
        let so = live.stop.push(&piece);
        text.push_str(&so.text_to_emit);
        if so.stopped {
            finish = Some(FinishReason::Stop);
            break;
        }
    }
    if finish.is_none() && live.guide.as_ref().is_some_and(Guide::is_done) {
        // The grammar is complete: the request stops here, with all its text.
        finish = Some(FinishReason::Stop);
        live.decoder.discard_incomplete();
        let tail = live.stop.push(&live.decoder.flush()).text_to_emit + &live.stop.flush();
        text.push_str(&tail);
    }
    logprobs.truncate(kept.len());
    (
        kept.clone(),
        finish,
        Event::Tokens {
            ids: kept,
            text,
            logprobs,
            prompt_logprobs: Vec::new(),
            at: now,
        },
    )
}

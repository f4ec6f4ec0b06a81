//! Proposing drafts after a step: n-gram lookup, or the self-draft through the target's
//! first layers (or a separate draft model), with draft lengths planned for the whole batch
//! against the measured step curve. The drafts are verified in the next fused forward.

use super::output::{greedy_pick, processed};
use super::Engine;
use crate::{RequestId, SpecMethod};
use folio_core::cost::StepTime;
use folio_model::{ForwardBatch, SeqSpan};
use std::time::Instant;

impl Engine {
    /// Drafts for every decoding request that speculates, set on the scheduler for the
    /// next step. Draft lengths are planned jointly for the batch (`folio_spec::plan`, the
    /// marginal rule against the measured step curve), with a probe when the budget
    /// (`probe_budget_s`) covers one.
    pub(super) fn propose(&mut self) {
        let t0 = Instant::now();
        // Steps with no speculating decode cost nothing here and record nothing.
        if self.propose_drafts() {
            if let Ok(mut st) = self.metrics.spec.lock() {
                st.propose_s += t0.elapsed().as_secs_f64();
            }
        }
    }

    /// Whether any decode was a candidate (the plan ran).
    fn propose_drafts(&mut self) -> bool {
        // Candidates: requests whose every token but the newest sampled one is computed.
        let mut cands: Vec<(RequestId, folio_spec::Candidate)> = Vec::new();
        let mut others = 0usize;
        // Prefill rows the next step will likely carry (chunks of requests still
        // prefilling, within the token budget): drafts are priced at the step's real size.
        let mut prefill = 0usize;
        let ids: Vec<RequestId> = self.live.keys().copied().collect();
        for id in ids {
            let Some(r) = self.sched.request(id) else {
                continue;
            };
            if r.num_computed_tokens + 1 < r.num_tokens() {
                prefill +=
                    (r.num_tokens() - r.num_computed_tokens).min(self.sched.config().max_chunk);
                continue;
            }
            if r.num_computed_tokens + 1 != r.num_tokens() || r.num_output_tokens() == 0 {
                continue;
            }
            let room = r.draft_room();
            let live = self.live.get(&id).expect("listed above");
            let Some(sp) = live.spec.as_ref() else {
                // Decodes without speculation still take a row of the step.
                others += 1;
                continue;
            };
            let draft_s = if sp.method == SpecMethod::SelfDraft {
                // Before the first measurement: the draft's share of a 1-row step (its
                // weight bytes against the target's, or the layer fraction).
                self.drafter.cost_s.unwrap_or_else(|| {
                    let share = match &self.runner.draft {
                        Some(d) => {
                            d.model.weights.bytes_per_step() as f64
                                / self.runner.model.weights.bytes_per_step().max(1) as f64
                        }
                        None => {
                            self.drafter.layers as f64 / self.runner.model.config.n_layers as f64
                        }
                    };
                    self.step_curve.step_s(1) * share
                })
            } else {
                0.0
            };
            // Context lookup learns from its proposal check; a draft model only by drafting.
            let probe = sp.method != SpecMethod::Ngram;
            cands.push((id, sp.control.candidate(room, draft_s, probe)));
        }
        if cands.is_empty() {
            return false;
        }
        // Non-speculating decodes enter the plan as candidates that never draft.
        let idle = folio_spec::Candidate {
            acceptance: folio_spec::Acceptance::flat(0.0),
            max: 0,
            fixed: None,
            draft_s: 0.0,
            probe: false,
        };
        let mut all: Vec<folio_spec::Candidate> = cands.iter().map(|c| c.1).collect();
        all.extend(std::iter::repeat_n(idle, others));
        let budget = self.sched.config().token_budget.saturating_sub(all.len());
        let (plan, probe_s) = folio_spec::plan_probing(
            &self.step_curve,
            prefill.min(budget),
            &all,
            self.drafter.probe_budget_s,
        );
        self.drafter.probe_budget_s -= probe_s;
        if let Ok(mut st) = self.metrics.spec.lock() {
            st.record_plan(&plan[..cands.len()]);
        }
        let mut self_draft: Vec<(RequestId, usize)> = Vec::new();
        for ((id, _), &k) in cands.iter().zip(&plan) {
            let live = self.live.get_mut(id).expect("listed above");
            let sp = live.spec.as_mut().expect("speculating");
            if sp.method == SpecMethod::Ngram && sp.check.is_idle() {
                sp.check.start(sp.index.propose(sp.control.max_tokens));
            }
            if k == 0 {
                continue;
            }
            match sp.method {
                SpecMethod::Ngram => {
                    let mut d = sp.index.propose(k);
                    // Drafts stop at the first token the grammar refuses.
                    if let Some(g) = live.guide.as_mut() {
                        d.truncate(g.valid_prefix(&d));
                    }
                    if !d.is_empty() {
                        self.sched.set_draft(*id, d);
                    }
                }
                SpecMethod::SelfDraft => self_draft.push((*id, k)),
                SpecMethod::Off => {}
            }
        }
        if !self_draft.is_empty() {
            self.self_draft(&self_draft);
        }
        true
    }

    /// Runs the target's first layers autoregressively for the listed requests (batched
    /// across requests), k steps at most, and sets the drafts.
    fn self_draft(&mut self, reqs: &[(RequestId, usize)]) {
        let t0 = Instant::now();
        let vocab = self.runner.model.config.vocab_size;
        // The drafter writes K/V at positions pos.. in the request's own blocks: the KV
        // manager reserves those slots (copy-on-write of a tail block shared with forked
        // samples included) and takes back the rejected ones at the next update.
        let mut st: Vec<DraftRun> = Vec::new();
        let mut planned: Vec<(RequestId, usize)> = Vec::with_capacity(reqs.len());
        for &(id, k) in reqs {
            let Some(la) = self.sched.reserve_lookahead(id, k) else {
                continue;
            };
            self.runner.copy_blocks(&la.copies);
            let r = self.sched.request(id).expect("running");
            let last = *r.tokens().last().expect("has tokens");
            // A separate draft model keeps a single-layout cache: it reads group 0's pages
            // and ignores the rest.
            st.push(DraftRun {
                tables: la.tables,
                pos: la.start_pos,
                last,
                drafts: Vec::new(),
                consumed: 0,
                done: false,
            });
            planned.push((id, la.num_slots));
            if let Some(l) = self.live.get_mut(&id) {
                if let Some(sp) = l.spec.as_mut() {
                    sp.draft_q.clear();
                }
            }
        }
        let reqs = planned;
        let kmax = reqs.iter().map(|r| r.1).max().unwrap_or(0);
        for step in 0..kmax {
            let mut batch = ForwardBatch::new();
            let mut who = Vec::new();
            for (i, &(id, k)) in reqs.iter().enumerate() {
                if step < k && !st[i].done {
                    let r = &mut st[i];
                    // The target's first layers draft under the request's adapters (their KV
                    // is the target's); a separate draft model has none.
                    let lora = match self.runner.draft {
                        None => self.live.get(&id).and_then(|l| l.lora.clone()),
                        Some(_) => None,
                    };
                    // The tables move into the step's batch and back after it.
                    batch.push_seq(
                        &[r.last],
                        SeqSpan {
                            pos: r.pos,
                            tables: std::mem::take(&mut r.tables),
                            n_logits: 1,
                            decode_from: r.pos,
                            lora,
                            ..SeqSpan::default()
                        },
                    );
                    who.push(i);
                }
            }
            let result = match self.runner.draft.as_mut() {
                Some(d) => d.model.forward(&batch, &mut d.kv, self.runner.pool),
                None => self.runner.model.forward_layers(
                    &batch,
                    &mut self.runner.kv,
                    self.runner.pool,
                    self.drafter.layers,
                ),
            };
            for (span, &i) in batch.seqs.iter_mut().zip(&who) {
                st[i].tables = std::mem::take(&mut span.tables);
            }
            drop(batch);
            let logits = match result {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!("self-draft failed: {e}");
                    self.rewind_guides(&reqs, &st);
                    return;
                }
            };
            for (row, &i) in who.iter().enumerate() {
                let l = &logits[row * vocab..(row + 1) * vocab];
                let id = reqs[i].0;
                let live = self.live.get_mut(&id).expect("drafting a live request");
                let mut l = processed(live, l, &st[i].drafts, &self.eog);
                // Under a grammar, drafts are drawn from the masked row and consumed, so the
                // next draft sees the next position's mask; rolled back below.
                let tok = if live.sampler.params.is_greedy() {
                    greedy_pick(live, l)
                } else {
                    if let Some(g) = live.guide.as_mut() {
                        g.mask(&mut l);
                    }
                    let at = live.sampler.step_at(live.output.len() + st[i].drafts.len());
                    let dist = live.sampler.distribution_at(&l, &at);
                    let t = live.sampler.draw(&dist);
                    live.spec.as_mut().expect("speculating").draft_q.push(dist);
                    t
                };
                let s = &mut st[i];
                s.pos += 1;
                s.last = tok;
                s.drafts.push(tok);
                if let Some(g) = live.guide.as_mut() {
                    if g.commit(tok) {
                        s.consumed += 1;
                    }
                    if s.consumed < s.drafts.len() || g.is_done() || self.eog.contains(&tok) {
                        s.done = true;
                    }
                }
            }
        }
        self.rewind_guides(&reqs, &st);
        let n: usize = st.iter().map(|s| s.drafts.len()).sum();
        for (i, &(id, _)) in reqs.iter().enumerate() {
            let d = std::mem::take(&mut st[i].drafts);
            self.sched.set_draft(id, d);
        }
        let per_token = t0.elapsed().as_secs_f64() / n.max(1) as f64 * reqs.len() as f64;
        self.drafter.observe_cost(per_token);
    }

    /// Rolls the grammars of drafting requests back to their output (the drafts they
    /// consumed are verified in the next step).
    fn rewind_guides(&mut self, reqs: &[(RequestId, usize)], st: &[DraftRun]) {
        for (&(id, _), s) in reqs.iter().zip(st) {
            if let Some(g) = self.live.get_mut(&id).and_then(|l| l.guide.as_mut()) {
                g.rollback(s.consumed);
            }
        }
    }
}

/// One request's self-draft in progress.
struct DraftRun {
    /// Block tables, one per page group (the request's own, lookahead slots included).
    tables: Vec<Vec<u32>>,
    /// Position of the next token to draft.
    pos: usize,
    /// The token at `pos`.
    last: u32,
    /// Drafts so far.
    drafts: Vec<u32>,
    /// Drafts the request's grammar consumed (rolled back after drafting).
    consumed: usize,
    /// No more drafts: the grammar is complete (or refused the last one).
    done: bool,
}

//! `folio bench model --capacity`: how many requests of a context the engine's KV pool runs
//! at once, measured through the engine's own pool and scheduler without a forward pass.
//!
//! The pool is [`KvPool::new`]'s (what `folio serve` allocates for the same
//! `--kv-cache-bytes` and formats) and the scheduler is folio-core's, configured by
//! [`KvPool::scheduler_config`] as the engine configures it. `n` requests of distinct
//! prompts are queued at once; each step every sampled request gets one token back (the
//! scheduler decides KV from token counts alone, so no model runs). A request counts as
//! holding its context once its prompt is computed; the row reports the most that did in
//! one step, under on-demand allocation (the engine's default: admit, then preempt the
//! newest when the pool runs out) and under reserve-final admission.

use crate::error::{BenchError, Result};
use folio_core::sched::KvReservation;
use folio_core::{Request, RequestResult, Scheduler};
use folio_engine::kv_pool::KvPool;
use folio_engine::EngineConfig;
use folio_model::{KvFormats, Model};
use serde::Serialize;

/// One format's measured capacity.
#[derive(Debug, Clone, Serialize)]
pub struct CapacityRow {
    pub kv_format: String,
    pub k_bytes_per_token: u64,
    pub v_bytes_per_token: u64,
    pub bytes_per_token: u64,
    pub pool_blocks: usize,
    /// Tokens of KV each request reaches: prompt + output − 1.
    pub context: usize,
    pub output_tokens: usize,
    pub queued: usize,
    /// On-demand allocation: the most requests past their prompt in one step.
    pub on_demand: usize,
    /// Preemptions on-demand allocation made on the way.
    pub on_demand_preemptions: u64,
    /// Reserve-final admission: the most requests past their prompt in one step.
    pub reserve_final: usize,
    /// What `folio plan` predicts for the same pool (filled by the caller).
    pub predicted: Option<u64>,
}

/// The measurement of one format: `queued` requests reaching `context` tokens of KV, the
/// last `output_tokens` of them generated, over the pool `base` (its `kv_cache_bytes`,
/// block size, batching limits) gives with `formats`.
pub fn measure(
    model: &Model,
    base: &EngineConfig,
    formats: KvFormats,
    context: usize,
    output_tokens: usize,
    queued: usize,
) -> Result<CapacityRow> {
    if output_tokens == 0 || output_tokens > context {
        return Err(BenchError::msg(format!(
            "--output-tokens {output_tokens}: must lie in 1..=--context ({context})"
        )));
    }
    let mut cfg = base.clone();
    cfg.kv_format = formats;
    let pool = KvPool::new(model, &cfg);
    let run = |reservation| -> Result<(usize, u64)> {
        let mut cfg = cfg.clone();
        cfg.reservation = reservation;
        let sched_cfg = pool.scheduler_config(model, &cfg, 0);
        let mut sched =
            Scheduler::new(sched_cfg).map_err(|e| BenchError::msg(format!("scheduler: {e}")))?;
        peak_holding(&mut sched, context, output_tokens, queued)
    };
    let (on_demand, on_demand_preemptions) = run(KvReservation::OnDemand)?;
    let (reserve_final, _) = run(KvReservation::ReserveFinal)?;
    let rows = model.config.kv_rows();
    Ok(CapacityRow {
        kv_format: super::model::kv_label(formats),
        k_bytes_per_token: rows.k_bytes_per_token(formats),
        v_bytes_per_token: rows.v_bytes_per_token(formats),
        bytes_per_token: rows.bytes_per_token(formats),
        pool_blocks: pool.num_blocks,
        context,
        output_tokens,
        queued,
        on_demand,
        on_demand_preemptions,
        reserve_final,
        predicted: None,
    })
}

/// Queues `queued` requests and steps `sched` until all finish: the most requests past
/// their prompt in one step, and the preemptions made (a request the pool can never
/// hold is an error naming it).
pub fn peak_holding(
    sched: &mut Scheduler,
    context: usize,
    output_tokens: usize,
    queued: usize,
) -> Result<(usize, u64)> {
    let prompt = context + 1 - output_tokens;
    for id in 0..queued as u64 {
        // Distinct prompts: no prefix is shared, every request holds its own blocks.
        let base = id as u32 * prompt as u32;
        let tokens: Vec<u32> = (0..prompt as u32).map(|t| base.wrapping_add(t)).collect();
        sched
            .add_request(Request::new(id, tokens, output_tokens))
            .map_err(|e| BenchError::msg(format!("a {context}-token request: {e}")))?;
    }
    let mut peak = 0;
    // Every step computes at least one token while work remains; this bounds a stall.
    let limit = queued * (context + 2) * 4 + 16;
    for _ in 0..limit {
        if !sched.has_unfinished() {
            break;
        }
        let out = sched.schedule();
        let holding = out
            .requests
            .iter()
            .filter(|r| r.start_pos + r.token_ids.len() >= prompt)
            .count();
        peak = peak.max(holding);
        let results: Vec<RequestResult> = out
            .requests
            .iter()
            .filter(|r| r.sample)
            .map(|r| RequestResult {
                id: r.id,
                new_token_ids: vec![1],
                finish: None,
            })
            .collect();
        sched.update(&out, &results);
    }
    Ok((peak, sched.stats().preemptions))
}

pub fn print_table(rows: &[CapacityRow]) {
    let Some(first) = rows.first() else { return };
    println!(
        "KV capacity: requests reaching {} tokens of KV ({} generated), `queued` at once, \
         through folio-core's scheduler over the engine's pool; vs f16 by reserve-final",
        first.context, first.output_tokens
    );
    println!(
        "{:<12} {:>9} {:>9} {:>9} {:>11} {:>6} {:>6} {:>9} {:>12} {:>13} {:>7}",
        "kv",
        "K B/tok",
        "V B/tok",
        "B/tok",
        "pool blocks",
        "queued",
        "plan",
        "on-demand",
        "preemptions",
        "reserve-final",
        "vs f16"
    );
    let f16 = rows
        .iter()
        .find(|r| r.kv_format == "f16")
        .map(|r| r.reserve_final);
    for r in rows {
        let vs = f16.filter(|&b| b > 0).map_or(String::new(), |b| {
            format!("{:.2}x", r.reserve_final as f64 / b as f64)
        });
        println!(
            "{:<12} {:>9} {:>9} {:>9} {:>11} {:>6} {:>6} {:>9} {:>12} {:>13} {:>7}",
            r.kv_format,
            r.k_bytes_per_token,
            r.v_bytes_per_token,
            r.bytes_per_token,
            r.pool_blocks,
            r.queued,
            r.predicted.map_or("-".into(), |p| p.to_string()),
            r.on_demand,
            r.on_demand_preemptions,
            r.reserve_final,
            vs
        );
    }
}

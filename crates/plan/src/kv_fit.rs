//! KV formats side by side: each one's bytes per token (K, V, total) and how many requests
//! of a given context the pool holds at once, counted as the engine's pool counts them.
//!
//! The pool is `floor(budget / block_bytes)` blocks of `p` tokens (every layer's K and V,
//! `block_bytes = p · k`); a request whose KV reaches `context` tokens holds
//! `ceil(context / p)` blocks at its longest, so `floor(blocks / ceil(context / p))` run at
//! once without preemption. `folio bench model --capacity` measures the same count through
//! folio-core's scheduler.

use serde::Serialize;

use crate::error::{at_least_one, Result};
use crate::model::ModelProfile;
use crate::table::Table;
use crate::units::{fx, gib, group};
use folio_gguf::{KvFormat, KvFormats};

/// One format's bytes and fit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitRow {
    pub format: KvFormats,
    pub k_bytes_per_token: u64,
    pub v_bytes_per_token: u64,
    pub bytes_per_token: u64,
    /// Blocks of `block` tokens the budget holds.
    pub pool_blocks: u64,
    /// `floor(pool_blocks / ceil(context / block))`.
    pub requests: u64,
}

/// The table: every format for one model, context and budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvFit {
    pub model: String,
    pub context: u64,
    pub block: u64,
    pub budget_bytes: u64,
    /// The format the plan was asked about (marked in the table).
    pub chosen: KvFormats,
    pub rows: Vec<FitRow>,
}

/// One format's row.
pub fn fit_row(
    model: &ModelProfile,
    format: KvFormats,
    context: u64,
    block: u64,
    budget: u64,
) -> FitRow {
    let k = model.kv_bytes_per_token_in(format);
    let pool_blocks = budget / (k * block).max(1);
    FitRow {
        format,
        k_bytes_per_token: model.kv_k_bytes_per_token_in(format),
        v_bytes_per_token: model.kv_v_bytes_per_token_in(format),
        bytes_per_token: k,
        pool_blocks,
        requests: pool_blocks / context.div_ceil(block).max(1),
    }
}

/// Every format of [`KvFormat::EVERY`] for K and V (a key-only format with q4h values), and
/// `chosen`'s pair last when it is none of those.
pub fn kv_fit(
    model: &ModelProfile,
    chosen: KvFormats,
    context: u64,
    block: u64,
    budget: u64,
) -> Result<KvFit> {
    at_least_one("block size", block)?;
    at_least_one("context", context)?;
    // Every format that holds keys and values, for both; a key-only one (q4c) beside q4h.
    let mut formats: Vec<KvFormats> = KvFormat::EVERY
        .into_iter()
        .map(|f| match f.holds_values() {
            true => KvFormats::same(f),
            false => KvFormats {
                k: f,
                v: KvFormat::Q4h,
            },
        })
        .collect();
    if !formats.contains(&chosen) {
        formats.push(chosen);
    }
    Ok(KvFit {
        model: model.name.clone(),
        context,
        block,
        budget_bytes: budget,
        chosen,
        rows: formats
            .into_iter()
            .map(|f| fit_row(model, f, context, block, budget))
            .collect(),
    })
}

impl KvFit {
    pub fn table(&self) -> Table {
        let base = self
            .rows
            .iter()
            .find(|r| r.format == KvFormats::same(KvFormat::F16))
            .map_or(1, |r| r.requests.max(1));
        let mut t = Table::new(
            format!(
                "KV formats: {}-token requests in a {} GiB pool ({}, {}-token blocks)",
                group(self.context),
                fx(gib(self.budget_bytes as f64), 2),
                self.model,
                self.block
            ),
            &[
                "K:V",
                "K B/token",
                "V B/token",
                "total B/token",
                "pool blocks",
                "requests",
                "vs f16",
            ],
        );
        for r in &self.rows {
            let mark = if r.format == self.chosen { " *" } else { "" };
            t.push(vec![
                format!("{}:{}{mark}", r.format.k.name(), r.format.v.name()),
                group(r.k_bytes_per_token),
                group(r.v_bytes_per_token),
                group(r.bytes_per_token),
                group(r.pool_blocks),
                r.requests.to_string(),
                format!("{}x", fx(r.requests as f64 / base as f64, 2)),
            ]);
        }
        t.explain(
            "pool blocks = floor(budget / (p·k)); requests = floor(blocks / ceil(context/p)); \
             * = the format asked (--kv-format, K:V); every layer counted global, rows padded \
             to whole groups as the cache stores them; `folio bench model --capacity` measures it",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smollm2_8k_requests_in_2gib() {
        // SmolLM2-135M: 30 layers, 3 KV heads of 64: f16 K 11,520 B + V 11,520 B.
        let m = crate::model::smollm2_135m();
        let mixed = KvFormats {
            k: KvFormat::Q8_0,
            v: KvFormat::Q4h,
        };
        let f = kv_fit(&m, mixed, 8192, 16, 2 << 30).unwrap();
        let f16 = &f.rows[0];
        assert_eq!(
            (
                f16.k_bytes_per_token,
                f16.v_bytes_per_token,
                f16.bytes_per_token
            ),
            (11_520, 11_520, 23_040)
        );
        // 2 GiB / (16 · 23,040) = 5,825 blocks; an 8K request holds 512.
        assert_eq!((f16.pool_blocks, f16.requests), (5_825, 11));
        let q4h = f
            .rows
            .iter()
            .find(|r| r.format == KvFormat::Q4h.into())
            .unwrap();
        // 90 · 36 = 3,240 B per token for each of K and V.
        assert_eq!(
            (q4h.bytes_per_token, q4h.pool_blocks, q4h.requests),
            (6_480, 20_712, 40)
        );
        let last = f.rows.last().unwrap();
        assert_eq!(last.format, mixed);
        assert_eq!(
            (last.k_bytes_per_token, last.v_bytes_per_token),
            (6_120, 3_240)
        );
        assert!(f.table().to_string().contains("q8_0:q4h *"));
        assert!(kv_fit(&m, mixed, 0, 16, 1).is_err());
    }
}

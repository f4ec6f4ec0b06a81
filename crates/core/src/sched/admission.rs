//! Admission control (DESIGN.md §serving): refuse early what cannot succeed, with a reason.
//!
//! Pure functions of the request, the measured rates and `now`; the scheduler supplies its
//! queue. Rejecting at the door is cheaper than discovering a miss half way.

use thiserror::Error;

use super::request::Request;

/// Why a request is refused. Messages name the limit and the value.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum RejectReason {
    #[error("prompt is empty (at least 1 token required)")]
    EmptyPrompt,
    #[error("request id {0} is already in use")]
    DuplicateId(u64),
    #[error("request {id} cannot be forked: {why}")]
    NotForkable { id: u64, why: &'static str },
    #[error(
        "final KV of {tokens} tokens needs {needed_blocks} blocks, the whole pool has {total_blocks}"
    )]
    KvNeverFits {
        tokens: usize,
        needed_blocks: usize,
        total_blocks: usize,
    },
    #[error(
        "deadline {deadline_s:.3} s cannot be met: estimated finish {estimated_finish_s:.3} s \
         (queue {queue_s:.3} s + prefill {prefill_s:.3} s + decode {decode_s:.3} s from now {now_s:.3} s)"
    )]
    DeadlineUnreachable {
        deadline_s: f64,
        estimated_finish_s: f64,
        now_s: f64,
        queue_s: f64,
        prefill_s: f64,
        decode_s: f64,
    },
    #[error("measured rate {field} = {value} tokens/s is not positive")]
    BadRate { field: &'static str, value: f64 },
    /// A later sample of an `n`-sample group, refused because the group's first request
    /// was (its own stream carries the reason).
    #[error("the group's first request was refused; see its stream")]
    GroupRefused,
}

/// Measured throughput used to estimate completion time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// Prompt tokens per second the engine processes (shared by the whole queue).
    pub prefill_tokens_per_s: f64,
    /// Output tokens per second for one request (1 / ITL).
    pub decode_tokens_per_s: f64,
}

/// Estimated timing of an admitted request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdmissionEstimate {
    pub queue_s: f64,
    pub prefill_s: f64,
    pub decode_s: f64,
    pub finish_s: f64,
}

/// Static checks: non-empty prompt, final KV fits the whole pool.
/// `blocks_for(tokens)`: the most blocks (pages) a sequence of `tokens` positions holds at
/// once ([`crate::KvManager::pages_at_most`]).
pub fn check_static(
    req: &Request,
    blocks_for: &dyn Fn(usize) -> usize,
    total_blocks: usize,
) -> Result<(), RejectReason> {
    if req.num_prompt_tokens() == 0 {
        return Err(RejectReason::EmptyPrompt);
    }
    let tokens = req.final_kv_tokens();
    let needed_blocks = blocks_for(tokens);
    if needed_blocks > total_blocks {
        return Err(RejectReason::KvNeverFits {
            tokens,
            needed_blocks,
            total_blocks,
        });
    }
    Ok(())
}

/// Deadline check: `now + queued/prefill_rate + prompt/prefill_rate + (max_tokens − 1)/decode_rate`
/// must not pass the deadline. `queued_prefill_tokens` is the prompt work ahead of it.
pub fn check_deadline(
    req: &Request,
    now_s: f64,
    rates: &Rates,
    queued_prefill_tokens: usize,
) -> Result<AdmissionEstimate, RejectReason> {
    if rates.prefill_tokens_per_s.is_nan() || rates.prefill_tokens_per_s <= 0.0 {
        return Err(RejectReason::BadRate {
            field: "prefill_tokens_per_s",
            value: rates.prefill_tokens_per_s,
        });
    }
    if rates.decode_tokens_per_s.is_nan() || rates.decode_tokens_per_s <= 0.0 {
        return Err(RejectReason::BadRate {
            field: "decode_tokens_per_s",
            value: rates.decode_tokens_per_s,
        });
    }
    let queue_s = queued_prefill_tokens as f64 / rates.prefill_tokens_per_s;
    let prefill_s = req.num_prompt_tokens() as f64 / rates.prefill_tokens_per_s;
    let decode_s = (req.max_outputs() - 1) as f64 / rates.decode_tokens_per_s;
    let finish_s = now_s + queue_s + prefill_s + decode_s;
    if let Some(deadline_s) = req.deadline_s {
        if finish_s > deadline_s {
            return Err(RejectReason::DeadlineUnreachable {
                deadline_s,
                estimated_finish_s: finish_s,
                now_s,
                queue_s,
                prefill_s,
                decode_s,
            });
        }
    }
    Ok(AdmissionEstimate {
        queue_s,
        prefill_s,
        decode_s,
        finish_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_deadline_example() {
        // DESIGN.md §requests: 0.1 s queue + 0.096 s prefill + 255 × 26.5 ms = 6.95 s < 7 s.
        let rates = Rates {
            prefill_tokens_per_s: 2048.0 / 0.096,
            decode_tokens_per_s: 1.0 / 0.0265,
        };
        let req = Request::new(1, vec![1; 2048], 256).with_deadline(7.0);
        let queued = (0.1 * rates.prefill_tokens_per_s).round() as usize;
        let est = check_deadline(&req, 0.0, &rates, queued).unwrap();
        assert!((est.finish_s - 6.9535).abs() < 1e-3, "{est:?}");
        let late = req.clone().with_deadline(6.9);
        let err = check_deadline(&late, 0.0, &rates, queued).unwrap_err();
        assert!(matches!(err, RejectReason::DeadlineUnreachable { .. }));
        assert!(err.to_string().contains("deadline 6.900 s"), "{err}");
    }

    #[test]
    fn kv_never_fits_names_blocks() {
        let req = Request::new(1, vec![1; 100], 29);
        let err = check_static(&req, &|t| t.div_ceil(16), 7).unwrap_err();
        assert_eq!(
            err,
            RejectReason::KvNeverFits {
                tokens: 128,
                needed_blocks: 8,
                total_blocks: 7
            }
        );
        assert_eq!(
            err.to_string(),
            "final KV of 128 tokens needs 8 blocks, the whole pool has 7"
        );
        assert!(check_static(&req, &|t| t.div_ceil(16), 8).is_ok());
    }
}

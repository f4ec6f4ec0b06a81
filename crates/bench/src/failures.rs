//! The verdict on a run's failed requests: `folio bench serve` exits non-zero when any
//! request failed, so a script or CI job never records the figures of a run where the
//! server was down, refused or errored as if they measured it (latencies of the requests
//! that did complete, over a fraction of the load, are not the load's).
//! `--allow-failures` keeps the old behaviour for soak tests that expect some.

use crate::report::RunReport;
use thiserror::Error;

/// Most distinct error messages quoted in [`FailedRequests`].
pub const SHOWN_ERRORS: usize = 5;

/// Requests failed in the runs checked.
#[derive(Debug, Clone, PartialEq, Error)]
#[error(
    "{failed} of {total} requests failed (pass --allow-failures to keep the results anyway); first errors:\n  {}",
    first_errors.join("\n  ")
)]
pub struct FailedRequests {
    pub failed: usize,
    pub total: usize,
    /// The first [`SHOWN_ERRORS`] distinct messages, in request order.
    pub first_errors: Vec<String>,
}

/// `Ok` when no request of `runs` failed, or when `allow` is set; otherwise how many failed
/// and their first distinct errors.
pub fn check(runs: &[RunReport], allow: bool) -> Result<(), FailedRequests> {
    let failed: usize = runs.iter().map(|r| r.failed).sum();
    if failed == 0 || allow {
        return Ok(());
    }
    let total = runs.iter().map(|r| r.completed + r.failed).sum();
    let mut first_errors: Vec<String> = Vec::new();
    let errors = runs
        .iter()
        .flat_map(|r| &r.records)
        .filter(|r| !r.ok)
        .map(|r| r.error.clone().unwrap_or_else(|| "(no message)".into()));
    for e in errors {
        if first_errors.len() == SHOWN_ERRORS {
            break;
        }
        if !first_errors.contains(&e) {
            first_errors.push(e);
        }
    }
    Err(FailedRequests {
        failed,
        total,
        first_errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RequestRecord;
    use crate::report::RunSetup;
    use crate::slo::Slo;

    fn run(outcomes: &[Option<&str>]) -> RunReport {
        let records = outcomes
            .iter()
            .enumerate()
            .map(|(id, e)| RequestRecord {
                id,
                ok: e.is_none(),
                error: e.map(str::to_string),
                end_s: 1.0,
                ..Default::default()
            })
            .collect();
        RunReport::from_records(RunSetup::default(), records, 1.0, Slo::default())
    }

    #[test]
    fn any_failure_fails_the_run_unless_allowed() {
        assert_eq!(check(&[run(&[None, None])], false), Ok(()));
        let refused = "connect: Connection refused (os error 111)";
        let runs = [
            run(&[Some(refused); 48]),
            run(&[None, Some("HTTP 500: boom")]),
        ];
        let e = check(&runs, false).unwrap_err();
        assert_eq!((e.failed, e.total), (49, 50));
        assert_eq!(e.first_errors, vec![refused, "HTTP 500: boom"]);
        let text = e.to_string();
        assert!(
            text.contains("49 of 50 requests failed")
                && text.contains("--allow-failures")
                && text.contains(refused),
            "{text}"
        );
        assert_eq!(check(&runs, true), Ok(()));
    }

    #[test]
    fn at_most_a_few_distinct_errors_are_quoted() {
        let msgs: Vec<String> = (0..20).map(|i| format!("error {i}")).collect();
        let outcomes: Vec<Option<&str>> = msgs.iter().map(|m| Some(m.as_str())).collect();
        let e = check(&[run(&outcomes)], false).unwrap_err();
        assert_eq!(e.first_errors.len(), SHOWN_ERRORS);
        assert_eq!(e.first_errors[0], "error 0");
    }
}

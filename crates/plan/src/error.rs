//! Planner errors: each names the field, the limit and the value.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum PlanError {
    /// A numeric input outside its allowed range.
    #[error("{field} = {value}: {why}")]
    Invalid {
        field: &'static str,
        value: String,
        why: &'static str,
    },
    /// A name that is neither a built-in profile nor a readable file.
    #[error("unknown {kind} `{name}` (built in: {known}); or give a path to a JSON file")]
    UnknownProfile {
        kind: &'static str,
        name: String,
        known: String,
    },
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Json {
        path: String,
        source: serde_json::Error,
    },
    #[error("simulator: {0}")]
    Sim(#[from] folio_core::sched::SchedulerError),
}

pub type Result<T> = std::result::Result<T, PlanError>;

/// Checks `value > 0` (and finite) for a named field.
pub fn positive(field: &'static str, value: f64) -> Result<f64> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(PlanError::Invalid {
            field,
            value: value.to_string(),
            why: "must be a finite number above 0",
        })
    }
}

/// Checks `value >= 1` for a named count.
pub fn at_least_one(field: &'static str, value: u64) -> Result<u64> {
    if value >= 1 {
        Ok(value)
    } else {
        Err(PlanError::Invalid {
            field,
            value: value.to_string(),
            why: "must be at least 1",
        })
    }
}

/// Checks `0 <= value <= 1` for a probability or a fraction.
pub fn fraction(field: &'static str, value: f64) -> Result<f64> {
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(PlanError::Invalid {
            field,
            value: value.to_string(),
            why: "must lie in [0, 1]",
        })
    }
}

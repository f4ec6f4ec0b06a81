//! `folio list`: the models in the cache, as `ollama list` shows its own: name, size, and
//! when the file last changed.

use anyhow::Result;
use std::time::{Duration, SystemTime};

pub fn run() -> Result<()> {
    print!("{}", render(&folio_fetch::cached()?, SystemTime::now()));
    Ok(())
}

/// The table of `models` as of `now`.
pub fn render(models: &[folio_fetch::Cached], now: SystemTime) -> String {
    let rows: Vec<Vec<String>> = models
        .iter()
        .map(|m| {
            vec![
                m.name.clone(),
                folio_fetch::human_size(m.size),
                ago(now.duration_since(m.modified).unwrap_or(Duration::ZERO)),
            ]
        })
        .collect();
    folio_fetch::table::render(&["NAME", "SIZE", "MODIFIED"], &rows)
}

/// `3 days ago`: Docker's and Ollama's human durations (a file from the future is
/// "Less than a second ago").
pub fn ago(d: Duration) -> String {
    let s = d.as_secs();
    let minutes = s / 60;
    let hours = (d.as_secs_f64() / 3600.0).round() as u64;
    let text = if s < 1 {
        "Less than a second".to_string()
    } else if s == 1 {
        "1 second".to_string()
    } else if s < 60 {
        format!("{s} seconds")
    } else if minutes == 1 {
        "About a minute".to_string()
    } else if minutes < 60 {
        format!("{minutes} minutes")
    } else if hours == 1 {
        "About an hour".to_string()
    } else if hours < 48 {
        format!("{hours} hours")
    } else if hours < 24 * 7 * 2 {
        format!("{} days", hours / 24)
    } else if hours < 24 * 30 * 2 {
        format!("{} weeks", hours / 24 / 7)
    } else if hours < 24 * 365 * 2 {
        format!("{} months", hours / 24 / 30)
    } else {
        format!("{} years", hours / 24 / 365)
    };
    format!("{text} ago")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_ollama_prints_them() {
        let cases = [
            (0, "Less than a second ago"),
            (1, "1 second ago"),
            (59, "59 seconds ago"),
            (60, "About a minute ago"),
            (119, "About a minute ago"),
            (120, "2 minutes ago"),
            (3599, "59 minutes ago"),
            (3600, "About an hour ago"),
            (5 * 3600, "5 hours ago"),
            (47 * 3600, "47 hours ago"),
            (3 * 86400, "3 days ago"),
            (20 * 86400, "2 weeks ago"),
            (90 * 86400, "3 months ago"),
            (800 * 86400, "2 years ago"),
        ];
        for (secs, want) in cases {
            assert_eq!(ago(Duration::from_secs(secs)), want, "{secs} s");
        }
    }
}

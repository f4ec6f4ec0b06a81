//! Ollama's timestamps: RFC 3339 in UTC with nanoseconds (`2024-06-04T14:38:31.837530123Z`),
//! as its `created_at`, `modified_at` and `expires_at` are written.

use std::time::{SystemTime, UNIX_EPOCH};

/// `t` as RFC 3339, UTC, nine fractional digits.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = folio_tokenizer::civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        d.subsec_nanos()
    )
}

/// Now, as [`rfc3339`].
pub fn now() -> String {
    rfc3339(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_utc_with_nanoseconds() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        // 2024-02-29 12:34:56 UTC, a leap day.
        let t = UNIX_EPOCH + Duration::new(1_709_210_096, 7);
        assert_eq!(rfc3339(t), "2024-02-29T12:34:56.000000007Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00.000000000Z");
    }
}

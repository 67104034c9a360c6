//! The bridge's wall clock: every timestamp in snapshots and events is Unix epoch milliseconds.

use chrono::{DateTime, SecondsFormat};

/// Milliseconds since the Unix epoch (0 for a clock set before 1970).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Unix epoch milliseconds as ISO 8601 UTC with milliseconds (`2026-12-01T12:00:00.000Z`), the
/// form MCP task timestamps take. A time past chrono's range (year 262,143) shows as the epoch.
pub fn iso8601(ms: u64) -> String {
    DateTime::from_timestamp_millis(i64::try_from(ms).unwrap_or(i64::MAX))
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::iso8601;

    #[test]
    fn timestamps_are_iso_8601_utc() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(iso8601(1_796_126_400_000), "2026-12-01T12:00:00.000Z");
    }
}

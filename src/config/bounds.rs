//! Numeric config keys checked against the range they must lie in. Each section lists its
//! bounded keys as one table of [`Bound`]s (one row per key, kept as a table by
//! `#[rustfmt::skip]`), in the order they are checked; the first key out of range is the
//! error, with the generic message or the one its row gives.

use std::ops::RangeInclusive;

/// Sizes in the tables: a kibibyte, a mebibyte, a gibibyte.
pub(super) const KIB: u64 = 1024;
pub(super) const MIB: u64 = 1024 * KIB;
pub(super) const GIB: u64 = 1024 * MIB;

/// One numeric key, its value, the range it must lie in, and what to say when it does not.
pub(super) struct Bound<'a> {
    key: &'a str,
    value: u64,
    range: RangeInclusive<u64>,
    message: Option<String>,
}

impl<'a> Bound<'a> {
    /// Out of range, says "must be between {min} and {max}, got {value}".
    pub(super) fn new(key: &'a str, value: impl TryInto<u64>, range: RangeInclusive<u64>) -> Self {
        let value = value.try_into().unwrap_or(u64::MAX);
        Self {
            key,
            value,
            range,
            message: None,
        }
    }

    /// Out of range, says `message` (which names the range, and why it is there).
    pub(super) fn says(
        key: &'a str,
        value: impl TryInto<u64>,
        range: RangeInclusive<u64>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            message: Some(message.into()),
            ..Self::new(key, value, range)
        }
    }
}

/// The first of `bounds` (keys of `section`) out of its range, as `(section.key, message)`.
pub(super) fn check<'a>(
    section: &str,
    bounds: impl IntoIterator<Item = Bound<'a>>,
) -> Result<(), (String, String)> {
    for bound in bounds {
        let (value, range) = (bound.value, &bound.range);
        if !range.contains(&value) {
            let message = bound.message.unwrap_or_else(|| {
                let (min, max) = (range.start(), range.end());
                format!("must be between {min} and {max}, got {value}")
            });
            return Err((format!("{section}.{}", bound.key), message));
        }
    }
    Ok(())
}

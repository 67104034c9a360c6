//! Identifiers that name a job and a correlation, validated where they enter the bridge.

use std::{fmt, str::FromStr, sync::Arc};

use serde::{Deserialize, Serialize};

/// A job's ID: 122 random bits (UUID v4), written as 32 lowercase hex digits. Unguessable, so
/// knowing one ID tells nothing about another.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(uuid::Uuid);

impl JobId {
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4())
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.simple(), f)
    }
}

impl fmt::Debug for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JobId({})", self.0.simple())
    }
}

/// Only the exact form the bridge hands out parses: 32 lowercase hex digits. Anything else is
/// not a job this bridge made, whatever `uuid` would accept.
impl FromStr for JobId {
    type Err = InvalidId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let well_formed =
            s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !well_formed {
            return Err(InvalidId);
        }
        uuid::Uuid::try_parse(s).map(Self).map_err(|_| InvalidId)
    }
}

impl Serialize for JobId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for JobId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse()
            .map_err(|_| serde::de::Error::custom("not a job ID (32 lowercase hex digits)"))
    }
}

/// An application's name for one conversation turn, sent in the correlation header. Limited to
/// a plain, URL-safe alphabet so it can sit in a path and a Redis key unescaped.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CorrelationId(Arc<str>);

impl CorrelationId {
    pub const MAX_LEN: usize = 128;

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for CorrelationId {
    type Err = InvalidId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = !s.is_empty()
            && s.len() <= Self::MAX_LEN
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
        if ok {
            Ok(Self(s.into()))
        } else {
            Err(InvalidId)
        }
    }
}

impl fmt::Display for CorrelationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for CorrelationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CorrelationId({})", self.0)
    }
}

impl Serialize for CorrelationId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for CorrelationId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse()
            .map_err(|_| serde::de::Error::custom("not a valid correlation ID"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed identifier")]
pub struct InvalidId;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_id_round_trips_and_rejects_other_forms() {
        let id = JobId::random();
        assert_eq!(id.to_string().parse::<JobId>(), Ok(id));
        let hyphenated = uuid::Uuid::new_v4().hyphenated().to_string();
        for bad in [
            "",
            "abc",
            &hyphenated,
            &"A".repeat(32),
            &"g".repeat(32),
            "../../etc/passwd",
        ] {
            assert!(bad.parse::<JobId>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn correlation_id_alphabet() {
        assert!("turn-42.a:b_c".parse::<CorrelationId>().is_ok());
        for bad in ["", "a b", "a/b", "é", &"x".repeat(129)] {
            assert!(bad.parse::<CorrelationId>().is_err(), "{bad:?} parsed");
        }
    }
}

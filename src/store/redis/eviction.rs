//! Redis must not evict the bridge's keys. Every key the bridge writes has a TTL, so every
//! `maxmemory-policy` but `noeviction` may take one under memory pressure (`volatile-*` ones
//! included): a job whose history or snapshot went loses its events, and readers see a gap
//! the store cannot explain. The command link reads the policy at each connect; with
//! `store.redis_eviction_check = "refuse"` such a connection is not used (the store stays
//! unready and says why, and the next reconnect attempt checks again, so a `CONFIG SET`
//! heals it). Where `CONFIG` is disabled (managed offerings, ACL users) the policy cannot be
//! read: that is logged and the bridge goes on.

use std::collections::HashMap;

use ::redis::RedisError;

use super::conn::Conn;

/// The only policy that never evicts a key with a TTL.
const SAFE: &str = "noeviction";

/// What Redis said about its eviction policy.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Policy {
    Safe,
    /// The policy, which may evict job keys.
    Evicts(String),
    /// Redis would not say (the reason).
    Unknown(String),
}

impl Policy {
    /// `CONFIG GET maxmemory-policy` on `conn`. A connection failure is an error (the link
    /// is not made); a refusal by Redis (`CONFIG` renamed or not allowed) is `Unknown`.
    pub(super) async fn read(conn: &mut Conn) -> Result<Self, RedisError> {
        let mut get = ::redis::cmd("CONFIG");
        get.arg("GET").arg("maxmemory-policy");
        match get.query_async::<HashMap<String, String>>(conn).await {
            Ok(answer) => Ok(Self::of(answer.get("maxmemory-policy").map(String::as_str))),
            Err(error) if answered(&error) => Ok(Policy::Unknown(error.to_string())),
            Err(error) => Err(error),
        }
    }

    fn of(policy: Option<&str>) -> Self {
        match policy {
            Some(SAFE) => Policy::Safe,
            Some(other) => Policy::Evicts(other.to_string()),
            None => Policy::Unknown("CONFIG GET maxmemory-policy gave no value".into()),
        }
    }
}

/// Redis answered (with an error, or with something that is not a policy).
fn answered(error: &RedisError) -> bool {
    use ::redis::ErrorKind;
    matches!(
        error.kind(),
        ErrorKind::Server(_) | ErrorKind::Extension | ErrorKind::UnexpectedReturnType
    )
}

/// Why a connection to a Redis with `policy` is not used, and what to do about it.
pub(super) fn refusal(policy: &str) -> String {
    format!(
        "its maxmemory-policy is {policy}, which can evict the bridge's job keys (they all have \
         a TTL) and lose job events; set maxmemory-policy to noeviction (`CONFIG SET \
         maxmemory-policy noeviction` and in redis.conf, or the offering's eviction setting), \
         or set store.redis_eviction_check = \"warn\" to run anyway; the bridge checks again \
         at each reconnect attempt (docs/replicas.md#which-redis)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only `noeviction` is safe: every other policy, `volatile-*` included, can take a key
    /// with a TTL, and the bridge's keys all have one.
    #[test]
    fn only_noeviction_keeps_job_keys() {
        assert_eq!(Policy::of(Some("noeviction")), Policy::Safe);
        for policy in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            assert_eq!(Policy::of(Some(policy)), Policy::Evicts(policy.into()));
        }
        assert!(matches!(Policy::of(None), Policy::Unknown(_)));
        let told = refusal("volatile-ttl");
        assert!(
            told.contains("volatile-ttl") && told.contains("noeviction"),
            "{told}"
        );
        assert!(told.contains("store.redis_eviction_check"), "{told}");
    }
}

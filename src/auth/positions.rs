//! The event ids a caller sees on a correlation stream opened with its credential.
//!
//! A correlation's positions count every principal's events, and such a stream passes over the
//! other principals' ones: shown as they are, its ids (their gaps, the newest one) would tell a
//! caller how much others did under the same correlation ID. So each position is enciphered
//! under a key of that caller and correlation: a 64-bit block cipher (a four-round Feistel
//! network, HMAC-SHA256 as its round function, keyed from the first job secret). An id is then
//! a number that only this bridge (any replica with the same secret) can turn back into the
//! position to resume from, and says nothing of the events between two of them.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::model::{CorrelationId, Principal, Seq};

type HmacSha256 = Hmac<Sha256>;

/// Rounds of the Feistel network: four make a pseudorandom permutation of the 64-bit ids.
const ROUNDS: u8 = 4;

/// The ids of one caller on one correlation: `id(position)` and back.
#[derive(Clone)]
pub struct Positions {
    /// Keyed once; each round clones it.
    round: HmacSha256,
}

impl Positions {
    /// The ids `principal` sees on correlation `cid`, under `key` (a job secret).
    pub(super) fn new(key: &[u8], principal: &Principal, cid: &CorrelationId) -> Self {
        let mut derive = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
        for part in ["v2", "correlation-position", principal.as_str()] {
            derive.update(part.as_bytes());
            derive.update(b":");
        }
        derive.update(cid.as_str().as_bytes());
        let subkey = derive.finalize().into_bytes();
        Self {
            round: HmacSha256::new_from_slice(&subkey).expect("HMAC accepts keys of any length"),
        }
    }

    fn f(&self, round: u8, half: u32) -> u32 {
        let mut mac = self.round.clone();
        mac.update(&[round]);
        mac.update(&half.to_be_bytes());
        let out = mac.finalize().into_bytes();
        u32::from_be_bytes([out[0], out[1], out[2], out[3]])
    }

    /// The id shown for `position`.
    pub fn id(&self, position: Seq) -> u64 {
        let (mut left, mut right) = ((position >> 32) as u32, position as u32);
        for round in 0..ROUNDS {
            (left, right) = (right, left ^ self.f(round, right));
        }
        (u64::from(left) << 32) | u64::from(right)
    }

    /// The position an id shown by [`Positions::id`] stands for (any other number gives some
    /// position, almost surely far ahead of the stream).
    pub fn position(&self, id: u64) -> Seq {
        let (mut left, mut right) = ((id >> 32) as u32, id as u32);
        for round in (0..ROUNDS).rev() {
            (left, right) = (right ^ self.f(round, left), left);
        }
        (u64::from(left) << 32) | u64::from(right)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_go_back_to_their_positions_and_differ_per_caller_and_correlation() {
        let cid: CorrelationId = "turn-1".parse().unwrap();
        let alice = Positions::new(b"secret", &Principal::token("alice"), &cid);
        let bob = Positions::new(b"secret", &Principal::token("bob"), &cid);
        let other = Positions::new(
            b"secret",
            &Principal::token("bob"),
            &"turn-2".parse().unwrap(),
        );
        for position in [0, 1, 2, 7, 1 << 40, u64::MAX] {
            assert_eq!(alice.position(alice.id(position)), position);
            assert_ne!(alice.id(position), bob.id(position));
            assert_ne!(bob.id(position), other.id(position));
        }
        // Neighbouring positions get unrelated ids.
        let ids: Vec<u64> = (0..4).map(|p| bob.id(p)).collect();
        assert!(
            ids.windows(2).all(|w| w[0].abs_diff(w[1]) > 1_000),
            "{ids:?}"
        );
    }
}

//! Why a bearer credential was refused. The reasons are a closed set: each is a label of the
//! `bridge_auth_rejections_total` metric and an `error_description` in the 401's
//! `WWW-Authenticate`, so the set stays small and says nothing a client did not send.

/// A refused credential on `/mcp` (or a job URL, or an admin route).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// No `Authorization` header.
    #[error("this endpoint needs `Authorization: Bearer <token>`")]
    Missing,
    /// An `Authorization` header that is not `Bearer <token>`.
    #[error("the Authorization header is not `Bearer <token>`")]
    NotBearer,
    /// Neither a configured static token nor a JWT.
    #[error("the bearer token is not one this bridge accepts; check the token the client sends")]
    UnknownToken,
    #[error("the bearer token is longer than auth.jwt.max_token_bytes")]
    TooLarge,
    /// Not a well-formed JWT (segments, base64url, JSON, claim types).
    #[error("the token is not a well-formed JWT")]
    Malformed,
    /// `alg` is `none`, symmetric, not allowed for the issuer, or not the key's.
    #[error("the token's signing algorithm is not accepted for its issuer")]
    Algorithm,
    #[error("the token's issuer is not one this bridge accepts")]
    WrongIssuer,
    /// No key of the issuer has the token's `kid`, even after fetching the keys again.
    #[error("the token was signed with a key its issuer does not publish")]
    UnknownKey,
    #[error("the token's signature does not verify")]
    BadSignature,
    #[error("the token has expired; get a new one")]
    Expired,
    #[error("the token is not valid yet (nbf); check the clocks")]
    NotYetValid,
    #[error("the token is for another audience; request one for this bridge's resource")]
    WrongAudience,
    /// An ID token or another JWT of the issuer, not an access token (see `auth::jwt`).
    #[error(
        "the token is not an access token (its typ or claims are an ID token's or another kind's); send an access token for this bridge"
    )]
    NotAccessToken,
    /// `exp`, `iss`, `aud` or the issuer's subject claim is missing.
    #[error("the token lacks a required claim (exp, iss, aud, or the subject)")]
    MissingClaim,
    /// The issuer's keys could not be fetched and none are cached: not the client's fault.
    #[error("the token issuer's signing keys cannot be fetched right now; retry shortly")]
    KeysUnavailable,
}

impl Rejection {
    /// Every reason, for tests and for documenting the metric's labels.
    pub const ALL: [Rejection; 15] = [
        Rejection::Missing,
        Rejection::NotBearer,
        Rejection::UnknownToken,
        Rejection::TooLarge,
        Rejection::Malformed,
        Rejection::Algorithm,
        Rejection::WrongIssuer,
        Rejection::UnknownKey,
        Rejection::BadSignature,
        Rejection::Expired,
        Rejection::NotYetValid,
        Rejection::WrongAudience,
        Rejection::MissingClaim,
        Rejection::NotAccessToken,
        Rejection::KeysUnavailable,
    ];

    /// The metric label and the machine-readable reason in the JSON body.
    pub fn label(self) -> &'static str {
        match self {
            Rejection::Missing => "missing",
            Rejection::NotBearer => "not_bearer",
            Rejection::UnknownToken => "unknown_token",
            Rejection::TooLarge => "too_large",
            Rejection::Malformed => "malformed",
            Rejection::Algorithm => "algorithm",
            Rejection::WrongIssuer => "wrong_issuer",
            Rejection::UnknownKey => "unknown_kid",
            Rejection::BadSignature => "bad_signature",
            Rejection::Expired => "expired",
            Rejection::NotYetValid => "not_yet_valid",
            Rejection::WrongAudience => "wrong_audience",
            Rejection::MissingClaim => "missing_claim",
            Rejection::NotAccessToken => "not_access_token",
            Rejection::KeysUnavailable => "keys_unavailable",
        }
    }

    /// Whether the client sent a credential at all (RFC 6750: a request without one gets a
    /// challenge without an error code).
    pub fn is_missing(self) -> bool {
        self == Rejection::Missing
    }

    /// The bridge, not the token, is at fault: 503, not 401.
    pub fn is_unavailable(self) -> bool {
        self == Rejection::KeysUnavailable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The descriptions go into a quoted header parameter: no quote, no backslash, ASCII.
    #[test]
    fn labels_are_unique_and_descriptions_fit_a_header() {
        let mut labels: Vec<&str> = Rejection::ALL.iter().map(|r| r.label()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), Rejection::ALL.len());
        for r in Rejection::ALL {
            let text = r.to_string();
            assert!(
                text.is_ascii() && !text.contains('"') && !text.contains('\\'),
                "{text}"
            );
        }
    }
}

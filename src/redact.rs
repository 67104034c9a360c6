//! The one redaction of everything the bridge prints (logs, tool errors, job failures,
//! `/upstreams`, traces): configured secrets are replaced before any text leaves the process.
//!
//! [`url`] shows a URL without its userinfo and query values. The config registers its secrets
//! at start ([`register_url`], [`register_value`]): upstream URLs (whole, as written and as
//! parsed, then their userinfo and query values), upstream headers and env values, the Redis
//! URL, tokens and job secrets. [`text`] replaces each one found in a text, longest first.
//! Process-wide because what prints (the log writer, rmcp's and reqwest's error texts) has no
//! handle on a config; a process holding two bridges (tests) redacts the secrets of both.

use std::{borrow::Cow, sync::LazyLock};

use parking_lot::RwLock;

/// What a secret is replaced by.
pub const MASK: &str = "***";

/// Shortest secret value replaced wherever it appears: shorter ones (a query's `v=1`) would
/// mask unrelated text; they are masked inside their whole URL.
const MIN_VALUE_LEN: usize = 6;

/// `(secret, replacement)`, longest secret first.
static SECRETS: LazyLock<RwLock<Vec<(String, String)>>> = LazyLock::new(RwLock::default);

/// `raw` as it may be shown: userinfo and every query value masked, no fragment. Not a URL:
/// `<unparsable URL>` (it may still hold a secret).
pub fn url(raw: &str) -> String {
    match ::url::Url::parse(raw) {
        Ok(parsed) => masked(parsed),
        Err(_) => "<unparsable URL>".into(),
    }
}

fn masked(mut url: ::url::Url) -> String {
    if !url.username().is_empty() {
        let _ = url.set_username(MASK);
    }
    if url.password().is_some() {
        let _ = url.set_password(Some(MASK));
    }
    if url.query().is_some() {
        let keys: Vec<String> = url.query_pairs().map(|(k, _)| k.into_owned()).collect();
        let mut query = url.query_pairs_mut();
        query.clear();
        for key in &keys {
            query.append_pair(key, MASK);
        }
    }
    url.set_fragment(None);
    url.to_string()
}

/// A configured URL: masked wherever it appears whole (as written or as a URL parser writes
/// it), and its userinfo and query values wherever they appear alone.
pub fn register_url(raw: &str) {
    let Ok(parsed) = ::url::Url::parse(raw) else {
        register_value(raw);
        return;
    };
    let shown = masked(parsed.clone());
    let mut secrets = vec![(raw.to_string(), shown.clone())];
    if parsed.as_str() != raw {
        secrets.push((parsed.to_string(), shown));
    }
    // Userinfo as written in a URL is percent-encoded; an error may quote it decoded.
    let decoded = |s: &str| {
        ::url::form_urlencoded::parse(format!("x={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    let mut parts = vec![parsed.username().to_string(), decoded(parsed.username())];
    if let Some(password) = parsed.password() {
        parts.extend([password.to_string(), decoded(password)]);
    }
    parts.extend(parsed.query_pairs().map(|(_, v)| v.into_owned()));
    if let Some(query) = parsed.query() {
        parts.extend(
            query
                .split('&')
                .filter_map(|p| p.split_once('='))
                .map(|(_, v)| v.to_string()),
        );
    }
    secrets.extend(
        parts
            .into_iter()
            .filter(|p| p.len() >= MIN_VALUE_LEN)
            .map(|p| (p, MASK.to_string())),
    );
    add(secrets);
}

/// A secret value (a token, a header value, an env value): masked wherever it appears, when
/// it is at least [`MIN_VALUE_LEN`] long; so is each word of it that long (the token of
/// `Bearer <token>`).
pub fn register_value(value: &str) {
    let words = value.split_whitespace().map(str::to_string);
    let secrets = std::iter::once(value.to_string())
        .chain(words)
        .filter(|v| v.len() >= MIN_VALUE_LEN)
        .map(|v| (v, MASK.to_string()))
        .collect();
    add(secrets);
}

fn add(new: Vec<(String, String)>) {
    if new.is_empty() {
        return;
    }
    let mut secrets = SECRETS.write();
    for secret in new {
        if !secrets.iter().any(|(s, _)| *s == secret.0) {
            secrets.push(secret);
        }
    }
    secrets.sort_by_key(|s| std::cmp::Reverse(s.0.len()));
}

/// `text` with every registered secret replaced (borrowed when it holds none).
pub fn text(text: &str) -> Cow<'_, str> {
    let secrets = SECRETS.read();
    let mut out = Cow::Borrowed(text);
    for (secret, shown) in secrets.iter() {
        if out.contains(secret.as_str()) {
            out = Cow::Owned(out.replace(secret.as_str(), shown));
        }
    }
    out
}

/// [`text`] for bytes that may not all be UTF-8 (a log line): each valid run is redacted.
pub fn bytes(line: &[u8]) -> Cow<'_, [u8]> {
    match std::str::from_utf8(line) {
        Ok(s) => match text(s) {
            Cow::Borrowed(_) => Cow::Borrowed(line),
            Cow::Owned(s) => Cow::Owned(s.into_bytes()),
        },
        Err(_) => match text(&String::from_utf8_lossy(line)) {
            Cow::Borrowed(_) => Cow::Borrowed(line),
            Cow::Owned(s) => Cow::Owned(s.into_bytes()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_userinfo_or_query_values() {
        assert_eq!(
            url("redis://user:secret@host:6379/0"),
            "redis://***:***@host:6379/0"
        );
        assert!(!url("redis://:secret@host").contains("secret"));
        assert_eq!(
            url("https://h/mcp?api_key=k3y&v=1#frag"),
            "https://h/mcp?api_key=***&v=***"
        );
        assert_eq!(url("not a url"), "<unparsable URL>");
    }

    #[test]
    fn registered_secrets_are_masked_in_any_text() {
        register_url("http://u5er-canary:pa55-canary@host:1/mcp?api_key=q-canary-value&v=1");
        register_value("Bearer hdr-canary-token");
        let said = "error sending request for url (http://u5er-canary:pa55-canary@host:1/mcp?api_key=q-canary-value&v=1): \
                    pa55-canary q-canary-value hdr-canary-token";
        let shown = text(said);
        for canary in [
            "u5er-canary",
            "pa55-canary",
            "q-canary-value",
            "hdr-canary-token",
        ] {
            assert!(!shown.contains(canary), "{shown}");
        }
        assert!(
            shown.contains("http://***:***@host:1/mcp?api_key=***&v=***"),
            "{shown}"
        );
        assert!(matches!(text("nothing secret"), Cow::Borrowed(_)));
    }
}

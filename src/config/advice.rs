//! Settings that are valid but probably not what was meant: the bridge starts, and says so once
//! in its log. A refusal would be wrong for these: a proxy or a port mapping can make each of
//! them right, and the bridge cannot see that.

use std::{
    net::{IpAddr, SocketAddr},
    path::Path,
};

use super::ConfigError;

/// Keys read under an old name (a serde `alias` of the new one): `(section, old, new)`.
const RENAMED: [(&str, &str, &str); 1] = [("jobs", "shutdown_grace_secs", "drain_secs")];

/// The keys `text` sets under a deprecated name, each as a line for the log; the file is
/// read as if it used the new name. Both names in one section is an error: which one was
/// meant cannot be told.
pub fn deprecated_keys(text: &str, file: &Path) -> Result<Vec<String>, ConfigError> {
    // The file's syntax is checked by the caller; a file that does not parse has no keys here.
    let Ok(table) = text.parse::<toml::Table>() else {
        return Ok(Vec::new());
    };
    let mut lines = Vec::new();
    for (section, old, new) in RENAMED {
        let Some(keys) = table.get(section).and_then(toml::Value::as_table) else {
            continue;
        };
        if !keys.contains_key(old) {
            continue;
        }
        if keys.contains_key(new) {
            return Err(ConfigError::new(
                file,
                format!("{section}.{old}"),
                format!(
                    "is the old name of {section}.{new}, which is set too: remove {section}.{old}"
                ),
            ));
        }
        lines.push(format!(
            "{}: {section}.{old} is deprecated; it is read as {section}.{new} (rename it: the \
             old name will go)",
            file.display()
        ));
    }
    Ok(lines)
}

/// `public_url` names this machine (a loopback host) but not the address the bridge listens on,
/// so the URLs in job handles (`events_url`, `status_url`, `cancel_url`) and the jobs page's
/// links lead nowhere. The usual cause: `--listen` or `BRIDGE_LISTEN` moved the listener and
/// left `server.public_url` at its default. A `public_url` that names another host (a load
/// balancer, a DNS name) is not judged: whatever is there may forward to this listener.
pub fn public_url_mismatch(public_url: &str, listening: SocketAddr) -> Option<String> {
    let url = url::Url::parse(public_url).ok()?;
    let names_this_machine = match url.host()? {
        url::Host::Domain(name) => name.eq_ignore_ascii_case("localhost"),
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => ip.is_loopback(),
    };
    if !names_this_machine {
        return None;
    }
    let port = url.port_or_known_default()?;
    let reachable_by_loopback = match listening.ip() {
        IpAddr::V4(ip) => ip.is_loopback() || ip.is_unspecified(),
        IpAddr::V6(ip) => ip.is_loopback() || ip.is_unspecified(),
    };
    if port == listening.port() && reachable_by_loopback {
        return None;
    }
    let host = url.host_str()?;
    let suggested = if reachable_by_loopback {
        format!("{}://{host}:{}", url.scheme(), listening.port())
    } else {
        format!("{}://{listening}", url.scheme())
    };
    Some(format!(
        "server.public_url is {public_url} but the bridge listens on {listening}: job handles \
         (events_url, status_url, cancel_url) and the jobs page point at public_url, which \
         --listen and BRIDGE_LISTEN do not change. Set BRIDGE_PUBLIC_URL={suggested} (or \
         server.public_url), unless a proxy or port mapping forwards {public_url} here"
    ))
}

/// `public_url` with the port the bridge was given when it names port 0: a `listen` address on
/// port 0 has the system pick a free port, and `public_url` then says "that port" the same way
/// (`http://127.0.0.1:0`). Any other `public_url` is returned as it is.
pub fn public_url_on(public_url: &str, bound: SocketAddr) -> String {
    let Ok(mut url) = url::Url::parse(public_url) else {
        return public_url.to_string();
    };
    if url.port() != Some(0) || url.set_port(Some(bound.port())).is_err() {
        return public_url.to_string();
    }
    url.as_str().trim_end_matches('/').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `jobs.shutdown_grace_secs` is read as `jobs.drain_secs`, with a line for the log that
    /// names both; the new name alone says nothing.
    #[test]
    fn the_old_name_of_the_drain_is_read_as_the_new_one_and_said() {
        let path = Path::new("bridge.toml");
        let load =
            |text: &str| crate::config::Config::from_toml(text, path, &Default::default()).unwrap();
        let old = load("[jobs]\nshutdown_grace_secs = 42\n");
        assert_eq!(old.jobs.drain_secs, 42);
        let [line] = old.deprecations.as_slice() else {
            panic!("one line: {:?}", old.deprecations);
        };
        assert!(
            line.contains("jobs.shutdown_grace_secs") && line.contains("jobs.drain_secs"),
            "{line}"
        );
        let new = load("[jobs]\ndrain_secs = 42\n");
        assert_eq!(new.jobs.drain_secs, 42);
        assert!(new.deprecations.is_empty());
        assert_eq!(load("").jobs.drain_secs, 900, "the default: 15 minutes");
    }

    fn mismatch(public_url: &str, listening: &str) -> Option<String> {
        public_url_mismatch(public_url, listening.parse().unwrap())
    }

    #[test]
    fn a_listener_moved_away_from_a_loopback_public_url_is_named() {
        let warning = mismatch("http://127.0.0.1:8080", "127.0.0.1:9090").unwrap();
        assert!(
            warning.contains("Set BRIDGE_PUBLIC_URL=http://127.0.0.1:9090"),
            "{warning}"
        );
        assert!(mismatch("http://localhost:8080", "0.0.0.0:9000").is_some());
        assert!(mismatch("http://[::1]:8080", "[::1]:8081").is_some());
        // The default port of the scheme counts.
        assert!(mismatch("http://localhost", "127.0.0.1:8080").is_some());
        // Loopback cannot reach a listener on one other interface.
        let warning = mismatch("http://127.0.0.1:8080", "192.0.2.7:8080").unwrap();
        assert!(warning.contains("http://192.0.2.7:8080"), "{warning}");
    }

    #[test]
    fn agreeing_or_unjudgeable_settings_say_nothing() {
        assert_eq!(mismatch("http://127.0.0.1:8080", "127.0.0.1:8080"), None);
        // The container default: all interfaces, reached as localhost on the same port.
        assert_eq!(mismatch("http://localhost:8080", "0.0.0.0:8080"), None);
        assert_eq!(mismatch("http://localhost:80", "[::]:80"), None);
        // Another host: a load balancer or a proxy may forward to this listener.
        assert_eq!(mismatch("https://bridge.example.com", "0.0.0.0:8080"), None);
        assert_eq!(mismatch("http://10.0.0.5:8080", "127.0.0.1:9090"), None);
    }

    #[test]
    fn port_zero_in_public_url_is_the_port_the_bridge_got() {
        let bound = "127.0.0.1:41234".parse().unwrap();
        assert_eq!(
            public_url_on("http://127.0.0.1:0", bound),
            "http://127.0.0.1:41234"
        );
        assert_eq!(
            public_url_on("http://localhost:0/bridge", bound),
            "http://localhost:41234/bridge"
        );
        // Any other port, or none, is left as it is.
        assert_eq!(
            public_url_on("http://127.0.0.1:8080", bound),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            public_url_on("https://bridge.example.com", bound),
            "https://bridge.example.com"
        );
    }
}

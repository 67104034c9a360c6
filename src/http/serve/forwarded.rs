//! The client address behind a trusted proxy (`server.trusted_proxies`): what the per-address
//! limits count a request by. A request from any other peer is counted by the peer's address,
//! whatever headers it sends. From a trusted peer, the configured header is read from the right
//! (the hop the proxy appended last) and the first address that is not itself a trusted proxy is
//! the client; anything a client wrote further left is never reached. At most [`MAX_HOPS`]
//! hops are read; past that, or at a hop that is no address, the last trusted hop stands (the
//! proxy's own bucket: a broken chain never buys a fresh one).

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use http::HeaderMap;
use prometheus::IntCounter;

use crate::config::{Cidr, ForwardedHeader};

/// Hops of a forwarded chain read, from the right, before giving up.
pub const MAX_HOPS: usize = 16;

/// The address the per-address limits count a request by (a request extension): the peer's,
/// or the one a trusted proxy forwards. Every other decision on an address (a loopback peer)
/// reads the socket's own `ConnectInfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

/// Who the client of a request is, as the per-address limits see it.
#[derive(Clone, Default)]
pub struct ClientAddress {
    trusted: Arc<[Cidr]>,
    header: ForwardedHeader,
    /// `bridge_limit_hits_total{limit="forwarded_hops"}`: a chain longer than [`MAX_HOPS`].
    too_long: Option<IntCounter>,
}

impl ClientAddress {
    pub fn new(trusted: &[Cidr], header: ForwardedHeader, too_long: IntCounter) -> Self {
        Self {
            trusted: trusted.into(),
            header,
            too_long: Some(too_long),
        }
    }

    /// Whether `ip` is a trusted proxy.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(ip))
    }

    /// The address a request from `peer` with `headers` counts as.
    pub fn of(&self, peer: SocketAddr, headers: &HeaderMap) -> ClientIp {
        if !self.trusts(peer.ip()) {
            return ClientIp(peer.ip());
        }
        let name = match self.header {
            ForwardedHeader::XForwardedFor => "x-forwarded-for",
            ForwardedHeader::Forwarded => http::header::FORWARDED.as_str(),
        };
        // Several header lines are one list, in order: read them from the last.
        let hops = headers
            .get_all(name)
            .iter()
            .rev()
            .flat_map(|value| value.as_bytes().rsplit(|b| *b == b','));
        let mut client = peer.ip();
        for (read, hop) in hops.enumerate() {
            if read == MAX_HOPS {
                if let Some(counter) = &self.too_long {
                    counter.inc();
                }
                break;
            }
            let Some(ip) = parse_hop(hop, self.header) else {
                break;
            };
            client = ip;
            if !self.trusts(ip) {
                break;
            }
        }
        ClientIp(client)
    }
}

/// One hop's address: `203.0.113.7`, `2001:db8::1` (X-Forwarded-For); `for=203.0.113.7`,
/// `for="[2001:db8::1]:4711"`, `for=203.0.113.7;proto=https` (Forwarded). `unknown`, an
/// obfuscated name or anything else: `None`.
fn parse_hop(hop: &[u8], header: ForwardedHeader) -> Option<IpAddr> {
    let text = std::str::from_utf8(hop).ok()?.trim();
    let value = match header {
        ForwardedHeader::XForwardedFor => text,
        ForwardedHeader::Forwarded => text.split(';').find_map(|pair| {
            let (key, value) = pair.trim().split_once('=')?;
            key.trim()
                .eq_ignore_ascii_case("for")
                .then_some(value.trim())
        })?,
    };
    let value = value.trim_matches('"');
    if let Ok(ip) = value.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    // `[v6]:port`, `[v6]` or `v4:port`.
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    value
        .parse::<SocketAddr>()
        .ok()
        .map(|a| a.ip().to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(trusted: &[&str], header: ForwardedHeader, peer: &str, lines: &[&str]) -> String {
        let trusted: Vec<Cidr> = trusted.iter().map(|t| t.parse().unwrap()).collect();
        let resolver = ClientAddress {
            trusted: trusted.into(),
            header,
            too_long: None,
        };
        let name = match header {
            ForwardedHeader::XForwardedFor => "x-forwarded-for",
            ForwardedHeader::Forwarded => "forwarded",
        };
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(name, line.parse().unwrap());
        }
        let peer = SocketAddr::new(peer.parse().unwrap(), 4000);
        resolver.of(peer, &headers).0.to_string()
    }

    const XFF: ForwardedHeader = ForwardedHeader::XForwardedFor;

    #[test]
    fn an_untrusted_peer_is_its_own_client_whatever_it_forwards() {
        assert_eq!(
            client(&[], XFF, "198.51.100.1", &["203.0.113.9"]),
            "198.51.100.1"
        );
        assert_eq!(
            client(&["10.0.0.0/8"], XFF, "198.51.100.1", &["10.0.0.5"]),
            "198.51.100.1"
        );
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let proxies = &["10.0.0.0/8"];
        // A client-forged first hop is never reached.
        let forged = &["1.2.3.4, 203.0.113.9"];
        assert_eq!(client(proxies, XFF, "10.0.0.2", forged), "203.0.113.9");
        // Two proxies, over two header lines.
        let lines = &["6.6.6.6, 203.0.113.9", "10.0.0.7"];
        assert_eq!(client(proxies, XFF, "10.0.0.2", lines), "203.0.113.9");
        // No header: the proxy itself.
        assert_eq!(client(proxies, XFF, "10.0.0.2", &[]), "10.0.0.2");
        // Every hop trusted: the leftmost.
        assert_eq!(
            client(proxies, XFF, "10.0.0.2", &["10.9.9.9, 10.0.0.3"]),
            "10.9.9.9"
        );
        // Garbage at the right: the last trusted hop stands.
        assert_eq!(
            client(proxies, XFF, "10.0.0.2", &["203.0.113.9, junk"]),
            "10.0.0.2"
        );
        assert_eq!(
            client(proxies, XFF, "10.0.0.2", &["::ffff:203.0.113.9"]),
            "203.0.113.9"
        );
    }

    #[test]
    fn a_long_chain_stops_at_the_bound() {
        let proxies = &["10.0.0.0/8"];
        let chain = vec!["10.1.1.1"; MAX_HOPS + 4].join(",");
        let line = format!("203.0.113.9, {chain}");
        assert_eq!(client(proxies, XFF, "10.0.0.2", &[&line]), "10.1.1.1");
    }

    #[test]
    fn forwarded_for_parameters_are_read() {
        let proxies = &["10.0.0.0/8"];
        let f = ForwardedHeader::Forwarded;
        let line = "for=1.2.3.4, for=\"[2001:db8::1]:4711\";proto=https, for=10.0.0.9";
        assert_eq!(client(proxies, f, "10.0.0.2", &[line]), "2001:db8::1");
        let line = "proto=https;For=203.0.113.9:80";
        assert_eq!(client(proxies, f, "10.0.0.2", &[line]), "203.0.113.9");
        assert_eq!(client(proxies, f, "10.0.0.2", &["for=unknown"]), "10.0.0.2");
        // The other header is not read.
        assert_eq!(client(proxies, XFF, "10.0.0.2", &[]), "10.0.0.2");
    }
}

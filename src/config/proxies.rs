//! `server.trusted_proxies`: the proxies whose forwarded client address the per-address limits
//! believe. An address range is written as a CIDR (`10.0.0.0/8`, `fd00::/8`) or a single
//! address; parsed here so that a typo fails at start, naming the key.

use std::{fmt, net::IpAddr, str::FromStr};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One address range: the addresses whose first `len` bits are `net`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct Cidr {
    net: IpAddr,
    len: u8,
}

impl Cidr {
    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as its IPv4 one).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        match (self.net, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                masked(u128::from(u32::from(net)), 32, self.len)
                    == masked(u128::from(u32::from(ip)), 32, self.len)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                masked(u128::from(net), 128, self.len) == masked(u128::from(ip), 128, self.len)
            }
            _ => false,
        }
    }
}

/// The first `len` of `bits` bits of `value`.
fn masked(value: u128, bits: u8, len: u8) -> u128 {
    if len == 0 { 0 } else { value >> (bits - len) }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{text:?} is not an address range: write one as 10.0.0.0/8, fd00::/8 or a single address"
            )
        };
        let (addr, len) = match text.split_once('/') {
            Some((addr, len)) => (addr, Some(len.parse::<u8>().map_err(|_| bad())?)),
            None => (text, None),
        };
        let net = addr
            .trim()
            .parse::<IpAddr>()
            .map_err(|_| bad())?
            .to_canonical();
        let bits = if net.is_ipv4() { 32 } else { 128 };
        let len = len.unwrap_or(bits);
        if len > bits {
            return Err(bad());
        }
        Ok(Self { net, len })
    }
}

impl TryFrom<String> for Cidr {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl From<Cidr> for String {
    fn from(cidr: Cidr) -> String {
        cidr.to_string()
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.len)
    }
}

/// `server.forwarded_header`: which header a trusted proxy writes the client's address in.
/// Only that one is read: a proxy that sets one passes the other on as the client sent it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (nginx, Caddy, Envoy, most load balancers).
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client, for="[2001:db8::1]:4711"` (RFC 7239).
    Forwarded,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_contain() {
        let net: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(net.contains("10.1.200.3".parse().unwrap()));
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.1.0.9".parse().unwrap()));
        assert!(!net.contains("fd00::1".parse().unwrap()));
        let one: Cidr = "192.0.2.7".parse().unwrap();
        assert!(one.contains("192.0.2.7".parse().unwrap()));
        assert!(!one.contains("192.0.2.8".parse().unwrap()));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fdab::1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("203.0.113.1".parse().unwrap()));
        for bad in [
            "10.0.0.0/33",
            "fd00::/129",
            "10.0.0/8",
            "x",
            "10.0.0.0/",
            "",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}

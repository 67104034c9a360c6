//! The TCP ports a child process listens on, read from `/proc` (Linux). A child that cannot
//! say which port it got (server-everything prints the `PORT` it was given, 0 here) is started
//! on port 0 and asked with [`child_port`]; a child that must be told a port (redis-server,
//! whose port 0 means "no TCP") is checked with it to be the process listening there, and not
//! another run's that took the port first. Several suites run at once on one machine: a port
//! picked free and bound later by a child can be taken in between.

use std::collections::HashSet;

use super::wait::eventually;

/// The TCP ports (IPv4 and IPv6) process `pid` listens on now.
pub fn listening_ports(pid: u32) -> Vec<u16> {
    let sockets: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_str()?;
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_string(),
            )
        })
        .collect();
    let mut ports: Vec<u16> = ["tcp", "tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter_map(|line| {
                    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let listening = *fields.get(3)? == "0A";
                    let inode = fields.get(9)?;
                    let port = fields.get(1)?.rsplit(':').next()?;
                    (listening && sockets.contains(*inode))
                        .then(|| u16::from_str_radix(port, 16).ok())
                        .flatten()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// Wait until process `pid` listens on a TCP port and return the lowest one it listens on;
/// `None` if `exited` says it has ended first. Fails the test with `what` after
/// [`super::wait::WAIT`].
pub async fn child_port(pid: u32, what: &str, mut exited: impl FnMut() -> bool) -> Option<u16> {
    eventually(&format!("{what} listens"), || {
        let answer = if exited() {
            Some(None)
        } else {
            listening_ports(pid).first().map(|port| Some(*port))
        };
        async move { answer }
    })
    .await
}

/// Start `command`, an MCP server over Streamable HTTP told to listen on port 0 (its output
/// discarded, killed when dropped), and return it with its endpoint
/// `http://127.0.0.1:PORT/mcp` once it listens. Fails the test with `what` if it exits first.
pub async fn http_child(
    mut command: tokio::process::Command,
    what: &str,
) -> (tokio::process::Child, String) {
    let mut child = command
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let pid = child.id().expect("a running child has a pid");
    let port = child_port(pid, what, || matches!(child.try_wait(), Ok(Some(_))))
        .await
        .unwrap_or_else(|| panic!("{what} exited before it listened"));
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

/// A loopback port held for a test: bound, not listening, so connections to it are refused
/// (a server that is down) and no other process can bind it. [`HeldPort::listener`] listens on
/// it (a server that comes, or comes back); the port stays held after that listener closes.
/// Both sockets share it through `SO_REUSEPORT`, which only sockets that set it (of this user)
/// can join, and only the listening ones get connections.
pub struct HeldPort {
    pub addr: std::net::SocketAddr,
    _hold: tokio::net::TcpSocket,
}

impl HeldPort {
    pub fn new() -> Self {
        let hold = reuseport_socket();
        hold.bind(([127, 0, 0, 1], 0).into())
            .expect("bind a free port");
        let addr = hold.local_addr().expect("local address");
        Self { addr, _hold: hold }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// A listener on the held port.
    pub fn listener(&self) -> tokio::net::TcpListener {
        let socket = reuseport_socket();
        socket.bind(self.addr).expect("bind the held port");
        socket.listen(1024).expect("listen on the held port")
    }
}

fn reuseport_socket() -> tokio::net::TcpSocket {
    let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
    socket.set_reuseport(true).expect("SO_REUSEPORT");
    socket
}

/// An IPv4 address of this machine that is not loopback: the source address of a route out
/// (a UDP "connect" sends nothing), else the first of `hostname -I`.
pub fn non_loopback_ip() -> Option<std::net::Ipv4Addr> {
    let routed = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("198.51.100.1:9").and_then(|()| s.local_addr()))
        .ok()
        .and_then(|a| match a.ip() {
            std::net::IpAddr::V4(v4) => Some(v4),
            std::net::IpAddr::V6(_) => None,
        });
    let listed = || {
        let out = std::process::Command::new("hostname")
            .arg("-I")
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .find_map(|a| a.parse::<std::net::Ipv4Addr>().ok())
    };
    routed
        .or_else(listed)
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
}

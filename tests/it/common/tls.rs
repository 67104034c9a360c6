//! A TLS terminator in front of a plain-HTTP server, with a private certificate authority: what
//! an https upstream looks like to the bridge. The certificates come from the `openssl` command
//! (a CA, and a leaf for `localhost` and 127.0.0.1 signed by it); the terminator is tokio-rustls
//! on ring, and forwards each decrypted connection to the server byte for byte.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio_util::sync::CancellationToken;

/// An https front for one plain-HTTP server; stops when dropped.
pub struct TlsFront {
    /// `https://localhost:PORT/mcp`.
    pub url: String,
    /// The PEM file of the CA that signed the front's certificate (for `ca_file`).
    pub ca_file: PathBuf,
    _dir: tempfile::TempDir,
    ct: CancellationToken,
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.ct.cancel();
    }
}

const OPENSSL: &str = "openssl";

impl TlsFront {
    /// An https front forwarding to `backend` (`host:port`), or `None` (skipped, or a failure
    /// under `BRIDGE_TEST_STRICT=1`) without the `openssl` command.
    pub async fn start(test: &str, backend: &str) -> Option<Self> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        if !make_certificates(dir.path()) {
            return super::skip(
                test,
                "the openssl command is missing (apt-get install openssl)",
            );
        }
        let chain = CertificateDer::pem_file_iter(dir.path().join("leaf.pem"))
            .expect("the leaf certificate")
            .collect::<Result<Vec<_>, _>>()
            .expect("a PEM certificate");
        let key = PrivateKeyDer::from_pem_file(dir.path().join("leaf.key")).expect("the leaf key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("a server certificate");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a free port");
        let port = listener.local_addr().expect("local address").port();
        let ct = CancellationToken::new();
        let backend = backend.to_string();
        let stop = ct.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = stop.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((socket, _)) = accepted else { continue };
                let (acceptor, backend, stop) = (acceptor.clone(), backend.clone(), stop.clone());
                tokio::spawn(async move {
                    // A client that refuses the certificate ends the handshake: nothing to do.
                    let Ok(mut tls) = acceptor.accept(socket).await else {
                        return;
                    };
                    let Ok(mut plain) = tokio::net::TcpStream::connect(&backend).await else {
                        return;
                    };
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut tls, &mut plain) => {}
                    }
                });
            }
        });
        Some(Self {
            url: format!("https://localhost:{port}/mcp"),
            ca_file: dir.path().join("ca.pem"),
            _dir: dir,
            ct,
        })
    }
}

/// A CA (`ca.pem`) and a server certificate it signed for `localhost` and 127.0.0.1
/// (`leaf.pem`, `leaf.key`) in `dir`; false without the `openssl` command.
pub fn make_certificates(dir: &Path) -> bool {
    let openssl = |args: &[&str]| {
        let output = std::process::Command::new(OPENSSL)
            .args(args)
            .current_dir(dir)
            .output();
        match output {
            Err(_) => false,
            Ok(output) => {
                assert!(
                    output.status.success(),
                    "openssl {args:?}: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
                true
            }
        }
    };
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .expect("write the extensions file");
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=bridge test CA",
            ],
        ]
        .concat(),
    ) && openssl(
        &[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "leaf.key",
                "-out",
                "leaf.csr",
                "-subj",
                "/CN=localhost",
            ],
        ]
        .concat(),
    ) && openssl(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "leaf.pem",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
    ])
}

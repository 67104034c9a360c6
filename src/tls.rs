//! TLS for the bridge's HTTP clients to upstreams: the crypto provider, and the extra roots an
//! upstream may trust (`[[upstreams]] ca_file`). A leaf: it imports nothing of the bridge.
//!
//! Why ring, installed as the process default: rmcp's Streamable HTTP client runs on reqwest
//! 0.13, whose `rustls` feature brings aws-lc-rs, a second crypto library built from C (the
//! tree already has ring, through reqwest 0.12 and redis). Its `rustls-no-provider` feature
//! instead takes the provider the process installed, and building any 0.13 client without one
//! panics, whatever its URL: this includes the clients rmcp builds itself
//! (`StreamableHttpClientTransport::from_uri`, used by `call`, the benchmark and the tests).
//! So every place that builds one calls [`use_ring`] first: the upstream client, `call`, the
//! benchmark's client and the tests' (a forgotten one panics at its first use, not silently). The certificates are checked against the system's roots
//! (`/etc/ssl/certs`, read by rustls-platform-verifier), plus the upstream's `ca_file`.

use std::{path::Path, sync::Once};

use rustls::pki_types::{CertificateDer, pem::PemObject};

/// Install ring as the process's rustls crypto provider, once (later calls do nothing).
pub fn use_ring() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Fails only when a provider is already installed, which then serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Why a `ca_file` cannot be used; the message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum CaFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a PEM file of certificates: {reason}")]
    NotPem { path: String, reason: String },
    #[error("{path} holds no certificate (expected PEM `-----BEGIN CERTIFICATE-----` blocks)")]
    Empty { path: String },
}

/// The certificates of a PEM file (a CA, or a bundle of them), DER-encoded.
pub fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, CaFileError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| CaFileError::Read {
        path: shown.clone(),
        source,
    })?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CaFileError::NotPem {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
    if certificates.is_empty() {
        return Err(CaFileError::Empty { path: shown });
    }
    // A block that is no certificate is refused here, not at the first connection.
    let mut roots = rustls::RootCertStore::empty();
    for certificate in &certificates {
        roots
            .add(certificate.clone())
            .map_err(|e| CaFileError::NotPem {
                path: shown.clone(),
                reason: e.to_string(),
            })?;
    }
    Ok(certificates)
}

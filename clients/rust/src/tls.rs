//! TLS for `rediss://` URLs: the rustls client configuration built from
//! [`TlsOptions`](super::TlsOptions).
//!
//! Builds the configuration only. Must not touch sockets or the connection:
//! `conn` wraps the TCP stream with it.

use std::sync::Arc;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::error::{Error, Result};
use super::TlsOptions;

fn pem_certs(path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>> {
    let bad = |e: &dyn std::fmt::Display| Error::Io(format!("{}: {e}", path.display()));
    CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(&e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))
}

/// The client configuration: the CA file's roots (or the system's), and a
/// client certificate when one is given.
pub(crate) fn client_config(o: &TlsOptions) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = RootCertStore::empty();
    match &o.ca_file {
        Some(path) => {
            for c in pem_certs(path)? {
                roots
                    .add(c)
                    .map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
            }
        }
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Error::Io(e.to_string()))?
    .with_root_certificates(roots);
    let config = match (&o.cert_file, &o.key_file) {
        (Some(cert), Some(key)) => {
            let chain = pem_certs(cert)?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| Error::Io(format!("{}: {e}", key.display())))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::Io(e.to_string()))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(Error::Io(
                "a client certificate needs both cert_file and key_file".into(),
            ))
        }
    };
    Ok(Arc::new(config))
}

//! TLS for `tls-port`, with rustls: Redis's tls-* directives mapped onto
//! a rustls server configuration. What rustls cannot honour (TLS 1.0 and
//! 1.1, OpenSSL cipher strings it has no suite for, encrypted keys, DH
//! parameters) stops start-up with a message that says so, rather than
//! being silently ignored.
//!
//! Builds the acceptor only: must not touch sockets, connections or the
//! store; it reads a `Config`, and its callers (start-up, CONFIG SET) put
//! the acceptor in the shared `Slot`.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::ring as provider;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::Config;

/// Where the TLS listeners read the acceptor for each new connection
/// (None: no TLS).
pub type Slot = Arc<parking_lot::RwLock<Option<tokio_rustls::TlsAcceptor>>>;

/// The TLS 1.3 suites by their OpenSSL (and IANA) names.
const TLS13: &[(&str, SupportedCipherSuite)] = &[
    (
        "TLS_AES_128_GCM_SHA256",
        provider::cipher_suite::TLS13_AES_128_GCM_SHA256,
    ),
    (
        "TLS_AES_256_GCM_SHA384",
        provider::cipher_suite::TLS13_AES_256_GCM_SHA384,
    ),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        provider::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    ),
];

/// The TLS 1.2 suites rustls has, by their OpenSSL names (`tls-ciphers`).
const TLS12: &[(&str, SupportedCipherSuite)] = &[
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        provider::cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        provider::cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        provider::cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

fn names(list: &[(&str, SupportedCipherSuite)]) -> String {
    list.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(":")
}

/// Suites named in an OpenSSL-style list (':' separated); an empty list
/// keeps rustls's defaults.
fn suites(
    directive: &str,
    list: &str,
    known: &[(&str, SupportedCipherSuite)],
) -> Result<Vec<SupportedCipherSuite>, String> {
    let mut out = Vec::new();
    for name in list.split([':', ',', ' ']).filter(|n| !n.is_empty()) {
        match known.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
            Some((_, s)) => out.push(*s),
            None => {
                return Err(format!(
                    "{directive}: rustls cannot honour '{name}'; name suites from: {}",
                    names(known)
                ))
            }
        }
    }
    Ok(out)
}

fn versions(list: &str) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    let mut out = Vec::new();
    for p in list.split_whitespace() {
        match p.to_ascii_lowercase().as_str() {
            "tlsv1.2" => out.push(&rustls::version::TLS12),
            "tlsv1.3" => out.push(&rustls::version::TLS13),
            "tlsv1" | "tlsv1.1" => {
                return Err(format!(
                    "tls-protocols: {p} is not supported (rustls speaks TLSv1.2 and TLSv1.3 only)"
                ))
            }
            _ => return Err(format!("tls-protocols: unknown protocol '{p}'")),
        }
    }
    if out.is_empty() {
        out = vec![&rustls::version::TLS12, &rustls::version::TLS13];
    }
    Ok(out)
}

fn certs(path: &str, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("Failed to load {what} '{path}': {e}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("Failed to load {what} '{path}': {e}"))?;
    if certs.is_empty() {
        return Err(format!(
            "Failed to load {what} '{path}': no certificate in it"
        ));
    }
    Ok(certs)
}

/// The CA roots of tls-ca-cert-file and every certificate file in
/// tls-ca-cert-dir.
fn roots(config: &Config) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let mut files = Vec::new();
    if !config.tls_ca_cert_file.is_empty() {
        files.push(config.tls_ca_cert_file.clone());
    }
    if !config.tls_ca_cert_dir.is_empty() {
        let dir = std::fs::read_dir(&config.tls_ca_cert_dir)
            .map_err(|e| format!("Failed to read tls-ca-cert-dir: {e}"))?;
        for entry in dir.flatten() {
            if entry.path().is_file() {
                files.push(entry.path().to_string_lossy().into_owned());
            }
        }
    }
    for f in files {
        for c in certs(&f, "CA certificate(s)")? {
            roots
                .add(c)
                .map_err(|e| format!("Failed to load CA certificate(s) '{f}': {e}"))?;
        }
    }
    Ok(roots)
}

/// The TLS acceptor for `tls-port`, or None when it is 0 (TLS off).
pub fn acceptor(config: &Config) -> Result<Option<tokio_rustls::TlsAcceptor>, String> {
    if config.tls_port == 0 {
        return Ok(None);
    }
    if config.tls_cert_file.is_empty() || config.tls_key_file.is_empty() {
        return Err(
            "Failed to configure TLS: tls-cert-file and tls-key-file are required with tls-port"
                .into(),
        );
    }
    if !config.tls_key_file_pass.is_empty() {
        return Err(
            "tls-key-file-pass: encrypted private keys are not supported; give an unencrypted key"
                .into(),
        );
    }
    if !config.tls_dh_params_file.is_empty() {
        return Err("tls-dh-params-file: rustls does not use DH parameters (it offers ECDHE only); remove the directive".into());
    }
    let mut suites13 = suites("tls-ciphersuites", &config.tls_ciphersuites, TLS13)?;
    let suites12 = suites("tls-ciphers", &config.tls_ciphers, TLS12)?;
    let mut provider = provider::default_provider();
    if !suites13.is_empty() || !suites12.is_empty() {
        if suites13.is_empty() {
            suites13 = TLS13.iter().map(|(_, s)| *s).collect();
        }
        let keep12: Vec<SupportedCipherSuite> = if suites12.is_empty() {
            TLS12.iter().map(|(_, s)| *s).collect()
        } else {
            suites12
        };
        provider.cipher_suites = suites13.into_iter().chain(keep12).collect();
    }
    let builder = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&versions(&config.tls_protocols)?)
        .map_err(|e| format!("Failed to configure TLS: {e}"))?;
    let builder = match config.tls_auth_clients.as_str() {
        "no" => builder.with_no_client_auth(),
        mode => {
            if config.tls_ca_cert_file.is_empty() && config.tls_ca_cert_dir.is_empty() {
                return Err("Either tls-ca-cert-file or tls-ca-cert-dir must be specified when tls-cluster, tls-replication or tls-auth-clients are enabled!".into());
            }
            let verifier = WebPkiClientVerifier::builder(Arc::new(roots(config)?));
            let verifier = if mode == "optional" {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .map_err(|e| format!("Failed to configure TLS: {e}"))?,
            )
        }
    };
    let chain = certs(&config.tls_cert_file, "certificate")?;
    let key = PrivateKeyDer::from_pem_file(Path::new(&config.tls_key_file))
        .map_err(|e| format!("Failed to load private key '{}': {e}", config.tls_key_file))?;
    let mut server = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("Failed to configure TLS: {e}"))?;
    server.ignore_client_order = config.tls_prefer_server_ciphers;
    if !config.tls_session_caching {
        server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        server.send_tls13_tickets = 0;
    } else {
        server.session_storage =
            rustls::server::ServerSessionMemoryCache::new(config.tls_session_cache_size.max(1));
    }
    server.alpn_protocols = Vec::new();
    Ok(Some(tokio_rustls::TlsAcceptor::from(Arc::new(server))))
}

/// A server certificate checked as Redis (OpenSSL with `SSL_VERIFY_PEER`)
/// checks its master's: a chain to one of the configured CAs, valid now;
/// the name in it is not compared with the host connected to (a replica
/// names its master by address, often one no certificate lists).
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &rustls_pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
        // The chain is checked before the name: a name error means the
        // chain passed.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                NotValidForName | NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The TLS connector of a replica's link to its master with
/// `tls-replication yes` (None: plain TCP), as Redis's: the master's
/// certificate must chain to `tls-ca-cert-file`/`tls-ca-cert-dir`, and
/// this server presents `tls-client-cert-file`/`tls-client-key-file`,
/// else `tls-cert-file`/`tls-key-file`, when set.
pub fn connector(config: &Config) -> Result<Option<tokio_rustls::TlsConnector>, String> {
    if !config.repl.tls_replication {
        return Ok(None);
    }
    if config.tls_ca_cert_file.is_empty() && config.tls_ca_cert_dir.is_empty() {
        return Err("Either tls-ca-cert-file or tls-ca-cert-dir must be specified when tls-cluster, tls-replication or tls-auth-clients are enabled!".into());
    }
    let r = &config.repl;
    let (cert, key, pass) = if !r.tls_client_cert_file.is_empty() {
        (
            &r.tls_client_cert_file,
            &r.tls_client_key_file,
            &r.tls_client_key_file_pass,
        )
    } else {
        (
            &config.tls_cert_file,
            &config.tls_key_file,
            &config.tls_key_file_pass,
        )
    };
    if !pass.is_empty() {
        return Err("encrypted private keys are not supported; give an unencrypted key".into());
    }
    let provider = Arc::new(provider::default_provider());
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots(config)?),
        provider.clone(),
    )
    .build()
    .map_err(|e| format!("Failed to configure TLS: {e}"))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions(&config.tls_protocols)?)
        .map_err(|e| format!("Failed to configure TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ChainOnly(verifier)));
    let client = if cert.is_empty() || key.is_empty() {
        builder.with_no_client_auth()
    } else {
        let chain = certs(cert, "certificate")?;
        let key = PrivateKeyDer::from_pem_file(Path::new(key))
            .map_err(|e| format!("Failed to load private key '{key}': {e}"))?;
        builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("Failed to configure TLS: {e}"))?
    };
    Ok(Some(tokio_rustls::TlsConnector::from(Arc::new(client))))
}

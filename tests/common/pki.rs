//! Certificates made at test time (rcgen): a CA, a server certificate for
//! 127.0.0.1 and localhost, a client certificate; nothing committed that
//! could expire.

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};

use super::TempDir;

pub struct Pki {
    _dir: TempDir,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

pub fn pki() -> Pki {
    let dir = TempDir::new("tls");
    let path = |n: &str| dir.0.join(n);
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "latchkey test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(names).unwrap();
        p.extended_key_usages = vec![usage];
        let cert = p.signed_by(&key, &ca, &ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (sc, sk) = leaf(
        vec!["localhost".into(), "127.0.0.1".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (cc, ck) = leaf(vec!["client".into()], ExtendedKeyUsagePurpose::ClientAuth);
    for (name, text) in [
        ("ca.crt", ca.pem()),
        ("server.crt", sc),
        ("server.key", sk),
        ("client.crt", cc),
        ("client.key", ck),
    ] {
        std::fs::write(path(name), text).unwrap();
    }
    Pki {
        ca: path("ca.crt"),
        server_cert: path("server.crt"),
        server_key: path("server.key"),
        client_cert: path("client.crt"),
        client_key: path("client.key"),
        _dir: dir,
    }
}

//! TLS on `tls-port` next to the plain port, with certificates made here
//! (rcgen: a CA, a server certificate for 127.0.0.1, a client
//! certificate; nothing committed that could expire): the bundled client
//! and CLI over `rediss://`, redis-cli `--tls`, client certificates
//! required / optional / not asked for, and set-ups rustls cannot honour
//! refused at start-up.

mod common;

use std::future::IntoFuture;
use std::path::PathBuf;
use std::time::Duration;

use common::pki::{pki, Pki};
use common::*;
use latchkey::{cmd, Client, Options, TlsOptions};
use latchkey_server::config::Config;
use latchkey_server::runtime::ServerHandle;

fn tls_config(p: &Pki, auth: &str) -> Config {
    Config {
        port: 0,
        tls_port: free_port(),
        tls_cert_file: p.server_cert.to_string_lossy().into(),
        tls_key_file: p.server_key.to_string_lossy().into(),
        tls_ca_cert_file: p.ca.to_string_lossy().into(),
        tls_auth_clients: auth.into(),
        ..Default::default()
    }
}

fn opts(p: &Pki, with_cert: bool) -> Options {
    Options {
        tls: TlsOptions {
            ca_file: Some(p.ca.clone()),
            cert_file: with_cert.then(|| p.client_cert.clone()),
            key_file: with_cert.then(|| p.client_key.clone()),
        },
        connect_timeout: Duration::from_secs(5),
        ..Options::default()
    }
}

fn url(h: &ServerHandle) -> String {
    format!("rediss://127.0.0.1:{}", h.tls_addr.unwrap().port())
}

async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("test step took over 20 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_over_tls_with_a_required_client_certificate() {
    let p = pki();
    let h = start_with(tls_config(&p, "yes"));
    let c = bounded(Client::connect_with(&url(&h), opts(&p, true)))
        .await
        .unwrap();
    let pong: String = bounded(c.query(&cmd("PING"))).await.unwrap();
    assert_eq!(pong, "PONG");
    let g = bounded(c.lock("lk").into_future()).await.unwrap();
    assert!(g.is_held());
    // The plain port serves at the same time, and sees the TLS holder.
    let mut plain = Conn::ready(h.addr);
    assert_eq!(plain.cmd(&["SETTP", "lk", "x"]), V::Int(0));
    // A waiter over TLS gets the hand-off.
    let c2 = bounded(Client::connect_with(&url(&h), opts(&p, true)))
        .await
        .unwrap();
    let waiting = tokio::spawn(async move { c2.lock("lk").await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(bounded(g.unlock()).await.unwrap());
    let g2 = bounded(waiting).await.unwrap().unwrap();
    assert!(g2.is_held());
    // Without a client certificate the handshake fails.
    assert!(bounded(Client::connect_with(&url(&h), opts(&p, false)))
        .await
        .is_err());
    // Nor without trusting the CA (the system roots do not know it).
    let untrusted = Options {
        tls: TlsOptions {
            ca_file: None,
            cert_file: Some(p.client_cert.clone()),
            key_file: Some(p.client_key.clone()),
        },
        ..Options::default()
    };
    assert!(bounded(Client::connect_with(&url(&h), untrusted))
        .await
        .is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_optional_or_not_asked_for() {
    let p = pki();
    for auth in ["optional", "no"] {
        let h = start_with(tls_config(&p, auth));
        for with_cert in [false, true] {
            let c = bounded(Client::connect_with(&url(&h), opts(&p, with_cert)))
                .await
                .unwrap_or_else(|e| panic!("tls-auth-clients {auth}, cert {with_cert}: {e}"));
            let pong: String = bounded(c.query(&cmd("PING"))).await.unwrap();
            assert_eq!(pong, "PONG");
        }
    }
}

#[test]
fn redis_cli_and_the_latchkey_cli_speak_tls() {
    let p = pki();
    let h = start_with(tls_config(&p, "yes"));
    let port = h.tls_addr.unwrap().port().to_string();
    let s = |x: &PathBuf| x.to_string_lossy().into_owned();
    common::require_tool("redis-cli", "redis-tools");
    let cli = std::process::Command::new("redis-cli")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "--tls",
            "--cacert",
            &s(&p.ca),
        ])
        .args(["--cert", &s(&p.client_cert), "--key", &s(&p.client_key)])
        .args(["SET", "from-redis-cli", "yes"])
        .output()
        .expect("redis-cli is installed (the compat suite needs it too)");
    assert_eq!(String::from_utf8_lossy(&cli.stdout).trim(), "OK");
    let mut plain = Conn::ready(h.addr);
    assert_eq!(plain.cmd(&["GET", "from-redis-cli"]), b("yes"));
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_latchkey"))
        .args(["--url", &format!("rediss://127.0.0.1:{port}")])
        .args(["--cacert", &s(&p.ca), "--cert", &s(&p.client_cert)])
        .args(["--key", &s(&p.client_key)])
        .args(["lock", "cli-lock", "--", "true"])
        .status()
        .unwrap();
    assert!(status.success(), "latchkey lock over rediss:// exits 0");
}

#[test]
fn tls_settings_rustls_cannot_honour_stop_start_up() {
    let p = pki();
    let refused = |c: Config| ServerHandle::start(c).err().unwrap().to_string();
    let e = refused(Config {
        tls_protocols: "TLSv1.1 TLSv1.2".into(),
        ..tls_config(&p, "yes")
    });
    assert!(e.contains("TLSv1.1 is not supported"), "{e}");
    let e = refused(Config {
        tls_ciphers: "HIGH:!aNULL".into(),
        ..tls_config(&p, "yes")
    });
    assert!(
        e.contains("tls-ciphers: rustls cannot honour 'HIGH'"),
        "{e}"
    );
    let e = refused(Config {
        tls_ca_cert_file: String::new(),
        ..tls_config(&p, "yes")
    });
    assert!(
        e.contains("Either tls-ca-cert-file or tls-ca-cert-dir must be specified"),
        "{e}"
    );
    // Suites and protocols it has are honoured.
    let h = start_with(Config {
        tls_protocols: "TLSv1.3".into(),
        tls_ciphersuites: "TLS_CHACHA20_POLY1305_SHA256".into(),
        ..tls_config(&p, "no")
    });
    assert!(h.tls_addr.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_with_config_set() {
    let old = pki();
    let new = pki();
    let h = start_with(tls_config(&old, "yes"));
    let held = bounded(Client::connect_with(&url(&h), opts(&old, true)))
        .await
        .unwrap();
    let g = bounded(held.lock("rotating").into_future()).await.unwrap();
    let mut admin = Conn::ready(h.addr);
    let s = |x: &PathBuf| x.to_string_lossy().into_owned();
    // A file that cannot be loaded changes nothing, with Redis's text.
    assert_eq!(
        admin.call_str(&["CONFIG", "SET", "tls-cert-file", "/nonexistent.crt"]),
        "-ERR CONFIG SET failed (possibly related to argument 'tls-cert-file') - Unable to update TLS configuration. Check server logs.\r\n"
    );
    assert!(bounded(Client::connect_with(&url(&h), opts(&old, true)))
        .await
        .is_ok());
    // The new CA and certificates, all at once.
    assert_eq!(
        admin.cmd(&[
            "CONFIG",
            "SET",
            "tls-cert-file",
            &s(&new.server_cert),
            "tls-key-file",
            &s(&new.server_key),
            "tls-ca-cert-file",
            &s(&new.ca),
        ]),
        ok()
    );
    assert!(bounded(Client::connect_with(&url(&h), opts(&new, true)))
        .await
        .is_ok());
    assert!(bounded(Client::connect_with(&url(&h), opts(&old, true)))
        .await
        .is_err());
    // The connection made before keeps its lock.
    assert!(g.is_held());
    let pong: String = bounded(held.query(&cmd("PING"))).await.unwrap();
    assert_eq!(pong, "PONG");
}

/// Over TLS too, a pipeline written before any reply is read is answered
/// (replies wait in the TLS stream while requests go on being read).
#[test]
fn a_long_pipeline_sent_before_reading_is_answered_over_tls() {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, ServerName};
    let p = pki();
    let h = start_with(tls_config(&p, "no"));
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&p.ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let tls = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let tcp = std::net::TcpStream::connect(h.tls_addr.unwrap()).unwrap();
    tcp.set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut s = rustls::StreamOwned::new(tls, tcp);
    pipeline_before_reading(&mut s, 50_000);
}

/// `tls-replication yes`, both ways with Redis 7.0.15, as Redis does it: a
/// replica connects to its master's `tls-port` over TLS, checks the
/// master's certificate against `tls-ca-cert-file` (not its name: Redis
/// does not either), presents `tls-client-cert-file` (the master here
/// requires client certificates) and announces its own TLS port. A
/// Latchkey replica of a Latchkey primary and of a Redis primary, and a
/// Redis replica of a Latchkey primary, each synced and then following
/// live writes, `DEBUG DIGEST` equal; a replica with no client
/// certificate never gets the link up.
#[test]
fn replication_over_tls_both_ways_with_redis() {
    let p = pki();
    let s = |p: &PathBuf| p.to_string_lossy().into_owned();
    let replica_tls = |c: &mut Config| {
        c.repl.tls_replication = true;
        c.repl.tls_client_cert_file = s(&p.client_cert);
        c.repl.tls_client_key_file = s(&p.client_key);
        c.enable_debug_command = "yes".into();
        c.repl.diskless_sync_delay = 0;
    };
    let mut pc = tls_config(&p, "yes");
    pc.enable_debug_command = "yes".into();
    pc.repl.diskless_sync_delay = 0;
    let primary = start_with(pc);
    let ptls = primary.tls_addr.unwrap();
    // A Latchkey replica over TLS.
    let mut rc = tls_config(&p, "yes");
    replica_tls(&mut rc);
    let replica = start_with(rc);
    repl::replicaof(replica.addr, ptls);
    let mut w = Conn::new(primary.addr);
    assert_eq!(w.cmd(&["SET", "a", "1"]), ok());
    assert_eq!(w.cmd(&["RPUSH", "l", "x", "y"]), V::Int(2));
    repl::assert_same(primary.addr, replica.addr);
    // It announced its TLS port (INFO's slaveN port).
    let info = repl::info(primary.addr, "replication");
    let slave0 = info_field(&info, "slave0");
    assert!(
        slave0.contains(&format!("port={}", replica.tls_addr.unwrap().port())),
        "{slave0}"
    );
    // A Redis replica over TLS.
    let rtls = free_port().to_string();
    let pport = ptls.port().to_string();
    let redis = RealRedis::start_args(&[
        "--tls-port",
        &rtls,
        "--tls-cert-file",
        &s(&p.server_cert),
        "--tls-key-file",
        &s(&p.server_key),
        "--tls-ca-cert-file",
        &s(&p.ca),
        "--tls-client-cert-file",
        &s(&p.client_cert),
        "--tls-client-key-file",
        &s(&p.client_key),
        "--tls-replication",
        "yes",
        "--enable-debug-command",
        "yes",
        "--replicaof",
        "127.0.0.1",
        &pport,
    ]);
    assert_eq!(w.cmd(&["INCR", "n"]), V::Int(1));
    repl::assert_same(primary.addr, redis.addr);
    repl::assert_same(primary.addr, replica.addr);
    // A Latchkey replica of a Redis primary over TLS (the Redis replica
    // above, made a primary).
    assert_eq!(Conn::new(redis.addr).cmd(&["REPLICAOF", "NO", "ONE"]), ok());
    let mut rc2 = tls_config(&p, "no");
    replica_tls(&mut rc2);
    let of_redis = start_with(rc2);
    let redis_tls: std::net::SocketAddr = format!("127.0.0.1:{rtls}").parse().unwrap();
    repl::replicaof(of_redis.addr, redis_tls);
    assert_eq!(Conn::new(redis.addr).cmd(&["SET", "from", "redis"]), ok());
    repl::assert_same(redis.addr, of_redis.addr);
    assert_eq!(Conn::new(of_redis.addr).cmd(&["GET", "from"]), b("redis"));
    // Without a client certificate the primary refuses the handshake:
    // the link never comes up.
    let mut nc = tls_config(&p, "no");
    nc.repl.tls_replication = true;
    nc.tls_cert_file = String::new();
    nc.tls_key_file = String::new();
    nc.tls_port = 0;
    let no_cert = start_with(nc);
    repl::replicaof(no_cert.addr, ptls);
    std::thread::sleep(Duration::from_millis(1500));
    let st = repl::info(no_cert.addr, "replication");
    assert_eq!(info_field(&st, "master_link_status"), "down", "{st}");
}

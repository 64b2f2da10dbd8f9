//! Limits that protect the server from one client, and maxclients against
//! the open-file limit (side by side with redis-server 7.0.15).

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

#[test]
fn a_client_past_the_query_buffer_limit_loses_only_its_connection() {
    let h = start();
    let mut admin = Conn::ready(h.addr);
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "client-query-buffer-limit", "1mb"]),
        ok()
    );
    // A bulk argument that never ends: 1.5 MB of it piles up unparsed.
    let mut c = Conn::new(h.addr);
    c.write_all(b"*2\r\n$4\r\nECHO\r\n$3000000\r\n").unwrap();
    let chunk = vec![b'x'; 64 * 1024];
    let mut closed = false;
    // Bounded: 1.5 MB in 64 KB writes, then a wait for the close.
    for _ in 0..24 {
        if c.write_all(&chunk).is_err() {
            closed = true;
            break;
        }
    }
    assert!(closed || c.closed(), "the client over the limit is closed");
    // Everyone else goes on.
    assert_eq!(admin.cmd(&["PING"]), V::Simple("PONG".into()));
    // Under the limit, a big argument is fine.
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "client-query-buffer-limit", "4mb"]),
        ok()
    );
    let big = "y".repeat(2_000_000);
    assert_eq!(admin.cmd(&["SET", "big", &big]), ok());
    assert_eq!(admin.cmd(&["STRLEN", "big"]), V::Int(2_000_000));
}

/// Runs a server binary with a 200-descriptor limit it may not raise
/// (as root, the capability to raise it is dropped first) and maxclients
/// 1000; returns CONFIG GET maxclients and a CONFIG SET of more.
fn squeezed(bin: &str, extra: &[&str]) -> Option<(String, String)> {
    let port = free_port().to_string();
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = if root {
        let mut c = Command::new("setpriv");
        c.args([
            "--bounding-set",
            "-sys_resource",
            "--inh-caps",
            "-sys_resource",
        ]);
        c.arg("prlimit");
        c
    } else {
        Command::new("prlimit")
    };
    cmd.args([
        "--nofile=200:200",
        bin,
        "--port",
        &port,
        "--bind",
        "127.0.0.1",
    ])
    .args(["--save", "", "--maxclients", "1000"])
    .args(extra)
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let mut child = cmd.spawn().ok()?;
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut up = false;
    // Bounded: 5 s for the server to answer.
    for _ in 0..100 {
        if std::net::TcpStream::connect(addr).is_ok() {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = up.then(|| {
        let mut c = Conn::ready(addr);
        let get = c.call_str(&["CONFIG", "GET", "maxclients"]);
        let set = c.call_str(&["CONFIG", "SET", "maxclients", "5000"]);
        (get, set)
    });
    let _ = child.kill();
    let _ = child.wait();
    out
}

#[test]
fn maxclients_is_lowered_to_fit_the_open_file_limit_as_redis_does() {
    common::require_tool("prlimit", "util-linux");
    common::require_tool("redis-server", "redis-server");
    let ours = squeezed(env!("CARGO_BIN_EXE_latchkey-server"), &[]).expect("latchkey starts");
    let redis = squeezed("redis-server", &["--daemonize", "no"]).expect("redis starts");
    assert_eq!(ours, redis);
    assert_eq!(ours.0, "*2\r\n$10\r\nmaxclients\r\n$3\r\n168\r\n");
    assert!(
        ours.1
            .contains("not able to handle the specified number of clients, try with 168"),
        "{}",
        ours.1
    );
}

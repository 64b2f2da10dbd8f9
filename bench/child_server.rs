//! A server binary run as a child process on a loopback port chosen at run
//! time, killed when dropped: shared by the benchmark examples
//! (`#[path]`-included, as each example is its own crate).

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `$LATCHKEY_BIN`, or the release latchkey-server of this checkout.
pub fn latchkey_bin() -> String {
    std::env::var("LATCHKEY_BIN").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/target/release/latchkey-server"
        )
        .to_string()
    })
}

/// Starts `bin` (latchkey-server or redis-server) on 127.0.0.1 with no
/// persistence and `extra` arguments; waits until it accepts.
pub fn start_bin(bin: &str, extra: &[&str]) -> std::io::Result<(Server, SocketAddr)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = std::process::Command::new(bin)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let server = Server(child);
    for _ in 0..500 {
        if TcpStream::connect(addr).is_ok() {
            return Ok((server, addr));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(std::io::Error::other("the server did not start"))
}

//! Issue 11's release targets, against the release latchkey-server as a
//! child process on a loopback port chosen at run time:
//! - host death: a holder with `TPSESSION 200` goes silent (no FIN: what
//!   a SIGSTOPped process, a dead host or a black-holed network look like
//!   to the server); a waiter in line (`SETTP ... QUEUE`) is timed until
//!   its ACQUIRED push, from the holder's last byte. Target: timeout + 10 ms.
//! - process death: the holder's socket closes (what the kernel does when
//!   the process dies); the waiter is timed from the close. Target: 1 ms.
//!   Also with a real process (`sleep`, holding the connection) killed by
//!   SIGKILL, timed from the kill: the kernel's teardown included.
//!
//! Usage: cargo build --release && cargo run --release --example sessionbench
//! Env: LATCHKEY_BIN (default target/release/latchkey-server), RUNS (20).

#[path = "child_server.rs"]
mod child_server;
use child_server::{latchkey_bin, start_bin, Server};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const SESSION_MS: u64 = 200;

fn start_server() -> (Server, SocketAddr) {
    let bin = latchkey_bin();
    start_bin(&bin, &[]).unwrap_or_else(|e| panic!("cannot start {bin}: {e}"))
}

fn enc(args: &[&str]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    v
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads until `want` has arrived (panics on anything else or a timeout).
fn expect_prefix(s: &mut TcpStream, want: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while got.len() < want.len() || !got.ends_with(b"\r\n") {
        let n = s.read(&mut buf).expect("a reply within 10 s");
        assert!(n > 0, "closed");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(want), "{:?}", String::from_utf8_lossy(&got));
    got
}

/// Starts `sleep 60` with `sock` as its only copy-to-be (the descriptor
/// stays open across exec); returns its pid.
fn spawn_holding(sock: &TcpStream) -> u32 {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let fd = sock.as_raw_fd();
    let mut cmd = std::process::Command::new("sleep");
    cmd.arg("60");
    // SAFETY: only fcntl between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
            Ok(())
        });
    }
    cmd.spawn().expect("spawn sleep").id()
}

fn pct(v: &[Duration], p: f64) -> Duration {
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn report(what: &str, v: &mut [Duration]) {
    v.sort();
    println!(
        "{what}: median {:.2} ms, p90 {:.2} ms, max {:.2} ms ({} runs)",
        pct(v, 0.5).as_secs_f64() * 1e3,
        pct(v, 0.9).as_secs_f64() * 1e3,
        v[v.len() - 1].as_secs_f64() * 1e3,
        v.len()
    );
}

fn main() {
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20);
    let (_server, addr) = start_server();
    let mut silent = Vec::new();
    let mut closed = Vec::new();
    for i in 0..runs * 2 {
        let host_death = i % 2 == 0;
        let mut holder = connect(addr);
        holder
            .write_all(&enc(&["TPSESSION", &SESSION_MS.to_string()]))
            .unwrap();
        expect_prefix(&mut holder, b"+OK\r\n");
        let mut waiter = connect(addr);
        holder.write_all(&enc(&["SETTP", "job", "h"])).unwrap();
        expect_prefix(&mut holder, b":1\r\n");
        waiter
            .write_all(&enc(&["SETTP", "job", "w", "QUEUE"]))
            .unwrap();
        expect_prefix(&mut waiter, b":0\r\n");
        // The holder's last byte went out with its SETTP: from here on it
        // is silent (host death) or closes now (process death).
        let t0 = Instant::now();
        if host_death {
            expect_prefix(
                &mut waiter,
                b"*5\r\n$5\r\nsettp\r\n$3\r\njob\r\n$8\r\nACQUIRED\r\n",
            );
            let over = t0
                .elapsed()
                .saturating_sub(Duration::from_millis(SESSION_MS));
            silent.push(over);
        } else {
            drop(holder);
            expect_prefix(
                &mut waiter,
                b"*5\r\n$5\r\nsettp\r\n$3\r\njob\r\n$8\r\nACQUIRED\r\n",
            );
            closed.push(t0.elapsed());
            continue;
        }
        drop(holder);
    }
    // A real process holding the lock, killed with SIGKILL: the kernel's
    // teardown of the process closes its socket. The holder is a `sleep`
    // with the connection as an inherited descriptor (SETTP sent first).
    let mut killed = Vec::new();
    for _ in 0..runs {
        let mut holder = connect(addr);
        holder.write_all(&enc(&["SETTP", "job2", "h"])).unwrap();
        expect_prefix(&mut holder, b":1\r\n");
        let mut waiter = connect(addr);
        waiter
            .write_all(&enc(&["SETTP", "job2", "w", "QUEUE"]))
            .unwrap();
        expect_prefix(&mut waiter, b":0\r\n");
        let child = spawn_holding(&holder);
        // Only the child has the socket now.
        drop(holder);
        std::thread::sleep(Duration::from_millis(50));
        let t0 = Instant::now();
        // SAFETY: a pid of our own child.
        unsafe { libc::kill(child as libc::pid_t, libc::SIGKILL) };
        expect_prefix(
            &mut waiter,
            b"*5\r\n$5\r\nsettp\r\n$4\r\njob2\r\n$8\r\nACQUIRED\r\n",
        );
        killed.push(t0.elapsed());
        let mut status = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(child as libc::pid_t, &mut status, 0) };
        waiter.write_all(&enc(&["DEL", "job2"])).unwrap();
        expect_prefix(&mut waiter, b":1\r\n");
    }
    println!("session timeout {SESSION_MS} ms");
    report(
        "process death (SIGKILL of the process holding the socket): waiter has the lock after",
        &mut killed,
    );
    report(
        "host death (silent holder): release after the timeout, beyond it",
        &mut silent,
    );
    report(
        "process death (socket closed): waiter has the lock after",
        &mut closed,
    );
}

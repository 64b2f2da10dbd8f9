//! Helpers shared by the integration tests: an in-process server on a
//! runtime-chosen loopback port, a raw RESP2/RESP3 client whose every read
//! is bounded, the reply type and parser, the command encoder and a bounded
//! wait. Each test binary uses a subset.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

pub mod pki;
pub mod repl;

use latchkey_server::config::Config;
use latchkey_server::runtime::ServerHandle;

/// The bound on every read and wait unless a test asks for another.
pub const WAIT: Duration = Duration::from_secs(10);

/// A server with the default configuration on a free loopback port.
pub fn start() -> ServerHandle {
    start_with(Config {
        port: 0,
        dir: own_dir(),
        ..Default::default()
    })
}

/// A server that allows DEBUG (`enable-debug-command yes`; Redis 7's default,
/// and latchkey's, is `no`).
pub fn start_debug() -> ServerHandle {
    start_with(Config {
        port: 0,
        enable_debug_command: "yes".into(),
        dir: own_dir(),
        ..Default::default()
    })
}

/// A directory of its own under target/tmp for a test server, so a DEBUG
/// RELOAD or SAVE never leaves a dump.rdb in the package root (where a
/// redis-server started by another test would load it).
pub fn own_dir() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("server-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a server directory under target/tmp");
    dir.to_string_lossy().into_owned()
}

/// `ServerHandle::start` blocks on its own runtime: it is called on a
/// thread of its own so that async tests can use it too.
/// Without save rules: a test never writes a snapshot it did not ask for
/// (a test that wants them sets them).
pub fn start_with(mut config: Config) -> ServerHandle {
    config.save.clear();
    std::thread::spawn(move || ServerHandle::start(config).expect("server starts"))
        .join()
        .unwrap()
}

/// A free loopback port, for a server started as a process or for a
/// setting where 0 does not mean "pick one" (`tls-port`).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Fails the test, saying what to install, unless `tool` is on PATH: a test
/// that needs an outside tool never passes without it. `./test.sh` (the
/// README's test command) installs every one of them.
pub fn require_tool(tool: &str, package: &str) {
    let found = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(dir.join(tool))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    });
    assert!(
        found,
        "this test needs `{tool}`: install Debian's {package} (apt-get install {package}), or run ./test.sh, which installs what the suites need"
    );
}

/// Polls `f` until true, every 2 ms, for at most `WAIT`.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

// ------------------------------------------------------------- encoding

/// One command as a RESP multibulk.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// `encode` for text arguments.
pub fn enc(args: &[&str]) -> Vec<u8> {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    encode(&a)
}

/// A bulk string reply.
pub fn bulk(b: &[u8]) -> Vec<u8> {
    let mut v = format!("${}\r\n", b.len()).into_bytes();
    v.extend_from_slice(b);
    v.extend_from_slice(b"\r\n");
    v
}

// -------------------------------------------------------------- replies

/// A decoded reply. Maps and sets are flattened into `Arr`; RESP3 doubles,
/// booleans and big numbers are kept as their text in `Other`.
#[derive(Debug, Clone, PartialEq)]
pub enum V {
    Simple(String),
    Err(String),
    Int(i64),
    Bulk(Vec<u8>),
    /// Null bulk (`$-1`) or RESP3 null (`_`).
    Nil,
    /// RESP2 null array (`*-1`).
    NilArr,
    Arr(Vec<V>),
    Push(Vec<V>),
    Other(Vec<u8>),
}

pub fn b(s: &str) -> V {
    V::Bulk(s.as_bytes().to_vec())
}

pub fn ok() -> V {
    V::Simple("OK".into())
}

/// Parses one frame at the start of `b`: the value and its length in
/// bytes, or None while it is incomplete. Panics on a byte that starts no
/// RESP2/RESP3 type.
pub fn parse(b: &[u8]) -> Option<(V, usize)> {
    let kind = *b.first()?;
    let nl = b.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&b[1..nl]).unwrap().to_string();
    let mut p = nl + 2;
    let num = || {
        line.parse::<i64>()
            .unwrap_or_else(|_| panic!("bad length {line:?}"))
    };
    let v = match kind {
        b'+' => V::Simple(line),
        b'-' => V::Err(line),
        b':' => V::Int(num()),
        b'_' => V::Nil,
        b',' | b'#' | b'(' => V::Other(line.into_bytes()),
        b'$' | b'=' | b'!' => {
            let n = num();
            if n < 0 {
                V::Nil
            } else {
                let n = n as usize;
                if b.len() < p + n + 2 {
                    return None;
                }
                let v = V::Bulk(b[p..p + n].to_vec());
                p += n + 2;
                v
            }
        }
        b'*' | b'>' | b'~' | b'%' | b'|' => {
            let n = num();
            if n < 0 {
                V::NilArr
            } else {
                let n = if matches!(kind, b'%' | b'|') {
                    2 * n
                } else {
                    n
                };
                let mut items = Vec::new();
                for _ in 0..n {
                    let (v, used) = parse(&b[p..])?;
                    items.push(v);
                    p += used;
                }
                if kind == b'>' {
                    V::Push(items)
                } else {
                    V::Arr(items)
                }
            }
        }
        _ => panic!(
            "bad reply byte {:?} in {:?}",
            kind as char,
            String::from_utf8_lossy(&b[..b.len().min(200)])
        ),
    };
    Some((v, p))
}

/// A `watchex` push (RESP3 push frame or RESP2 array): (key, "ADD"/"DEL").
pub fn as_push(v: &V) -> Option<(Vec<u8>, String)> {
    let (V::Push(items) | V::Arr(items)) = v else {
        return None;
    };
    match items.as_slice() {
        [V::Bulk(w), V::Bulk(k), V::Bulk(e)] if w == b"watchex" => {
            Some((k.clone(), String::from_utf8_lossy(e).into()))
        }
        // A holder told its lock went by another hand: "LOST <reason>".
        [V::Bulk(w), V::Bulk(k), V::Bulk(l), V::Bulk(r)] if w == b"settp" && l == b"LOST" => {
            Some((k.clone(), format!("LOST {}", String::from_utf8_lossy(r))))
        }
        _ => None,
    }
}

/// The exact bytes of a `watchex` push.
pub fn push_bytes(resp3: bool, key: &str, ev: &str) -> Vec<u8> {
    format!(
        "{}\r\n$7\r\nwatchex\r\n${}\r\n{key}\r\n$3\r\n{ev}\r\n",
        if resp3 { ">3" } else { "*3" },
        key.len()
    )
    .into_bytes()
}

/// The bytes of a `settp ... ACQUIRED` push up to its fencing token (a
/// bulk string that follows: `Conn::expect_acquired` reads it too).
pub fn acquired_bytes(resp3: bool, key: &str, value: &str) -> Vec<u8> {
    format!(
        "{}\r\n$5\r\nsettp\r\n${}\r\n{key}\r\n$8\r\nACQUIRED\r\n${}\r\n{value}\r\n",
        if resp3 { ">5" } else { "*5" },
        key.len(),
        value.len()
    )
    .into_bytes()
}

/// The exact bytes of a `settp key LOST reason` push.
pub fn lost_bytes(resp3: bool, key: &str, reason: &str) -> Vec<u8> {
    format!(
        "{}\r\n$5\r\nsettp\r\n${}\r\n{key}\r\n$4\r\nLOST\r\n${}\r\n{reason}\r\n",
        if resp3 { ">4" } else { "*4" },
        key.len(),
        reason.len()
    )
    .into_bytes()
}

// --------------------------------------------------------------- client

/// What one read from the socket gave.
enum Fill {
    Data,
    Quiet,
    Closed,
}

/// A raw client over one TCP connection. Every read is bounded (`WAIT`
/// unless a method takes its own bound). `cmd`/`reply` set `watchex`
/// pushes aside in `pushes`; `next_push` takes them in arrival order; the
/// raw readers (`raw`, `call`, `bytes`, ...) return frames as they come.
pub struct Conn {
    pub s: TcpStream,
    buf: Vec<u8>,
    pos: usize,
    pub pushes: VecDeque<(Vec<u8>, String)>,
}

impl Write for Conn {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.s.write(b)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.s.flush()
    }
}

impl Conn {
    /// Connects; sends nothing.
    pub fn new(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).unwrap();
        s.set_write_timeout(Some(WAIT)).unwrap();
        Conn {
            s,
            buf: Vec::new(),
            pos: 0,
            pushes: VecDeque::new(),
        }
    }

    /// Connects and waits for the reply to a PING, so the server has
    /// registered the connection before the test goes on.
    pub fn ready(addr: SocketAddr) -> Conn {
        let mut c = Conn::new(addr);
        c.call(&["PING"]);
        c
    }

    /// Connects and switches to RESP3.
    pub fn resp3(addr: SocketAddr) -> Conn {
        let mut c = Conn::new(addr);
        assert!(matches!(c.cmd(&["HELLO", "3"]), V::Arr(_)));
        c
    }

    pub fn proto(addr: SocketAddr, resp3: bool) -> Conn {
        if resp3 {
            Conn::resp3(addr)
        } else {
            Conn::new(addr)
        }
    }

    pub fn send(&mut self, args: &[&str]) {
        self.s.write_all(&enc(args)).unwrap();
    }

    pub fn send_b(&mut self, args: &[&[u8]]) {
        self.s.write_all(&encode(args)).unwrap();
    }

    /// Sends several commands in one write.
    pub fn pipeline(&mut self, cmds: &[&[&str]]) {
        let req: Vec<u8> = cmds.iter().flat_map(|c| enc(c)).collect();
        self.s.write_all(&req).unwrap();
    }

    fn read_once(&mut self, deadline: Instant) -> Fill {
        let now = Instant::now();
        if now >= deadline {
            return Fill::Quiet;
        }
        self.s.set_read_timeout(Some(deadline - now)).unwrap();
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        let mut tmp = [0u8; 65536];
        match self.s.read(&mut tmp) {
            Ok(0) => Fill::Closed,
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                Fill::Data
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Fill::Quiet
            }
            Err(_) => Fill::Closed,
        }
    }

    /// Reads more bytes until `deadline`; false on timeout, panics on EOF.
    fn fill(&mut self, deadline: Instant) -> bool {
        match self.read_once(deadline) {
            Fill::Data => true,
            Fill::Quiet => false,
            Fill::Closed => panic!("connection closed by server"),
        }
    }

    /// The next frame's raw bytes, or None when `timeout` passes first.
    pub fn raw_within(&mut self, timeout: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((_, used)) = parse(&self.buf[self.pos..]) {
                let raw = self.buf[self.pos..self.pos + used].to_vec();
                self.pos += used;
                return Some(raw);
            }
            if !self.fill(deadline) {
                return None;
            }
        }
    }

    /// The next frame of any kind, raw.
    pub fn raw(&mut self) -> Vec<u8> {
        self.raw_within(WAIT).expect("reply within 10 s")
    }

    /// The next frame of any kind, raw, as text.
    pub fn raw_str(&mut self) -> String {
        String::from_utf8(self.raw()).unwrap()
    }

    /// Sends a command and returns the next frame raw.
    pub fn call(&mut self, args: &[&str]) -> Vec<u8> {
        self.send(args);
        self.raw()
    }

    pub fn call_str(&mut self, args: &[&str]) -> String {
        String::from_utf8(self.call(args)).unwrap()
    }

    pub fn call_b(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send_b(args);
        self.raw()
    }

    /// The next frame of any kind, decoded, or None when `timeout` passes.
    pub fn frame_within(&mut self, timeout: Duration) -> Option<V> {
        self.next_frame(timeout, true)
    }

    /// The next frame, or None when `timeout` passes or the server closed
    /// the connection first.
    pub fn frame_unless_closed(&mut self, timeout: Duration) -> Option<V> {
        self.next_frame(timeout, false)
    }

    fn next_frame(&mut self, timeout: Duration, panic_on_close: bool) -> Option<V> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((v, used)) = parse(&self.buf[self.pos..]) {
                self.pos += used;
                return Some(v);
            }
            match self.read_once(deadline) {
                Fill::Data => {}
                Fill::Closed if panic_on_close => panic!("connection closed by server"),
                Fill::Quiet | Fill::Closed => return None,
            }
        }
    }

    pub fn frame(&mut self) -> V {
        self.frame_within(WAIT).expect("reply within 10 s")
    }

    /// The next reply, setting watchex pushes aside.
    pub fn reply(&mut self) -> V {
        loop {
            let v = self.frame();
            match as_push(&v) {
                Some(p) => self.pushes.push_back(p),
                None => return v,
            }
        }
    }

    pub fn cmd(&mut self, args: &[&str]) -> V {
        self.send(args);
        self.reply()
    }

    pub fn cmd_b(&mut self, args: &[&[u8]]) -> V {
        self.send_b(args);
        self.reply()
    }

    /// `cmd` for a command that walks a whole large dataset (DEBUG
    /// DIGEST, DEBUG RELOAD): a debug build on a loaded 2-core machine
    /// may take longer than `WAIT`, never longer than `timeout`.
    pub fn cmd_slow(&mut self, args: &[&str], timeout: Duration) -> V {
        self.send(args);
        self.frame_within(timeout)
            .unwrap_or_else(|| panic!("{args:?}: no reply within {timeout:?}"))
    }

    /// Exactly `n` replies, raw, and nothing after them in what was read.
    pub fn replies_raw(&mut self, n: usize) -> Vec<Vec<u8>> {
        let out: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                self.raw_within(WAIT)
                    .unwrap_or_else(|| panic!("only {i} of {n} replies"))
            })
            .collect();
        assert!(
            self.pos == self.buf.len(),
            "extra bytes after replies: {:?}",
            &self.buf[self.pos..]
        );
        out
    }

    /// The next `n` bytes, whatever they are.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let deadline = Instant::now() + WAIT;
        while self.buf.len() - self.pos < n {
            assert!(self.fill(deadline), "timed out waiting for {n} bytes");
        }
        let got = self.buf[self.pos..self.pos + n].to_vec();
        self.pos += n;
        got
    }

    /// The next bytes on the wire are exactly `want`.
    /// Reads a `settp key ACQUIRED value token` push; returns the token.
    pub fn expect_acquired(&mut self, resp3: bool, key: &str, value: &str) -> u64 {
        self.expect_bytes(&acquired_bytes(resp3, key, value));
        match self.frame() {
            V::Bulk(t) => String::from_utf8_lossy(&t).parse().expect("a token"),
            v => panic!("a token, not {v:?}"),
        }
    }

    pub fn expect_bytes(&mut self, want: &[u8]) {
        let got = self.bytes(want.len());
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "exact bytes"
        );
    }

    /// Everything until the server closes (EOF or reset) or `quiet` passes
    /// without data: the bytes and whether the connection was closed.
    /// Panics if the server keeps sending for 10 s.
    pub fn read_all(&mut self, quiet: Duration) -> (Vec<u8>, bool) {
        let end = Instant::now() + WAIT;
        loop {
            assert!(Instant::now() < end, "server kept sending for 10 s");
            match self.read_once(Instant::now() + quiet) {
                Fill::Data => {}
                Fill::Quiet => break (self.take_buffered(), false),
                Fill::Closed => break (self.take_buffered(), true),
            }
        }
    }

    fn take_buffered(&mut self) -> Vec<u8> {
        let rest = self.buf[self.pos..].to_vec();
        self.buf.clear();
        self.pos = 0;
        rest
    }

    /// True once the server has closed the connection (waits up to `WAIT`);
    /// false if data arrives or nothing happens.
    pub fn closed(&mut self) -> bool {
        if self.pos < self.buf.len() {
            return false;
        }
        matches!(self.read_once(Instant::now() + WAIT), Fill::Closed)
    }

    /// Nothing at all (no byte, no set-aside push) arrives within `ms`.
    pub fn expect_quiet(&mut self, ms: u64) {
        assert!(self.pushes.is_empty(), "unexpected {:?}", self.pushes);
        let pending = &self.buf[self.pos..];
        assert!(pending.is_empty(), "unexpected data: {pending:?}");
        match self.read_once(Instant::now() + Duration::from_millis(ms)) {
            Fill::Quiet => {}
            Fill::Data => panic!(
                "unexpected data: {:?}",
                String::from_utf8_lossy(&self.buf[self.pos..])
            ),
            Fill::Closed => panic!("connection closed by server"),
        }
    }

    /// `expect_quiet` over 150 ms.
    pub fn silent(&mut self) {
        self.expect_quiet(150);
    }

    pub fn next_push_within(&mut self, timeout: Duration) -> Option<(String, String)> {
        if self.pushes.is_empty() {
            let v = self.frame_within(timeout)?;
            let p = as_push(&v).unwrap_or_else(|| panic!("expected a push, got {v:?}"));
            self.pushes.push_back(p);
        }
        self.pushes
            .pop_front()
            .map(|(k, e)| (String::from_utf8(k).unwrap(), e))
    }

    pub fn next_push(&mut self) -> (String, String) {
        self.next_push_within(WAIT).expect("push within 10 s")
    }

    pub fn expect_push(&mut self, key: &str, ev: &str) {
        assert_eq!(self.next_push(), (key.to_string(), ev.to_string()));
    }

    /// CLIENT ID.
    pub fn id(&mut self) -> i64 {
        match self.cmd(&["CLIENT", "ID"]) {
            V::Int(i) => i,
            v => panic!("{v:?}"),
        }
    }
}

/// One `name:value` field of an INFO reply.
pub fn info_field(info: &str, name: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in INFO"))
        .to_string()
}

/// A fresh directory under the system's temp dir, removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!(
            "latchkey-test-{tag}-{}-{}",
            std::process::id(),
            latchkey_server::util::now_us()
        ));
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
    pub fn path(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process, killed (SIGKILL) and reaped on drop.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The latchkey-server binary as a child process, killed on drop.
pub struct Proc {
    pub child: std::process::Child,
    pub addr: SocketAddr,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Starts the binary (`bin`: env!("CARGO_BIN_EXE_latchkey-server") of
    /// the calling test) on a free loopback port with its files in `dir`.
    pub fn spawn(bin: &str, dir: &TempDir, args: &[&str]) -> Proc {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Proc {
            child: Self::launch(bin, port, dir, args),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    fn launch(bin: &str, port: u16, dir: &TempDir, args: &[&str]) -> std::process::Child {
        std::process::Command::new(bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--dir", &dir.path()])
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn latchkey-server")
    }

    /// Kills the server (SIGKILL) and starts `bin` again on the same port.
    pub fn restart(&mut self, bin: &str, dir: &TempDir, args: &[&str]) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::launch(bin, self.addr.port(), dir, args);
    }

    /// Waits (bounded) until the server answers PING (None), or exits
    /// (its status). A connect alone is not enough: the kernel accepts
    /// into the backlog while the process is still loading.
    pub fn started(&mut self) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return Some(st);
            }
            if let Ok(mut s) = TcpStream::connect(self.addr) {
                let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                let mut buf = [0u8; 7];
                if s.write_all(b"PING\r\n").is_ok()
                    && s.read_exact(&mut buf).is_ok()
                    && &buf == b"+PONG\r\n"
                {
                    return None;
                }
            }
            assert!(Instant::now() < deadline, "neither started nor exited");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (bounded) for the process to exit.
    pub fn exited(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, and wait.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------- proxy

/// A TCP proxy on a loopback port in front of `to`, that can go silent:
/// `blackhole()` stops forwarding both ways without closing anything (a
/// host that died, a network that drops packets) until `restore()`;
/// `cut()` closes every connection open now (a reset mid-command), and
/// later ones are forwarded again. `isolate()` black-holes only the
/// connections that come from another loopback address than 127.0.0.1
/// (servers and Sentinels connecting from their `bind-source-addr`), old
/// and new, leaving clients through: a partition between a server and
/// the rest of its cluster. `heal()` ends it, closing the connections it
/// silenced (their dropped bytes cannot be resumed).
pub struct Proxy {
    pub addr: SocketAddr,
    silent: std::sync::Arc<std::sync::atomic::AtomicBool>,
    isolated: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Bumped by `cut`: connections of an older generation close.
    gen: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    pub fn start(to: SocketAddr) -> Proxy {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let silent = Arc::new(AtomicBool::new(false));
        let isolated = Arc::new(AtomicBool::new(false));
        let gen = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, i2, g2, st2) = (silent.clone(), isolated.clone(), gen.clone(), stop.clone());
        std::thread::spawn(move || {
            // Bounded: ends when the proxy is dropped.
            while !st2.load(Ordering::Relaxed) {
                let (client, peer) = match l.accept() {
                    Ok(c) => c,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                };
                let cluster = peer.ip() != std::net::Ipv4Addr::LOCALHOST;
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect(to) else {
                    continue;
                };
                let mine = g2.load(Ordering::Relaxed);
                // Set once the partition silenced this connection.
                let partitioned = Arc::new(AtomicBool::new(false));
                for (mut from, mut into) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let (silent, isolated, gen, stop) =
                        (s2.clone(), i2.clone(), g2.clone(), st2.clone());
                    let partitioned = partitioned.clone();
                    std::thread::spawn(move || {
                        let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
                        let mut buf = [0u8; 16384];
                        // Bounded: ends when either side closes or it is cut.
                        loop {
                            let cut_off = cluster && isolated.load(Ordering::Relaxed);
                            if cut_off {
                                partitioned.store(true, Ordering::Relaxed);
                            }
                            let healed = !cut_off && partitioned.load(Ordering::Relaxed);
                            if healed
                                || gen.load(Ordering::Relaxed) != mine
                                || stop.load(Ordering::Relaxed)
                            {
                                let _ = from.shutdown(std::net::Shutdown::Both);
                                let _ = into.shutdown(std::net::Shutdown::Both);
                                return;
                            }
                            match from.read(&mut buf) {
                                Ok(0) => {
                                    if !cut_off {
                                        let _ = into.shutdown(std::net::Shutdown::Write);
                                        return;
                                    }
                                    // A close is a packet too: dropped.
                                    std::thread::sleep(Duration::from_millis(20));
                                }
                                Ok(n) => {
                                    let dropped = silent.load(Ordering::Relaxed) || cut_off;
                                    if !dropped && into.write_all(&buf[..n]).is_err() {
                                        return;
                                    }
                                }
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        ErrorKind::WouldBlock | ErrorKind::TimedOut
                                    ) => {}
                                Err(_) if cut_off => {
                                    std::thread::sleep(Duration::from_millis(20));
                                }
                                Err(_) => return,
                            }
                        }
                    });
                }
            }
        });
        Proxy {
            addr,
            silent,
            isolated,
            gen,
            stop,
        }
    }

    /// Stops forwarding (bytes are read and dropped), closing nothing.
    pub fn blackhole(&self) {
        self.silent
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Forwards again.
    pub fn restore(&self) {
        self.silent
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Closes both sides of every connection open now.
    pub fn cut(&self) {
        self.gen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Black-holes the connections from other addresses than 127.0.0.1.
    pub fn isolate(&self) {
        self.isolated
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Ends `isolate`: the connections it silenced close.
    pub fn heal(&self) {
        self.isolated
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A real Redis started for one test; killed on drop.
pub struct RealRedis {
    child: std::process::Child,
    pub addr: SocketAddr,
}

impl RealRedis {
    /// Starts Debian's redis-server 7.0 (the oracle) on a free loopback
    /// port, trying another if the port was taken between probing and
    /// Redis binding it. Fails the test, naming the package, if it is not
    /// installed.
    pub fn start() -> RealRedis {
        Self::start_args(&[])
    }

    /// `start` with more command-line options (`--replicaof ...`).
    pub fn start_args(extra: &[&str]) -> RealRedis {
        require_tool("redis-server", "redis-server");
        Self::try_start(extra).expect("redis-server starts on a free loopback port")
    }

    /// The process id (to stop it with a signal).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn try_start(extra: &[&str]) -> Option<RealRedis> {
        for _ in 0..4 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .ok()?
                .local_addr()
                .ok()?
                .port();
            // A directory of its own: never a dump.rdb left in the cwd.
            let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("redis-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).ok()?;
            let child = std::process::Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(&dir)
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .args(extra)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .ok()?;
            let mut r = RealRedis {
                child,
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
            };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if r.child.try_wait().ok()?.is_some() {
                    break;
                }
                // Another test's server may hold the port this one failed
                // to bind: only its own process counts.
                if TcpStream::connect(r.addr).is_ok() {
                    if r.serves_own_pid() {
                        return Some(r);
                    }
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        None
    }
}

impl RealRedis {
    /// Whether the server answering on `addr` is this child (INFO's
    /// process_id).
    fn serves_own_pid(&mut self) -> bool {
        let mut c = Conn::new(self.addr);
        let info = match c.cmd(&["INFO", "server"]) {
            V::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
            _ => return false,
        };
        info_field(&info, "process_id") == self.child.id().to_string()
    }
}

impl Drop for RealRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `n` ECHOs of 1,000 bytes in one blocking write before reading
/// any reply, as a client library's large pipeline does, then reads every
/// reply. With 50,000 (50 MB each way, past what the kernel's socket
/// buffers hold) it fails rather than hangs when the server stops reading
/// while its replies wait: the write then times out.
pub fn pipeline_before_reading<S: Read + Write>(s: &mut S, n: usize) {
    let arg = "v".repeat(1000);
    let req = enc(&["ECHO", &arg]).repeat(n);
    s.write_all(&req)
        .expect("the pipeline's write timed out: the server stopped reading");
    let reply = bulk(arg.as_bytes());
    let mut got = vec![0u8; reply.len()];
    for i in 0..n {
        s.read_exact(&mut got)
            .unwrap_or_else(|e| panic!("reply {i}: {e}"));
        assert_eq!(got, reply, "reply {i}");
    }
}

//! The reference redis-server, run as a child process that dies with us.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::resp::{encode, Conn, Reply};

/// A running redis-server; dropping it kills the process.
pub struct RedisProc {
    child: Child,
    pub port: u16,
    log: PathBuf,
}

/// A port that was free a moment ago (redis-server binds it next).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

const EXITED_EARLY: &str = "redis-server exited early";

impl RedisProc {
    /// Starts Redis on a free port, trying another if the port was taken
    /// between probing and Redis binding it.
    pub fn start() -> Result<RedisProc, String> {
        RedisProc::start_in(&std::env::temp_dir(), &[])
    }

    /// Starts Redis with `dir` as its working directory (where it loads
    /// and saves), and `extra` options after the suite's own.
    pub fn start_in(dir: &Path, extra: &[&str]) -> Result<RedisProc, String> {
        let mut tries = 0;
        loop {
            match RedisProc::start_on(free_port(), dir, extra) {
                Err(e) if e.starts_with(EXITED_EARLY) && tries < 3 => tries += 1,
                r => return r,
            }
        }
    }

    fn start_on(port: u16, dir: &Path, extra: &[&str]) -> Result<RedisProc, String> {
        let log = std::env::temp_dir().join(format!("latchkey-compat-redis-{port}.log"));
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--enable-debug-command", "yes"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(&log)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // If this process dies without unwinding (SIGKILL), take Redis along.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(
                    "redis-server was not found on PATH. The compat suite compares \
                     latchkey with real Redis 7.0 and cannot run without it: install it \
                     with `apt-get install redis-server redis-tools`."
                        .into(),
                )
            }
            Err(e) => return Err(format!("cannot start redis-server: {e}")),
        };
        let mut p = RedisProc { child, port, log };
        p.wait_ready()?;
        Ok(p)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                return Err(format!("{EXITED_EARLY} ({st}):\n{log}"));
            }
            if let Ok(mut c) = Conn::connect(self.port) {
                c.send(&encode(&[b"PING".to_vec()]));
                if let Reply::Node(n) = c.read_reply() {
                    if n.head == b"+PONG\r\n" {
                        return Ok(());
                    }
                }
            }
            if Instant::now() > deadline {
                return Err(format!("redis-server on port {} did not start", self.port));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The version line, e.g. "Redis server v=7.0.15 ...".
    pub fn version() -> String {
        Command::new("redis-server")
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }
}

impl Drop for RedisProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

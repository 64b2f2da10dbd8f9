//! Redis's process conventions for the server binary: `daemonize` (fork,
//! setsid, stdio to /dev/null, before any thread starts), the pid file,
//! `supervised` (upstart's SIGSTOP, systemd's `NOTIFY_SOCKET` messages),
//! the `--version` line and the start-up banner's text.
//!
//! Built on `libc` and std only. Must not touch keys, connections or the
//! configuration store; it logs through `tracing` and is handed the values
//! it needs.

use std::os::unix::net::UnixDatagram;

/// Where a daemonized server without `pidfile` writes its pid (Redis's
/// CONFIG_DEFAULT_PID_FILE).
pub const DEFAULT_PID_FILE: &str = "/var/run/redis.pid";

/// Redis's `daemonize()`: the parent exits at once (status 0); the child
/// starts a new session with stdin, stdout and stderr on /dev/null. Must
/// run before any thread is started (a fork copies only the caller).
pub fn daemonize() -> std::io::Result<()> {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: the process is single-threaded here (no runtime yet), so the
    // child is a full copy; the parent leaves with _exit, running no
    // destructors or atexit handlers twice.
    match unsafe { libc::fork() } {
        -1 => return Err(std::io::Error::last_os_error()),
        0 => {}
        _ => unsafe { libc::_exit(0) },
    }
    // SAFETY: plain syscalls on descriptors this process owns.
    unsafe {
        libc::setsid();
        let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR, 0);
        if fd != -1 {
            libc::dup2(fd, libc::STDIN_FILENO);
            libc::dup2(fd, libc::STDOUT_FILENO);
            libc::dup2(fd, libc::STDERR_FILENO);
            if fd > libc::STDERR_FILENO {
                libc::close(fd);
            }
        }
    }
    Ok(())
}

/// Writes this process's pid and a newline to `path`; a failure is logged
/// (as Redis) and start-up goes on.
pub fn create_pid_file(path: &str) {
    if let Err(e) = std::fs::write(path, format!("{}\n", std::process::id())) {
        tracing::warn!("Failed to write PID file: {}", crate::logging::strerror(&e));
    }
}

/// At exit: removes the pid file, with Redis's line.
pub fn remove_pid_file(path: &str) {
    tracing::info!("Removing the pid file.");
    let _ = std::fs::remove_file(path);
}

/// How the server is supervised once `supervised` was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Supervision {
    None,
    Upstart,
    Systemd,
}

/// Redis's `redisIsSupervised`: `auto` picks upstart when UPSTART_JOB is
/// set, else systemd when NOTIFY_SOCKET is. Upstart's readiness is the
/// process stopping itself (SIGSTOP, until the supervisor continues it);
/// systemd's is told on NOTIFY_SOCKET, starting with "Redis is loading...".
/// A mode whose variable is missing leaves the server unsupervised (and
/// free to daemonize).
pub fn supervise(mode: &str) -> Supervision {
    let mut mode = mode;
    if mode == "auto" {
        if std::env::var_os("UPSTART_JOB").is_some() {
            tracing::debug!("Upstart supervision detected.");
            mode = "upstart";
        } else if std::env::var_os("NOTIFY_SOCKET").is_some() {
            tracing::debug!("Systemd supervision detected.");
            mode = "systemd";
        }
    }
    match mode {
        "upstart" => {
            if std::env::var_os("UPSTART_JOB").is_none() {
                tracing::warn!("upstart supervision requested, but UPSTART_JOB not found!");
                return Supervision::None;
            }
            tracing::info!("supervised by upstart, will stop to signal readiness.");
            // SAFETY: raising a signal at ourselves; SIGSTOP cannot be caught.
            unsafe { libc::raise(libc::SIGSTOP) };
            std::env::remove_var("UPSTART_JOB");
            Supervision::Upstart
        }
        "systemd" => {
            if notify_systemd("STATUS=Redis is loading...\n").is_err() {
                return Supervision::None;
            }
            tracing::info!(
                "Supervised by systemd. Please make sure you set appropriate values for \
                 TimeoutStartSec and TimeoutStopSec in your service unit."
            );
            Supervision::Systemd
        }
        _ => Supervision::None,
    }
}

/// Sends `msg` to the socket NOTIFY_SOCKET names (a path, or `@name` for
/// Linux's abstract namespace), as sd_notify(3). Err when the variable is
/// unset or the message cannot be sent (logged, as Redis logs it).
pub fn notify_systemd(msg: &str) -> std::io::Result<()> {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        tracing::warn!("systemd supervision error: NOTIFY_SOCKET not found!");
        return Err(std::io::ErrorKind::NotFound.into());
    };
    let sent = (|| {
        let sock = UnixDatagram::unbound()?;
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str());
        if let Some(name) = bytes.strip_prefix(b"@") {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            sock.send_to_addr(msg.as_bytes(), &addr)?;
        } else {
            sock.send_to(msg.as_bytes(), &target)?;
        }
        Ok(())
    })();
    if let Err(e) = &sent {
        tracing::warn!(
            "Can't send notification to systemd: {}",
            crate::logging::strerror(e)
        );
    }
    sent
}

/// A build id in the manner of Redis's (a hex hash of what the binary was
/// built from): this package's version, target and profile.
fn build_id() -> u64 {
    let what = format!(
        "latchkey-server {} {} {} {}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        std::env::consts::OS,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    // FNV-1a, 64 bits.
    what.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `latchkey-server --version`: redis-server's line (`v=` is the Redis
/// version implemented, so scripts that parse it keep working) with
/// `latchkey=` naming this server's own version at its end. `jemalloc`:
/// the allocator's version string ("5.3.0-0-g...").
pub fn version_line(jemalloc: &str) -> String {
    let malloc = jemalloc.split('-').next().unwrap_or(jemalloc);
    format!(
        "Redis server v={} sha=00000000:0 malloc=jemalloc-{malloc} bits={} build={:x} latchkey={}",
        crate::version::REDIS_VERSION,
        usize::BITS,
        build_id(),
        env!("CARGO_PKG_VERSION")
    )
}

/// The start-up banner (Redis's ASCII logo), naming Latchkey and the Redis
/// version it implements, with Redis's fields: mode, port, pid.
pub fn banner(port: u16, pid: u32) -> String {
    let right = [
        String::new(),
        format!(
            "Latchkey {} (Redis {} compatible) {} bit",
            env!("CARGO_PKG_VERSION"),
            crate::version::REDIS_VERSION,
            usize::BITS
        ),
        String::new(),
        "Running in standalone mode".to_string(),
        format!("Port: {port}"),
        format!("PID: {pid}"),
        String::new(),
        String::new(),
    ];
    let art = [
        "      .-----.      ",
        "     / .---. \\     ",
        "    | |     | |    ",
        "  .-+-'-----'-+-.  ",
        "  |    .---.    |  ",
        "  |    | o |    |  ",
        "  |    '-+-'    |  ",
        "  '------'------'  ",
    ];
    let mut s = String::new();
    for (a, r) in art.iter().zip(right.iter()) {
        s.push_str(a);
        if !r.is_empty() {
            s.push_str("        ");
            s.push_str(r);
        }
        s.push('\n');
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_line_has_redis_fields() {
        let l = version_line("5.3.0-0-g54eaed1d8b56b1aa528be3bdd1877e59c56fa90c");
        let fields: Vec<&str> = l.split(' ').collect();
        assert_eq!(&fields[..2], &["Redis", "server"]);
        assert_eq!(fields[2], format!("v={}", crate::version::REDIS_VERSION));
        assert_eq!(fields[3], "sha=00000000:0");
        assert_eq!(fields[4], "malloc=jemalloc-5.3.0");
        assert_eq!(fields[5], "bits=64");
        assert!(fields[6]
            .strip_prefix("build=")
            .is_some_and(|h| !h.is_empty() && h.bytes().all(|c| c.is_ascii_hexdigit())));
        assert_eq!(fields[7], format!("latchkey={}", env!("CARGO_PKG_VERSION")));
    }

    #[test]
    fn banner_names_port_and_pid() {
        let b = banner(6380, 77);
        assert!(b.contains("Port: 6380\n"), "{b}");
        assert!(b.contains("PID: 77\n"), "{b}");
        assert!(b.contains("Running in standalone mode"), "{b}");
    }
}

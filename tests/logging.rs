//! Redis's log and process conventions, on the built `latchkey-server`
//! binary: the log line format, the start-up / save / rewrite / shutdown
//! lines in Redis's words and order, `logfile`, `loglevel` filtering (and
//! CONFIG SET loglevel), `pidfile`, `daemonize`, `supervised systemd`
//! (a NOTIFY_SOCKET the test binds) and `upstart` (SIGSTOP), the
//! start-up-only directives' CONFIG GET/SET, and `--version`.
//!
//! Every server is on a loopback port chosen at run time and killed when
//! its guard drops, a daemon included; every wait is bounded.

mod common;

use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_latchkey-server");

/// A spawned server, killed (SIGKILL) on drop if still running.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn spawn(dir: &TempDir, args: &[&str], env: &[(&str, &str)]) -> Server {
        let port = free_port();
        let mut cmd = Command::new(BIN);
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--dir", &dir.path()])
            .args(args)
            .env_remove("NOTIFY_SOCKET")
            .env_remove("UPSTART_JOB")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Server {
            child: cmd.spawn().expect("spawn latchkey-server"),
            port,
        }
    }

    fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Waits (bounded) until PING answers.
    fn ready(&mut self) -> Conn {
        eventually("the server answers PING", || {
            assert!(
                self.child.try_wait().unwrap().is_none(),
                "the server exited"
            );
            pings(self.port)
        });
        Conn::new(self.addr())
    }

    /// Waits (bounded) for the exit, and its status.
    fn exited(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Everything it wrote to stdout (after it exited).
    fn stdout(&mut self) -> String {
        use std::io::Read;
        let mut s = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = o.read_to_string(&mut s);
        }
        s
    }

    fn stderr(&mut self) -> String {
        use std::io::Read;
        let mut s = String::new();
        if let Some(mut o) = self.child.stderr.take() {
            let _ = o.read_to_string(&mut s);
        }
        s
    }
}

/// Sends `cmd` (SHUTDOWN and its options) and waits for a clean exit.
fn shut_down(s: &mut Server, c: &mut Conn, cmd: &str) {
    let args: Vec<&str> = cmd.split(' ').collect();
    c.send(&args);
    assert!(s.exited().success(), "{cmd}: a clean exit");
}

fn pings(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// A parsed log line: `pid:role dd Mon yyyy hh:mm:ss.mmm c message`.
#[derive(Debug)]
struct Line {
    pid: u32,
    role: char,
    level: char,
    msg: String,
}

fn digits(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| b.is_ascii_digit())
}

/// Parses one line in Redis's format, or None when it is not one (the
/// check the tests make of every line, as a regex would).
fn parse_line(l: &str) -> Option<Line> {
    let (pid, rest) = l.split_once(':')?;
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut it = rest.splitn(7, ' ');
    let role = it.next()?;
    let (day, mon, year, time, level) =
        (it.next()?, it.next()?, it.next()?, it.next()?, it.next()?);
    let msg = it.next()?;
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let t: Vec<&str> = time.split([':', '.']).collect();
    let ok = matches!(role, "C" | "M" | "S")
        && digits(day, 2)
        && months.contains(&mon)
        && digits(year, 4)
        && t.len() == 4
        && digits(t[0], 2)
        && digits(t[1], 2)
        && digits(t[2], 2)
        && digits(t[3], 3)
        && matches!(level, "." | "-" | "*" | "#")
        && !msg.is_empty();
    ok.then(|| Line {
        pid: pid.parse().unwrap(),
        role: role.chars().next().unwrap(),
        level: level.chars().next().unwrap(),
        msg: msg.to_string(),
    })
}

#[test]
fn the_line_parser_rejects_other_shapes() {
    assert!(parse_line("12345:M 27 Nov 2026 03:50:01.123 * Ready to accept connections").is_some());
    for bad in [
        "12345:M 27 Nov 2026 03:50:01 * no millis",
        "12345:X 27 Nov 2026 03:50:01.123 * bad role",
        "12345:M 27 November 2026 03:50:01.123 * bad month",
        "12345:M 27 Nov 2026 03:50:01.123 ! bad level",
        "2026-11-27T03:50:01.123Z  INFO Ready to accept connections",
        "M 27 Nov 2026 03:50:01.123 * no pid",
    ] {
        assert!(parse_line(bad).is_none(), "{bad}");
    }
}

/// The log's lines; every one must be in Redis's format except the
/// signal handler's (`pid:signal-handler (secs) msg`).
fn log_lines(text: &str) -> Vec<Line> {
    text.lines()
        .filter(|l| !l.contains(":signal-handler ("))
        .map(|l| parse_line(l).unwrap_or_else(|| panic!("not a Redis log line: {l:?}\n{text}")))
        .collect()
}

/// Asserts `wanted` appear in this order (each a line's message prefix).
fn in_order(lines: &[Line], wanted: &[&str], text: &str) {
    let mut at = 0;
    for w in wanted {
        match lines[at..].iter().position(|l| l.msg.starts_with(w)) {
            Some(i) => at += i + 1,
            None => panic!("{w:?} missing or out of order in:\n{text}"),
        }
    }
}

fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits (bounded) until the log at `path` has a line containing `what`.
fn wait_log(path: &std::path::Path, what: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let t = read(path);
        if t.contains(what) {
            return t;
        }
        assert!(Instant::now() < deadline, "no {what:?} in the log:\n{t}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A server logging to `dir`/server.log with its pid in `dir`/server.pid,
/// and those two paths.
fn spawn_with_files(
    dir: &TempDir,
    extra: &[&str],
) -> (Server, std::path::PathBuf, std::path::PathBuf) {
    let log = dir.0.join("server.log");
    let pidfile = dir.0.join("server.pid");
    let (l, p) = (log.to_string_lossy(), pidfile.to_string_lossy());
    let mut args = vec!["--logfile", &l, "--pidfile", &p];
    args.extend_from_slice(extra);
    (Server::spawn(dir, &args, &[]), log, pidfile)
}

#[test]
fn start_up_and_shutdown_lines_go_to_the_logfile_in_order() {
    let dir = TempDir::new("log-order");
    let (mut s, log, pidfile) = spawn_with_files(&dir, &["--save", "3600 1"]);
    let mut c = s.ready();
    let pid = s.child.id();
    assert_eq!(read(&pidfile), format!("{pid}\n"), "the pid file");
    assert_eq!(c.cmd(&["SET", "k", "v"]), ok());
    shut_down(&mut s, &mut c, "SHUTDOWN");
    assert!(!pidfile.exists(), "the pid file is removed at exit");
    assert_eq!(s.stdout(), "", "with a logfile nothing goes to stdout");
    let text = read(&log);
    let lines = log_lines(&text);
    in_order(
        &lines,
        &[
            "oO0OoO0OoO0Oo Redis is starting oO0OoO0OoO0Oo",
            &format!("Redis version=7.0.15, bits=64, commit=00000000, modified=0, pid={pid}, just started"),
            "Configuration loaded",
            &format!("Running mode=standalone, port={}.", s.port),
            "Server initialized",
            "Ready to accept connections",
            "User requested shutdown...",
            "Saving the final RDB snapshot before exiting.",
            "DB saved on disk",
            "Removing the pid file.",
            "Redis is now ready to exit, bye bye...",
        ],
        &text,
    );
    assert!(lines.iter().all(|l| l.pid == pid), "{text}");
    // Redis's roles: C until the server is initialised, M after.
    assert_eq!(lines[0].role, 'C');
    let ready = lines
        .iter()
        .find(|l| l.msg == "Ready to accept connections")
        .unwrap();
    assert_eq!((ready.role, ready.level), ('M', '*'));
    let starting = &lines[0];
    assert_eq!(starting.level, '#');
}

/// The line of `lines` whose message starts with `prefix` (the last one).
fn line_of<'a>(lines: &'a [Line], prefix: &str, text: &str) -> &'a Line {
    lines
        .iter()
        .rev()
        .find(|l| l.msg.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in:\n{text}"))
}

/// Redis writes `S` as the role on a replica (`server.masterhost` set),
/// from the configuration on (a `--replicaof` start) and from REPLICAOF
/// host port on, and `M` again from REPLICAOF NO ONE on (checked against
/// redis-server 7.0.15's log of the same steps).
#[test]
fn a_replica_logs_the_role_s_and_a_promoted_one_m() {
    let pdir = TempDir::new("log-role-primary");
    let mut p = Server::spawn(&pdir, &[], &[]);
    p.ready();
    let dir = TempDir::new("log-role-replica");
    let port = p.port.to_string();
    let (mut r, log, _) = spawn_with_files(&dir, &["--replicaof", "127.0.0.1", &port]);
    let mut c = r.ready();
    let text = wait_log(&log, "MASTER <-> REPLICA sync: Finished with success");
    let lines = log_lines(&text);
    assert_eq!(lines[0].role, 'C', "{text}");
    for l in ["Server initialized", "Ready to accept connections"] {
        assert_eq!(line_of(&lines, l, &text).role, 'S', "{l}: {text}");
    }
    let done = line_of(
        &lines,
        "MASTER <-> REPLICA sync: Finished with success",
        &text,
    );
    assert_eq!(done.role, 'S', "{text}");
    assert_eq!(c.cmd(&["REPLICAOF", "NO", "ONE"]), ok());
    let text = wait_log(&log, "MASTER MODE enabled");
    let lines = log_lines(&text);
    for l in ["Setting secondary replication ID", "MASTER MODE enabled"] {
        assert_eq!(line_of(&lines, l, &text).role, 'M', "{l}: {text}");
    }
    assert_eq!(c.cmd(&["REPLICAOF", "127.0.0.1", &port]), ok());
    let text = wait_log(&log, &format!("REPLICAOF 127.0.0.1:{port} enabled"));
    let lines = log_lines(&text);
    let on = line_of(&lines, "REPLICAOF 127.0.0.1", &text);
    assert_eq!(on.role, 'S', "{text}");
    // A primary started without a master stays M.
    let (mut m, mlog, _) = spawn_with_files(&pdir, &[]);
    m.ready();
    let text = wait_log(&mlog, "Ready to accept connections");
    let lines = log_lines(&text);
    assert_eq!(
        line_of(&lines, "Ready to accept connections", &text).role,
        'M'
    );
}

#[test]
fn saves_rewrites_signals_and_the_load_are_logged_as_redis_does() {
    let dir = TempDir::new("log-save");
    let log = dir.0.join("server.log");
    let logs = log.to_string_lossy().into_owned();
    let mut s = Server::spawn(&dir, &["--logfile", &logs, "--save", ""], &[]);
    let mut c = s.ready();
    assert_eq!(c.cmd(&["SET", "k", "v"]), ok());
    c.cmd(&["BGSAVE"]);
    let text = wait_log(&log, "Background saving terminated with success");
    in_order(
        &log_lines(&text),
        &[
            &format!("Background saving started by pid {}", s.child.id()),
            "DB saved on disk",
            "Background saving terminated with success",
        ],
        &text,
    );
    assert_eq!(c.cmd(&["SAVE"]), ok());
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "yes"]), ok());
    let text = wait_log(&log, "Background AOF rewrite finished successfully");
    in_order(
        &log_lines(&text),
        &[
            "Creating AOF incr file temp-appendonly.aof.incr on background rewrite",
            "Background append only file rewriting started by pid",
            "Background AOF rewrite terminated with success",
            "Successfully renamed the temporary AOF incr file temp-appendonly.aof.incr into appendonly.aof.1.incr.aof",
            "Background AOF rewrite finished successfully",
        ],
        &text,
    );
    c.cmd(&["BGREWRITEAOF"]);
    eventually("the second rewrite is logged", || {
        read(&log)
            .matches("Background AOF rewrite finished successfully")
            .count()
            == 2
    });
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "no"]), ok());
    // SIGTERM: the signal handler's line, then the shutdown's.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    assert!(s.exited().success());
    let text = read(&log);
    let pid = s.child.id().to_string();
    assert!(
        text.lines().any(|l| {
            let (p, rest) = l.split_once(":signal-handler (").unwrap_or(("", ""));
            let (secs, msg) = rest.split_once(") ").unwrap_or(("", ""));
            p == pid
                && digits(secs, secs.len().max(1))
                && msg == "Received SIGTERM scheduling shutdown..."
        }),
        "{text}"
    );
    let lines = log_lines(&text);
    in_order(
        &lines,
        &[
            "DB saved on disk",
            "Creating AOF incr file appendonly.aof.2.incr.aof on background rewrite",
            "Background append only file rewriting started by pid",
            "Background AOF rewrite terminated with success",
            "Removing the history file appendonly.aof.1.incr.aof in the background",
            "Background AOF rewrite finished successfully",
            "User requested shutdown...",
            "Redis is now ready to exit, bye bye...",
        ],
        &text,
    );
    // Without save rules SIGTERM does not save.
    let after = text.split("User requested shutdown...").nth(1).unwrap();
    assert!(!after.contains("Saving the final RDB snapshot"), "{text}");
    drop(s);
    // The next start loads the snapshot, and says so.
    let _ = std::fs::remove_file(&log);
    let mut s = Server::spawn(&dir, &["--logfile", &logs, "--save", ""], &[]);
    let mut c = s.ready();
    assert_eq!(c.cmd(&["GET", "k"]), b("v"));
    let text = read(&log);
    in_order(
        &log_lines(&text),
        &[
            "Server initialized",
            "Loading RDB produced by version 7.0.15",
            "RDB age ",
            "RDB memory usage when created ",
            "Done loading RDB, keys loaded: 1, keys expired: 0.",
            "DB loaded from disk: ",
            "Ready to accept connections",
        ],
        &text,
    );
    let loaded = text
        .lines()
        .find(|l| l.contains("DB loaded from disk: "))
        .unwrap();
    let secs = loaded.rsplit_once("DB loaded from disk: ").unwrap().1;
    let secs = secs.strip_suffix(" seconds").expect("X seconds");
    assert!(
        secs.parse::<f64>().is_ok() && secs.split('.').nth(1).unwrap().len() == 3,
        "{loaded}"
    );
}

/// A server at `level`, logging to `log`, without save rules.
fn at_level(dir: &TempDir, log: &std::path::Path, level: &str) -> Server {
    let l = log.to_string_lossy();
    Server::spawn(
        dir,
        &["--logfile", &l, "--save", "", "--loglevel", level],
        &[],
    )
}

#[test]
fn loglevel_filters_lines_and_config_set_changes_it() {
    let dir = TempDir::new("log-level");
    let log = dir.0.join("server.log");
    let mut s = at_level(&dir, &log, "notice");
    let mut c = s.ready();
    // "Accepted <addr>" is Redis's verbose line: absent at notice.
    Conn::new(s.addr()).cmd(&["PING"]);
    assert_eq!(c.cmd(&["PING"]), V::Simple("PONG".into()));
    assert!(
        !read(&log).contains("Accepted 127.0.0.1:"),
        "{}",
        read(&log)
    );
    assert_eq!(c.cmd(&["CONFIG", "SET", "loglevel", "verbose"]), ok());
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "loglevel"]),
        V::Arr(vec![b("loglevel"), b("verbose")])
    );
    let mut other = Conn::new(s.addr());
    other.cmd(&["PING"]);
    let text = wait_log(&log, "Accepted 127.0.0.1:");
    let accepted = log_lines(&text)
        .into_iter()
        .find(|l| l.msg.starts_with("Accepted 127.0.0.1:"))
        .unwrap();
    assert_eq!(accepted.level, '-');
    // Lua's redis.log: LOG_DEBUG ('.') only at debug, LOG_VERBOSE ('-')
    // from verbose on.
    let script = "redis.log(redis.LOG_DEBUG, ARGV[1] .. '-dbg') redis.log(redis.LOG_VERBOSE, ARGV[1] .. '-vrb')";
    c.cmd(&["EVAL", script, "0", "first"]);
    let text = wait_log(&log, "first-vrb");
    assert!(
        text.contains(" - first-vrb\n") && !text.contains("first-dbg"),
        "{text}"
    );
    assert_eq!(c.cmd(&["CONFIG", "SET", "loglevel", "debug"]), ok());
    c.cmd(&["EVAL", script, "0", "second"]);
    let text = wait_log(&log, "second-vrb");
    assert!(text.contains(" . second-dbg\n"), "{text}");
    assert!(matches!(
        c.cmd(&["CONFIG", "SET", "loglevel", "loud"]),
        V::Err(e) if e.contains("argument(s) must be one of the following: debug, verbose, notice, warning")
    ));
    shut_down(&mut s, &mut c, "SHUTDOWN NOSAVE");
    drop(s);

    // At warning, the notice lines are gone, the warnings stay.
    let _ = std::fs::remove_file(&log);
    let mut s = at_level(&dir, &log, "warning");
    let mut c = s.ready();
    shut_down(&mut s, &mut c, "SHUTDOWN");
    let text = read(&log);
    let lines = log_lines(&text);
    in_order(
        &lines,
        &[
            "oO0OoO0OoO0Oo Redis is starting",
            "Server initialized",
            "User requested shutdown...",
            "Redis is now ready to exit",
        ],
        &text,
    );
    assert!(lines.iter().all(|l| l.level == '#'), "{text}");
    assert!(!text.contains("Ready to accept connections"), "{text}");
}

#[test]
fn stdout_when_logfile_is_empty_and_the_banner_on_request() {
    let dir = TempDir::new("log-stdout");
    let mut s = Server::spawn(&dir, &["--save", "", "--logfile", ""], &[]);
    let mut c = s.ready();
    shut_down(&mut s, &mut c, "SHUTDOWN");
    let out = s.stdout();
    let lines = log_lines(&out);
    // Not a tty: no banner, Redis's one line instead.
    in_order(
        &lines,
        &[
            &format!("Running mode=standalone, port={}.", s.port),
            "Ready to accept connections",
        ],
        &out,
    );
    drop(s);

    let mut s = Server::spawn(&dir, &["--save", "", "--always-show-logo", "yes"], &[]);
    let mut c = s.ready();
    shut_down(&mut s, &mut c, "SHUTDOWN");
    let out = s.stdout();
    assert!(out.contains(&format!("Port: {}\n", s.port)), "{out}");
    assert!(out.contains(&format!("PID: {}\n", s.child.id())), "{out}");
    assert!(out.contains("(Redis 7.0.15 compatible)"), "{out}");
    assert!(!out.contains("Running mode=standalone"), "{out}");
}

/// The daemon a test started, SIGKILLed on drop unless it exited.
struct Daemon(i32);

impl Drop for Daemon {
    fn drop(&mut self) {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", self.0)).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains("latchkey-server") {
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
}

#[test]
fn daemonize_returns_at_once_and_the_daemon_serves() {
    let dir = TempDir::new("log-daemon");
    let (mut s, log, pidfile) = spawn_with_files(&dir, &["--daemonize", "yes", "--save", ""]);
    // The parent exits at once, successfully.
    let started = Instant::now();
    assert!(s.exited().success());
    assert!(started.elapsed() < Duration::from_secs(5));
    let parent = s.child.id();
    eventually("the daemon writes its pid file", || {
        read(&pidfile).ends_with('\n')
    });
    let pid: i32 = read(&pidfile).trim().parse().expect("a pid");
    let _guard = Daemon(pid);
    assert_ne!(pid as u32, parent, "the daemon is another process");
    eventually("the daemon answers PING", || pings(s.port));
    let mut c = Conn::new(s.addr());
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "daemonize"]),
        V::Arr(vec![b("daemonize"), b("yes")])
    );
    c.send(&["SHUTDOWN"]);
    eventually("the daemon removes its pid file", || !pidfile.exists());
    let text = wait_log(&log, "Redis is now ready to exit, bye bye...");
    let lines = log_lines(&text);
    // Every line is the daemon's (it daemonizes before logging).
    assert!(lines.iter().all(|l| l.pid == pid as u32), "{text}");
    in_order(
        &lines,
        &[
            "oO0OoO0OoO0Oo Redis is starting",
            "Ready to accept connections",
            "Removing the pid file.",
        ],
        &text,
    );
}

#[test]
fn supervised_systemd_notifies_the_socket() {
    let dir = TempDir::new("log-systemd");
    let sock_path = dir.0.join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let recv = || {
        let mut buf = [0u8; 512];
        // A signal to this test process (another test's child exiting)
        // interrupts the wait: retry it, a bounded number of times.
        for _ in 0..100 {
            match sock.recv(&mut buf) {
                Ok(n) => return String::from_utf8_lossy(&buf[..n]).into_owned(),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => panic!("a notification within the wait: {e}"),
            }
        }
        panic!("the wait was interrupted 100 times");
    };
    // daemonize is ignored when supervised, as Redis: the process stays.
    let mut s = Server::spawn(
        &dir,
        &[
            "--supervised",
            "systemd",
            "--daemonize",
            "yes",
            "--save",
            "",
        ],
        &[("NOTIFY_SOCKET", &sock_path.to_string_lossy())],
    );
    assert_eq!(recv(), "STATUS=Redis is loading...\n");
    assert_eq!(recv(), "STATUS=Ready to accept connections\n");
    assert_eq!(recv(), "READY=1\n");
    assert!(
        s.child.try_wait().unwrap().is_none(),
        "still in the foreground"
    );
    let mut c = s.ready();
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "supervised"]),
        V::Arr(vec![b("supervised"), b("systemd")])
    );
    c.send(&["SHUTDOWN"]);
    assert_eq!(recv(), "STOPPING=1\n");
    assert!(s.exited().success());
    let out = s.stdout();
    assert!(out.contains("* Supervised by systemd."), "{out}");

    // auto finds NOTIFY_SOCKET.
    let mut s = Server::spawn(
        &dir,
        &["--supervised", "auto", "--save", ""],
        &[("NOTIFY_SOCKET", &sock_path.to_string_lossy())],
    );
    assert_eq!(recv(), "STATUS=Redis is loading...\n");
    assert_eq!(recv(), "STATUS=Ready to accept connections\n");
    assert_eq!(recv(), "READY=1\n");
    let mut c = s.ready();
    let V::Bulk(info) = c.cmd(&["INFO", "server"]) else {
        panic!("INFO is a bulk string")
    };
    assert_eq!(
        info_field(&String::from_utf8_lossy(&info), "process_supervised"),
        "systemd"
    );
    shut_down(&mut s, &mut c, "SHUTDOWN");
}

#[test]
fn supervised_upstart_stops_itself_until_continued() {
    let dir = TempDir::new("log-upstart");
    let mut s = Server::spawn(
        &dir,
        &["--supervised", "upstart", "--save", ""],
        &[("UPSTART_JOB", "latchkey-test")],
    );
    let pid = s.child.id();
    eventually("the process stops itself", || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command name's closing parenthesis.
        stat.rsplit_once(") ")
            .is_some_and(|(_, r)| r.starts_with('T'))
    });
    assert!(!pings(s.port));
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    let mut c = s.ready();
    shut_down(&mut s, &mut c, "SHUTDOWN");
    let out = s.stdout();
    assert!(
        out.contains("* supervised by upstart, will stop to signal readiness."),
        "{out}"
    );
}

#[test]
fn process_directives_are_start_up_only() {
    let dir = TempDir::new("log-config");
    let mut s = Server::spawn(&dir, &["--save", "", "--syslog-ident", "lk"], &[]);
    let mut c = s.ready();
    for (name, value) in [
        ("logfile", ""),
        ("pidfile", ""),
        ("daemonize", "no"),
        ("supervised", "no"),
        ("syslog-enabled", "no"),
        ("syslog-ident", "lk"),
        ("syslog-facility", "local0"),
        ("always-show-logo", "no"),
    ] {
        assert_eq!(
            c.cmd(&["CONFIG", "GET", name]),
            V::Arr(vec![b(name), b(value)]),
            "{name}"
        );
        assert_eq!(
            c.cmd(&["CONFIG", "SET", name, value]),
            V::Err(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - can't set immutable config"
            )),
            "{name}"
        );
    }
    shut_down(&mut s, &mut c, "SHUTDOWN");
}

#[test]
fn bad_process_directives_stop_start_up_with_redis_errors() {
    let dir = TempDir::new("log-bad");
    for (args, wanted) in [
        (
            vec!["--syslog-facility", "bogus"],
            "argument(s) must be one of the following: user, local0, local1, local2, local3, local4, local5, local6, local7",
        ),
        (
            vec!["--supervised", "bogus"],
            "argument(s) must be one of the following: upstart, systemd, auto, no",
        ),
        (vec!["--daemonize", "maybe"], "argument must be 'yes' or 'no'"),
        (
            vec!["--logfile", "/nonexistent-dir/x.log"],
            "Can't open the log file: No such file or directory",
        ),
    ] {
        let mut s = Server::spawn(&dir, &args, &[]);
        let st = s.exited();
        assert_eq!(st.code(), Some(1), "{args:?}");
        let err = s.stderr();
        assert!(err.contains("*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***"), "{err}");
        assert!(err.contains(wanted), "{args:?}: {err}");
    }
}

#[test]
fn a_port_in_use_stops_start_up_with_redis_lines() {
    let dir = TempDir::new("log-busy");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    // Killed on drop, and waited for with a bound, should it start.
    let mut s = Server {
        child: Command::new(BIN)
            .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
            .args(["--dir", &dir.path()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        port: port.parse().unwrap(),
    };
    assert_eq!(s.exited().code(), Some(1));
    let out = s.stdout();
    in_order(
        &log_lines(&out),
        &[
            "Configuration loaded",
            &format!("Warning: Could not create server TCP listening socket 127.0.0.1:{port}: bind: Address already in use"),
            &format!("Failed listening on port {port} (TCP), aborting."),
        ],
        &out,
    );
}

#[test]
fn version_is_in_redis_server_format() {
    for flag in ["--version", "-v"] {
        let out = Command::new(BIN).arg(flag).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let fields: Vec<&str> = text.trim_end().split(' ').collect();
        assert_eq!(fields.len(), 8, "{text}");
        assert_eq!(
            &fields[..4],
            &["Redis", "server", "v=7.0.15", "sha=00000000:0"]
        );
        assert!(fields[4].starts_with("malloc=jemalloc-5."), "{text}");
        assert_eq!(fields[5], "bits=64");
        let build = fields[6].strip_prefix("build=").unwrap();
        assert!(
            !build.is_empty() && build.bytes().all(|c| c.is_ascii_hexdigit()),
            "{text}"
        );
        assert_eq!(fields[7], format!("latchkey={}", env!("CARGO_PKG_VERSION")));
    }
}

//! The `latchkey` command-line tool against an in-process server: `lock`
//! (exit statuses, holding while the command runs, timeouts, loss, signals,
//! the holder being SIGKILLed, everything the command started ending with
//! it, job control under a pseudo-terminal) and `watch`. Every wait is
//! bounded and every spawned process group is killed on drop.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use latchkey_server::runtime::ServerHandle;

mod common;
use common::{start, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_latchkey");
const WAIT: Duration = Duration::from_secs(5);

fn url(h: &ServerHandle) -> String {
    format!("redis://{}", h.addr)
}

fn conn(h: &ServerHandle) -> redis::Connection {
    redis::Client::open(url(h))
        .unwrap()
        .get_connection_with_timeout(WAIT)
        .unwrap()
}

fn exists(c: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(c).unwrap() == 1
}

/// Polls `f` every 5 ms until it is true or `WAIT` passes.
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The CLIENT LIST id of the CLI's connection (it names itself latchkey-cli).
fn cli_client_id(c: &mut redis::Connection) -> i64 {
    let mut id = None;
    wait_for("the CLI's connection", || {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(c).unwrap();
        id = list
            .lines()
            .find(|l| l.contains(" name=latchkey-cli "))
            .and_then(|l| l.strip_prefix("id="))
            .and_then(|l| l.split(' ').next())
            .and_then(|s| s.parse().ok());
        id.is_some()
    });
    id.unwrap()
}

fn kill_client(c: &mut redis::Connection, id: i64) {
    let n: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query(c)
        .unwrap();
    assert_eq!(n, 1);
}

/// Lines of a child's pipe, read on a thread so waits can time out.
struct Lines(Receiver<String>);

impl Lines {
    fn new(r: impl std::io::Read + Send + 'static) -> Lines {
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines(rx)
    }

    fn next(&self) -> String {
        self.0.recv_timeout(WAIT).expect("a line within 5 s")
    }

    /// Everything until the pipe closes (bounded by `WAIT`).
    fn rest(&self) -> String {
        let end = Instant::now() + WAIT;
        let mut all = String::new();
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.0.recv_timeout(left) {
                Ok(l) => {
                    all.push_str(&l);
                    all.push('\n');
                }
                Err(_) => break,
            }
        }
        all
    }
}

/// A `latchkey` process in its own process group; Drop SIGKILLs the whole
/// group (the CLI and its command) and reaps the CLI.
struct Cli {
    child: Child,
    out: Lines,
    err: Lines,
    stdin: Option<ChildStdin>,
}

impl Cli {
    fn spawn(h: &ServerHandle, args: &[&str]) -> Cli {
        Self::spawn_url(&url(h), args)
    }

    fn spawn_url(url: &str, args: &[&str]) -> Cli {
        let mut child = Command::new(BIN)
            .arg("--url")
            .arg(url)
            .args(args)
            .env_remove("LATCHKEY_URL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("spawn latchkey");
        Cli {
            out: Lines::new(child.stdout.take().unwrap()),
            err: Lines::new(child.stderr.take().unwrap()),
            stdin: child.stdin.take(),
            child,
        }
    }

    fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    fn signal(&self, sig: i32) {
        unsafe { libc::kill(self.pid(), sig) };
    }

    fn kill_group(&self) {
        unsafe { libc::kill(-self.pid(), libc::SIGKILL) };
    }

    /// Waits (bounded) for the CLI to exit.
    fn wait(&mut self) -> ExitStatus {
        let end = Instant::now() + WAIT;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < end, "latchkey did not exit within 5 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Asserts that stderr (read to its end) has `text`.
    fn said(&self, text: &str) {
        let err = self.err.rest();
        assert!(err.contains(text), "{text:?} not in {err:?}");
    }

    fn code(&mut self) -> i32 {
        let s = self.wait();
        s.code().unwrap_or_else(|| panic!("latchkey died: {s:?}"))
    }
}

impl Drop for Cli {
    fn drop(&mut self) {
        self.kill_group();
        let _ = self.child.wait();
    }
}

/// Runs a `lock` to completion: (exit code, stdout, stderr).
fn run(h: &ServerHandle, args: &[&str]) -> (i32, String, String) {
    let mut c = Cli::spawn(h, args);
    drop(c.stdin.take());
    let code = c.code();
    (code, c.out.rest(), c.err.rest())
}

#[test]
fn lock_exit_statuses() {
    let h = start();
    let mut c = conn(&h);
    assert_eq!(run(&h, &["lock", "l", "--", "true"]).0, 0);
    assert_eq!(run(&h, &["lock", "l", "--", "sh", "-c", "exit 7"]).0, 7);
    // Killed by a signal: 128 + N, like a shell.
    assert_eq!(
        run(&h, &["lock", "l", "--", "sh", "-c", "kill -9 $$"]).0,
        137
    );
    let (code, _, err) = run(&h, &["lock", "l", "--", "/no/such/command-xyz"]);
    assert_eq!(code, 127);
    assert!(err.contains("command not found"), "{err}");
    let (code, _, err) = run(&h, &["lock", "l", "--", "/dev/null"]);
    assert_eq!(code, 126, "{err}");
    // An executable script without a #! line runs with /bin/sh (as from a
    // shell or flock), with or without --kill-on-loss.
    let dir = std::env::temp_dir().join(format!("latchkey-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("no-shebang");
    std::fs::write(&script, "echo plain; exit 5\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = script.to_str().unwrap();
    for extra in [&[][..], &["--kill-on-loss"][..]] {
        let args: Vec<&str> = ["lock"]
            .iter()
            .chain(extra)
            .chain(&["l", "--", path])
            .copied()
            .collect();
        let (code, out, err) = run(&h, &args);
        assert_eq!((code, out.as_str()), (5, "plain\n"), "{extra:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    // A lease too short to outlast taking the lock: the command never
    // starts on a lock that is already gone.
    let (code, out, err) = run(
        &h,
        &[
            "lock",
            "--lease",
            "0.1ms",
            "l",
            "--",
            "sh",
            "-c",
            "echo running",
        ],
    );
    assert_eq!(code, 4, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("before the command could start"), "{err}");
    // A lease no server TTL can hold is a usage error.
    let (code, _, err) = run(
        &h,
        &["lock", "--lease", "10000000000000h", "l", "--", "true"],
    );
    assert_eq!(code, 2, "{err}");
    // Without `--`, hyphenated words after the command belong to it.
    let (code, out, _) = run(&h, &["lock", "l", "echo", "-n", "--x"]);
    assert_eq!((code, out.as_str()), (0, "--x\n"));
    assert!(!exists(&mut c, "l"), "every run released the lock");
}

#[test]
fn command_runs_while_lock_is_held() {
    let h = start();
    let mut c = conn(&h);
    let script =
        r#"echo "$LATCHKEY_LOCK $LATCHKEY_LOCK_VALUE $LATCHKEY_LOCK_TOKEN"; read x; exit 3"#;
    let mut cli = Cli::spawn(&h, &["lock", "job", "--", "sh", "-c", script]);
    let line = cli.out.next();
    let mut words = line.split(' ');
    let (name, token, fence) = (
        words.next().unwrap(),
        words.next().unwrap(),
        words.next().unwrap(),
    );
    assert_eq!(name, "job");
    // The fencing token, as TPINFO shows it.
    let info: Vec<redis::Value> = redis::cmd("TPINFO").arg("job").query(&mut c).unwrap();
    assert_eq!(info[3], redis::Value::Int(fence.parse().unwrap()));
    // The key is held, bound to the CLI's connection, with the token as value.
    let id = cli_client_id(&mut c);
    let owner: Option<i64> = redis::cmd("TPOWNER").arg("job").query(&mut c).unwrap();
    assert_eq!(owner, Some(id));
    let v: String = redis::cmd("GET").arg("job").query(&mut c).unwrap();
    assert_eq!(v, token);
    writeln!(cli.stdin.as_mut().unwrap()).unwrap();
    assert_eq!(cli.code(), 3);
    assert!(!exists(&mut c, "job"));
}

#[test]
fn timeout_while_another_client_holds_the_lock() {
    let h = start();
    let mut holder = conn(&h);
    let n: i64 = redis::cmd("SETTP")
        .arg("busy")
        .arg("x")
        .query(&mut holder)
        .unwrap();
    assert_eq!(n, 1);

    let t = Instant::now();
    let (code, _, err) = run(&h, &["lock", "--timeout", "200ms", "busy", "--", "true"]);
    let took = t.elapsed();
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("timed out after 200ms"), "{err}");
    assert!(took >= Duration::from_millis(200), "{took:?}");
    assert!(took < Duration::from_millis(5000), "{took:?}");

    let (code, _, err) = run(&h, &["lock", "--timeout", "0", "busy", "--", "true"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("held by another client"), "{err}");
    let (code, _, err) = run(
        &h,
        &["lock", "--fair", "--timeout", "0", "busy", "--", "true"],
    );
    assert_eq!(code, 3, "{err}");
    // A free lock is taken even with a zero wait, plain or fair.
    let (code, _, err) = run(&h, &["lock", "--timeout", "0", "free", "--", "true"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(
        &h,
        &[
            "lock",
            "--fair",
            "--timeout",
            "0",
            "free",
            "--",
            "sh",
            "-c",
            "exit 6",
        ],
    );
    assert_eq!(code, 6, "{err}");
    assert!(!exists(&mut holder, "free"));

    // SIGTERM while waiting: nothing held, exit 128 + 15.
    let mut cli = Cli::spawn(&h, &["lock", "busy", "--", "true"]);
    // In the lock's line means this CLI (not one that just exited) is set
    // up and waiting.
    wait_for("the CLI to wait on the lock", || {
        let line: Vec<i64> = redis::cmd("TPQUEUE")
            .arg("busy")
            .query(&mut holder)
            .unwrap();
        !line.is_empty()
    });
    cli.signal(libc::SIGTERM);
    // It dies of the signal itself (a shell shows 143), as flock(1) would.
    assert_eq!(killed_by(cli.wait()), Some(libc::SIGTERM));
    assert!(exists(&mut holder, "busy"));
}

fn killed_by(s: ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(&s)
}

#[test]
fn cannot_connect() {
    // Bind then drop a listener: the port is (almost surely) closed now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    let mut cli = Cli::spawn_url(&url, &["lock", "x", "--", "true"]);
    assert_eq!(cli.code(), 5);
    assert!(cli.err.rest().contains("cannot connect"));
    let mut cli = Cli::spawn_url(&url, &["watch", "x"]);
    assert_eq!(cli.code(), 5);
    let mut cli = Cli::spawn_url("http://x", &["lock", "x", "--", "true"]);
    assert_eq!(cli.code(), 2);
}

#[test]
fn lock_lost_while_running() {
    let h = start();
    let mut c = conn(&h);
    let mut cli = Cli::spawn(&h, &["lock", "l", "--", "sh", "-c", "echo up; read x"]);
    assert_eq!(cli.out.next(), "up");
    let id = cli_client_id(&mut c);
    kill_client(&mut c, id);
    let msg = cli.err.next();
    assert!(msg.contains("lost lock \"l\""), "{msg}");
    // Without --kill-on-loss the command runs on; the exit says the lock was lost.
    assert!(cli.child.try_wait().unwrap().is_none());
    drop(cli.stdin.take());
    assert_eq!(cli.code(), 4);
}

#[test]
fn kill_on_loss_stops_the_command() {
    let h = start();
    let mut c = conn(&h);
    let args = [
        "lock",
        "--kill-on-loss",
        "l",
        "--",
        "sh",
        "-c",
        "echo up; exec sleep 30",
    ];
    let mut cli = Cli::spawn(&h, &args);
    assert_eq!(cli.out.next(), "up");
    let id = cli_client_id(&mut c);
    let t = Instant::now();
    kill_client(&mut c, id);
    assert_eq!(cli.code(), 4);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(cli.err.rest().contains("lost lock"));
}

/// A process's state letter, parent, process group and session, from
/// /proc/PID/stat; None once it is gone.
fn proc_stat(pid: impl std::fmt::Display) -> Option<(char, i32, i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    let f: Vec<&str> = rest.split(' ').collect();
    let num = |i: usize| f.get(i).and_then(|s| s.parse().ok());
    Some((f.first()?.chars().next()?, num(1)?, num(2)?, num(3)?))
}

/// Gone, or a zombie nobody has reaped yet (PID 1 in a container may not reap).
fn process_gone(pid: impl std::fmt::Display) -> bool {
    proc_stat(pid).is_none_or(|(state, ..)| state == 'Z')
}

/// The processes of group `pgid` that are neither gone nor zombies.
fn group_survivors(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| proc_stat(pid).is_some_and(|(st, _, pg, _)| pg == pgid && st != 'Z'))
        .collect()
}

/// A folder for the pids the command's shells write (one a line, file
/// `pids`) and for the marks they leave; Drop SIGKILLs every listed
/// process that is still there, so a failing test leaves nothing running.
struct Tree {
    dir: TempDir,
}

impl Tree {
    fn new(tag: &str) -> Tree {
        Tree {
            dir: TempDir::new(tag),
        }
    }

    /// A file in the folder.
    fn file(&self, name: &str) -> String {
        format!("{}/{name}", self.dir.path())
    }

    fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.file("pids"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Waits until `n` pids are listed.
    fn wait_pids(&self, n: usize) -> Vec<i32> {
        wait_for(&format!("{n} pids"), || self.pids().len() >= n);
        self.pids()
    }

    fn mark(&self) -> String {
        std::fs::read_to_string(self.file("mark")).unwrap_or_default()
    }

    /// Listed processes still running (zombies are not).
    fn survivors(&self) -> Vec<i32> {
        self.pids()
            .into_iter()
            .filter(|&p| !process_gone(p))
            .collect()
    }

    /// Asserts that nothing of the tree runs: no listed process, and no
    /// process of the group `pgid` (COMMAND's).
    fn assert_gone(&self, pgid: i32) {
        assert_eq!(self.survivors(), [0; 0], "listed processes left running");
        assert_eq!(group_survivors(pgid), [0; 0], "group {pgid} left running");
    }

    /// Waits until nothing of the tree runs.
    fn wait_gone(&self, pgid: i32) {
        wait_for("the whole tree to end", || {
            self.survivors().is_empty() && group_survivors(pgid).is_empty()
        });
    }

    /// A background `sleep 30`, listed.
    fn sleeper(&self) -> String {
        format!("sleep 30 & echo $! >> {};", self.file("pids"))
    }

    /// A background shell that traps SIGTERM and SIGHUP (it writes their
    /// names to `mark` and goes on), so only SIGKILL ends it; it lists its
    /// pid once its traps are set.
    fn trapper(&self) -> String {
        let (pids, mark) = (self.file("pids"), self.file("mark"));
        format!(
            "sh -c 'trap \"echo TERM >> {mark}\" TERM; trap \"echo HUP >> {mark}\" HUP; \
             echo $$ >> {pids}; while :; do sleep 0.05; done' &"
        )
    }

    /// A shell COMMAND that starts a background `sleep`, a trapper and a
    /// foreground grandchild (`exec sleep 30`), listing all four pids, its
    /// own first.
    fn script(&self) -> String {
        let pids = self.file("pids");
        format!(
            "echo $$ >> {pids}; {} {}\n\
             sh -c 'echo $$ >> {pids}; exec sleep 30'",
            self.sleeper(),
            self.trapper()
        )
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        for pid in self.survivors() {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// The guardian `latchkey lock` started (a child running `__guardian`).
fn guardian_of(latchkey: i32) -> i32 {
    let mut found = None;
    wait_for("the guardian", || {
        found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let guardian = cmdline.split(|&b| b == 0).nth(1) == Some(b"__guardian");
            (guardian && proc_stat(pid)?.1 == latchkey).then_some(pid)
        });
        found.is_some()
    });
    found.unwrap()
}

/// latchkey dying (SIGKILL) releases the lock, so COMMAND dies with it by
/// default (as under flock(1)), with --kill-on-loss too; only
/// --let-command-outlive lets it run on.
#[test]
fn command_dies_with_latchkey_unless_told_otherwise() {
    let h = start();
    let mut c = conn(&h);
    for flag in ["--timeout=10s", "--kill-on-loss", "--let-command-outlive"] {
        let args = [
            "lock",
            flag,
            "l",
            "--",
            "sh",
            "-c",
            "echo $$; exec sleep 30",
        ];
        let mut cli = Cli::spawn(&h, &args);
        let pid = cli.out.next();
        assert!(!process_gone(&pid));
        cli.signal(libc::SIGKILL); // latchkey only, not its process group
        cli.wait();
        wait_for("the lock to be released", || !exists(&mut c, "l"));
        if flag == "--let-command-outlive" {
            std::thread::sleep(Duration::from_millis(200));
            assert!(!process_gone(&pid), "the command runs on");
            unsafe { libc::kill(pid.parse().unwrap(), libc::SIGKILL) };
        } else {
            wait_for("the command to die with latchkey", || process_gone(&pid));
        }
    }
}

/// A server, a connection to it and a `Tree`: where the tree tests start.
fn tree_setup(tag: &str) -> (ServerHandle, redis::Connection, Tree) {
    let h = start();
    let c = conn(&h);
    (h, c, Tree::new(tag))
}

/// `lock FLAGS... l -- sh -c SCRIPT`
fn lock_sh<'a>(flags: &[&'a str], script: &'a str) -> Vec<&'a str> {
    let mut args = vec!["lock"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["l", "--", "sh", "-c", script]);
    args
}

/// latchkey killed by SIGKILL, alone or with its whole process group (as
/// `kill -9 -- -PGID` does): its guardian, in a session of its own, kills
/// COMMAND's group, so no process of the tree runs on without the lock;
/// the guardian exits too.
#[test]
fn a_killed_latchkey_takes_everything_the_command_started() {
    let h = start();
    let mut c = conn(&h);
    for whole_group in [false, true] {
        let tree = Tree::new("killed");
        let script = tree.script();
        let cli = Cli::spawn(&h, &lock_sh(&[], &script));
        let pids = tree.wait_pids(4);
        let group = pids[0];
        assert_eq!(tree.survivors().len(), 4);
        // COMMAND leads a group of its own; the guardian is in a session of
        // its own, apart from both groups.
        let (_, _, cmd_group, session) = proc_stat(group).unwrap();
        assert_eq!(cmd_group, group);
        assert_ne!(cmd_group, cli.pid());
        let guardian = guardian_of(cli.pid());
        let (_, _, guardian_group, guardian_session) = proc_stat(guardian).unwrap();
        assert_eq!((guardian_group, guardian_session), (guardian, guardian));
        assert_ne!(guardian_session, session);
        if whole_group {
            cli.kill_group();
        } else {
            cli.signal(libc::SIGKILL);
        }
        tree.wait_gone(group);
        wait_for("the guardian to exit", || process_gone(guardian));
        wait_for("the lock to be released", || !exists(&mut c, "l"));
        drop(cli);
    }
}

/// --kill-on-loss: the whole tree gets SIGTERM when the lock goes (here by
/// FLUSHALL), and what survives it (a trapper) SIGKILL after --kill-grace;
/// latchkey exits only once nothing of it runs.
#[test]
fn kill_on_loss_ends_the_whole_tree() {
    let (h, mut c, tree) = tree_setup("loss");
    let script = tree.script();
    let flags = ["--kill-on-loss", "--kill-grace", "300ms"];
    let mut cli = Cli::spawn(&h, &lock_sh(&flags, &script));
    let group = tree.wait_pids(4)[0];
    let t = Instant::now();
    redis::cmd("FLUSHALL").query::<()>(&mut c).unwrap();
    assert_eq!(cli.code(), 4);
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    tree.assert_gone(group);
    assert!(
        tree.mark().contains("TERM"),
        "the trapper got SIGTERM first"
    );
    cli.said("lost lock");
}

/// COMMAND exits and leaves processes running in its group: they get
/// SIGTERM, then SIGKILL after --kill-grace, and the lock is released only
/// once they are gone; the exit status is COMMAND's.
#[test]
fn what_the_command_leaves_running_is_ended_before_the_release() {
    let (h, mut c, tree) = tree_setup("left");
    let pids = tree.file("pids");
    let script = format!(
        "{} {}\n\
         i=0; while [ $(wc -l < {pids}) -lt 2 ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done\n\
         echo $$ >> {pids}; exit 3",
        tree.sleeper(),
        tree.trapper()
    );
    let mut cli = Cli::spawn(&h, &lock_sh(&["--kill-grace", "500ms"], &script));
    let group = tree.wait_pids(3)[2];
    wait_for("the trapper's SIGTERM", || tree.mark().contains("TERM"));
    assert!(exists(&mut c, "l"), "held while the trapper runs");
    assert!(!tree.survivors().is_empty());
    wait_for("the lock to be released", || !exists(&mut c, "l"));
    tree.assert_gone(group);
    assert_eq!(cli.code(), 3);
    cli.said("left processes");
}

/// --let-command-outlive: what COMMAND leaves running runs on, and the
/// lock is released at once.
#[test]
fn let_command_outlive_leaves_the_group_running() {
    let (h, mut c, tree) = tree_setup("outlive");
    let script = format!("{} exit 0", tree.sleeper());
    let (code, _, err) = run(&h, &lock_sh(&["--let-command-outlive"], &script));
    assert_eq!(code, 0, "{err}");
    assert!(!exists(&mut c, "l"));
    assert_eq!(tree.survivors(), tree.wait_pids(1), "the sleep runs on");
}

/// Signals passed on go to COMMAND's whole group: a SIGHUP reaches the
/// trapper too; COMMAND dies of it, the rest is ended, and latchkey dies
/// of SIGHUP once the lock is released.
#[test]
fn passed_on_signals_reach_the_whole_group() {
    let (h, mut c, tree) = tree_setup("hup");
    let script = tree.script();
    let mut cli = Cli::spawn(&h, &lock_sh(&["--kill-grace", "200ms"], &script));
    let group = tree.wait_pids(4)[0];
    cli.signal(libc::SIGHUP);
    assert_eq!(killed_by(cli.wait()), Some(libc::SIGHUP));
    assert!(tree.mark().contains("HUP"), "{}", tree.mark());
    tree.assert_gone(group);
    assert!(!exists(&mut c, "l"));
}

/// An interactive bash (job control on) on a pseudo-terminal of its own,
/// as a user's terminal runs it: the test types and reads the screen.
/// Drop SIGKILLs bash and every job's process group it was told of.
struct Pty {
    master: std::fs::File,
    shell: Child,
    screen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    /// How much of the screen `expect` has consumed.
    seen: usize,
    jobs: Vec<i32>,
}

impl Pty {
    fn bash(h: &ServerHandle) -> Pty {
        use std::os::fd::FromRawFd;
        // SAFETY (test): a new pty master, unlocked; its slave opened by name.
        let (master, slave) = unsafe {
            let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            assert!(m >= 0, "posix_openpt");
            assert_eq!(libc::grantpt(m), 0);
            assert_eq!(libc::unlockpt(m), 0);
            let mut name = [0 as libc::c_char; 128];
            assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
            let s = libc::open(
                name.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            assert!(s >= 0, "open the pty's slave");
            (std::fs::File::from_raw_fd(m), std::fs::File::from_raw_fd(s))
        };
        let mut cmd = Command::new("bash");
        cmd.args(["--norc", "--noprofile", "--noediting", "-i"])
            .env("PS1", "$ ")
            .env("TERM", "dumb")
            .env("HISTFILE", "/dev/null")
            .env("LATCHKEY_URL", url(h))
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave);
        // SAFETY: setsid and ioctl are async-signal-safe: bash leads a new
        // session whose controlling terminal is the pty.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let shell = cmd.spawn().expect("spawn bash");
        let screen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (mut r, sink) = (master.try_clone().unwrap(), screen.clone());
        // Ends when the pty closes (EIO once bash and its jobs are gone).
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut r, &mut buf) {
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let mut pty = Pty {
            master,
            shell,
            screen,
            seen: 0,
            jobs: Vec::new(),
        };
        pty.send("echo ready-$((6*7))\n");
        pty.expect("ready-42");
        pty
    }

    fn send(&mut self, text: &str) {
        self.master.write_all(text.as_bytes()).unwrap();
    }

    /// Waits until `text` shows on the screen after what was seen so far.
    fn expect(&mut self, text: &str) {
        let mut at = None;
        let end = Instant::now() + WAIT;
        while at.is_none() {
            let screen = self.screen.lock().unwrap();
            let rest = String::from_utf8_lossy(&screen[self.seen..]);
            at = rest.find(text).map(|i| self.seen + i + text.len());
            assert!(
                at.is_some() || Instant::now() < end,
                "timed out waiting for {text:?} on the screen: {rest:?}"
            );
            drop(screen);
            std::thread::sleep(Duration::from_millis(5));
        }
        self.seen = at.unwrap();
    }

    /// The terminal's foreground process group.
    fn foreground(&self) -> i32 {
        use std::os::fd::AsRawFd;
        unsafe { libc::tcgetpgrp(self.master.as_raw_fd()) }
    }

    fn shell_pid(&self) -> i32 {
        self.shell.id() as i32
    }

    /// Waits until `pid` is latchkey's COMMAND (or a process in its group)
    /// and latchkey's job is known; returns latchkey's pid.
    fn latchkey_above(&mut self, command: i32) -> i32 {
        let latchkey = proc_stat(command).expect("the command runs").1;
        let (_, _, job, _) = proc_stat(latchkey).expect("latchkey runs");
        self.jobs.push(job);
        latchkey
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        for job in &self.jobs {
            unsafe { libc::kill(-job, libc::SIGKILL) };
        }
        unsafe { libc::kill(-self.shell_pid(), libc::SIGKILL) };
        let _ = self.shell.wait();
    }
}

fn state(pid: i32) -> char {
    proc_stat(pid).map_or('-', |(st, ..)| st)
}

/// Under a terminal COMMAND's group is the foreground job: it reads the
/// terminal, Ctrl-Z stops it and latchkey (the shell sees the job
/// stopped), `fg` resumes both and gives the terminal back to COMMAND,
/// Ctrl-C reaches it, and latchkey dies of SIGINT after the release.
#[test]
fn job_control_under_a_terminal() {
    let (h, mut c, tree) = tree_setup("tty");
    let pids = tree.file("pids");
    let mut pty = Pty::bash(&h);
    let script =
        format!("echo $$ >> {pids}; read x; echo got-$x; sleep 30 & echo $! >> {pids}; wait");
    pty.send(&format!("{BIN} lock l -- sh -c '{script}'\n"));
    let command = tree.wait_pids(1)[0];
    let latchkey = pty.latchkey_above(command);
    wait_for("COMMAND's group in the foreground", || {
        pty.foreground() == command
    });
    pty.send("hello\n");
    pty.expect("got-hello");
    let sleep = tree.wait_pids(2)[1];

    pty.send("\x1a"); // Ctrl-Z
    wait_for("all three stopped", || {
        [latchkey, command, sleep].iter().all(|&p| state(p) == 'T')
    });
    pty.expect("Stopped");
    let shell = pty.shell_pid();
    wait_for("the shell in the foreground", || pty.foreground() == shell);
    assert!(exists(&mut c, "l"));

    pty.send("fg\n");
    wait_for("all three running and COMMAND in the foreground", || {
        [latchkey, command, sleep].iter().all(|&p| state(p) != 'T') && pty.foreground() == command
    });

    pty.send("\x03"); // Ctrl-C
    wait_for("latchkey to exit", || process_gone(latchkey));
    tree.assert_gone(command);
    assert!(!exists(&mut c, "l"));
    pty.send("echo status-$?\n");
    pty.expect("status-130");
}

/// latchkey run by a script in the foreground job: COMMAND's group takes
/// the terminal, and latchkey gives it back to the script's group when
/// COMMAND exits (else the script's `read` would stop on SIGTTIN); a
/// Ctrl-C that kills COMMAND reaches the script too, as it did when they
/// shared a group, so the script stops.
#[test]
fn the_terminal_goes_back_to_the_job_around_latchkey() {
    let h = start();
    let tree = Tree::new("tty-script");
    let pids = tree.file("pids");
    let mut pty = Pty::bash(&h);
    pty.send(&format!(
        "sh -c '{BIN} lock l -- true; read y; echo after-$y'\n"
    ));
    pty.send("z\n");
    pty.expect("after-z");
    pty.send(&format!(
        "sh -c '{BIN} lock l -- sh -c \"echo \\$\\$ >> {pids}; exec sleep 30\"; echo survived-$?'\n"
    ));
    let command = tree.wait_pids(1)[0];
    let latchkey = pty.latchkey_above(command);
    wait_for("COMMAND's group in the foreground", || {
        pty.foreground() == command
    });
    pty.send("\x03"); // Ctrl-C
    wait_for("latchkey to exit", || process_gone(latchkey));
    pty.send("echo status-$?\n");
    pty.expect("status-130");
    // The script stopped: no `survived-<status>` line (its typed-in `$?` shows).
    let screen = String::from_utf8_lossy(&pty.screen.lock().unwrap()).into_owned();
    let ran_on = screen
        .match_indices("survived-")
        .any(|(i, m)| screen[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()));
    assert!(!ran_on, "{screen}");
    tree.assert_gone(command);
}

/// A latchkey that stops (SIGSTOP: its host frozen, as far as the server
/// can tell) loses the lock after its session timeout; resumed, it finds
/// the lock lost and exits 4.
#[test]
fn a_stopped_holder_loses_the_lock_after_its_session_timeout() {
    let h = start();
    let mut c = conn(&h);
    let args = [
        "lock",
        "--session-timeout",
        "300ms",
        "--kill-on-loss",
        "l",
        "--",
        "sh",
        "-c",
        "echo up; exec sleep 30",
    ];
    let mut cli = Cli::spawn(&h, &args);
    assert_eq!(cli.out.next(), "up");
    std::thread::sleep(Duration::from_millis(500));
    assert!(exists(&mut c, "l"), "heartbeats keep the session");
    let t = Instant::now();
    cli.signal(libc::SIGSTOP);
    wait_for("the lock to be released", || !exists(&mut c, "l"));
    let took = t.elapsed();
    assert!(took < Duration::from_secs(3), "{took:?}");
    cli.signal(libc::SIGCONT);
    assert_eq!(cli.code(), 4);
    assert!(cli.err.rest().contains("lost lock"));
}

#[test]
fn lease_expiry_counts_as_loss() {
    let h = start();
    let mut c = conn(&h);
    let args = [
        "lock",
        "--lease",
        "200ms",
        "--kill-on-loss",
        "l",
        "--",
        "sleep",
        "30",
    ];
    let t = Instant::now();
    let mut cli = Cli::spawn(&h, &args);
    assert_eq!(cli.code(), 4);
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(200), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let err = cli.err.rest();
    assert!(
        err.contains("lease ran out") || err.contains("expired"),
        "{err}"
    );
    assert!(!exists(&mut c, "l"));
}

#[test]
fn signals_are_forwarded_and_the_lock_released_after() {
    let h = start();
    let mut c = conn(&h);
    for (sig, code) in [(libc::SIGTERM, 9), (libc::SIGINT, 8)] {
        let script = format!(
            "trap 'echo got; exit {code}' TERM INT; echo up; \
             i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"
        );
        let mut cli = Cli::spawn(&h, &["lock", "l", "--", "sh", "-c", &script]);
        assert_eq!(cli.out.next(), "up");
        cli.signal(sig);
        assert_eq!(cli.out.next(), "got");
        assert_eq!(cli.code(), code);
        assert!(!exists(&mut c, "l"));
    }
    // A COMMAND that dies of the forwarded signal: the lock is released,
    // then latchkey dies of the same signal (as timeout(1) does), so a
    // shell loop around it stops.
    let mut cli = Cli::spawn(
        &h,
        &["lock", "l", "--", "sh", "-c", "echo up; exec sleep 30"],
    );
    assert_eq!(cli.out.next(), "up");
    cli.signal(libc::SIGTERM);
    assert_eq!(killed_by(cli.wait()), Some(libc::SIGTERM));
    assert!(!exists(&mut c, "l"));
}

/// `<RFC 3339 ms UTC> <key> <event>`
fn split_event(line: &str) -> (String, String) {
    let mut it = line.split(' ');
    let ts = it.next().unwrap();
    assert_eq!(ts.len(), 24, "{line}");
    assert!(ts.ends_with('Z') && ts.as_bytes()[10] == b'T' && ts.as_bytes()[19] == b'.');
    let key = it.next().unwrap().to_string();
    let ev = it.next().unwrap().to_string();
    assert!(it.next().is_none(), "{line}");
    (key, ev)
}

#[test]
fn watch_prints_states_and_changes() {
    let h = start();
    let mut c = conn(&h);
    redis::cmd("SET")
        .arg("b")
        .arg("1")
        .query::<()>(&mut c)
        .unwrap();
    let mut cli = Cli::spawn(&h, &["watch", "a", "b"]);
    let mut first = [split_event(&cli.out.next()), split_event(&cli.out.next())];
    first.sort();
    let s = |k: &str, e: &str| (k.to_string(), e.to_string());
    assert_eq!(first, [s("a", "NOEXIST"), s("b", "EXIST")]);

    redis::cmd("SET")
        .arg("a")
        .arg("1")
        .query::<()>(&mut c)
        .unwrap();
    assert_eq!(split_event(&cli.out.next()), s("a", "ADD"));
    redis::cmd("DEL")
        .arg("a")
        .arg("b")
        .query::<()>(&mut c)
        .unwrap();
    let mut two = [split_event(&cli.out.next()), split_event(&cli.out.next())];
    two.sort();
    assert_eq!(two, [s("a", "DEL"), s("b", "DEL")]);
    // A bound key goes with its connection.
    {
        let mut holder = conn(&h);
        redis::cmd("SETTP")
            .arg("a")
            .arg("x")
            .query::<()>(&mut holder)
            .unwrap();
        assert_eq!(split_event(&cli.out.next()), s("a", "ADD"));
    }
    assert_eq!(split_event(&cli.out.next()), s("a", "DEL"));

    cli.signal(libc::SIGINT);
    assert_eq!(cli.code(), 0);
}

#[test]
fn watch_reports_disconnect() {
    let h = start();
    let mut c = conn(&h);
    let mut cli = Cli::spawn(&h, &["watch", "k"]);
    assert_eq!(split_event(&cli.out.next()).1, "NOEXIST");
    let id = cli_client_id(&mut c);
    kill_client(&mut c, id);
    assert_eq!(split_event(&cli.out.next()).1, "DISCONNECTED");
    assert_eq!(cli.code(), 5);
}

/// The issue's requirement: a holder process killed with SIGKILL, and the
/// next waiter acquiring within 50 ms. Median of 5 tries (each must be < 5 s).
#[test]
fn sigkilled_holder_hands_over_quickly() {
    let h = start();
    let mut c = conn(&h);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let waiter = rt.block_on(latchkey::Client::connect(&url(&h))).unwrap();
    let mut took = Vec::new();
    for _ in 0..5 {
        let cli = Cli::spawn(&h, &["lock", "hk", "--", "sleep", "30"]);
        wait_for("the CLI to hold the lock", || exists(&mut c, "hk"));
        let w = waiter.clone();
        let acquire = rt.spawn(async move {
            let g = w.lock_timeout("hk", WAIT).await;
            (Instant::now(), g)
        });
        // Let the waiter find the lock taken and start watching.
        std::thread::sleep(Duration::from_millis(50));
        assert!(!acquire.is_finished());
        let killed = Instant::now();
        cli.kill_group(); // the CLI and its `sleep`, both by SIGKILL
        let (got, guard) = rt.block_on(acquire).unwrap();
        let guard = guard.expect("waiter acquires");
        took.push(got.duration_since(killed));
        assert!(rt.block_on(guard.unlock()).unwrap());
        drop(cli);
    }
    println!("SIGKILL of holder -> next waiter holds the lock: {took:?}");
    assert!(took.iter().all(|d| *d < Duration::from_secs(5)), "{took:?}");
    took.sort();
    assert!(took[2] < Duration::from_millis(50), "median {:?}", took[2]);
}

#[test]
fn help_shows_usage_examples_and_exit_codes() {
    for args in [&["--help"][..], &["lock", "--help"][..]] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Usage: latchkey"), "{text}");
        if args.len() == 1 {
            assert!(
                text.contains("latchkey lock deploy -- ./deploy.sh"),
                "{text}"
            );
            assert!(text.contains("Exit codes:"), "{text}");
            assert!(text.contains("latchkey watch"), "{text}");
        } else {
            for flag in ["--timeout", "--lease", "--fair", "--kill-on-loss"] {
                assert!(text.contains(flag), "{flag} in {text}");
            }
        }
    }
    // A usage error is exit status 2, as the help says.
    let out = Command::new(BIN).args(["lock"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// The shipped examples, built by `cargo test` next to this test's binary,
/// run against an in-process server and must succeed (exactly 3200 locked
/// increments; nothing oversold).
#[test]
fn examples_counter_and_stock_succeed() {
    let h = start();
    let dir = std::env::current_exe().unwrap();
    let examples = dir.parent().unwrap().parent().unwrap().join("examples");
    for name in ["counter", "stock"] {
        let path = examples.join(name);
        assert!(path.exists(), "{} not built", path.display());
        let mut child = Command::new(&path)
            .args(["--url", &url(&h)])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let end = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > end {
                let _ = child.kill();
                panic!("example {name} ran over 60 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            status.success(),
            "{name}: {status}\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if name == "counter" {
            assert!(text.contains("counter = 3200 (want 3200)"), "{text}");
        }
    }
}

/// Two CLIs holding `name` with `flags` until told to finish.
fn two_holders(h: &ServerHandle, flags: &[&str], name: &str) -> [Cli; 2] {
    let mut args = vec!["lock"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[name, "--", "sh", "-c", "echo up; read x"]);
    let mut both = [Cli::spawn(h, &args), Cli::spawn(h, &args)];
    for c in &mut both {
        assert_eq!(c.out.next(), "up");
    }
    both
}

/// Lets a holder from `two_holders` finish; it exits 0.
fn finish(c: &mut Cli) {
    writeln!(c.stdin.as_mut().unwrap()).unwrap();
    assert_eq!(c.code(), 0);
}

/// Runs `latchkey lock FLAGS --timeout T NAME -- true`; its exit code.
fn try_for(h: &ServerHandle, flags: &[&str], t: &str, name: &str) -> i32 {
    let mut args = vec!["lock"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--timeout", t, name, "--", "true"]);
    run(h, &args).0
}

/// --read holders share the lock while a writer waits; --permits N admits
/// N holders at once.
#[test]
fn readers_share_and_permits_admit_n() {
    let h = start();
    let mut c = conn(&h);
    let [mut r1, mut r2] = two_holders(&h, &["--read"], "rw");
    assert_eq!(try_for(&h, &["--write"], "200ms", "rw"), 3);
    finish(&mut r1);
    finish(&mut r2);
    assert!(!exists(&mut c, "rw"));
    let [mut p1, mut p2] = two_holders(&h, &["--permits", "2"], "sem");
    assert_eq!(try_for(&h, &["--permits", "2"], "200ms", "sem"), 3);
    finish(&mut p1);
    assert_eq!(try_for(&h, &["--permits", "2"], "5s", "sem"), 0);
    finish(&mut p2);
    let (code, _, _) = run(&h, &["lock", "--read", "--permits", "2", "x", "--", "true"]);
    assert_eq!(code, 2);
}

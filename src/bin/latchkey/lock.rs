//! `latchkey lock NAME -- COMMAND...`: hold a lock while a child process runs.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::process::ExitStatus;
use std::time::Duration;

use futures::StreamExt;
use latchkey::client::{Client, Error, LockGuard, Options, WatchEvent};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::Instant;

use crate::code;
use crate::units::show_duration;

/// How long a child gets between SIGTERM and SIGKILL after the lock is lost.
const KILL_GRACE: Duration = Duration::from_secs(5);

pub struct LockArgs {
    pub name: String,
    pub timeout: Option<Duration>,
    pub lease: Option<Duration>,
    pub kill_on_loss: bool,
    pub let_outlive: bool,
    pub session_timeout: Option<Duration>,
    pub watch_loop: bool,
    pub mode: latchkey::client::Mode,
    pub command: Vec<OsString>,
}

/// SIGINT, SIGTERM and SIGHUP, caught so that they reach the child (and the
/// lock is released) instead of killing latchkey.
struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next caught signal's number.
    async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}

pub async fn run(url: &str, tls: latchkey::client::TlsOptions, args: LockArgs) -> i32 {
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("latchkey: cannot install signal handlers: {e}");
            return code::ERROR;
        }
    };
    let opts = Options {
        client_name: Some(crate::CLIENT_NAME.to_string()),
        heartbeat: Some(crate::HEARTBEAT),
        reconnect: None,
        session_timeout: args.session_timeout,
        tls,
        ..Options::default()
    };
    let client = tokio::select! {
        r = Client::connect_with(url, opts) => match r {
            Ok(c) => c,
            Err(e) => {
                eprintln!("latchkey: cannot connect to {url}: {e}");
                return crate::exit_for_error(&e);
            }
        },
        sig = signals.recv() => return die_by(sig),
    };

    let guard = tokio::select! {
        r = acquire(&client, &args) => match r {
            Ok(g) => g,
            Err(Error::LockTimeout { .. }) if args.timeout == Some(Duration::ZERO) => {
                eprintln!("latchkey: lock {:?} is held by another client", args.name);
                return code::LOCK_TIMEOUT;
            }
            Err(Error::LockTimeout { waited, .. }) => {
                eprintln!(
                    "latchkey: timed out after {} waiting for lock {:?}",
                    show_duration(args.timeout.unwrap_or(waited)),
                    args.name
                );
                return code::LOCK_TIMEOUT;
            }
            Err(e) => {
                eprintln!("latchkey: cannot take lock {:?}: {e}", args.name);
                return crate::exit_for_error(&e);
            }
        },
        // Nothing is held yet; if SETTP raced the signal, the key goes with
        // the connection when the process exits.
        sig = signals.recv() => return die_by(sig),
    };

    hold_and_run(&client, guard, &args, &mut signals).await
}

/// Waits for the lock: once (`--timeout 0`), up to `--timeout`, or forever.
async fn acquire(client: &Client, args: &LockArgs) -> Result<LockGuard, Error> {
    let mut b = client.lock(&args.name).mode(args.mode);
    if let Some(l) = args.lease {
        b = b.lease(l);
    }
    if args.watch_loop {
        b = b.watch_loop();
    }
    match args.timeout {
        Some(t) => b.timeout(t).await,
        None => b.await,
    }
}

async fn hold_and_run(
    client: &Client,
    guard: LockGuard,
    args: &LockArgs,
    signals: &mut Signals,
) -> i32 {
    // The guard reports a dropped connection; the watch also catches the key
    // being deleted or expiring (--lease) while the connection stays up.
    let mut watch = match client.watch_stream(&args.name).await {
        Ok(w) => Some(w),
        Err(e) => {
            eprintln!("latchkey: cannot watch lock {:?}: {e}", args.name);
            release(guard, &args.name).await;
            return crate::exit_for_error(&e);
        }
    };
    // Start COMMAND only on a lock known to be held from here on: the watch
    // reports any later change, and the key, read after it was set up,
    // still holds this guard's token (the lease may have run out, or the key
    // been deleted and re-taken, between SETTP and WATCHEX).
    if let Err(why) = still_held(client, &guard, &mut watch, &args.name).await {
        eprintln!(
            "latchkey: lost lock {:?} before the command could start: {why}",
            args.name
        );
        release(guard, &args.name).await;
        return code::LOCK_LOST;
    }
    let mut child = match spawn(args, &guard) {
        Ok(c) => c,
        Err((status, msg)) => {
            eprintln!("latchkey: {msg}");
            release(guard, &args.name).await;
            return status;
        }
    };
    let pid = child.id().map(|p| p as libc::pid_t);

    let lost = guard.lost();
    tokio::pin!(lost);
    let mut lost_why: Option<String> = None;
    let mut kill_at: Option<Instant> = None;
    let mut got_signal: Option<i32> = None;
    let status = loop {
        tokio::select! {
            st = child.wait() => break st,
            _ = &mut lost, if lost_why.is_none() => {
                lost_why = Some(guard_lost_reason(client, &guard));
            }
            ev = next_event(&mut watch), if lost_why.is_none() => match ev {
                Some(WatchEvent::Exists) | Some(WatchEvent::Added) => {}
                Some(WatchEvent::Disconnected) | None => {
                    lost_why = Some("the connection to the server was lost".into());
                }
                Some(WatchEvent::NotExists) | Some(WatchEvent::Deleted) => {
                    lost_why = Some(match guard.lost_reason() {
                        Some(r) => format!("the server ended it ({r})"),
                        None => "its key was deleted or expired".into(),
                    });
                }
            },
            sig = signals.recv() => {
                got_signal = Some(sig);
                if sig != libc::SIGINT || !child_in_terminal_foreground(pid) {
                    send(pid, sig);
                }
            }
            _ = sleep_until(kill_at), if kill_at.is_some() => {
                send(pid, libc::SIGKILL);
                kill_at = None;
            }
        }
        // Report once: dropping the watch marks the loss as handled.
        if let (Some(why), true) = (&lost_why, watch.is_some()) {
            watch = None;
            eprintln!(
                "latchkey: lost lock {:?} while the command was running: {why}",
                args.name
            );
            if args.kill_on_loss {
                send(pid, libc::SIGTERM);
                kill_at = Some(Instant::now() + KILL_GRACE);
            }
        }
    };
    drop(watch);

    // COMMAND died of the signal latchkey was sent: once the lock is
    // released, latchkey dies of it too (as timeout(1) does), so a shell
    // loop around it stops on Ctrl-C as one around flock(1) would.
    let die_with = status
        .as_ref()
        .ok()
        .and_then(std::os::unix::process::ExitStatusExt::signal)
        .filter(|s| got_signal == Some(*s));
    let status = match status {
        Ok(s) => exit_code(s),
        Err(e) => {
            eprintln!("latchkey: waiting for the command failed: {e}");
            code::ERROR
        }
    };
    if lost_why.is_some() {
        return code::LOCK_LOST;
    }
    if !guard.is_held() {
        eprintln!(
            "latchkey: lost lock {:?} while the command was running: {}",
            args.name,
            guard_lost_reason(client, &guard)
        );
        return code::LOCK_LOST;
    }
    match guard.unlock().await {
        Ok(true) => match die_with {
            Some(sig) => die_by(sig),
            None => status,
        },
        Ok(false) => {
            eprintln!(
                "latchkey: lock {:?} was no longer held when the command finished",
                args.name
            );
            code::LOCK_LOST
        }
        Err(e) => {
            eprintln!(
                "latchkey: could not release lock {:?}: {e} (the server frees it when the connection closes)",
                args.name
            );
            code::LOCK_LOST
        }
    }
}

/// Whether the lock is still this guard's, checked once the watch is up.
async fn still_held(
    client: &Client,
    guard: &LockGuard,
    watch: &mut Option<latchkey::client::WatchStream>,
    name: &str,
) -> Result<(), String> {
    match next_event(watch).await {
        Some(WatchEvent::Exists) => {}
        Some(WatchEvent::Disconnected) | None => {
            return Err("the connection to the server was lost".into())
        }
        Some(_) => return Err("its key was deleted or expired".into()),
    }
    // Its fencing token is still current (for a shared lock: one of the
    // holders' tokens).
    let check = latchkey::client::cmd("TPCHECK")
        .arg(name)
        .arg(guard.token());
    match client.query::<latchkey::client::Value>(&check).await {
        Ok(_) => {}
        Err(Error::Server(_)) => {
            return Err("its key was deleted or taken by another client".into())
        }
        Err(e) => return Err(e.to_string()),
    }
    if !guard.is_held() {
        return Err(guard_lost_reason(client, guard));
    }
    Ok(())
}

/// Why the guard counts itself lost: the server took it away, its
/// connection dropped (or its session timed out), or its lease ran out.
fn guard_lost_reason(client: &Client, guard: &LockGuard) -> String {
    if let Some(r) = guard.lost_reason() {
        format!("the server ended it ({r})")
    } else if client.is_connected() {
        "its lease ran out".into()
    } else {
        "the connection to the server was lost".into()
    }
}

/// Starts the command; on failure, the exit status a shell would give and a message.
fn spawn(args: &LockArgs, guard: &LockGuard) -> Result<Child, (i32, String)> {
    let prog = &args.command[0];
    let mut cmd = Command::new(prog);
    cmd.args(&args.command[1..])
        .env("LATCHKEY_LOCK", &args.name)
        .env("LATCHKEY_LOCK_TOKEN", guard.token().to_string())
        .env("LATCHKEY_LOCK_VALUE", guard.value());
    #[cfg(target_os = "linux")]
    if !args.let_outlive {
        set_parent_death_signal(&mut cmd);
    }
    // Any pre_exec makes std fork and execvp instead of posix_spawnp, and
    // execvp runs an executable script without a #! line with /bin/sh, as
    // shells and flock(1) do; without it, such a script would run or fail
    // depending on --kill-on-loss.
    // SAFETY: the closure does nothing.
    unsafe {
        cmd.pre_exec(|| Ok(()));
    }
    cmd.spawn().map_err(|e| {
        let shown = prog.to_string_lossy();
        match e.kind() {
            ErrorKind::NotFound => (code::NOT_FOUND, format!("{shown}: command not found")),
            ErrorKind::PermissionDenied => {
                (code::NOT_EXECUTABLE, format!("{shown}: permission denied"))
            }
            _ => (code::NOT_EXECUTABLE, format!("{shown}: {e}")),
        }
    })
}

/// latchkey dying (even by SIGKILL) loses the lock, so the child must not
/// outlive it (as under flock(1), where the child holds the lock itself),
/// unless --let-command-outlive.
#[cfg(target_os = "linux")]
fn set_parent_death_signal(cmd: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: only async-signal-safe calls (prctl, getppid, raise) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
}

async fn next_event(watch: &mut Option<latchkey::client::WatchStream>) -> Option<WatchEvent> {
    match watch {
        Some(w) => w.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn send(pid: Option<libc::pid_t>, sig: i32) {
    if let Some(pid) = pid {
        // SAFETY: plain syscall; the child is not reaped until wait() returns,
        // so the pid cannot have been reused.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// A terminal's Ctrl-C goes to its whole foreground process group: if the
/// child is in it, it has the SIGINT already and forwarding would deliver
/// it twice. Asked of the controlling terminal (/dev/tty), not of stdin,
/// which may be a pipe or file; a child that made its own group (such as
/// `timeout` or `setsid`) does not get the terminal's SIGINT, so it is
/// forwarded.
fn child_in_terminal_foreground(pid: Option<libc::pid_t>) -> bool {
    use std::os::fd::AsRawFd;
    let (Some(pid), Ok(tty)) = (pid, std::fs::File::open("/dev/tty")) else {
        return false;
    };
    // SAFETY: plain syscalls on an open fd and a child not yet reaped.
    let (fg, child) = unsafe { (libc::tcgetpgrp(tty.as_raw_fd()), libc::getpgid(pid)) };
    fg > 0 && fg == child
}

/// Ends latchkey by `sig` itself rather than exiting 128 + `sig`: a shell
/// shows the same `$?`, but also sees the signal (bash stops a loop on a
/// child killed by SIGINT). Only called with nothing held: the lock is
/// released, or never taken (a SETTP that raced the signal goes with the
/// connection). Returns 128 + `sig` if the signal somehow does not kill.
fn die_by(sig: i32) -> i32 {
    // SAFETY: resetting a disposition, unblocking and raising a signal are
    // plain syscalls; nothing is left to clean up.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    128 + sig
}

/// The status a shell would report: the exit code, or 128 + the signal.
fn exit_code(s: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => code::ERROR,
    }
}

async fn release(guard: LockGuard, name: &str) {
    if let Err(e) = guard.unlock().await {
        eprintln!("latchkey: could not release lock {name:?}: {e}");
    }
}

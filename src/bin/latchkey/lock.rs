//! `latchkey lock NAME -- COMMAND...`: hold a lock while a child process runs.
//!
//! Must not touch the server's crate: the lock is held through the client
//! (`latchkey`) alone, and COMMAND's processes are reached only through
//! `job::Job` (with the `guardian::Guardian` spawned here).

use std::ffi::OsString;
use std::time::Duration;

use futures::StreamExt;
use latchkey::{Client, Error, LockGuard, Options, WatchEvent};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::Instant;

use crate::code;
use crate::guardian::Guardian;
use crate::job::{Change, Job};
use crate::units::show_duration;

/// How long latchkey waits for processes it sent SIGKILL to (one in
/// uninterruptible sleep dies when it wakes; one it may not signal never).
const KILLED_WAIT: Duration = Duration::from_secs(5);

/// How often latchkey looks whether COMMAND's group is gone while ending it.
const GROUP_POLL: Duration = Duration::from_millis(20);

pub struct LockArgs {
    pub name: String,
    pub timeout: Option<Duration>,
    pub lease: Option<Duration>,
    pub kill_on_loss: bool,
    /// Between SIGTERM and SIGKILL, when ending COMMAND's group.
    pub kill_grace: Duration,
    pub let_outlive: bool,
    pub session_timeout: Option<Duration>,
    pub watch_loop: bool,
    pub mode: latchkey::Mode,
    pub command: Vec<OsString>,
}

/// SIGINT, SIGTERM and SIGHUP, caught so that they reach COMMAND's group
/// (and the lock is released) instead of killing latchkey.
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

pub async fn run(server: &crate::Server, args: LockArgs) -> i32 {
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
        ..Options::default()
    };
    let client = tokio::select! {
        r = server.connect(opts) => match r {
            Ok(c) => c,
            Err(e) => {
                eprintln!("latchkey: cannot connect to {}: {e}", server.url);
                return crate::exit_for_error(&e);
            }
        },
        sig = signals.recv() => return die_by(sig, false),
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
        sig = signals.recv() => return die_by(sig, false),
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
    let mut job = match spawn(args, &guard) {
        Ok(j) => j,
        Err((status, msg)) => {
            eprintln!("latchkey: {msg}");
            release(guard, &args.name).await;
            return status;
        }
    };

    let lost = guard.lost();
    tokio::pin!(lost);
    let mut lost_why: Option<String> = None;
    let mut ending = Ending::NotYet;
    let mut got_signal: Option<i32> = None;
    let ended = loop {
        tokio::select! {
            change = job.changed() => match change {
                Change::Exited(e) => break e,
                Change::Stopped(sig) => job.follow_stop(sig),
            },
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
                job.signal(sig);
            }
            _ = sleep_until(ending.kill_at()), if ending.kill_at().is_some() => {
                job.signal(libc::SIGKILL);
                ending = Ending::Killed(Instant::now() + KILLED_WAIT);
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
                job.signal(libc::SIGTERM);
                ending = Ending::KillAt(Instant::now() + args.kill_grace);
            }
        }
    };
    drop(watch);
    // COMMAND died of SIGINT or SIGQUIT while it was the terminal's
    // foreground group: taken as a Ctrl-C (or Ctrl-\), which latchkey's own
    // group would have got too, had COMMAND stayed in it.
    let from_terminal = job.has_terminal();
    job.give_back_terminal();
    // Nothing COMMAND started runs on once the lock is released (or lost).
    if !args.let_outlive {
        end_group(&job, ending, args.kill_grace, signals).await;
    }
    job.finish();

    // COMMAND died of the signal latchkey was sent: once the lock is
    // released, latchkey dies of it too (as timeout(1) does), so a shell
    // loop around it stops on Ctrl-C as one around flock(1) would. One
    // from the terminal goes to latchkey's whole group, as the terminal
    // would have sent it.
    let die_with = match ended.signal() {
        Some(s) if got_signal == Some(s) => Some((s, false)),
        Some(s) if from_terminal && (s == libc::SIGINT || s == libc::SIGQUIT) => Some((s, true)),
        _ => None,
    };
    let status = ended.status();
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
            Some((sig, group)) => die_by(sig, group),
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

/// Where ending COMMAND's process group stands.
#[derive(Clone, Copy)]
enum Ending {
    /// Nothing sent yet.
    NotYet,
    /// SIGTERM sent; SIGKILL at this instant.
    KillAt(Instant),
    /// SIGKILL sent; latchkey stops waiting for the group at this instant.
    Killed(Instant),
}

impl Ending {
    fn kill_at(self) -> Option<Instant> {
        match self {
            Ending::KillAt(t) => Some(t),
            _ => None,
        }
    }
}

/// Ends what COMMAND left running in its process group: SIGTERM, then
/// SIGKILL after `grace`, and waits until no process of it is left (a
/// process latchkey may not signal is reported and left after
/// `KILLED_WAIT`). Signals latchkey gets meanwhile are passed on.
async fn end_group(job: &Job, mut ending: Ending, grace: Duration, signals: &mut Signals) {
    loop {
        let live = job.live_members();
        if live.is_empty() {
            return;
        }
        let now = Instant::now();
        match ending {
            Ending::NotYet => {
                eprintln!(
                    "latchkey: the command left {} running in its process group: \
                     SIGTERM, then SIGKILL after {}",
                    show_pids(&live),
                    show_duration(grace)
                );
                job.signal(libc::SIGTERM);
                ending = Ending::KillAt(now + grace);
            }
            Ending::KillAt(t) if now >= t => {
                job.signal(libc::SIGKILL);
                ending = Ending::Killed(now + KILLED_WAIT);
            }
            Ending::Killed(t) if now >= t => {
                eprintln!(
                    "latchkey: {} of the command's process group did not die of SIGKILL; \
                     going on without them",
                    show_pids(&live)
                );
                return;
            }
            _ => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(GROUP_POLL) => {}
            sig = signals.recv() => job.signal(sig),
        }
    }
}

fn show_pids(pids: &[libc::pid_t]) -> String {
    let list: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
    match pids.len() {
        1 => format!("process {}", list[0]),
        _ => format!("processes {}", list.join(" ")),
    }
}

/// Whether the lock is still this guard's, checked once the watch is up.
async fn still_held(
    client: &Client,
    guard: &LockGuard,
    watch: &mut Option<latchkey::WatchStream>,
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
    let check = latchkey::cmd("TPCHECK").arg(name).arg(guard.token());
    match client.query::<latchkey::Value>(&check).await {
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

/// Starts the command under its guardian (none with --let-command-outlive);
/// on failure, the exit status a shell would give and a message.
fn spawn(args: &LockArgs, guard: &LockGuard) -> Result<Job, (i32, String)> {
    let guardian = if args.let_outlive {
        None
    } else {
        match Guardian::spawn() {
            Ok(g) => Some(g),
            Err(e) => {
                return Err((
                    code::ERROR,
                    format!("cannot start the guardian process: {e}"),
                ))
            }
        }
    };
    let mut cmd = std::process::Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("LATCHKEY_LOCK", &args.name)
        .env("LATCHKEY_LOCK_TOKEN", guard.token().to_string())
        .env("LATCHKEY_LOCK_VALUE", guard.value());
    Job::start(cmd, guardian)
}

async fn next_event(watch: &mut Option<latchkey::WatchStream>) -> Option<WatchEvent> {
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

/// Ends latchkey by `sig` itself rather than exiting 128 + `sig`: a shell
/// shows the same `$?`, but also sees the signal (bash stops a loop on a
/// child killed by SIGINT). Only called with nothing held: the lock is
/// released, or never taken (a SETTP that raced the signal goes with the
/// connection). With `whole_group`, the signal goes to latchkey's whole
/// process group, as the terminal sends it. Returns 128 + `sig` if the
/// signal somehow does not kill.
fn die_by(sig: i32, whole_group: bool) -> i32 {
    // SAFETY: resetting a disposition, unblocking and raising a signal are
    // plain syscalls; nothing is left to clean up.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        if whole_group {
            libc::kill(0, sig);
        } else {
            libc::raise(sig);
        }
    }
    128 + sig
}

async fn release(guard: LockGuard, name: &str) {
    if let Err(e) = guard.unlock().await {
        eprintln!("latchkey: could not release lock {name:?}: {e}");
    }
}

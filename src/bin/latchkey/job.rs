//! COMMAND's process group: started under the guardian, given the terminal
//! the way a shell gives it to a foreground job, waited for (stops
//! included), signalled and ended as a whole.
//!
//! COMMAND runs in a process group of its own (its pid is the group's id),
//! so everything it starts, unless it leaves the group on purpose, can be
//! signalled at once: the signals latchkey passes on, `--kill-on-loss`, the
//! clean-up when COMMAND exits, and the guardian's SIGKILL when latchkey
//! dies. COMMAND is reaped only at the very end (its exit is read with
//! WNOWAIT), so the group's id cannot be reused while latchkey may still
//! signal it.
//!
//! Must not touch the client or the lock: it knows processes, signals and
//! the terminal; when to signal or end the group is `lock`'s call.

use std::ffi::OsStr;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::code;
use crate::guardian::{self, Guardian};

/// How COMMAND ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Code(i32),
    Signal(i32),
}

impl Ended {
    /// The status a shell would report: the exit code, or 128 + the signal.
    pub fn status(self) -> i32 {
        match self {
            Ended::Code(c) => c,
            Ended::Signal(s) => 128 + s,
        }
    }

    pub fn signal(self) -> Option<i32> {
        match self {
            Ended::Signal(s) => Some(s),
            Ended::Code(_) => None,
        }
    }
}

/// What happened to COMMAND.
pub enum Change {
    Exited(Ended),
    /// Stopped by this signal (Ctrl-Z: SIGTSTP).
    Stopped(i32),
}

pub struct Job {
    /// COMMAND's pid, and its process group's id.
    pid: libc::pid_t,
    guardian: Option<Guardian>,
    tty: Option<Terminal>,
    sigchld: Signal,
    sigcont: Signal,
}

impl Job {
    /// Starts `cmd` in a process group of its own; with a guardian, COMMAND
    /// also gets PR_SET_PDEATHSIG (it covers the instant before the guardian
    /// is armed) and the guardian is armed before exec. If latchkey's group
    /// is the terminal's foreground group, COMMAND's group takes its place.
    /// On failure: the exit status a shell would give, and a message.
    pub fn start(mut cmd: Command, guardian: Option<Guardian>) -> Result<Job, (i32, String)> {
        // Listening before the child exists: no SIGCHLD is missed.
        let watch = signal(SignalKind::child())
            .and_then(|c| Ok((c, signal(SignalKind::from_raw(libc::SIGCONT))?)));
        let (sigchld, sigcont) = match watch {
            Ok(s) => s,
            Err(e) => {
                dismiss(guardian);
                return Err((code::ERROR, format!("cannot watch for SIGCHLD: {e}")));
            }
        };
        let tty = Terminal::open();
        let take = tty.as_ref().filter(|t| t.is_ours()).map(Terminal::fd);
        let arm = guardian.as_ref().map(Guardian::fd);
        let parent = guardian.as_ref().map(|_| std::process::id() as libc::pid_t);
        cmd.process_group(0);
        // Any pre_exec also makes std fork and execvp instead of
        // posix_spawnp, and execvp runs an executable script without a #!
        // line with /bin/sh, as shells and flock(1) do.
        // SAFETY: child_setup makes only async-signal-safe calls.
        unsafe {
            cmd.pre_exec(move || child_setup(parent, arm, take));
        }
        match cmd.spawn() {
            Ok(child) => Ok(Job {
                pid: child.id() as libc::pid_t,
                guardian,
                tty,
                sigchld,
                sigcont,
            }),
            Err(e) => {
                // The child may have taken the terminal before exec failed.
                if let (Some(t), Some(_)) = (&tty, take) {
                    t.give(t.own);
                }
                dismiss(guardian);
                Err(spawn_error(cmd.get_program(), e))
            }
        }
    }

    /// Sends `sig` to COMMAND's whole process group.
    pub fn signal(&self, sig: i32) {
        signal_group(self.pid, sig);
    }

    /// The next exit or stop of COMMAND itself. A SIGCONT of latchkey
    /// meanwhile continues COMMAND's group too.
    pub async fn changed(&mut self) -> Change {
        loop {
            if let Some(c) = self.poll() {
                return c;
            }
            tokio::select! {
                _ = self.sigchld.recv() => {}
                _ = self.sigcont.recv() => self.resume(),
            }
        }
    }

    fn poll(&mut self) -> Option<Change> {
        if let Some(st) = self.guardian.as_mut().and_then(Guardian::died) {
            eprintln!(
                "latchkey: the guardian process ended ({st}): if latchkey is killed now, \
                 what the command started may run on"
            );
            self.guardian = None;
        }
        // SAFETY: waitid fills the zeroed siginfo; WNOWAIT leaves COMMAND
        // unreaped, so its pid (the group's id) stays taken.
        let (r, info) = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
            let r = libc::waitid(libc::P_PID, self.pid as libc::id_t, &mut info, flags);
            (r, info)
        };
        if r != 0 {
            // Not our child any more (cannot happen unless SIGCHLD is
            // ignored): take it as a failure.
            eprintln!(
                "latchkey: waiting for the command failed: {}",
                std::io::Error::last_os_error()
            );
            return Some(Change::Exited(Ended::Code(code::ERROR)));
        }
        // SAFETY: the siginfo was filled by waitid (or is still zeroed).
        if unsafe { info.si_pid() } != 0 {
            // SAFETY: as above, for a CLD_* child report.
            let st = unsafe { info.si_status() };
            return Some(Change::Exited(match info.si_code {
                libc::CLD_EXITED => Ended::Code(st),
                _ => Ended::Signal(st),
            }));
        }
        // Stops and continues are consumed (reported once).
        loop {
            // SAFETY: as above.
            let (r, info) = unsafe {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                let flags = libc::WSTOPPED | libc::WCONTINUED | libc::WNOHANG;
                let r = libc::waitid(libc::P_PID, self.pid as libc::id_t, &mut info, flags);
                (r, info)
            };
            // SAFETY: as above.
            if r != 0 || unsafe { info.si_pid() } == 0 {
                return None;
            }
            if info.si_code == libc::CLD_STOPPED {
                // SAFETY: as above.
                return Some(Change::Stopped(unsafe { info.si_status() }));
            }
        }
    }

    /// COMMAND was stopped by `sig`. With a controlling terminal, latchkey
    /// follows as a shell's job control expects: it gives the terminal back
    /// to its own group and stops that group with the same signal (what the
    /// terminal's Ctrl-Z would have done had COMMAND shared latchkey's
    /// group), so the shell sees the job stopped; once continued (`fg`,
    /// `bg`) it gives the terminal back to COMMAND's group if its own has
    /// it, and continues COMMAND's group. SIGSTOP, sent on purpose to
    /// COMMAND, is not followed.
    pub fn follow_stop(&mut self, sig: i32) {
        let Some(t) = &self.tty else { return };
        if ![libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU].contains(&sig) {
            return;
        }
        if t.foreground() == self.pid {
            t.give(t.own);
        }
        // SAFETY: a plain syscall. Returns once latchkey is continued, or at
        // once in an orphaned process group, where the kernel drops the
        // signal (nobody could continue the group): COMMAND goes on then.
        unsafe {
            libc::kill(0, sig);
        }
        self.resume();
    }

    /// latchkey was continued (SIGCONT): if its group has the terminal,
    /// COMMAND's group gets it; COMMAND's group is continued.
    pub fn resume(&self) {
        if let Some(t) = &self.tty {
            if t.foreground() == t.own {
                t.give(self.pid);
            }
        }
        self.signal(libc::SIGCONT);
    }

    /// Whether COMMAND's group is the terminal's foreground group (a Ctrl-C
    /// reaches it, not latchkey).
    pub fn has_terminal(&self) -> bool {
        self.tty
            .as_ref()
            .is_some_and(|t| t.foreground() == self.pid)
    }

    /// Gives the terminal back to latchkey's own group if COMMAND's has it.
    pub fn give_back_terminal(&self) {
        if let (Some(t), true) = (&self.tty, self.has_terminal()) {
            t.give(t.own);
        }
    }

    /// The processes of COMMAND's group that have not exited.
    pub fn live_members(&self) -> Vec<libc::pid_t> {
        live_members(self.pid)
    }

    /// Once COMMAND has exited and its group is ended (or left to outlive
    /// latchkey): dismisses the guardian, then reaps COMMAND.
    pub fn finish(mut self) {
        dismiss(self.guardian.take());
        let mut st = 0;
        // SAFETY: reaps COMMAND, which has exited; WNOHANG never blocks.
        unsafe {
            libc::waitpid(self.pid, &mut st, libc::WNOHANG);
        }
    }
}

fn dismiss(guardian: Option<Guardian>) {
    if let Some(g) = guardian {
        g.dismiss();
    }
}

/// In COMMAND's child, between fork and exec (std has already moved it
/// into its own process group): only async-signal-safe calls.
fn child_setup(
    parent: Option<libc::pid_t>,
    arm: Option<RawFd>,
    tty: Option<RawFd>,
) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    if let Some(parent) = parent {
        // SAFETY: prctl, getppid and raise are async-signal-safe.
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // latchkey may have died before prctl took effect.
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
    if let Some(fd) = arm {
        guardian::arm_from_child(fd)?;
    }
    if let Some(fd) = tty {
        // As a shell does in both parent and child: the group is the
        // foreground one before COMMAND can read the terminal.
        // SAFETY: getpid is async-signal-safe.
        set_foreground(fd, unsafe { libc::getpid() });
    }
    Ok(())
}

/// The controlling terminal (/dev/tty: stdin may be a pipe or a file).
struct Terminal {
    tty: std::fs::File,
    /// latchkey's own process group.
    own: libc::pid_t,
}

impl Terminal {
    fn open() -> Option<Terminal> {
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .ok()?;
        // SAFETY: a plain syscall.
        let own = unsafe { libc::getpgrp() };
        Some(Terminal { tty, own })
    }

    fn fd(&self) -> RawFd {
        self.tty.as_raw_fd()
    }

    fn foreground(&self) -> libc::pid_t {
        // SAFETY: a plain syscall on an open fd.
        unsafe { libc::tcgetpgrp(self.fd()) }
    }

    /// latchkey's group is the foreground one: latchkey runs as (part of)
    /// a foreground job, so COMMAND's group should be in its place.
    fn is_ours(&self) -> bool {
        self.foreground() == self.own
    }

    fn give(&self, pgrp: libc::pid_t) {
        set_foreground(self.fd(), pgrp);
    }
}

/// tcsetpgrp with SIGTTOU blocked: called from a background group it would
/// otherwise stop the caller's group. Async-signal-safe.
fn set_foreground(fd: RawFd, pgrp: libc::pid_t) {
    // SAFETY: signal-set calls on local sets and tcsetpgrp on an open fd,
    // all async-signal-safe; the old mask is restored.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
        libc::tcsetpgrp(fd, pgrp);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

/// The exit status a shell would give for a command that could not start,
/// and a message.
fn spawn_error(prog: &OsStr, e: std::io::Error) -> (i32, String) {
    let shown = prog.to_string_lossy();
    match e.kind() {
        ErrorKind::NotFound => (code::NOT_FOUND, format!("{shown}: command not found")),
        ErrorKind::PermissionDenied => {
            (code::NOT_EXECUTABLE, format!("{shown}: permission denied"))
        }
        _ => (code::NOT_EXECUTABLE, format!("{shown}: {e}")),
    }
}

/// Sends `sig` to process group `pgid` (never to "every process" or to
/// latchkey's own group: `pgid` must be above 1).
pub fn signal_group(pgid: libc::pid_t, sig: i32) {
    if pgid > 1 {
        // SAFETY: a plain syscall.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// The processes of group `pgid` that have not exited (a zombie has: it
/// runs nothing, and nobody may be reaping it). Read from /proc; where it
/// cannot be read, the group's leader stands for a group that exists.
pub fn live_members(pgid: libc::pid_t) -> Vec<libc::pid_t> {
    if pgid <= 1 || !group_exists(pgid) {
        return Vec::new();
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![pgid];
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|&pid| {
            matches!(proc_state(pid), Some((state, pgrp))
                if pgrp == pgid && state != 'Z' && state != 'X')
        })
        .collect()
}

/// Whether any process (a zombie too) is in group `pgid`.
fn group_exists(pgid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks.
    let r = unsafe { libc::kill(-pgid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// A process's state letter and process group, from /proc/PID/stat.
fn proc_state(pid: libc::pid_t) -> Option<(char, libc::pid_t)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything, ")" too.
    let (_, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

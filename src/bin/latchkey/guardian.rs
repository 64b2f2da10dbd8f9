//! The guardian: a small process that ends COMMAND's process group when
//! latchkey dies, however it dies (SIGKILL, a kill of latchkey's whole
//! process group, a terminal's hang-up).
//!
//! latchkey runs itself again as `latchkey __guardian FD`, in a session of
//! its own (no signal meant for latchkey's process group or terminal reaches
//! it), with FD the read end of a pipe whose write end only latchkey holds:
//! it is close-on-exec, so neither the guardian nor COMMAND keeps a copy.
//! COMMAND's child, between fork and exec, writes an "arm" record with its
//! pid (its process group's id) to the pipe, so the guardian knows the group
//! before COMMAND runs a single instruction of its own. When the pipe ends
//! (latchkey is gone, and its write end with it) the guardian SIGKILLs the
//! group — the lock went with latchkey's connection, so nothing is left to
//! shut down gracefully — and exits. When latchkey has ended the group
//! itself, it writes a "dismiss" record and the guardian exits at once.
//!
//! Must not touch the network, the client or the lock: it knows processes,
//! signals and its pipe (with `job`'s group signalling).

use std::ffi::OsStr;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The hidden first argument that makes latchkey a guardian.
pub const ARG: &str = "__guardian";

/// One record on the pipe: a tag byte and a pid (native byte order); at
/// most PIPE_BUF bytes, so each write is atomic.
const RECORD: usize = 5;
/// "The group to end is this pid's."
const ARM: u8 = b'G';
/// "The group is ended: exit without killing anything."
const DISMISS: u8 = b'D';

/// How long the guardian keeps killing a group that has not gone yet (a
/// process in uninterruptible sleep dies only when it wakes).
const KILL_FOR: Duration = Duration::from_secs(2);

fn record(tag: u8, pid: libc::pid_t) -> [u8; RECORD] {
    let p = pid.to_ne_bytes();
    [tag, p[0], p[1], p[2], p[3]]
}

/// latchkey's side: the guardian process and the pipe's write end.
pub struct Guardian {
    child: Child,
    tx: std::fs::File,
}

impl Guardian {
    /// Starts the guardian. Done before COMMAND is started, so that there is
    /// no moment in which COMMAND runs unguarded.
    pub fn spawn() -> std::io::Result<Guardian> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 fills the two-element array on success.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both fds were just created and are owned by nobody else.
        let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let rx_fd = rx.as_raw_fd();
        let mut cmd = Command::new(own_exe());
        cmd.arg0("latchkey")
            .arg(ARG)
            .arg(rx_fd.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: setsid and fcntl are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                // A session (and so a process group) of its own: a kill of
                // latchkey's group, or of COMMAND's, or the terminal's
                // signals never reach it.
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The one fd it keeps across exec.
                if libc::fcntl(rx_fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        drop(rx);
        Ok(Guardian {
            child,
            tx: std::fs::File::from(tx),
        })
    }

    /// The write end, for COMMAND's child to arm the guardian with its pid
    /// between fork and exec (see [`arm_from_child`]).
    pub fn fd(&self) -> RawFd {
        self.tx.as_raw_fd()
    }

    /// The guardian's exit status if it has exited (it should be watching).
    pub fn died(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Tells the guardian that the group is ended, closes the pipe and reaps
    /// the guardian (it exits at once; the wait is bounded all the same).
    pub fn dismiss(mut self) {
        let _ = self.tx.write_all(&record(DISMISS, 0));
        drop(self.tx);
        let end = Instant::now() + Duration::from_secs(1);
        while Instant::now() < end {
            match self.child.try_wait() {
                Ok(None) => std::thread::sleep(Duration::from_millis(1)),
                _ => return,
            }
        }
    }
}

/// Called in COMMAND's child between fork and exec: writes its pid, now its
/// process group's id, to the guardian. Only async-signal-safe calls.
pub fn arm_from_child(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: getpid is async-signal-safe.
    let rec = record(ARM, unsafe { libc::getpid() });
    // SAFETY: write is async-signal-safe; the buffer is on the stack and RECORD long.
    let n = unsafe { libc::write(fd, rec.as_ptr().cast(), RECORD) };
    if n != RECORD as isize {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// This program, to run again as the guardian.
fn own_exe() -> std::path::PathBuf {
    // The running binary even if its file was replaced or removed since.
    #[cfg(target_os = "linux")]
    return "/proc/self/exe".into();
    #[cfg(not(target_os = "linux"))]
    return std::env::current_exe().unwrap_or_else(|_| "latchkey".into());
}

/// The guardian's main: `latchkey __guardian FD`. Never returns.
pub fn run(fd: Option<&OsStr>) -> ! {
    let fd: Option<RawFd> = fd.and_then(|s| s.to_str()).and_then(|s| s.parse().ok());
    let Some(fd) = fd.filter(|&fd| is_pipe(fd)) else {
        eprintln!("latchkey: {ARG} is internal to `latchkey lock`");
        std::process::exit(crate::code::USAGE);
    };
    // Only latchkey's end of the pipe may end the guardian's watch.
    for sig in [
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
    ] {
        // SAFETY: setting a signal's disposition to SIG_IGN.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    // SAFETY: the fd is open (it is a pipe) and nothing else in this process uses it.
    let mut rx = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut group = None;
    let mut rec = [0u8; RECORD];
    loop {
        match rx.read_exact(&mut rec) {
            Ok(()) if rec[0] == ARM => {
                group = Some(libc::pid_t::from_ne_bytes([rec[1], rec[2], rec[3], rec[4]]))
            }
            Ok(()) if rec[0] == DISMISS => std::process::exit(0),
            Ok(()) => {}
            // End of file (or a record cut short by latchkey's death):
            // latchkey is gone.
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => break,
            Err(_) => break,
        }
    }
    if let Some(pgid) = group.filter(|&g| g > 1) {
        kill_group(pgid);
    }
    std::process::exit(0);
}

/// SIGKILLs the group until no live process is left in it (bounded).
fn kill_group(pgid: libc::pid_t) {
    let end = Instant::now() + KILL_FOR;
    loop {
        crate::job::signal_group(pgid, libc::SIGKILL);
        if crate::job::live_members(pgid).is_empty() || Instant::now() >= end {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn is_pipe(fd: RawFd) -> bool {
    // SAFETY: fstat only writes into the zeroed struct.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFIFO
    }
}

//! Redis's log conventions for the server binary: every tracing event of
//! this crate becomes one line `pid:role dd Mon yyyy hh:mm:ss.mmm <c> msg`
//! (`c`: `.` debug, `-` verbose, `*` notice, `#` warning), written to
//! `logfile` (opened in append mode for each line, as Redis does, so a
//! rotated file is followed; "" = stdout) and, with `syslog-enabled`, to
//! syslog under `syslog-ident`/`syslog-facility`. The level filter is the
//! server's `LogLevel` handle, so CONFIG SET loglevel applies at once.
//!
//! Levels: TRACE = debug, DEBUG = verbose, INFO = notice, WARN and ERROR =
//! warning. Role: `C` until the server is initialised (`set_role`), then
//! `M`, or `S` while the server is a replica (`set_replica`, told by the
//! replication state at REPLICAOF host port / NO ONE), as Redis's
//! `pid != server.pid ? 'C' : (server.masterhost ? 'S' : 'M')`.
//!
//! Owns only the process-wide log sink and subscriber. Must not touch keys,
//! connections or the configuration (it is handed the values it needs).

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::OnceLock;

use tracing_subscriber::prelude::*;

use crate::config::LogLevel;

/// Redis's LOG_MAX_LEN: longer messages are cut.
const LOG_MAX_LEN: usize = 1024;

/// Where lines go: set once by `init`.
struct Sink {
    /// "" = stdout.
    logfile: String,
    syslog: bool,
    level: LogLevel,
}

static SINK: OnceLock<Sink> = OnceLock::new();
static ROLE: AtomicU8 = AtomicU8::new(b'C');
/// Whether a master is set (Redis's `server.masterhost`).
static REPLICA: AtomicBool = AtomicBool::new(false);

/// The level character of a tracing level.
pub fn level_char(level: &tracing::Level) -> char {
    match *level {
        tracing::Level::TRACE => '.',
        tracing::Level::DEBUG => '-',
        tracing::Level::INFO => '*',
        _ => '#',
    }
}

/// The role character of later lines: `M` once the server is initialised.
pub fn set_role(role: u8) {
    ROLE.store(role, Ordering::Relaxed);
}

/// Whether the server follows a master: its lines say `S` instead of
/// `M` from now on.
pub fn set_replica(on: bool) {
    REPLICA.store(on, Ordering::Relaxed);
}

/// The role character of a line: `C` before initialisation, then `S` on
/// a replica and `M` on a primary.
pub fn role_char() -> char {
    match ROLE.load(Ordering::Relaxed) {
        b'M' if REPLICA.load(Ordering::Relaxed) => 'S',
        r => r as char,
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// `dd Mon yyyy hh:mm:ss.mmm` in local time, as Redis's `strftime("%d %b
/// %Y %H:%M:%S.")` plus milliseconds.
pub fn timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`, which lives on our stack.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    unsafe { libc::localtime_r(&secs, &mut tm) };
    format!(
        "{:02} {} {} {:02}:{:02}:{:02}.{:03}",
        tm.tm_mday,
        MONTHS[tm.tm_mon.clamp(0, 11) as usize],
        tm.tm_year + 1900,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        now.subsec_millis()
    )
}

/// One log line without its newline.
pub fn format_line(pid: u32, role: char, time: &str, level: char, msg: &str) -> String {
    format!("{pid}:{role} {time} {level} {msg}")
}

/// `msg` cut to Redis's LOG_MAX_LEN - 1 bytes, on a char boundary.
fn truncate(msg: &str) -> &str {
    if msg.len() < LOG_MAX_LEN {
        return msg;
    }
    let mut end = LOG_MAX_LEN - 1;
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    &msg[..end]
}

fn write_out(logfile: &str, text: &str) {
    if logfile.is_empty() {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    } else if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(logfile)
    {
        // One write per line, so concurrent lines never interleave.
        let _ = f.write_all(text.as_bytes());
    }
}

/// syslog(3) priority of a tracing level (Redis's syslogLevelMap).
fn syslog_priority(level: &tracing::Level) -> libc::c_int {
    match *level {
        tracing::Level::TRACE => libc::LOG_DEBUG,
        tracing::Level::DEBUG => libc::LOG_INFO,
        tracing::Level::INFO => libc::LOG_NOTICE,
        _ => libc::LOG_WARNING,
    }
}

fn to_syslog(level: &tracing::Level, msg: &str) {
    let Ok(c) = std::ffi::CString::new(msg.replace('\0', " ")) else {
        return;
    };
    // SAFETY: both pointers are NUL-terminated strings alive for the call;
    // the "%s" format takes exactly the one argument given.
    unsafe { libc::syslog(syslog_priority(level), c"%s".as_ptr(), c.as_ptr()) };
}

/// Logs `msg` at `level` through the sink, as `serverLog` does.
fn log(sink: &Sink, level: &tracing::Level, msg: &str) {
    let msg = truncate(msg);
    let role = role_char();
    let mut line = format_line(
        std::process::id(),
        role,
        &timestamp(),
        level_char(level),
        msg,
    );
    line.push('\n');
    write_out(&sink.logfile, &line);
    if sink.syslog {
        to_syslog(level, msg);
    }
}

/// Text written as it is (Redis's LL_RAW: the ASCII-art banner), at
/// notice level.
pub fn raw(text: &str) {
    if let Some(sink) = SINK.get() {
        if sink.level.enabled(&tracing::Level::INFO) {
            write_out(&sink.logfile, text);
            if sink.syslog {
                to_syslog(&tracing::Level::INFO, text);
            }
        }
    }
}

/// A line in Redis's signal-handler form, `pid:signal-handler (unix time)
/// msg`, at warning level (what Redis logs on SIGTERM and SIGINT).
pub fn from_signal_handler(msg: &str) {
    if let Some(sink) = SINK.get() {
        if sink.level.enabled(&tracing::Level::WARN) {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            let line = format!("{}:signal-handler ({secs}) {msg}\n", std::process::id());
            write_out(&sink.logfile, &line);
        }
    }
}

/// The `message` field of an event.
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        }
    }
}

/// The layer that writes this crate's events through the sink, filtered
/// by the server's level.
struct RedisLines(LogLevel);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for RedisLines {
    /// `sometimes`, never cached as always/never: the level changes at
    /// run time (CONFIG SET loglevel), so `enabled` decides each time.
    fn register_callsite(
        &self,
        m: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if ours(m.target()) {
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn enabled(
        &self,
        m: &tracing::Metadata<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        ours(m.target()) && self.0.enabled(m.level())
    }

    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let Some(sink) = SINK.get() else {
            return;
        };
        let mut m = Message(String::new());
        event.record(&mut m);
        log(sink, event.metadata().level(), &m.0);
    }
}

/// Whether an event of `target` is one of this server's (not a
/// dependency's, which Redis would not log either).
fn ours(target: &str) -> bool {
    target.starts_with("latchkey") || target == "lua"
}

/// The `syslog-facility` name's value (Redis's syslog_facility enum).
fn facility(name: &str) -> libc::c_int {
    match name {
        "user" => libc::LOG_USER,
        "local1" => libc::LOG_LOCAL1,
        "local2" => libc::LOG_LOCAL2,
        "local3" => libc::LOG_LOCAL3,
        "local4" => libc::LOG_LOCAL4,
        "local5" => libc::LOG_LOCAL5,
        "local6" => libc::LOG_LOCAL6,
        "local7" => libc::LOG_LOCAL7,
        _ => libc::LOG_LOCAL0,
    }
}

/// What `init` needs of the configuration.
pub struct Options<'a> {
    pub logfile: &'a str,
    pub syslog_enabled: bool,
    pub syslog_ident: &'a str,
    pub syslog_facility: &'a str,
    pub level: LogLevel,
}

/// Installs the process-wide subscriber (once; later calls change
/// nothing) and, with syslog, opens it as Redis does (`LOG_PID |
/// LOG_NDELAY | LOG_NOWAIT`).
pub fn init(o: Options<'_>) {
    if o.syslog_enabled {
        // openlog keeps the pointer: the ident lives as long as the process.
        let ident = std::ffi::CString::new(o.syslog_ident.replace('\0', " ")).unwrap_or_default();
        let ident: &'static std::ffi::CStr = Box::leak(ident.into_boxed_c_str());
        // SAFETY: `ident` is a 'static NUL-terminated string.
        unsafe {
            libc::openlog(
                ident.as_ptr(),
                libc::LOG_PID | libc::LOG_NDELAY | libc::LOG_NOWAIT,
                facility(o.syslog_facility),
            )
        };
    }
    let level = o.level.clone();
    let set = SINK
        .set(Sink {
            logfile: o.logfile.to_string(),
            syslog: o.syslog_enabled,
            level: o.level,
        })
        .is_ok();
    if !set {
        return;
    }
    let _ = tracing_subscriber::registry()
        .with(RedisLines(level))
        .try_init();
}

/// Checks that `logfile` can be opened for appending (Redis refuses to
/// start otherwise), with strerror's wording on failure.
pub fn check_logfile(logfile: &str) -> Result<(), String> {
    if logfile.is_empty() {
        return Ok(());
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(logfile)
        .map(|_| ())
        .map_err(|e| format!("Can't open the log file: {}", strerror(&e)))
}

/// An I/O error as strerror(3) words it, without Rust's " (os error N)".
pub fn strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_shape_and_level_chars() {
        let t = timestamp();
        let line = format_line(42, 'M', &t, level_char(&tracing::Level::INFO), "hi");
        assert_eq!(line, format!("42:M {t} * hi"));
        let chars: String = [
            tracing::Level::TRACE,
            tracing::Level::DEBUG,
            tracing::Level::INFO,
            tracing::Level::WARN,
            tracing::Level::ERROR,
        ]
        .iter()
        .map(level_char)
        .collect();
        assert_eq!(chars, ".-*##");
        // dd Mon yyyy hh:mm:ss.mmm
        let parts: Vec<&str> = t.split(' ').collect();
        assert_eq!(parts.len(), 4, "{t}");
        assert_eq!(parts[0].len(), 2);
        assert!(MONTHS.contains(&parts[1]));
        assert_eq!(parts[2].len(), 4);
        assert_eq!(parts[3].len(), 12);
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let long = "é".repeat(1000);
        let cut = truncate(&long);
        assert!(cut.len() < LOG_MAX_LEN && cut.len() >= LOG_MAX_LEN - 2);
        assert_eq!(truncate("short"), "short");
    }

    #[test]
    fn strerror_drops_the_os_error_suffix() {
        let e = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(strerror(&e), "No such file or directory");
    }
}

//! `latchkey`: run a command while holding a latchkey lock, or watch keys
//! come and go. Uses the bundled client (`latchkey`).
//!
//! Must not touch the server's crate (`latchkey_server`): it talks to a
//! server only through the client. Parsing and exit codes are here; the
//! work is `lock`'s and `watch`'s.

/// `eprintln!` without its panic when stderr is gone (a closed pipe, a
/// hung-up terminal): a lost message must not abandon a running command.
macro_rules! eprintln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

mod guardian;
mod job;
mod lock;
mod units;
mod watch;

use std::ffi::OsString;
use std::time::Duration;

use clap::{Parser, Subcommand};
use latchkey::{Client, Error, Options, Sentinel};

use units::{parse_duration, parse_positive_duration};

/// Exit codes (also listed in `--help`).
pub mod code {
    /// A server error reply or another unexpected failure.
    pub const ERROR: i32 = 1;
    /// A usage error: bad arguments (clap's own code) or a bad URL.
    pub const USAGE: i32 = 2;
    /// `lock --timeout` passed without getting the lock.
    pub const LOCK_TIMEOUT: i32 = 3;
    /// The lock was lost while the command ran.
    pub const LOCK_LOST: i32 = 4;
    /// Could not connect, or the connection dropped outside a held lock.
    pub const CONNECTION: i32 = 5;
    /// The command was found but could not be executed.
    pub const NOT_EXECUTABLE: i32 = 126;
    /// The command was not found.
    pub const NOT_FOUND: i32 = 127;
}

/// The exit code for a client error.
pub fn exit_for_error(e: &Error) -> i32 {
    match e {
        Error::Io(_)
        | Error::Disconnected
        | Error::Timeout
        | Error::NoSentinel(_)
        | Error::MasterUnknown(_)
        | Error::NotMaster(_) => code::CONNECTION,
        Error::LockTimeout { .. } => code::LOCK_TIMEOUT,
        Error::Url(_) => code::USAGE,
        _ => code::ERROR,
    }
}

const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// Where `lock` and `watch` connect: the URL (one server, or the master
/// the Sentinels of a `redis-sentinel://` URL name), the TLS files, and
/// the Sentinels' own credentials.
pub struct Server {
    pub url: String,
    pub tls: latchkey::TlsOptions,
    /// `--sentinel-user` / `--sentinel-password`.
    pub sentinel_auth: Option<(Option<String>, String)>,
}

impl Server {
    fn is_sentinel(&self) -> bool {
        Sentinel::is_sentinel_url(&self.url)
    }

    /// Connects with `opts` (its TLS files replaced by ours).
    pub async fn connect(&self, opts: Options) -> Result<Client, Error> {
        let opts = Options {
            tls: self.tls.clone(),
            ..opts
        };
        if !self.is_sentinel() {
            return Client::connect_with(&self.url, opts).await;
        }
        let mut s = Sentinel::parse_url(&self.url)?;
        if let Some((user, pass)) = &self.sentinel_auth {
            s = s.sentinel_auth(user.as_deref(), pass);
        }
        Client::connect_sentinel(s, opts).await
    }
}

/// Client name shown in CLIENT LIST, so an operator can find (or kill) the CLI's connection.
pub const CLIENT_NAME: &str = "latchkey-cli";

/// PING interval: a server or network that stops answering counts as a lost
/// connection after about this long, even without a TCP reset.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

const AFTER_HELP: &str = "\
Examples:
  latchkey lock deploy -- ./deploy.sh --prod
      Wait for the lock `deploy`, run the script while holding it, release it.
  latchkey lock --timeout 10s backup -- pg_dump -f db.sql mydb
      Give up (exit 3) if the lock is not free within 10 seconds.
  latchkey lock --timeout 0 cron:report -- ./report.sh
      Run only if nobody holds the lock right now.
  latchkey lock --kill-on-loss --lease 5m job -- ./job.sh
      Stop the job if the lock is lost (connection dropped, key deleted or lease expired).
  latchkey watch deploy backup
      Print the current state of both keys and every change, until Ctrl-C.
  latchkey --url redis://:secret@10.0.0.5:6379/2 watch lock
  latchkey --url 'redis-sentinel://10.0.0.1,10.0.0.2:26380#mymaster' lock deploy -- ./deploy.sh
      Ask the Sentinels (port 26379 unless given) for the master named mymaster; with
      watch --reconnect, follow it through a failover.

Exit codes:
  lock:  the command's exit status; 128+N if it was killed by signal N
         126  the command could not be executed      127  the command was not found
           3  --timeout passed, lock not acquired      4  the lock was lost while the command ran
           5  cannot connect / connection dropped before the lock was held
           1  other error (e.g. an error reply: NOAUTH, WRONGTYPE)
         SIGINT/SIGTERM while waiting, or passed on to a COMMAND that dies of it:
                  latchkey dies of the same signal (a shell shows 130/143)
  watch: 0 after Ctrl-C/SIGTERM; 5 cannot connect or connection lost; 1 other error
  both:  2 usage error (bad arguments or URL)

The server URL comes from --url, else $LATCHKEY_URL, else redis://127.0.0.1:6379.
Through Sentinel: redis-sentinel://[[user:]pass@]host[:port][,host[:port]...][/db]#MASTER
(Lettuce's form; rediss-sentinel: TLS; user:pass are the master's, the Sentinels' own are
--sentinel-user/--sentinel-password, or $LATCHKEY_SENTINEL_PASSWORD).";

#[derive(Parser, Debug)]
#[command(
    name = "latchkey",
    version,
    about = "Run commands under a latchkey lock; watch keys appear and disappear",
    after_help = AFTER_HELP
)]
struct Cli {
    /// Server URL: redis[s]://[user:pass@]host:port[/db] (rediss: TLS), or the master named by
    /// Sentinel: redis[s]-sentinel://[user:pass@]host[:port][,host[:port]...][/db]#MASTER
    /// [default: $LATCHKEY_URL or redis://127.0.0.1:6379]
    #[arg(long, global = true, value_name = "URL")]
    url: Option<String>,

    /// With redis-sentinel://: the Sentinels' ACL user (their own, not the master's)
    #[arg(long, global = true, value_name = "USER")]
    sentinel_user: Option<String>,

    /// With redis-sentinel://: the Sentinels' password (their own, not the master's)
    /// [default: $LATCHKEY_SENTINEL_PASSWORD]
    #[arg(long, global = true, value_name = "PASS")]
    sentinel_password: Option<String>,

    /// With rediss://: CA certificate(s) to trust (PEM) [default: the system's]
    #[arg(long, global = true, value_name = "FILE")]
    cacert: Option<std::path::PathBuf>,

    /// With rediss://: client certificate (PEM), for a server that asks for one
    #[arg(long, global = true, value_name = "FILE", requires = "key")]
    cert: Option<std::path::PathBuf>,

    /// With rediss://: the client certificate's private key (PEM)
    #[arg(long, global = true, value_name = "FILE", requires = "cert")]
    key: Option<std::path::PathBuf>,

    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Take a lock, run COMMAND while holding it, release it; exit with COMMAND's status.
    ///
    /// The lock is a connection-bound key (SETTP): if this process dies or its
    /// connection drops, the server frees the lock at once. While waiting, it
    /// sleeps on a WATCHEX push instead of polling. The command gets
    /// LATCHKEY_LOCK (the name), LATCHKEY_LOCK_TOKEN (the acquisition's fencing
    /// token: a number above every one given before) and LATCHKEY_LOCK_VALUE (the
    /// random value stored in the key) in its environment. It runs in a process
    /// group of its own (the terminal's foreground group, if latchkey's was);
    /// SIGINT, SIGTERM and SIGHUP sent to latchkey are passed on to that group.
    /// When the command exits, whatever it left running in its group gets
    /// SIGTERM (SIGKILL after --kill-grace), and the lock is released once the
    /// group is gone. If latchkey dies, even by SIGKILL, a guardian process
    /// SIGKILLs the group.
    #[command(
        after_help = AFTER_HELP,
        override_usage = "latchkey lock [OPTIONS] <NAME> [--] <COMMAND>..."
    )]
    Lock {
        /// Lock name (the key that holds it)
        name: String,

        /// Give up after waiting this long (exit 3). 0 = try once. E.g. 500ms, 10s, 2m
        #[arg(long, value_name = "DUR", value_parser = parse_duration)]
        timeout: Option<Duration>,

        /// Also expire the lock key after DUR (PEXPIRE), as a second line of
        /// defence; the lock then counts as lost if the command outlives it
        #[arg(long, value_name = "DUR", value_parser = parse_positive_duration)]
        lease: Option<Duration>,

        /// When the lock is lost, send COMMAND's whole process group (the
        /// processes it started too) SIGTERM, and SIGKILL --kill-grace later if any
        /// is still running
        #[arg(long)]
        kill_on_loss: bool,

        /// Time between SIGTERM and SIGKILL when COMMAND's group is ended (lock
        /// lost with --kill-on-loss, or processes left running when COMMAND exits)
        #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "5s")]
        kill_grace: Duration,

        /// Let COMMAND's process group run on: if latchkey itself dies (by
        /// default the group is SIGKILLed with it: the lock went with latchkey's
        /// connection), and after COMMAND exits (by default what it left running
        /// is ended before the lock is released)
        #[arg(long)]
        let_command_outlive: bool,

        /// The session's liveness timeout: if the server hears nothing from
        /// latchkey for DUR (a dead host, a silent network), it releases the
        /// lock; latchkey keeps it alive with a PING every third of DUR and
        /// counts the lock lost if one goes unanswered ("0": no session)
        #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "10s")]
        session_timeout: Duration,

        /// Queue for the lock first come, first served (SETTP ... QUEUE): the
        /// default, kept for scripts that pass it
        #[arg(long, conflicts_with = "watch_loop")]
        fair: bool,

        /// Wait with the WATCHEX retry loop instead of the server's queue (no order;
        /// every release wakes every waiter)
        #[arg(long, conflicts_with_all = ["read", "permits"])]
        watch_loop: bool,

        /// Take NAME as a read-write lock's reader: shared with other --read
        /// holders, never with a writer (a plain or --write lock of NAME)
        #[arg(long, conflicts_with_all = ["write", "permits", "lease"])]
        read: bool,

        /// Take NAME as a read-write lock's writer (the default: exclusive)
        #[arg(long, conflicts_with = "permits")]
        write: bool,

        /// Take one of N permits of the counting semaphore NAME (every user of
        /// NAME must give the same N)
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "lease")]
        permits: Option<u32>,

        /// The command and its arguments (put `--` before it if it starts with `-`)
        #[arg(
            required = true,
            trailing_var_arg = true,
            value_name = "COMMAND",
            num_args = 1..
        )]
        command: Vec<OsString>,
    },

    /// Print each KEY's state, then every ADD/DEL as it happens, until Ctrl-C.
    ///
    /// One line per event: `<UTC time, RFC 3339 with ms> <key> <event>`, where the
    /// event is EXIST or NOEXIST (the state when the watch started, or again after
    /// a reconnect), ADD, DEL, or DISCONNECTED (the connection dropped).
    #[command(after_help = AFTER_HELP)]
    Watch {
        /// Keys to watch
        #[arg(required = true, num_args = 1.., value_name = "KEY")]
        keys: Vec<String>,

        /// Reconnect after a connection loss (printing DISCONNECTED, then each key's
        /// state again) instead of exiting with code 5
        #[arg(long)]
        reconnect: bool,
    },
}

fn main() {
    // `latchkey __guardian FD`: the guardian `lock` starts (see guardian.rs).
    let mut argv = std::env::args_os().skip(1);
    if argv.next().as_deref() == Some(std::ffi::OsStr::new(guardian::ARG)) {
        guardian::run(argv.next().as_deref());
    }
    let cli = Cli::parse();
    let url = cli
        .url
        .or_else(|| std::env::var("LATCHKEY_URL").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| DEFAULT_URL.to_string());
    let tls = latchkey::TlsOptions {
        ca_file: cli.cacert.clone(),
        cert_file: cli.cert.clone(),
        key_file: cli.key.clone(),
    };
    let sentinel_password = cli.sentinel_password.clone().or_else(|| {
        std::env::var("LATCHKEY_SENTINEL_PASSWORD")
            .ok()
            .filter(|p| !p.is_empty())
    });
    let server = Server {
        url,
        tls,
        sentinel_auth: sentinel_password.map(|p| (cli.sentinel_user.clone(), p)),
    };
    let usage = if (cli.sentinel_password.is_some() || cli.sentinel_user.is_some())
        && !server.is_sentinel()
    {
        Some("--sentinel-user and --sentinel-password need a redis-sentinel:// URL")
    } else if cli.sentinel_user.is_some() && server.sentinel_auth.is_none() {
        Some("--sentinel-user needs --sentinel-password (or $LATCHKEY_SENTINEL_PASSWORD)")
    } else {
        None
    };
    if let Some(msg) = usage {
        eprintln!("latchkey: {msg}");
        std::process::exit(code::USAGE);
    }
    // One thread: the tool does little work, and the command's
    // parent-death signal is tied to the thread that spawned it.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("latchkey: cannot start the runtime: {e}");
            std::process::exit(code::ERROR);
        }
    };
    let status = rt.block_on(async {
        match cli.cmd {
            Cmd::Lock {
                name,
                timeout,
                lease,
                kill_on_loss,
                kill_grace,
                let_command_outlive,
                session_timeout,
                fair: _,
                watch_loop,
                read,
                write: _,
                permits,
                command,
            } => {
                let mode = match (read, permits) {
                    (true, _) => latchkey::Mode::Shared,
                    (_, Some(n)) => latchkey::Mode::Permits(n),
                    _ => latchkey::Mode::Exclusive,
                };
                let args = lock::LockArgs {
                    name,
                    timeout,
                    lease,
                    kill_on_loss,
                    kill_grace,
                    let_outlive: let_command_outlive,
                    session_timeout: (!session_timeout.is_zero()).then_some(session_timeout),
                    watch_loop,
                    mode,
                    command,
                };
                lock::run(&server, args).await
            }
            Cmd::Watch { keys, reconnect } => watch::run(&server, keys, reconnect).await,
        }
    });
    // Do not wait for background tasks (a parked lock release, a reconnect loop).
    rt.shutdown_timeout(Duration::from_millis(100));
    std::process::exit(status);
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("latchkey").chain(args.iter().copied()))
    }

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn lock_arguments() {
        let c = parse(&["lock", "--timeout", "200ms", "n", "--", "ls", "-l", "--x"]).unwrap();
        match c.cmd {
            Cmd::Lock {
                name,
                timeout,
                command,
                kill_on_loss,
                kill_grace,
                lease,
                fair,
                watch_loop,
                let_command_outlive,
                session_timeout,
                read,
                write,
                permits,
            } => {
                assert!(!read && !write && permits.is_none());
                assert!(!watch_loop);
                assert!(!let_command_outlive);
                assert_eq!(session_timeout, Duration::from_secs(10));
                assert!(!fair);
                assert_eq!(name, "n");
                assert_eq!(timeout, Some(Duration::from_millis(200)));
                assert_eq!(command, ["ls", "-l", "--x"]);
                assert!(!kill_on_loss);
                assert_eq!(kill_grace, Duration::from_secs(5));
                assert_eq!(lease, None);
            }
            other => panic!("{other:?}"),
        }
        // Without `--`, everything after the first command word is the command's.
        let c = parse(&["lock", "n", "sh", "-c", "exit 7", "--timeout", "1"]).unwrap();
        match c.cmd {
            Cmd::Lock {
                command, timeout, ..
            } => {
                assert_eq!(command, ["sh", "-c", "exit 7", "--timeout", "1"]);
                assert_eq!(timeout, None);
            }
            other => panic!("{other:?}"),
        }
        let c = parse(&["lock", "n", "--url", "redis://x:1", "--", "true"]).unwrap();
        assert_eq!(c.url.as_deref(), Some("redis://x:1"));
        let c = parse(&[
            "--sentinel-user",
            "u",
            "--sentinel-password",
            "p",
            "watch",
            "k",
        ])
        .unwrap();
        assert_eq!(
            (c.sentinel_user.as_deref(), c.sentinel_password.as_deref()),
            (Some("u"), Some("p"))
        );
        assert!(parse(&["lock", "n"]).is_err());
        assert!(parse(&["lock", "n", "--timeout", "soon", "--", "true"]).is_err());
        assert!(parse(&["lock", "n", "--lease", "0", "--", "true"]).is_err());
        assert!(parse(&["watch"]).is_err());
        let c = parse(&["watch", "a", "b", "--reconnect"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Watch { ref keys, reconnect: true } if keys == &["a", "b"]));
    }
}

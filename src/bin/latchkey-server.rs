//! `latchkey-server [config-file] [--port N] [--bind ADDR] ... [--<directive> <args>...]`
//!
//! Like redis-server, command-line directives are appended to the config
//! file's text, so they win, and any redis.conf directive may be given as
//! `--name value`.
//!
//! Start-up and exit in Redis's order and words (`logging`, `process`):
//! config, supervision, daemonize (before any thread), the "Redis is
//! starting" lines, the pid file, the banner, "Server initialized", the
//! load, "Ready to accept connections" (and systemd's READY=1); at exit
//! the pid file is removed and "Redis is now ready to exit, bye bye...".
//!
//! Through the library's public entry points (`config`, `logging`,
//! `process`, `fdlimit`, `persist`'s loads, `runtime::serve`) only. Must
//! not touch keys, connections or command handlers itself.

use clap::Parser;
use latchkey_server::config::Config;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its first allocation (tikv-jemallocator's
/// documented way to set them in a binary). `narenas:1`: one arena for
/// every thread. Commands run on one thread; the runtime's worker and
/// blocking threads had arenas of their own (three in use), and each arena
/// in use costs every `used_memory` refresh (ten a second: the statistics
/// epoch merges each arena's, about 110,000 instructions an arena): at
/// idle 2.7M instructions a second became 1.25M (Redis 7.0.15: 1.1M), and
/// GET at pipeline 1 went from 4,664 to 4,510 instructions a request
/// (callgrind). With io-threads its workers share the arena behind their
/// thread caches (small allocations come from those without its lock).
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] = b"narenas:1\0";

#[derive(Parser, Debug)]
#[command(
    name = "latchkey-server",
    disable_version_flag = true,
    about = "Redis-compatible server with connection-bound keys and existence watches",
    after_help = "Any other redis.conf directive may be given as --<directive> <args...>."
)]
struct Args {
    /// Optional config file in redis.conf syntax.
    config_file: Option<std::path::PathBuf>,
    #[arg(long)]
    port: Option<String>,
    /// Addresses to listen on, space separated.
    #[arg(long)]
    bind: Option<String>,
    #[arg(long)]
    requirepass: Option<String>,
    #[arg(long)]
    databases: Option<String>,
    #[arg(long)]
    maxclients: Option<String>,
    /// Close a client after this many idle seconds (0 = never).
    #[arg(long)]
    timeout: Option<String>,
    #[arg(long = "tcp-keepalive")]
    tcp_keepalive: Option<String>,
    /// debug, verbose, notice or warning.
    #[arg(long)]
    loglevel: Option<String>,
}

const CLAP_OPTIONS: &[&str] = &[
    "port",
    "bind",
    "requirepass",
    "databases",
    "maxclients",
    "timeout",
    "tcp-keepalive",
    "loglevel",
];

/// Splits argv into what clap parses (the config file, --help and
/// single-valued listed options) and other `--directive args...` groups.
fn split_argv(argv: Vec<String>) -> (Vec<String>, Vec<Vec<String>>) {
    let mut for_clap = vec![argv[0].clone()];
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut i = 1;
    while i < argv.len() {
        let a = &argv[i];
        let Some(name) = a.strip_prefix("--").filter(|n| !n.is_empty()) else {
            for_clap.push(a.clone());
            i += 1;
            continue;
        };
        let mut j = i + 1;
        while j < argv.len() && !argv[j].starts_with("--") {
            j += 1;
        }
        let vals = &argv[i + 1..j];
        if name == "help" || (CLAP_OPTIONS.contains(&name) && vals.len() == 1) {
            for_clap.extend_from_slice(&argv[i..j]);
        } else {
            let mut g = vec![name.to_string()];
            g.extend_from_slice(vals);
            groups.push(g);
        }
        i = j;
    }
    (for_clap, groups)
}

/// One config line with every argument quoted like Redis's `sdscatrepr`.
fn line(name: &str, vals: &[String]) -> String {
    let mut s = name.to_string();
    for v in vals {
        s.push(' ');
        s.push_str(&latchkey_server::util::repr(v.as_bytes()));
    }
    s
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    // As redis-server: -v / --version only as the first argument.
    if argv.len() >= 2 && matches!(argv[1].as_str(), "-v" | "--version") {
        let jemalloc = tikv_jemalloc_ctl::version::read().unwrap_or("unknown");
        println!("{}", latchkey_server::process::version_line(jemalloc));
        return;
    }
    let no_arguments = argv.len() == 1;
    let argv0 = argv[0].clone();
    let (for_clap, groups) = split_argv(argv);
    let args = Args::parse_from(for_clap);
    let mut lines = Vec::new();
    let listed = [
        ("port", &args.port),
        ("bind", &args.bind),
        ("requirepass", &args.requirepass),
        ("databases", &args.databases),
        ("maxclients", &args.maxclients),
        ("timeout", &args.timeout),
        ("tcp-keepalive", &args.tcp_keepalive),
        ("loglevel", &args.loglevel),
    ];
    for (name, v) in listed {
        if let Some(v) = v {
            lines.push(line(name, std::slice::from_ref(v)));
        }
    }
    for g in &groups {
        lines.push(line(&g[0], &g[1..]));
    }
    let mut config = Config::default();
    let warnings = match config.load(args.config_file.as_deref(), &lines.join("\n")) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    // Relative log and pid files are under `dir`, where Redis (which
    // chdirs there) finds them.
    for f in [&mut config.logfile, &mut config.pidfile] {
        if !f.is_empty() && !config.dir.is_empty() {
            *f = std::path::Path::new(&config.dir)
                .join(&*f)
                .to_string_lossy()
                .into_owned();
        }
    }
    if let Err(e) = latchkey_server::logging::check_logfile(&config.logfile) {
        eprintln!(
            "\n*** FATAL CONFIG FILE ERROR (Redis {}) ***\n{e}",
            latchkey_server::version::REDIS_VERSION
        );
        std::process::exit(1);
    }
    // The filter holds this server's log level, which its store keeps at
    // the configured `loglevel` (CONFIG SET included).
    let log_level = latchkey_server::config::LogLevel::new(&config.loglevel);
    latchkey_server::logging::init(latchkey_server::logging::Options {
        logfile: &config.logfile,
        syslog_enabled: config.syslog_enabled,
        syslog_ident: &config.syslog_ident,
        syslog_facility: &config.syslog_facility,
        level: log_level.clone(),
    });
    let supervision = latchkey_server::process::supervise(&config.supervised);
    // As Redis: the mode found (auto's) is what CONFIG GET and INFO show.
    match supervision {
        latchkey_server::process::Supervision::Upstart => config.supervised = "upstart".into(),
        latchkey_server::process::Supervision::Systemd => config.supervised = "systemd".into(),
        latchkey_server::process::Supervision::None => {}
    }
    let background = config.daemonize && supervision == latchkey_server::process::Supervision::None;
    if background {
        if let Err(e) = latchkey_server::process::daemonize() {
            eprintln!("Can't daemonize: {e}");
            std::process::exit(1);
        }
    }
    tracing::warn!("oO0OoO0OoO0Oo Redis is starting oO0OoO0OoO0Oo");
    tracing::warn!(
        "Redis version={}, bits={}, commit=00000000, modified=0, pid={}, just started",
        latchkey_server::version::REDIS_VERSION,
        usize::BITS,
        std::process::id()
    );
    if no_arguments {
        tracing::warn!(
            "Warning: no config file specified, using the default config. In order to specify a config file use {argv0} /path/to/redis.conf"
        );
    } else {
        tracing::warn!("Configuration loaded");
    }
    for w in warnings {
        tracing::warn!("{w}");
    }
    // Redis's initServer: from here on the lines are the master's, or the
    // replica's (`S`) when the configuration names a master.
    latchkey_server::logging::set_replica(config.repl.replicaof.is_some());
    latchkey_server::logging::set_role(b'M');
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.io_threads.max(1))
        .enable_all()
        .build()
        .expect("tokio runtime");
    let pidfile = rt.block_on(async move {
        let listeners = match latchkey_server::runtime::bind(&config).await {
            Ok(l) => l,
            Err(e) => {
                // Redis's two lines (`runtime::bind`).
                for l in e.to_string().lines() {
                    tracing::warn!("{l}");
                }
                eprintln!("{e}");
                std::process::exit(1);
            }
        };
        let port = config.port;
        // maxclients against the open-file limit, as Redis at start-up.
        let mut config = config;
        match latchkey_server::fdlimit::adjust(config.maxclients) {
            Ok((m, notes)) => {
                for n in notes {
                    tracing::warn!("{n}");
                }
                config.maxclients = m;
            }
            Err(e) => {
                tracing::error!("{e}");
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
        if background && config.pidfile.is_empty() {
            config.pidfile = latchkey_server::process::DEFAULT_PID_FILE.to_string();
        }
        let pidfile = config.pidfile.clone();
        if !pidfile.is_empty() {
            latchkey_server::process::create_pid_file(&pidfile);
        }
        let show_logo = config.always_show_logo
            || (!config.syslog_enabled
                && config.logfile.is_empty()
                && std::io::IsTerminal::is_terminal(&std::io::stdout()));
        if show_logo {
            latchkey_server::logging::raw(&latchkey_server::process::banner(
                port,
                std::process::id(),
            ));
        } else {
            tracing::info!("Running mode=standalone, port={port}.");
        }
        latchkey_server::stats::jemalloc_bg_thread(config.tuning.jemalloc_bg_thread);
        let shared = latchkey_server::runtime::Shared::new(config);
        shared.store.lock().share_log_level(log_level);
        tracing::warn!("Server initialized");
        // The snapshot at dir/dbfilename, before any client runs a command;
        // a file that cannot be read stops start-up (never an empty start
        // over data that could not be loaded).
        let loaded = {
            let mut store = shared.store.lock();
            if let Err(e) = store.load_acl_at_start() {
                tracing::error!("{e}");
                eprintln!("{e}");
                std::process::exit(1);
            }
            if store.config().appendonly {
                latchkey_server::persist::load_aof_at_start(
                    &mut *store,
                    &mut latchkey_server::commands::replay::aof_client(),
                )
            } else {
                latchkey_server::persist::load_at_start(&mut *store)
            }
        };
        if let Err(e) = loaded {
            tracing::error!("{e}");
            eprintln!("{e}");
            std::process::exit(1);
        }
        tracing::info!("Ready to accept connections");
        if supervision == latchkey_server::process::Supervision::Systemd {
            let _ =
                latchkey_server::process::notify_systemd("STATUS=Ready to accept connections\n");
            let _ = latchkey_server::process::notify_systemd("READY=1\n");
        }
        let s2 = shared.clone();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            loop {
                let name = tokio::select! {
                    _ = tokio::signal::ctrl_c() => "SIGINT",
                    _ = term.recv() => "SIGTERM",
                };
                // A second SIGINT while the shutdown waits for replicas:
                // the user wants out now (Redis's sigShutdownHandler).
                if name == "SIGINT" && s2.lock_store().await.shutdown_pending.is_some() {
                    latchkey_server::logging::from_signal_handler("You insist... exiting now.");
                    std::process::exit(1);
                }
                latchkey_server::logging::from_signal_handler(&format!(
                    "Received {name} scheduling shutdown..."
                ));
                // As SHUTDOWN with `shutdown-on-sigint`/`-sigterm`'s flags:
                // waits for lagging replicas (the runtime finishes it), and
                // with save rules the snapshot first; if it cannot be
                // written the server stays up, unless `force`.
                let outcome = {
                    let mut store = s2.lock_store().await;
                    let flags = match name {
                        "SIGINT" => store.config().shutdown_on_sigint,
                        _ => store.config().shutdown_on_sigterm,
                    };
                    latchkey_server::commands::server::prepare_shutdown(&mut store, flags)
                };
                use latchkey_server::commands::server::Shutdown;
                match outcome {
                    Shutdown::Exit => break,
                    Shutdown::Waiting => {}
                    Shutdown::Failed => tracing::warn!(
                        "{name} received but errors trying to shut down the server, \
                         check the logs for more information"
                    ),
                }
            }
            s2.begin_shutdown();
        });
        latchkey_server::runtime::serve(shared, listeners).await;
        pidfile
    });
    if supervision == latchkey_server::process::Supervision::Systemd {
        let _ = latchkey_server::process::notify_systemd("STOPPING=1\n");
    }
    if !pidfile.is_empty() {
        latchkey_server::process::remove_pid_file(&pidfile);
    }
    tracing::warn!("Redis is now ready to exit, bye bye...");
}

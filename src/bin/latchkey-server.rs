//! `latchkey-server [config-file] [--port N] [--bind ADDR] ... [--<directive> <args>...]`
//!
//! Like redis-server, command-line directives are appended to the config
//! file's text, so they win, and any redis.conf directive may be given as
//! `--name value`.
//!
//! Start-up only, through the library's public entry points (`config`,
//! `fdlimit`, `persist`'s loads, `runtime::serve`). Must not touch keys,
//! connections or command handlers itself.

use clap::Parser;
use latchkey_server::config::Config;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser, Debug)]
#[command(
    name = "latchkey-server",
    version,
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

/// Splits argv into what clap parses (the config file, --help, --version and
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
        if matches!(name, "help" | "version") || (CLAP_OPTIONS.contains(&name) && vals.len() == 1) {
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
    let (for_clap, groups) = split_argv(std::env::args().collect());
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
    // The filter holds this server's log level, which its store keeps at
    // the configured `loglevel` (CONFIG SET included).
    let log_level = latchkey_server::config::LogLevel::new(&config.loglevel);
    // Redis's line format on stdout (`logging`).
    latchkey_server::logging::init(latchkey_server::logging::Options {
        logfile: "",
        syslog_enabled: false,
        syslog_ident: "redis",
        syslog_facility: "local0",
        level: log_level.clone(),
    });
    for w in warnings {
        tracing::warn!("{w}");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.io_threads.max(1))
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let listeners = match latchkey_server::runtime::bind(&config).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("Could not bind {:?}:{}: {e}", config.bind, config.port);
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
        let shared = latchkey_server::runtime::Shared::new(config);
        shared.store.lock().share_log_level(log_level);
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
        tracing::info!("Ready to accept connections tcp on port {port}");
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
                tracing::info!("Received {name} scheduling shutdown...");
                // With save rules set, the snapshot first (as Redis); if
                // it cannot be written the server stays up.
                let prepared = {
                    let mut store = s2.lock_store().await;
                    latchkey_server::persist::prepare_shutdown(&mut *store, false, false)
                };
                match prepared {
                    Ok(()) => break,
                    Err(_) => tracing::warn!(
                        "{name} received but errors trying to shut down the server, \
                         check the logs for more information"
                    ),
                }
            }
            s2.begin_shutdown();
        });
        latchkey_server::runtime::serve(shared, listeners).await;
    });
    tracing::info!("Latchkey is now ready to exit, bye bye...");
}

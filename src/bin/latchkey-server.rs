//! `latchkey-server [config-file] [--port N] [--bind ADDR] ...`

use clap::Parser;
use latchkey::config::Config;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser, Debug)]
#[command(
    name = "latchkey-server",
    version,
    about = "Redis-compatible server with connection-bound keys and existence watches"
)]
struct Args {
    /// Optional config file in redis.conf syntax.
    config_file: Option<std::path::PathBuf>,
    #[arg(long)]
    port: Option<u16>,
    #[arg(long)]
    bind: Option<String>,
    #[arg(long)]
    requirepass: Option<String>,
    #[arg(long)]
    databases: Option<usize>,
    #[arg(long)]
    maxclients: Option<usize>,
    /// Close a client after this many idle seconds (0 = never).
    #[arg(long)]
    timeout: Option<u64>,
    #[arg(long = "tcp-keepalive")]
    tcp_keepalive: Option<u64>,
    #[arg(long)]
    loglevel: Option<String>,
}

fn main() {
    let args = Args::parse();
    let mut config = Config::default();
    if let Some(p) = args.port {
        config.port = p;
    }
    if let Some(b) = args.bind {
        config.bind = b.split_whitespace().map(String::from).collect();
    }
    config.requirepass = args.requirepass.or(config.requirepass);
    if let Some(v) = args.databases {
        config.databases = v;
    }
    if let Some(v) = args.maxclients {
        config.maxclients = v;
    }
    if let Some(v) = args.timeout {
        config.timeout = v;
    }
    if let Some(v) = args.tcp_keepalive {
        config.tcp_keepalive = v;
    }
    if let Some(v) = args.loglevel {
        config.loglevel = v;
    }
    tracing_subscriber::fmt().with_target(false).init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.io_threads.max(1))
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let listeners = match latchkey::server::bind(&config).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("Could not bind {:?}:{}: {e}", config.bind, config.port);
                std::process::exit(1);
            }
        };
        tracing::info!("Ready to accept connections tcp on port {}", config.port);
        let shared = latchkey::server::Shared::new(config);
        let s2 = shared.clone();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {},
                _ = term.recv() => {},
            }
            tracing::info!("Received signal, shutting down");
            s2.begin_shutdown();
        });
        latchkey::server::serve(shared, listeners).await;
    });
    tracing::info!("Latchkey is now ready to exit, bye bye...");
}

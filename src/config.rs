//! Server configuration: defaults, redis.conf files, command-line overrides,
//! and the directive table shared by start-up and CONFIG GET/SET.
//!
//! Only directives latchkey honours are in `DIRECTIVES`; a directive Redis 7.0
//! knows but latchkey does not implement is accepted with a warning (so an
//! existing redis.conf still starts), anything else is a start-up error
//! printed exactly like redis-server prints it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

use crate::resp::split_args;

#[derive(Debug, Clone)]
pub struct Config {
    /// `aclfile`: users are loaded from (and ACL SAVE writes) this file.
    pub aclfile: String,
    /// `acllog-max-len`: entries ACL LOG keeps.
    pub acllog_max_len: usize,
    /// `acl-pubsub-default allchannels` (true) or `resetchannels`: the
    /// channels a new user may use.
    pub acl_pubsub_default_all: bool,
    /// `user` directives of the config file, each user's name and rules.
    pub users: Vec<Vec<String>>,
    pub port: u16,
    pub bind: Vec<String>,
    pub requirepass: Option<String>,
    pub databases: usize,
    pub maxclients: usize,
    /// Idle seconds before a client is closed; 0 = never.
    pub timeout: u64,
    /// `tp-session-timeout` (ms; 0 = off): a connection that holds bound
    /// keys or waits in a lock line, without a TPSESSION of its own, is
    /// closed when nothing arrives from it for this long.
    pub tp_session_timeout: u64,
    pub tcp_keepalive: u64,
    /// listen(2) backlog; the kernel caps it at net.core.somaxconn.
    pub tcp_backlog: u32,
    pub loglevel: String,
    pub hz: u32,
    /// `dir`: where the RDB file goes (an absolute path; unlike Redis,
    /// latchkey does not chdir, so servers in one process may differ).
    pub dir: String,
    /// `dbfilename`.
    pub dbfilename: String,
    /// `rdbcompression`: LZF for strings over 20 bytes.
    pub rdbcompression: bool,
    /// `rdbchecksum`: the CRC64 footer (0 when off).
    pub rdbchecksum: bool,
    /// `save`: (seconds, changes) rules; a background save starts when
    /// any holds. Redis's default: 3600 1 300 100 60 10000.
    pub save: Vec<(i64, i64)>,
    /// `stop-writes-on-bgsave-error`: refuse writes (MISCONF) while the
    /// last background save failed and save rules are set.
    pub stop_writes_on_bgsave_error: bool,
    /// `rdb-key-save-delay` (microseconds per key, Redis's testing knob):
    /// the background save pauses between slices for that long per key
    /// written, off the store lock.
    pub rdb_key_save_delay: i64,
    /// `appendonly`: log every change to the AOF.
    pub appendonly: bool,
    /// `appendfsync`.
    pub appendfsync: crate::aof::Fsync,
    /// `appenddirname` (under `dir`) and `appendfilename` (the files' prefix).
    pub appenddirname: String,
    pub appendfilename: String,
    /// `aof-load-truncated`: a last command cut short is dropped (yes) or
    /// stops start-up (no).
    pub aof_load_truncated: bool,
    /// `aof-use-rdb-preamble`: a rewrite writes the AOF's base as an RDB
    /// file (yes) or as commands (no).
    pub aof_use_rdb_preamble: bool,
    /// `auto-aof-rewrite-percentage` / `auto-aof-rewrite-min-size`: a
    /// rewrite starts by itself once the AOF grew by this percentage over
    /// its size after the last rewrite, and is at least this big.
    pub auto_aof_rewrite_percentage: i64,
    pub auto_aof_rewrite_min_size: u64,
    /// Tokio worker threads (redis's `io-threads`).
    pub io_threads: usize,
    /// Hard limit in bytes for a client's queued pushes before it is closed
    /// (`client-output-buffer-limit pubsub`).
    pub pubsub_hard_limit: u64,
    pub pubsub_soft_limit: u64,
    pub pubsub_soft_seconds: u64,
    /// `client-output-buffer-limit replica ...`: kept for CONFIG GET; latchkey
    /// has no replicas, so no client is ever in that class.
    pub replica_limits: (u64, u64, u64),
    /// Absolute path of the config file, if one was given (INFO config_file).
    pub config_file: Option<PathBuf>,
    /// `list-max-listpack-size` (alias `list-max-ziplist-size`): a list
    /// node's limit, entries when positive, -1..-5 for 4..64 KB.
    pub list_max_listpack_size: i64,
    /// Small-encoding thresholds of hashes, sets and sorted sets (and
    /// their `ziplist` aliases): `hash-max-listpack-entries`/`-value`,
    /// `set-max-intset-entries`, `zset-max-listpack-entries`/`-value`.
    pub hash_max_listpack_entries: usize,
    pub hash_max_listpack_value: usize,
    pub set_max_intset_entries: usize,
    pub zset_max_listpack_entries: usize,
    pub zset_max_listpack_value: usize,
    /// `hll-sparse-max-bytes`: a sparse HyperLogLog that would grow past
    /// this many bytes (header included) becomes dense.
    pub hll_sparse_max_bytes: usize,
    /// `maxmemory` in bytes (0: no limit), its policy and sampling, and the
    /// LFU parameters.
    pub maxmemory: u64,
    pub maxmemory_policy: crate::db::evict::Policy,
    pub maxmemory_samples: usize,
    /// SLOWLOG: commands that ran at least this many microseconds are
    /// logged (negative: none, 0: all), keeping the newest `slowlog_max_len`.
    pub slowlog_log_slower_than: i64,
    pub slowlog_max_len: usize,
    /// LATENCY: events of at least this many ms are recorded (0: off).
    pub latency_monitor_threshold: u64,
    /// Client-side caching: keys the tracking table holds before it
    /// invalidates some early (0 = no limit).
    pub tracking_table_max_keys: usize,
    pub lfu_log_factor: u32,
    pub lfu_decay_time: u32,
    /// `enable-debug-command`: "no" (Redis 7's default), "yes" or "local"
    /// (loopback connections only). Start-up only, as in Redis.
    pub enable_debug_command: String,
    /// `enable-protected-configs` ("no", "yes", "local"): whether CONFIG
    /// SET may change `dir` and `dbfilename`. Start-up only, as in Redis.
    pub enable_protected_configs: String,
    /// `enable-module-command` ("no", "yes", "local"): MODULE LOAD and
    /// friends. Start-up only.
    pub enable_module_command: String,
    /// `protected-mode`: with no password on the default user, only
    /// loopback clients are served.
    pub protected_mode: bool,
    /// `proto-max-bulk-len`: the longest bulk string a request may send,
    /// and the longest string a command may build.
    pub proto_max_bulk_len: usize,
    /// `client-query-buffer-limit`: a client whose unparsed input grows
    /// past this is closed.
    pub client_query_buffer_limit: usize,
    /// `client-output-buffer-limit normal`: hard, soft (bytes), soft
    /// seconds; 0 0 0 (the default) is no limit.
    pub normal_limits: (u64, u64, u64),
    /// `tls-port` (0: no TLS listener) and the tls-* settings it uses
    /// (see `server::tls`). Start-up only.
    pub tls_port: u16,
    pub tls_cert_file: String,
    pub tls_key_file: String,
    pub tls_key_file_pass: String,
    pub tls_ca_cert_file: String,
    pub tls_ca_cert_dir: String,
    /// "yes" (a client certificate is required), "no" or "optional".
    pub tls_auth_clients: String,
    pub tls_protocols: String,
    pub tls_ciphers: String,
    pub tls_ciphersuites: String,
    pub tls_prefer_server_ciphers: bool,
    pub tls_session_caching: bool,
    pub tls_session_cache_size: usize,
    pub tls_session_cache_timeout: u64,
    pub tls_dh_params_file: String,
    /// `notify-keyspace-events` flags (`crate::pubsub::NOTIFY_*`).
    pub notify_keyspace_events: u32,
    /// `busy-reply-threshold` (alias `lua-time-limit`), ms: after this a
    /// running script makes other clients get BUSY.
    pub busy_reply_threshold: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            port: 6379,
            bind: vec!["127.0.0.1".into()],
            requirepass: None,
            aclfile: String::new(),
            acllog_max_len: 128,
            acl_pubsub_default_all: false,
            users: Vec::new(),
            databases: 16,
            maxclients: 10000,
            timeout: 0,
            tp_session_timeout: 0,
            tcp_keepalive: 300,
            tcp_backlog: 511,
            loglevel: "notice".into(),
            hz: 10,
            dir: std::env::current_dir()
                .map(|d| d.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "/".into()),
            dbfilename: "dump.rdb".into(),
            rdbcompression: true,
            rdbchecksum: true,
            save: vec![(3600, 1), (300, 100), (60, 10000)],
            stop_writes_on_bgsave_error: true,
            rdb_key_save_delay: 0,
            appendonly: false,
            appendfsync: crate::aof::Fsync::EverySec,
            appenddirname: "appendonlydir".into(),
            appendfilename: "appendonly.aof".into(),
            aof_load_truncated: true,
            aof_use_rdb_preamble: true,
            auto_aof_rewrite_percentage: 100,
            auto_aof_rewrite_min_size: 64 * 1024 * 1024,
            io_threads: 1,
            pubsub_hard_limit: 32 * 1024 * 1024,
            pubsub_soft_limit: 8 * 1024 * 1024,
            pubsub_soft_seconds: 60,
            replica_limits: (256 * 1024 * 1024, 64 * 1024 * 1024, 60),
            config_file: None,
            list_max_listpack_size: -2,
            hash_max_listpack_entries: 512,
            hash_max_listpack_value: 64,
            set_max_intset_entries: 512,
            zset_max_listpack_entries: 128,
            zset_max_listpack_value: 64,
            hll_sparse_max_bytes: 3000,
            maxmemory: 0,
            maxmemory_policy: crate::db::evict::Policy::NoEviction,
            maxmemory_samples: 5,
            slowlog_log_slower_than: 10_000,
            slowlog_max_len: 128,
            latency_monitor_threshold: 0,
            tracking_table_max_keys: 1_000_000,
            lfu_log_factor: 10,
            lfu_decay_time: 1,
            enable_debug_command: "no".into(),
            enable_protected_configs: "no".into(),
            enable_module_command: "no".into(),
            protected_mode: true,
            proto_max_bulk_len: 512 * 1024 * 1024,
            client_query_buffer_limit: 1024 * 1024 * 1024,
            normal_limits: (0, 0, 0),
            tls_port: 0,
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            tls_key_file_pass: String::new(),
            tls_ca_cert_file: String::new(),
            tls_ca_cert_dir: String::new(),
            tls_auth_clients: "yes".into(),
            tls_protocols: String::new(),
            tls_ciphers: String::new(),
            tls_ciphersuites: String::new(),
            tls_prefer_server_ciphers: false,
            tls_session_caching: true,
            tls_session_cache_size: 20480,
            tls_session_cache_timeout: 300,
            tls_dh_params_file: String::new(),
            notify_keyspace_events: 0,
            busy_reply_threshold: 5000,
        }
    }
}

/// How a directive may be changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutability {
    /// CONFIG SET changes it and the server honours the new value.
    Runtime,
    /// Start-up only (Redis's immutable configs, and port/bind, which
    /// latchkey cannot re-bind while running).
    Startup,
}

/// A directive latchkey implements.
pub struct Directive {
    pub name: &'static str,
    pub mutability: Mutability,
    /// Takes several arguments (Redis's MULTI_ARG_CONFIG).
    pub multi_arg: bool,
}

const fn d(name: &'static str, mutability: Mutability, multi_arg: bool) -> Directive {
    Directive {
        name,
        mutability,
        multi_arg,
    }
}

pub static DIRECTIVES: &[Directive] = &[
    d("aclfile", Mutability::Startup, false),
    d("acllog-max-len", Mutability::Runtime, false),
    d("acl-pubsub-default", Mutability::Runtime, false),
    d("appendonly", Mutability::Runtime, false),
    d("appendfsync", Mutability::Runtime, false),
    d("appenddirname", Mutability::Startup, false),
    d("appendfilename", Mutability::Startup, false),
    d("aof-load-truncated", Mutability::Runtime, false),
    d("auto-aof-rewrite-percentage", Mutability::Runtime, false),
    d("auto-aof-rewrite-min-size", Mutability::Runtime, false),
    d("aof-use-rdb-preamble", Mutability::Runtime, false),
    d("bind", Mutability::Startup, true),
    d("busy-reply-threshold", Mutability::Runtime, false),
    d("lua-time-limit", Mutability::Runtime, false),
    d("client-output-buffer-limit", Mutability::Runtime, true),
    d("databases", Mutability::Startup, false),
    d("dbfilename", Mutability::Runtime, false),
    d("dir", Mutability::Runtime, false),
    d("rdbchecksum", Mutability::Startup, false),
    d("stop-writes-on-bgsave-error", Mutability::Runtime, false),
    d("rdb-key-save-delay", Mutability::Runtime, false),
    d("rdbcompression", Mutability::Runtime, false),
    d("enable-debug-command", Mutability::Startup, false),
    d("enable-protected-configs", Mutability::Startup, false),
    d("enable-module-command", Mutability::Startup, false),
    d("protected-mode", Mutability::Runtime, false),
    d("proto-max-bulk-len", Mutability::Runtime, false),
    d("client-query-buffer-limit", Mutability::Runtime, false),
    d("tls-port", Mutability::Startup, false),
    d("tls-cert-file", Mutability::Runtime, false),
    d("tls-key-file", Mutability::Runtime, false),
    d("tls-key-file-pass", Mutability::Runtime, false),
    d("tls-ca-cert-file", Mutability::Runtime, false),
    d("tls-ca-cert-dir", Mutability::Runtime, false),
    d("tls-auth-clients", Mutability::Runtime, false),
    d("tls-protocols", Mutability::Runtime, false),
    d("tls-ciphers", Mutability::Runtime, false),
    d("tls-ciphersuites", Mutability::Runtime, false),
    d("tls-prefer-server-ciphers", Mutability::Runtime, false),
    d("tls-session-caching", Mutability::Runtime, false),
    d("tls-session-cache-size", Mutability::Runtime, false),
    d("tls-session-cache-timeout", Mutability::Runtime, false),
    d("tls-dh-params-file", Mutability::Runtime, false),
    d("hz", Mutability::Runtime, false),
    d("io-threads", Mutability::Startup, false),
    d("lfu-decay-time", Mutability::Runtime, false),
    d("lfu-log-factor", Mutability::Runtime, false),
    d("maxmemory", Mutability::Runtime, false),
    d("maxmemory-policy", Mutability::Runtime, false),
    d("maxmemory-samples", Mutability::Runtime, false),
    d("slowlog-log-slower-than", Mutability::Runtime, false),
    d("slowlog-max-len", Mutability::Runtime, false),
    d("latency-monitor-threshold", Mutability::Runtime, false),
    d("tracking-table-max-keys", Mutability::Runtime, false),
    d("list-max-listpack-size", Mutability::Runtime, false),
    d("list-max-ziplist-size", Mutability::Runtime, false),
    d("hash-max-listpack-entries", Mutability::Runtime, false),
    d("hash-max-ziplist-entries", Mutability::Runtime, false),
    d("hash-max-listpack-value", Mutability::Runtime, false),
    d("hash-max-ziplist-value", Mutability::Runtime, false),
    d("set-max-intset-entries", Mutability::Runtime, false),
    d("hll-sparse-max-bytes", Mutability::Runtime, false),
    d("zset-max-listpack-entries", Mutability::Runtime, false),
    d("zset-max-ziplist-entries", Mutability::Runtime, false),
    d("zset-max-listpack-value", Mutability::Runtime, false),
    d("zset-max-ziplist-value", Mutability::Runtime, false),
    d("loglevel", Mutability::Runtime, false),
    d("maxclients", Mutability::Runtime, false),
    d("notify-keyspace-events", Mutability::Runtime, false),
    d("port", Mutability::Startup, false),
    d("requirepass", Mutability::Runtime, false),
    d("save", Mutability::Runtime, true),
    d("tcp-backlog", Mutability::Startup, false),
    d("tcp-keepalive", Mutability::Runtime, false),
    d("timeout", Mutability::Runtime, false),
    d("tp-session-timeout", Mutability::Runtime, false),
];

/// Directives CONFIG GET shows only by their exact name, as Redis's
/// HIDDEN_CONFIG.
pub const HIDDEN: &[&str] = &["rdb-key-save-delay"];

pub fn directive(name: &str) -> Option<&'static Directive> {
    DIRECTIVES
        .iter()
        .find(|d| d.name.eq_ignore_ascii_case(name))
}

/// Every directive name Redis 7.0 accepts in a config file, space separated:
/// `CONFIG GET *` on redis-server 7.0.15, its hidden configs, the directives
/// its file loader handles itself (include, rename-command, user,
/// loadmodule) and the deprecated ones it silently accepts.
pub static REDIS_DIRECTIVES: &str = "\
    acl-pubsub-default aclfile acllog-max-len active-defrag-cycle-max active-defrag-cycle-min \
    active-defrag-ignore-bytes active-defrag-max-scan-fields active-defrag-threshold-lower \
    active-defrag-threshold-upper active-expire-effort activedefrag activerehashing \
    always-show-logo aof-disable-auto-gc aof-load-truncated aof-rewrite-incremental-fsync \
    aof-timestamp-enabled aof-use-rdb-preamble aof_rewrite_cpulist appenddirname \
    appendfilename appendfsync appendonly auto-aof-rewrite-min-size \
    auto-aof-rewrite-percentage bgsave_cpulist bind bind-source-addr bio_cpulist \
    busy-reply-threshold client-output-buffer-limit client-query-buffer-limit \
    cluster-allow-pubsubshard-when-down cluster-allow-reads-when-down \
    cluster-allow-replica-migration cluster-announce-bus-port cluster-announce-hostname \
    cluster-announce-ip cluster-announce-port cluster-announce-tls-port cluster-config-file \
    cluster-enabled cluster-link-sendbuf-limit cluster-migration-barrier cluster-node-timeout \
    cluster-port cluster-preferred-endpoint-type cluster-replica-no-failover \
    cluster-replica-validity-factor cluster-require-full-coverage cluster-slave-no-failover \
    cluster-slave-validity-factor crash-log-enabled crash-memcheck-enabled daemonize databases \
    dbfilename dir disable-thp dynamic-hz enable-debug-command enable-module-command \
    enable-protected-configs hash-max-listpack-entries hash-max-listpack-value \
    hash-max-ziplist-entries hash-max-ziplist-value hll-sparse-max-bytes hz ignore-warnings \
    io-threads io-threads-do-reads jemalloc-bg-thread key-load-delay latency-monitor-threshold \
    latency-tracking latency-tracking-info-percentiles lazyfree-lazy-eviction \
    lazyfree-lazy-expire lazyfree-lazy-server-del lazyfree-lazy-user-del \
    lazyfree-lazy-user-flush lfu-decay-time lfu-log-factor list-compress-depth \
    list-max-listpack-size list-max-ziplist-size loading-process-events-interval-bytes logfile \
    loglevel lua-time-limit masterauth masteruser maxclients maxmemory maxmemory-clients \
    maxmemory-eviction-tenacity maxmemory-policy maxmemory-samples min-replicas-max-lag \
    min-replicas-to-write min-slaves-max-lag min-slaves-to-write no-appendfsync-on-rewrite \
    notify-keyspace-events oom-score-adj oom-score-adj-values pidfile port proc-title-template \
    propagation-error-behavior protected-mode proto-max-bulk-len rdb-del-sync-files \
    rdb-key-save-delay rdb-save-incremental-fsync rdbchecksum rdbcompression repl-backlog-size \
    repl-backlog-ttl repl-disable-tcp-nodelay repl-diskless-load repl-diskless-sync \
    repl-diskless-sync-delay repl-diskless-sync-max-replicas repl-ping-replica-period \
    repl-ping-slave-period repl-timeout replica-announce-ip replica-announce-port \
    replica-announced replica-ignore-disk-write-errors replica-ignore-maxmemory \
    replica-lazy-flush replica-priority replica-read-only replica-serve-stale-data replicaof \
    requirepass sanitize-dump-payload save server_cpulist set-max-intset-entries \
    set-proc-title shutdown-on-sigint shutdown-on-sigterm shutdown-timeout slave-announce-ip \
    slave-announce-port slave-ignore-maxmemory slave-lazy-flush slave-priority slave-read-only \
    slave-serve-stale-data slaveof slowlog-log-slower-than slowlog-max-len socket-mark-id \
    stop-writes-on-bgsave-error stream-node-max-bytes stream-node-max-entries supervised \
    syslog-enabled syslog-facility syslog-ident tcp-backlog tcp-keepalive timeout \
    tls-auth-clients tls-ca-cert-dir tls-ca-cert-file tls-cert-file tls-ciphers \
    tls-ciphersuites tls-client-cert-file tls-client-key-file tls-client-key-file-pass \
    tls-cluster tls-dh-params-file tls-key-file tls-key-file-pass tls-port \
    tls-prefer-server-ciphers tls-protocols tls-replication tls-session-cache-size \
    tls-session-cache-timeout tls-session-caching tracking-table-max-keys unixsocket \
    unixsocketperm zset-max-listpack-entries zset-max-listpack-value zset-max-ziplist-entries \
    zset-max-ziplist-value include rename-command user loadmodule list-max-ziplist-entries \
    list-max-ziplist-value lua-replicate-commands \
";

/// Redis configs that take several arguments; every other one takes exactly one.
const REDIS_MULTI_ARG: &[&str] = &[
    "save",
    "client-output-buffer-limit",
    "oom-score-adj-values",
    "bind",
    "latency-tracking-info-percentiles",
    "replicaof",
    "slaveof",
    "include",
    "rename-command",
    "user",
    "loadmodule",
];

pub const LOGLEVELS: &[&str] = &["debug", "verbose", "notice", "warning"];

/// Current log verbosity as an index into `LOGLEVELS`, read by the binary's
/// log filter so CONFIG SET loglevel takes effect at once.
static LOG_LEVEL: AtomicU8 = AtomicU8::new(2);

pub fn log_level() -> &'static str {
    LOGLEVELS[LOG_LEVEL.load(Ordering::Relaxed) as usize % LOGLEVELS.len()]
}

fn set_log_level(name: &str) {
    if let Some(i) = LOGLEVELS.iter().position(|l| *l == name) {
        LOG_LEVEL.store(i as u8, Ordering::Relaxed);
    }
}

/// Whether a tracing event of `level` passes the configured loglevel
/// (debug/verbose = DEBUG, notice = INFO, warning = WARN).
pub fn log_enabled(level: &tracing::Level) -> bool {
    let min = match log_level() {
        "debug" | "verbose" => tracing::Level::DEBUG,
        "notice" => tracing::Level::INFO,
        _ => tracing::Level::WARN,
    };
    *level <= min
}

/// Parses a memory value like Redis's `memtoull`: digits with an optional
/// b/k/kb/m/mb/g/gb unit (k = 1000, kb = 1024).
pub fn parse_memory(s: &str) -> Option<u64> {
    let lower = s.to_ascii_lowercase();
    let (num, mul) = [
        ("gb", 1u64 << 30),
        ("mb", 1 << 20),
        ("kb", 1 << 10),
        ("g", 1_000_000_000),
        ("m", 1_000_000),
        ("k", 1000),
        ("b", 1),
    ]
    .iter()
    .find_map(|(u, m)| lower.strip_suffix(u).map(|n| (n, *m)))
    .unwrap_or((lower.as_str(), 1));
    if num.is_empty() || !num.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    num.parse::<u64>().ok()?.checked_mul(mul)
}

/// A size_t memory config (0..=LONG_MAX bytes, units allowed).
fn parse_size(v: &str) -> Result<usize, String> {
    match parse_memory(v) {
        None => Err("argument must be a memory value".into()),
        Some(n) if n > i64::MAX as u64 => {
            Err("argument must be between 0 and 9223372036854775807 inclusive".into())
        }
        Some(n) => Ok(n as usize),
    }
}

fn parse_int(v: &str, min: i64, max: i64) -> Result<i64, String> {
    let n = crate::util::parse_i64(v.as_bytes())
        .ok_or_else(|| "argument couldn't be parsed into an integer".to_string())?;
    if n < min || n > max {
        return Err(format!(
            "argument must be between {min} and {max} inclusive"
        ));
    }
    Ok(n)
}

const INT_MAX: i64 = i32::MAX as i64;
const INT_MIN: i64 = i32::MIN as i64;

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

fn yes_no_arg(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err("argument must be 'yes' or 'no'".into()),
    }
}

/// `save` rules as Redis's setConfigSaveOption reads them: `""` alone is
/// none; else pairs of seconds (1 or more) and changes (0 or more).
fn parse_save(args: &[String]) -> Result<Vec<(i64, i64)>, String> {
    let args: Vec<&str> = match args {
        [one] if one.is_empty() => Vec::new(),
        _ => args.iter().map(String::as_str).collect(),
    };
    let bad = || "Invalid save parameters".to_string();
    if args.len() % 2 == 1 {
        return Err(bad());
    }
    let mut out = Vec::new();
    for pair in args.chunks(2) {
        let secs: i64 = pair[0].parse().map_err(|_| bad())?;
        let changes: i64 = pair[1].parse().map_err(|_| bad())?;
        if secs < 1 || changes < 0 {
            return Err(bad());
        }
        out.push((secs, changes));
    }
    Ok(out)
}
const UINT_MAX: i64 = u32::MAX as i64;

impl Config {
    /// Sets a directive from its arguments, with Redis's validation and
    /// error texts. `name` must be a directive of `DIRECTIVES`.
    pub fn set(&mut self, name: &str, args: &[String]) -> Result<(), String> {
        let one = || args.first().map(String::as_str).unwrap_or("");
        match name {
            "aclfile" => self.aclfile = one().to_string(),
            "acllog-max-len" => self.acllog_max_len = parse_int(one(), 0, i64::MAX)? as usize,
            "acl-pubsub-default" => {
                self.acl_pubsub_default_all =
                    match one().to_ascii_lowercase().as_str() {
                        "allchannels" => true,
                        "resetchannels" => false,
                        _ => return Err(
                            "argument(s) must be one of the following: allchannels, resetchannels"
                                .into(),
                        ),
                    }
            }
            "port" => self.port = parse_int(one(), 0, 65535)? as u16,
            "databases" => self.databases = parse_int(one(), 1, INT_MAX)? as usize,
            "io-threads" => self.io_threads = parse_int(one(), 1, 128)? as usize,
            "maxclients" => self.maxclients = parse_int(one(), 1, UINT_MAX)? as usize,
            "timeout" => self.timeout = parse_int(one(), 0, INT_MAX)? as u64,
            "tp-session-timeout" => self.tp_session_timeout = parse_int(one(), 0, INT_MAX)? as u64,
            "busy-reply-threshold" | "lua-time-limit" => {
                self.busy_reply_threshold = parse_int(one(), 0, i64::MAX)? as u64
            }
            // Redis accepts any int and clamps to CONFIG_MIN_HZ..CONFIG_MAX_HZ.
            "hz" => self.hz = parse_int(one(), 0, INT_MAX)?.clamp(1, 500) as u32,
            "tcp-keepalive" => self.tcp_keepalive = parse_int(one(), 0, INT_MAX)? as u64,
            "tcp-backlog" => self.tcp_backlog = parse_int(one(), 0, INT_MAX)? as u32,
            "list-max-listpack-size" | "list-max-ziplist-size" => {
                self.list_max_listpack_size = parse_int(one(), -INT_MAX - 1, INT_MAX)?
            }
            // Redis's size_t configs: 0..LONG_MAX.
            "hash-max-listpack-entries" | "hash-max-ziplist-entries" => {
                self.hash_max_listpack_entries = parse_int(one(), 0, i64::MAX)? as usize
            }
            // Redis's MEMORY_CONFIG size_t values: "1kb" is accepted.
            "hash-max-listpack-value" | "hash-max-ziplist-value" => {
                self.hash_max_listpack_value = parse_size(one())?
            }
            "set-max-intset-entries" => {
                self.set_max_intset_entries = parse_int(one(), 0, i64::MAX)? as usize
            }
            // A size_t memory config: 0..LONG_MAX, units accepted.
            "hll-sparse-max-bytes" => {
                let n = parse_memory(one())
                    .ok_or_else(|| "argument must be a memory value".to_string())?;
                if n > i64::MAX as u64 {
                    return Err(format!(
                        "argument must be between 0 and {} inclusive",
                        i64::MAX
                    ));
                }
                self.hll_sparse_max_bytes = n as usize
            }
            "maxmemory" => {
                self.maxmemory = parse_memory(one())
                    .ok_or_else(|| "argument must be a memory value".to_string())?
            }
            "maxmemory-policy" => {
                self.maxmemory_policy = crate::db::evict::Policy::parse(one()).ok_or_else(|| {
                    let names: Vec<&str> = crate::db::evict::POLICY_NAMES
                        .iter()
                        .map(|(n, _)| *n)
                        .collect();
                    format!(
                        "argument(s) must be one of the following: {}",
                        names.join(", ")
                    )
                })?
            }
            "maxmemory-samples" => self.maxmemory_samples = parse_int(one(), 1, INT_MAX)? as usize,
            "slowlog-log-slower-than" => {
                self.slowlog_log_slower_than = parse_int(one(), -1, i64::MAX)?
            }
            "slowlog-max-len" => self.slowlog_max_len = parse_int(one(), 0, i64::MAX)? as usize,
            "latency-monitor-threshold" => {
                self.latency_monitor_threshold = parse_int(one(), 0, i64::MAX)? as u64
            }
            "tracking-table-max-keys" => {
                self.tracking_table_max_keys = parse_int(one(), 0, i64::MAX)? as usize
            }
            "lfu-log-factor" => self.lfu_log_factor = parse_int(one(), 0, INT_MAX)? as u32,
            "enable-debug-command" | "enable-protected-configs" | "enable-module-command" => {
                let v = one().to_ascii_lowercase();
                if !["no", "yes", "local"].contains(&v.as_str()) {
                    return Err("argument(s) must be one of the following: no, yes, local".into());
                }
                match name {
                    "enable-debug-command" => self.enable_debug_command = v,
                    "enable-protected-configs" => self.enable_protected_configs = v,
                    _ => self.enable_module_command = v,
                }
            }
            "protected-mode" => self.protected_mode = yes_no_arg(one())?,
            "proto-max-bulk-len" | "client-query-buffer-limit" => {
                let v = parse_size(one())?;
                if v < 1024 * 1024 {
                    return Err(
                        "argument must be between 1048576 and 9223372036854775807 inclusive".into(),
                    );
                }
                if name == "proto-max-bulk-len" {
                    self.proto_max_bulk_len = v;
                } else {
                    self.client_query_buffer_limit = v;
                }
            }
            "tls-port" => self.tls_port = parse_int(one(), 0, 65535)? as u16,
            "tls-cert-file" => self.tls_cert_file = one().to_string(),
            "tls-key-file" => self.tls_key_file = one().to_string(),
            "tls-key-file-pass" => self.tls_key_file_pass = one().to_string(),
            "tls-ca-cert-file" => self.tls_ca_cert_file = one().to_string(),
            "tls-ca-cert-dir" => self.tls_ca_cert_dir = one().to_string(),
            "tls-auth-clients" => {
                let v = one().to_ascii_lowercase();
                if !["no", "yes", "optional"].contains(&v.as_str()) {
                    return Err(
                        "argument(s) must be one of the following: no, yes, optional".into(),
                    );
                }
                self.tls_auth_clients = v;
            }
            "tls-protocols" => self.tls_protocols = one().to_string(),
            "tls-ciphers" => self.tls_ciphers = one().to_string(),
            "tls-ciphersuites" => self.tls_ciphersuites = one().to_string(),
            "tls-prefer-server-ciphers" => self.tls_prefer_server_ciphers = yes_no_arg(one())?,
            "tls-session-caching" => self.tls_session_caching = yes_no_arg(one())?,
            "tls-session-cache-size" => {
                self.tls_session_cache_size = parse_int(one(), 0, INT_MAX)? as usize
            }
            "tls-session-cache-timeout" => {
                self.tls_session_cache_timeout = parse_int(one(), 0, INT_MAX)? as u64
            }
            "tls-dh-params-file" => self.tls_dh_params_file = one().to_string(),
            "lfu-decay-time" => self.lfu_decay_time = parse_int(one(), 0, INT_MAX)? as u32,
            "zset-max-listpack-entries" | "zset-max-ziplist-entries" => {
                self.zset_max_listpack_entries = parse_int(one(), 0, i64::MAX)? as usize
            }
            "zset-max-listpack-value" | "zset-max-ziplist-value" => {
                self.zset_max_listpack_value = parse_size(one())?
            }
            "requirepass" => {
                self.requirepass = if one().is_empty() {
                    None
                } else {
                    Some(one().to_string())
                }
            }
            "dbfilename" => {
                // Redis's isValidDBfilename: a file name, not a path.
                if one().contains('/') {
                    return Err("dbfilename can't be a path, just a filename".into());
                }
                self.dbfilename = one().to_string();
            }
            "dir" => {
                let d = std::path::Path::new(self.dir.as_str()).join(one());
                if !d.is_dir() {
                    return Err("No such file or directory".into());
                }
                self.dir = d
                    .canonicalize()
                    .map_err(|e| e.to_string())?
                    .to_string_lossy()
                    .into_owned();
            }
            "stop-writes-on-bgsave-error" => self.stop_writes_on_bgsave_error = yes_no_arg(one())?,
            "rdb-key-save-delay" => self.rdb_key_save_delay = parse_int(one(), INT_MIN, INT_MAX)?,
            "rdbchecksum" | "rdbcompression" => {
                let v = match one().to_ascii_lowercase().as_str() {
                    "yes" => true,
                    "no" => false,
                    _ => return Err("argument must be 'yes' or 'no'".into()),
                };
                if name == "rdbchecksum" {
                    self.rdbchecksum = v;
                } else {
                    self.rdbcompression = v;
                }
            }
            "appendonly" => self.appendonly = yes_no_arg(one())?,
            "appendfsync" => {
                self.appendfsync = crate::aof::Fsync::parse(one())
                    .ok_or("argument(s) must be one of the following: everysec, always, no")?
            }
            "appenddirname" | "appendfilename" => {
                let v = one();
                if v.is_empty() || v.contains('/') || v == "." || v == ".." {
                    return Err(if name == "appenddirname" {
                        "appenddirname can't be a path, just a dirname".into()
                    } else {
                        "appendfilename can't be a path, just a filename".into()
                    });
                }
                if name == "appenddirname" {
                    self.appenddirname = v.into();
                } else {
                    self.appendfilename = v.into();
                }
            }
            "aof-load-truncated" => self.aof_load_truncated = yes_no_arg(one())?,
            "auto-aof-rewrite-percentage" => {
                self.auto_aof_rewrite_percentage = parse_int(one(), 0, INT_MAX)?
            }
            "auto-aof-rewrite-min-size" => {
                self.auto_aof_rewrite_min_size = parse_memory(one())
                    .ok_or_else(|| "argument must be a memory value".to_string())?
            }
            "aof-use-rdb-preamble" => self.aof_use_rdb_preamble = yes_no_arg(one())?,
            "save" => self.save = parse_save(args)?,
            "loglevel" => {
                let v = one().to_ascii_lowercase();
                if !LOGLEVELS.contains(&v.as_str()) {
                    return Err(format!(
                        "argument(s) must be one of the following: {}",
                        LOGLEVELS.join(", ")
                    ));
                }
                self.loglevel = v;
            }
            "bind" => {
                if args.len() > 16 {
                    return Err("Too many bind addresses specified.".into());
                }
                // `bind ""` is Redis's "no TCP listener"; latchkey always
                // needs one, so it is refused rather than ignored.
                if args.iter().all(|a| a.is_empty()) {
                    return Err("latchkey needs at least one bind address".into());
                }
                self.bind = args.to_vec();
            }
            "client-output-buffer-limit" => self.set_obuf_limits(args)?,
            "notify-keyspace-events" => {
                self.notify_keyspace_events = crate::pubsub::parse_flags(one().as_bytes())
                    .ok_or("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")?
            }
            _ => return Err("unknown directive".into()),
        }
        Ok(())
    }

    /// `client-output-buffer-limit <class> <hard> <soft> <seconds> ...`,
    /// checked whole before anything is applied, like Redis.
    fn set_obuf_limits(&mut self, args: &[String]) -> Result<(), String> {
        if !args.len().is_multiple_of(4) {
            return Err("Wrong number of arguments in buffer limit configuration.".into());
        }
        let mut parsed = Vec::new();
        for c in args.chunks(4) {
            let class = c[0].to_ascii_lowercase();
            if !matches!(class.as_str(), "normal" | "slave" | "replica" | "pubsub") {
                return Err("Invalid client class specified in buffer limit configuration.".into());
            }
            let hard = parse_memory(&c[1]);
            let soft = parse_memory(&c[2]);
            let secs = c[3].parse::<i64>().ok().filter(|s| *s >= 0);
            let (Some(hard), Some(soft), Some(secs)) = (hard, soft, secs) else {
                return Err(
                    "Error in hard, soft or soft_seconds setting in buffer limit configuration."
                        .into(),
                );
            };
            parsed.push((class, hard, soft, secs as u64));
        }
        for (class, hard, soft, secs) in parsed {
            match class.as_str() {
                "pubsub" => {
                    self.pubsub_hard_limit = hard;
                    self.pubsub_soft_limit = soft;
                    self.pubsub_soft_seconds = secs;
                }
                "slave" | "replica" => self.replica_limits = (hard, soft, secs),
                _ => self.normal_limits = (hard, soft, secs),
            }
        }
        Ok(())
    }

    /// Applies the settings that live outside the store (the log filter).
    /// Called after a load or a successful CONFIG SET.
    pub fn apply_globals(&self) {
        set_log_level(&self.loglevel);
        crate::db::evict::set_globals(
            self.maxmemory_policy,
            self.lfu_log_factor,
            self.lfu_decay_time,
        );
        crate::db::set_notify_keymiss(
            self.notify_keyspace_events & crate::pubsub::NOTIFY_KEY_MISS != 0,
        );
    }

    /// The value CONFIG GET shows for a directive of `DIRECTIVES`.
    pub fn get(&self, name: &str) -> Option<String> {
        Some(match name {
            "aclfile" => self.aclfile.clone(),
            "acllog-max-len" => self.acllog_max_len.to_string(),
            "acl-pubsub-default" => if self.acl_pubsub_default_all {
                "allchannels"
            } else {
                "resetchannels"
            }
            .into(),
            "port" => self.port.to_string(),
            "appendonly" => yes_no(self.appendonly),
            "appendfsync" => self.appendfsync.name().into(),
            "appenddirname" => self.appenddirname.clone(),
            "appendfilename" => self.appendfilename.clone(),
            "aof-load-truncated" => yes_no(self.aof_load_truncated),
            "auto-aof-rewrite-percentage" => self.auto_aof_rewrite_percentage.to_string(),
            "auto-aof-rewrite-min-size" => self.auto_aof_rewrite_min_size.to_string(),
            "aof-use-rdb-preamble" => yes_no(self.aof_use_rdb_preamble),
            "save" => self
                .save
                .iter()
                .map(|(s, c)| format!("{s} {c}"))
                .collect::<Vec<_>>()
                .join(" "),
            "stop-writes-on-bgsave-error" => yes_no(self.stop_writes_on_bgsave_error),
            "rdb-key-save-delay" => self.rdb_key_save_delay.to_string(),
            "dir" => self.dir.clone(),
            "dbfilename" => self.dbfilename.clone(),
            "rdbchecksum" => yes_no(self.rdbchecksum),
            "rdbcompression" => yes_no(self.rdbcompression),
            "bind" => self.bind.join(" "),
            "requirepass" => self.requirepass.clone().unwrap_or_default(),
            "databases" => self.databases.to_string(),
            "io-threads" => self.io_threads.to_string(),
            "maxclients" => self.maxclients.to_string(),
            "timeout" => self.timeout.to_string(),
            "tp-session-timeout" => self.tp_session_timeout.to_string(),
            "busy-reply-threshold" | "lua-time-limit" => self.busy_reply_threshold.to_string(),
            "hz" => self.hz.to_string(),
            "tcp-keepalive" => self.tcp_keepalive.to_string(),
            "tcp-backlog" => self.tcp_backlog.to_string(),
            "list-max-listpack-size" | "list-max-ziplist-size" => {
                self.list_max_listpack_size.to_string()
            }
            "hash-max-listpack-entries" | "hash-max-ziplist-entries" => {
                self.hash_max_listpack_entries.to_string()
            }
            "hash-max-listpack-value" | "hash-max-ziplist-value" => {
                self.hash_max_listpack_value.to_string()
            }
            "set-max-intset-entries" => self.set_max_intset_entries.to_string(),
            "hll-sparse-max-bytes" => self.hll_sparse_max_bytes.to_string(),
            "maxmemory" => self.maxmemory.to_string(),
            "enable-debug-command" => self.enable_debug_command.clone(),
            "enable-protected-configs" => self.enable_protected_configs.clone(),
            "enable-module-command" => self.enable_module_command.clone(),
            "protected-mode" => yes_no(self.protected_mode),
            "proto-max-bulk-len" => self.proto_max_bulk_len.to_string(),
            "client-query-buffer-limit" => self.client_query_buffer_limit.to_string(),
            "tls-port" => self.tls_port.to_string(),
            "tls-cert-file" => self.tls_cert_file.clone(),
            "tls-key-file" => self.tls_key_file.clone(),
            "tls-key-file-pass" => self.tls_key_file_pass.clone(),
            "tls-ca-cert-file" => self.tls_ca_cert_file.clone(),
            "tls-ca-cert-dir" => self.tls_ca_cert_dir.clone(),
            "tls-auth-clients" => self.tls_auth_clients.clone(),
            "tls-protocols" => self.tls_protocols.clone(),
            "tls-ciphers" => self.tls_ciphers.clone(),
            "tls-ciphersuites" => self.tls_ciphersuites.clone(),
            "tls-prefer-server-ciphers" => yes_no(self.tls_prefer_server_ciphers),
            "tls-session-caching" => yes_no(self.tls_session_caching),
            "tls-session-cache-size" => self.tls_session_cache_size.to_string(),
            "tls-session-cache-timeout" => self.tls_session_cache_timeout.to_string(),
            "tls-dh-params-file" => self.tls_dh_params_file.clone(),
            "maxmemory-policy" => self.maxmemory_policy.name().to_string(),
            "maxmemory-samples" => self.maxmemory_samples.to_string(),
            "slowlog-log-slower-than" => self.slowlog_log_slower_than.to_string(),
            "slowlog-max-len" => self.slowlog_max_len.to_string(),
            "latency-monitor-threshold" => self.latency_monitor_threshold.to_string(),
            "tracking-table-max-keys" => self.tracking_table_max_keys.to_string(),
            "lfu-log-factor" => self.lfu_log_factor.to_string(),
            "lfu-decay-time" => self.lfu_decay_time.to_string(),
            "zset-max-listpack-entries" | "zset-max-ziplist-entries" => {
                self.zset_max_listpack_entries.to_string()
            }
            "zset-max-listpack-value" | "zset-max-ziplist-value" => {
                self.zset_max_listpack_value.to_string()
            }
            "loglevel" => self.loglevel.clone(),
            "notify-keyspace-events" => crate::pubsub::flags_string(self.notify_keyspace_events),
            "client-output-buffer-limit" => format!(
                "normal {} {} {} slave {} {} {} pubsub {} {} {}",
                self.normal_limits.0,
                self.normal_limits.1,
                self.normal_limits.2,
                self.replica_limits.0,
                self.replica_limits.1,
                self.replica_limits.2,
                self.pubsub_hard_limit,
                self.pubsub_soft_limit,
                self.pubsub_soft_seconds
            ),
            _ => return None,
        })
    }

    /// Loads a config file, then `extra` (command-line directives, one per
    /// line), as redis-server does: the command line is appended to the file.
    /// Returns warnings for Redis directives latchkey ignores.
    pub fn load(&mut self, file: Option<&Path>, extra: &str) -> Result<Vec<String>, LoadError> {
        let mut warnings = Vec::new();
        let mut text = String::new();
        if let Some(path) = file {
            text = read_file(path)?;
            self.config_file = Some(std::fs::canonicalize(path).unwrap_or(path.to_path_buf()));
        }
        if !extra.is_empty() {
            text.push('\n');
            text.push_str(extra);
        }
        self.load_str(&text, &mut warnings, 0, &mut false)?;
        self.apply_globals();
        Ok(warnings)
    }

    /// `save_seen`: a `save` line was read. The first replaces the
    /// default rules, later ones add to them (redis.conf lists one rule
    /// per line).
    fn load_str(
        &mut self,
        text: &str,
        warnings: &mut Vec<String>,
        depth: usize,
        save_seen: &mut bool,
    ) -> Result<(), LoadError> {
        for (i, raw) in text.split('\n').enumerate() {
            let line = raw.trim_matches(|c| matches!(c, ' ' | '\t' | '\r' | '\n'));
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |msg: &str| LoadError::Line {
                line: i + 1,
                text: line.to_string(),
                msg: msg.to_string(),
            };
            let Some(args) = split_args(line.as_bytes()) else {
                return Err(err("Unbalanced quotes in configuration line"));
            };
            if args.is_empty() {
                continue;
            }
            let args: Vec<String> = args
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let name = args[0].to_ascii_lowercase();
            let rest = &args[1..];
            if let Some(d) = directive(&name) {
                let rest: Vec<String> = if d.multi_arg && rest.len() == 1 && !rest[0].is_empty() {
                    // `bind "a b"` is split again, as Redis does.
                    split_args(rest[0].as_bytes())
                        .unwrap_or_default()
                        .iter()
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect()
                } else {
                    rest.to_vec()
                };
                if !d.multi_arg && rest.len() != 1 {
                    return Err(err("wrong number of arguments"));
                }
                let kept = std::mem::take(&mut self.save);
                let r = self.set(d.name, &rest);
                if d.name == "save" && *save_seen {
                    let added = std::mem::replace(&mut self.save, kept);
                    if r.is_ok() {
                        self.save.extend(added);
                    }
                } else if d.name == "save" {
                    if r.is_ok() {
                        *save_seen = true;
                    } else {
                        self.save = kept;
                    }
                } else {
                    self.save = kept;
                }
                r.map_err(|m| err(&m))?;
            } else if name == "include" && rest.len() == 1 {
                if depth > 16 {
                    return Err(err("include nesting too deep"));
                }
                for path in include_paths(&rest[0])? {
                    let t = read_file(&path)?;
                    self.load_str(&t, warnings, depth + 1, save_seen)?;
                }
            } else if name == "user" && !rest.is_empty() {
                // Checked against the command table when the server starts.
                self.users.push(rest.to_vec());
            } else if name == "sentinel" && !rest.is_empty() {
                return Err(err("sentinel directive while not in sentinel mode"));
            } else if REDIS_DIRECTIVES.split_whitespace().any(|d| d == name) || name.contains('.') {
                if !REDIS_MULTI_ARG.contains(&name.as_str())
                    && !name.contains('.')
                    && !name.starts_with("list-max-ziplist-")
                    && name != "lua-replicate-commands"
                    && rest.len() != 1
                {
                    return Err(err("wrong number of arguments"));
                }
                warnings.push(format!(
                    "config directive '{name}' (line {}) is not implemented by latchkey; ignored",
                    i + 1
                ));
            } else {
                return Err(err("Bad directive or wrong number of arguments"));
            }
        }
        Ok(())
    }
}

/// A config file that cannot be used; `Display` is redis-server's message.
#[derive(Debug)]
pub enum LoadError {
    Open {
        path: String,
        err: String,
    },
    Line {
        line: usize,
        text: String,
        msg: String,
    },
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Open { path, err } => {
                write!(f, "Fatal error, can't open config file '{path}': {err}")
            }
            LoadError::Line { line, text, msg } => write!(
                f,
                "\n*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\n\
                 Reading the configuration file, at line {line}\n>>> '{text}'\n{msg}"
            ),
        }
    }
}

fn read_file(path: &Path) -> Result<String, LoadError> {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|e| LoadError::Open {
            path: path.display().to_string(),
            err: io_message(&e),
        })
}

/// strerror-style text without Rust's " (os error N)" suffix.
fn io_message(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// `include` paths: a pattern with wildcards matches files in its directory
/// (none is fine); a plain path must exist.
fn include_paths(p: &str) -> Result<Vec<PathBuf>, LoadError> {
    if !p.contains(['*', '?', '[']) {
        return Ok(vec![PathBuf::from(p)]);
    }
    let path = Path::new(p);
    let dir = path.parent().unwrap_or(Path::new("."));
    let pat = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out: Vec<PathBuf> = match std::fs::read_dir(if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    }) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                !n.starts_with('.') && crate::glob::matches(pat.as_bytes(), n.as_bytes(), false)
            })
            .map(|e| e.path())
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    Ok(out)
}

/// The name CONFIG REWRITE writes for a directive: Redis 7.0 rewrites a
/// `ziplist` alias under the `listpack` name it stands for.
fn canonical(name: &str) -> &str {
    match name {
        "list-max-ziplist-size" => "list-max-listpack-size",
        "hash-max-ziplist-entries" => "hash-max-listpack-entries",
        "hash-max-ziplist-value" => "hash-max-listpack-value",
        "zset-max-ziplist-entries" => "zset-max-listpack-entries",
        "zset-max-ziplist-value" => "zset-max-listpack-value",
        other => other,
    }
}

/// Byte-size directives, which Redis rewrites with the largest exact unit.
const MEMORY_DIRECTIVES: &[&str] = &[
    "maxmemory",
    "auto-aof-rewrite-min-size",
    "hash-max-listpack-value",
    "zset-max-listpack-value",
    "hll-sparse-max-bytes",
];

/// String directives, which Redis rewrites quoted.
const STRING_DIRECTIVES: &[&str] = &["requirepass"];

/// Redis's rewriteConfigFormatMemory.
fn format_memory(bytes: u64) -> String {
    const KB: u64 = 1024;
    const MB: u64 = 1024 * KB;
    const GB: u64 = 1024 * MB;
    match bytes {
        0 => "0".into(),
        b if b % GB == 0 => format!("{}gb", b / GB),
        b if b % MB == 0 => format!("{}mb", b / MB),
        b if b % KB == 0 => format!("{}kb", b / KB),
        b => b.to_string(),
    }
}

/// Redis's sdscatrepr: the value in double quotes, escaped.
fn quoted(s: &str) -> String {
    let mut q = String::from("\"");
    for b in s.bytes() {
        match b {
            b'\\' => q.push_str("\\\\"),
            b'"' => q.push_str("\\\""),
            b'\n' => q.push_str("\\n"),
            b'\r' => q.push_str("\\r"),
            b'\t' => q.push_str("\\t"),
            7 => q.push_str("\\a"),
            8 => q.push_str("\\b"),
            c if c.is_ascii_graphic() || c == b' ' => q.push(c as char),
            c => q.push_str(&format!("\\x{c:02x}")),
        }
    }
    q.push('"');
    q
}

/// The signature line above the directives CONFIG REWRITE appends.
const REWRITE_SIGNATURE: &str = "# Generated by CONFIG REWRITE";

impl Config {
    /// The config-file lines for one directive at its current value.
    fn rewrite_lines(&self, name: &str) -> Vec<String> {
        let value = self.get(name).unwrap_or_default();
        if name == "client-output-buffer-limit" {
            // One line per class, as Redis writes it.
            let parts: Vec<&str> = value.split(' ').collect();
            return parts
                .chunks(4)
                .map(|c| {
                    let mem = |v: &str| format_memory(v.parse().unwrap_or(0));
                    format!("{name} {} {} {} {}", c[0], mem(c[1]), mem(c[2]), c[3])
                })
                .collect();
        }
        if name == "save" && value.is_empty() {
            return vec![format!("{name} \"\"")];
        }
        let v = if MEMORY_DIRECTIVES.contains(&name) {
            format_memory(value.parse().unwrap_or(0))
        } else if STRING_DIRECTIVES.contains(&name) {
            quoted(&value)
        } else {
            value
        };
        vec![format!("{name} {v}")]
    }

    /// CONFIG REWRITE, as Redis's rewriteConfig: the config file keeps its
    /// comments, blank lines and the directives latchkey does not know; a
    /// known directive's first line gets its current value and its other
    /// lines are blanked; directives not in the file whose value differs
    /// from the default are appended under the signature line. The new
    /// file replaces the old one atomically.
    pub fn rewrite(&self) -> Result<(), String> {
        let Some(path) = &self.config_file else {
            return Err("The server is running without a config file".into());
        };
        let old = match std::fs::read(path) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(format!("Rewriting config file: {}", io_message(&e))),
        };
        let mut lines: Vec<String> = Vec::new();
        let mut at: std::collections::HashMap<&'static str, Vec<usize>> = Default::default();
        let mut signed = false;
        for raw in old.lines() {
            let line = raw.trim_matches(|c| matches!(c, ' ' | '\t' | '\r' | '\n'));
            if line.starts_with('#') || line.is_empty() {
                signed |= line == REWRITE_SIGNATURE;
                lines.push(line.to_string());
                continue;
            }
            let name = split_args(line.as_bytes()).and_then(|a| {
                a.first()
                    .map(|n| String::from_utf8_lossy(n).to_ascii_lowercase())
            });
            if let Some(d) = name.as_deref().and_then(|n| directive(canonical(n))) {
                at.entry(d.name).or_default().push(lines.len());
            }
            lines.push(line.to_string());
        }
        let defaults = Config::default();
        let mut appended: Vec<String> = Vec::new();
        for d in DIRECTIVES {
            if canonical(d.name) != d.name {
                continue;
            }
            let new = self.rewrite_lines(d.name);
            match at.get(d.name) {
                Some(idx) => {
                    // The file's lines for it take the new lines in order;
                    // extra old lines are blanked, extra new ones appended.
                    for (k, &i) in idx.iter().enumerate() {
                        lines[i] = new.get(k).cloned().unwrap_or_default();
                    }
                    appended.extend(new.into_iter().skip(idx.len()));
                }
                None => {
                    if self.get(d.name) != defaults.get(d.name) {
                        appended.extend(new);
                    }
                }
            }
        }
        if !appended.is_empty() {
            if !signed {
                if lines.last().is_some_and(|l| !l.is_empty()) {
                    lines.push(String::new());
                }
                lines.push(REWRITE_SIGNATURE.to_string());
            }
            lines.extend(appended);
        }
        let mut text = lines.join("\n");
        text.push('\n');
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("Rewriting config file: {}", io_message(&e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_like_sdssplitargs() {
        let v = |s: &str| split_args(s.as_bytes());
        assert_eq!(
            v(r#"set "a b" 'c d' e"#).unwrap(),
            vec![
                b"set".to_vec(),
                b"a b".to_vec(),
                b"c d".to_vec(),
                b"e".to_vec()
            ]
        );
        assert_eq!(v(r#""\x41\n""#).unwrap(), vec![b"A\n".to_vec()]);
        assert_eq!(v(r#"'it\'s'"#).unwrap(), vec![b"it's".to_vec()]);
        assert_eq!(v(r#"save """#).unwrap(), vec![b"save".to_vec(), vec![]]);
        assert!(v(r#""unbalanced"#).is_none());
        assert!(v(r#""a"b"#).is_none());
        assert!(v("   ").unwrap().is_empty());
    }

    #[test]
    fn memory_units() {
        assert_eq!(parse_memory("32mb"), Some(32 << 20));
        assert_eq!(parse_memory("1k"), Some(1000));
        assert_eq!(parse_memory("1KB"), Some(1024));
        assert_eq!(parse_memory("7"), Some(7));
        assert_eq!(parse_memory("x"), None);
        assert_eq!(parse_memory("mb"), None);
    }

    #[test]
    fn file_errors_and_warnings() {
        let mut c = Config::default();
        let w = c
            .load(
                None,
                "port 7000\nsave \"\"\nappendonly no\n# c\n\nloglevel WARNING\nsave 3600 1\nlazyfree-lazy-eviction no",
            )
            .unwrap();
        assert_eq!(c.port, 7000);
        assert_eq!(c.loglevel, "warning");
        // save "" clears the defaults, the next save line adds a rule.
        assert_eq!(c.save, vec![(3600, 1)]);
        // Warned: directives latchkey ignores.
        assert_eq!(w.len(), 1, "{w:?}");
        let mut c = Config::default();
        c.load(None, "save 900 1\nsave 300 10").unwrap();
        assert_eq!(c.save, vec![(900, 1), (300, 10)]);
        let mut c = Config::default();
        c.load(None, "port 1").unwrap();
        assert_eq!(c.save, vec![(3600, 1), (300, 100), (60, 10000)]);
        assert!(Config::default().load(None, "save 0 1").is_err());
        assert!(Config::default().load(None, "save 10").is_err());
        let e = Config::default().load(None, "port 1\nfoo bar").unwrap_err();
        assert_eq!(
            e.to_string(),
            "\n*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\nReading the configuration file, \
             at line 3\n>>> 'foo bar'\nBad directive or wrong number of arguments"
        );
        let e = Config::default().load(None, "port abc").unwrap_err();
        assert!(e
            .to_string()
            .ends_with("argument couldn't be parsed into an integer"));
        let e = Config::default().load(None, "port 1 2").unwrap_err();
        assert!(e.to_string().ends_with("\nwrong number of arguments"));
        let e = Config::default()
            .load(None, "appendonly yes no")
            .unwrap_err();
        assert!(e.to_string().ends_with("\nwrong number of arguments"));
        let e = Config::default().load(None, "timeout -1").unwrap_err();
        assert!(e
            .to_string()
            .ends_with("argument must be between 0 and 2147483647 inclusive"));
        set_log_level("notice");
    }

    #[test]
    fn obuf_limits() {
        let mut c = Config::default();
        c.set(
            "client-output-buffer-limit",
            &["pubsub".into(), "1mb".into(), "512kb".into(), "10".into()],
        )
        .unwrap();
        assert_eq!(
            c.get("client-output-buffer-limit").unwrap(),
            "normal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 524288 10"
        );
        assert!(c
            .set(
                "client-output-buffer-limit",
                &["pubsub".into(), "1mb".into()]
            )
            .is_err());
    }
}

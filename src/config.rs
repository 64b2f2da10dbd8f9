//! Server configuration: defaults, command-line overrides, redis.conf files.

#[derive(Debug, Clone)]
pub struct Config {
    pub port: u16,
    pub bind: Vec<String>,
    pub requirepass: Option<String>,
    pub databases: usize,
    pub maxclients: usize,
    /// Idle seconds before a client is closed; 0 = never.
    pub timeout: u64,
    pub tcp_keepalive: u64,
    pub loglevel: String,
    pub hz: u32,
    /// Tokio worker threads (redis's `io-threads`).
    pub io_threads: usize,
    /// Hard limit in bytes for a client's queued pushes before it is closed
    /// (`client-output-buffer-limit pubsub`).
    pub pubsub_hard_limit: u64,
    pub pubsub_soft_limit: u64,
    pub pubsub_soft_seconds: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            port: 6379,
            bind: vec!["127.0.0.1".into()],
            requirepass: None,
            databases: 16,
            maxclients: 10000,
            timeout: 0,
            tcp_keepalive: 300,
            loglevel: "notice".into(),
            hz: 10,
            io_threads: 2,
            pubsub_hard_limit: 32 * 1024 * 1024,
            pubsub_soft_limit: 8 * 1024 * 1024,
            pubsub_soft_seconds: 60,
        }
    }
}

//! Server command family end to end: CONFIG, INFO, DBSIZE/FLUSH*, DEBUG,
//! OBJECT, MEMORY, COMMAND, MONITOR, SHUTDOWN over a real socket.

mod common;
use common::*;
use latchkey_server::config::Config;

// INFO's used_memory is jemalloc's counter, as in the real binary.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[test]
fn config_get_set() {
    let h = start();
    let mut c = Conn::new(h.addr);
    assert_eq!(
        c.call_str(&["CONFIG", "GET", "maxclients", "MAXCLIENTS"]),
        "*4\r\n$10\r\nmaxclients\r\n$5\r\n10000\r\n$10\r\nMAXCLIENTS\r\n$5\r\n10000\r\n"
    );
    assert_eq!(
        c.call_str(&["CONFIG", "SET", "maxclients", "50", "timeout", "7"]),
        "+OK\r\n"
    );
    assert_eq!(
        c.call_str(&["CONFIG", "GET", "time*"]),
        "*2\r\n$7\r\ntimeout\r\n$1\r\n7\r\n"
    );
    assert_eq!(
        c.call_str(&["CONFIG", "SET", "foo", "1", "maxclients", "5"]),
        "-ERR Unknown option or number of arguments for CONFIG SET - 'foo'\r\n"
    );
    assert_eq!(
        c.call_str(&["CONFIG", "SET", "maxclients", "5", "timeout", "x"]),
        "-ERR CONFIG SET failed (possibly related to argument 'timeout') - argument couldn't be parsed into an integer\r\n"
    );
    // All or nothing: maxclients kept its value.
    assert_eq!(
        c.call_str(&["CONFIG", "GET", "maxclients"]),
        "*2\r\n$10\r\nmaxclients\r\n$2\r\n50\r\n"
    );
    assert_eq!(
        c.call_str(&["CONFIG", "SET", "databases", "3"]),
        "-ERR CONFIG SET failed (possibly related to argument 'databases') - can't set immutable config\r\n"
    );
    // Every Redis parameter is listed; a value latchkey cannot honour is
    // refused, and nothing changes.
    assert_eq!(
        c.call_str(&["CONFIG", "SET", "timeout", "9", "oom-score-adj", "yes"]),
        "-ERR CONFIG SET failed (possibly related to argument 'oom-score-adj') - setting the OOM score is not implemented by latchkey; only 'no' is accepted\r\n"
    );
    assert_eq!(
        c.call_str(&["CONFIG", "GET", "oom-score-adj", "timeout"]),
        "*4\r\n$13\r\noom-score-adj\r\n$2\r\nno\r\n$7\r\ntimeout\r\n$1\r\n7\r\n"
    );
    assert_eq!(
        c.call_str(&["CONFIG", "GET", "maxmemory"]),
        "*2\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n"
    );
    // Test servers run without save rules.
    assert_eq!(
        c.call_str(&["CONFIG", "GET", "save"]),
        "*2\r\n$4\r\nsave\r\n$0\r\n\r\n"
    );
    assert_eq!(
        c.call_str(&["CONFIG", "SET", "aof-use-rdb-preamble", "no"]),
        "+OK\r\n"
    );
    assert_eq!(
        c.call_str(&["CONFIG", "GET", "aof-use-rdb-preamble"]),
        "*2\r\n$20\r\naof-use-rdb-preamble\r\n$2\r\nno\r\n"
    );
    c.send(&["HELLO", "3"]);
    c.reply();
    assert_eq!(
        c.call_str(&["CONFIG", "GET", "timeout"]),
        "%1\r\n$7\r\ntimeout\r\n$1\r\n7\r\n"
    );
}

#[test]
fn populate_info_flush() {
    let h = start_debug();
    let mut c = Conn::new(h.addr);
    assert_eq!(c.call_str(&["SET", "key:1", "mine"]), "+OK\r\n");
    assert_eq!(
        c.call_str(&["DEBUG", "POPULATE", "1000", "key", "12"]),
        "+OK\r\n"
    );
    assert_eq!(c.call_str(&["DBSIZE"]), ":1000\r\n");
    // Existing keys are skipped; values are "value:N" zero-padded to size.
    assert_eq!(c.call_str(&["GET", "key:1"]), "$4\r\nmine\r\n");
    assert_eq!(
        c.call_str(&["GET", "key:7"]),
        "$12\r\nvalue:7\0\0\0\0\0\r\n"
    );
    assert_eq!(
        c.call_str(&["DEBUG", "POPULATE", "2", "cut", "3"]),
        "+OK\r\n"
    );
    assert_eq!(c.call_str(&["GET", "cut:1"]), "$3\r\nval\r\n");
    assert_eq!(
        c.call_str(&["DEBUG", "POPULATE", "-1"]),
        "-ERR value is out of range, must be positive\r\n"
    );
    let info = c.call_str(&["INFO", "keyspace", "memory"]);
    assert!(info.contains("# Memory\r\n"), "{info}");
    assert!(info.contains("\r\n\r\n# Keyspace\r\ndb0:keys=1002,expires=0,avg_ttl=0\r\n"));
    let used: u64 = info_field(&info, "used_memory").parse().unwrap();
    let rss: u64 = info_field(&info, "used_memory_rss").parse().unwrap();
    assert!(used > 100_000 && rss > used / 2, "used {used} rss {rss}");
    assert!(info_field(&info, "mem_allocator").starts_with("jemalloc-"));
    assert_eq!(c.call_str(&["SELECT", "2"]), "+OK\r\n");
    assert_eq!(c.call_str(&["SET", "x", "1"]), "+OK\r\n");
    assert_eq!(c.call_str(&["FLUSHDB", "ASYNC"]), "+OK\r\n");
    assert_eq!(c.call_str(&["DBSIZE"]), ":0\r\n");
    assert_eq!(c.call_str(&["SELECT", "0"]), "+OK\r\n");
    assert_eq!(c.call_str(&["DBSIZE"]), ":1002\r\n");
    assert_eq!(c.call_str(&["FLUSHALL", "ASYNC"]), "+OK\r\n");
    assert_eq!(c.call_str(&["DBSIZE"]), ":0\r\n");
    assert_eq!(c.call_str(&["FLUSHALL", "now"]), "-ERR syntax error\r\n");
    let info = c.call_str(&["INFO"]);
    for s in [
        "Server",
        "Clients",
        "Memory",
        "Persistence",
        "Stats",
        "Replication",
        "CPU",
        "Cluster",
        "Keyspace",
    ] {
        assert!(info.contains(&format!("# {s}\r\n")), "{s}");
    }
    assert!(!info.contains("# Modules"));
    assert_eq!(info_field(&info, "role"), "master");
    assert_eq!(c.call_str(&["INFO", "nosuch"]), "$0\r\n\r\n");
}

#[test]
fn object_and_memory() {
    let h = start();
    let mut c = Conn::new(h.addr);
    c.call_str(&["SET", "small", "100"]);
    c.call_str(&["SET", "big", "10000"]);
    c.call_str(&["SET", "s", "hello"]);
    assert_eq!(
        c.call_str(&["OBJECT", "REFCOUNT", "small"]),
        ":2147483647\r\n"
    );
    assert_eq!(c.call_str(&["OBJECT", "REFCOUNT", "big"]), ":1\r\n");
    assert_eq!(
        c.call_str(&["OBJECT", "ENCODING", "small"]),
        "$3\r\nint\r\n"
    );
    assert_eq!(c.call_str(&["OBJECT", "ENCODING", "s"]), "$6\r\nembstr\r\n");
    assert_eq!(c.call_str(&["OBJECT", "ENCODING", "nokey"]), "$-1\r\n");
    // Whole seconds of the LRU clock: a second may tick over since the SET.
    let idle = c.call_str(&["OBJECT", "IDLETIME", "s"]);
    assert!(idle == ":0\r\n" || idle == ":1\r\n", "{idle:?}");
    assert!(c
        .call_str(&["OBJECT", "FREQ", "s"])
        .starts_with("-ERR An LFU maxmemory policy"));
    assert!(c.call_str(&["MEMORY", "USAGE", "s"]).starts_with(':'));
    assert_eq!(
        c.call_str(&["MEMORY", "USAGE", "s", "SAMPLES", "-1"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(c.call_str(&["MEMORY", "USAGE", "nokey"]), "$-1\r\n");
    assert_eq!(
        c.call_str(&["OBJECT", "ENCODING"]),
        "-ERR wrong number of arguments for 'object|encoding' command\r\n"
    );
}

#[test]
fn command_introspection() {
    let h = start();
    let mut c = Conn::new(h.addr);
    let n = c.call_str(&["COMMAND", "COUNT"]);
    assert!(n.starts_with(':'));
    assert_eq!(
        c.call_str(&["COMMAND", "INFO", "dbsize", "nosuch"]),
        "*2\r\n*10\r\n$6\r\ndbsize\r\n:1\r\n*2\r\n+readonly\r\n+fast\r\n:0\r\n:0\r\n:0\r\n\
         *3\r\n+@keyspace\r\n+@read\r\n+@fast\r\n*2\r\n$25\r\nrequest_policy:all_shards\r\n\
         $23\r\nresponse_policy:agg_sum\r\n*0\r\n*0\r\n$-1\r\n"
    );
    let all = c.call_str(&["COMMAND"]);
    let count: usize = n[1..n.len() - 2].parse().unwrap();
    assert!(all.starts_with(&format!("*{count}\r\n")));
    let docs = c.call_str(&["COMMAND", "DOCS", "config|get"]);
    assert!(docs.contains("$9\r\narguments\r\n"), "{docs}");
    assert_eq!(
        c.call_str(&["COMMAND", "LIST", "FILTERBY", "pattern", "object|enc*"]),
        "*1\r\n$15\r\nobject|encoding\r\n"
    );
    assert_eq!(
        c.call_str(&["COMMAND", "COUNT", "x"]),
        "-ERR wrong number of arguments for 'command|count' command\r\n"
    );
    assert_eq!(
        c.call_str(&["COMMAND", "foo"]),
        "-ERR unknown subcommand 'foo'. Try COMMAND HELP.\r\n"
    );
}

#[test]
fn monitor_and_shutdown() {
    // The snapshot step below moves `dir`, a protected config.
    let h = start_with(latchkey_server::config::Config {
        port: 0,
        enable_protected_configs: "yes".into(),
        ..Default::default()
    });
    let mut m = Conn::new(h.addr);
    let mut c = Conn::new(h.addr);
    assert_eq!(m.call_str(&["MONITOR"]), "+OK\r\n");
    c.call_str(&["SET", "k", "a b\n"]);
    let line = m.raw_str();
    let (_, rest) = line.split_once(" [0 127.0.0.1:").expect("monitor line");
    assert!(rest.ends_with("] \"SET\" \"k\" \"a b\\n\"\r\n"), "{line}");
    // Admin commands are not shown to monitors.
    c.call_str(&["CONFIG", "GET", "port"]);
    c.call_str(&["PING"]);
    assert!(m.raw_str().ends_with("\"PING\"\r\n"));
    assert_eq!(
        c.call_str(&["SHUTDOWN", "ABORT"]),
        "-ERR No shutdown in progress.\r\n"
    );
    // A snapshot that cannot be written keeps the server up.
    let gone = std::env::temp_dir().join(format!("latchkey-gone-{}", std::process::id()));
    std::fs::create_dir_all(&gone).unwrap();
    c.call_str(&["CONFIG", "SET", "dir", &gone.to_string_lossy()]);
    std::fs::remove_dir(&gone).unwrap();
    assert_eq!(
        c.call_str(&["SHUTDOWN", "SAVE"]),
        "-ERR Errors trying to SHUTDOWN. Check logs.\r\n"
    );
    c.send(&["SHUTDOWN", "NOSAVE"]);
    let (rest, _) = c.read_all(WAIT);
    assert!(rest.is_empty(), "no reply to SHUTDOWN");
    assert!(*h.shared.shutdown.borrow());
}

/// DEBUG is refused unless `enable-debug-command` allows it (Redis 7's
/// default is `no`); `local` allows loopback clients, as this one is.
#[test]
fn debug_needs_enable_debug_command() {
    let h = start();
    let mut c = Conn::new(h.addr);
    assert_eq!(
        c.call_str(&["DEBUG", "SLEEP", "0"]),
        "-ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server.\r\n"
    );
    assert_eq!(
        c.call_str(&["CONFIG", "SET", "enable-debug-command", "yes"]),
        "-ERR CONFIG SET failed (possibly related to argument 'enable-debug-command') - can't set immutable config\r\n"
    );
    let h = start_with(Config {
        port: 0,
        enable_debug_command: "local".into(),
        ..Default::default()
    });
    let mut c = Conn::new(h.addr);
    assert_eq!(c.call_str(&["DEBUG", "SLEEP", "0"]), "+OK\r\n");
}

/// The value of an INFO field, if the reply has it.
fn info_opt(info: &str, field: &str) -> Option<String> {
    info.split("\r\n")
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(str::to_string)
}

#[test]
fn commandstats_count_calls_rejections_and_failures() {
    let h = start();
    let mut c = Conn::new(h.addr);
    c.call(&["CONFIG", "RESETSTAT"]);
    c.call(&["SET", "k", "v"]);
    c.call(&["SET", "k", "v"]);
    c.call(&["GET"]); // arity: rejected
    c.call(&["LPUSH", "k", "x"]); // WRONGTYPE: failed
    c.call(&["CLIENT", "ID"]);
    let info = c.call_str(&["INFO", "commandstats"]);
    let set = info_opt(&info, "cmdstat_set").expect("set counted");
    assert!(set.starts_with("calls=2,usec="), "{set}");
    assert!(set.ends_with(",rejected_calls=0,failed_calls=0"), "{set}");
    let get = info_opt(&info, "cmdstat_get").expect("get counted");
    assert_eq!(
        get,
        "calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0"
    );
    let lpush = info_opt(&info, "cmdstat_lpush").expect("lpush counted");
    assert!(
        lpush.ends_with(",rejected_calls=0,failed_calls=1"),
        "{lpush}"
    );
    assert!(info_opt(&info, "cmdstat_client|id").is_some(), "{info}");
    // INFO default shows errorstats, not commandstats.
    let info = c.call_str(&["INFO"]);
    assert!(
        info.contains("# Errorstats\r\nerrorstat_ERR:count=1\r\nerrorstat_WRONGTYPE:count=1\r\n")
    );
    assert!(!info.contains("cmdstat_"));
    assert_eq!(info_opt(&info, "total_error_replies").as_deref(), Some("2"));
    // RESETSTAT clears both; only itself and the INFO are counted after.
    c.call(&["CONFIG", "RESETSTAT"]);
    let info = c.call_str(&["INFO", "commandstats", "errorstats"]);
    assert!(info_opt(&info, "cmdstat_set").is_none(), "{info}");
    assert!(info_opt(&info, "errorstat_ERR").is_none(), "{info}");
    assert!(
        info_opt(&info, "cmdstat_config|resetstat").is_some(),
        "{info}"
    );
}

#[test]
fn slowlog_and_latency_record_slow_commands() {
    let h = start_debug();
    let mut c = Conn::new(h.addr);
    c.call(&["CLIENT", "SETNAME", "slowpoke"]);
    c.call(&["CONFIG", "SET", "slowlog-log-slower-than", "20000"]);
    c.call(&["CONFIG", "SET", "latency-monitor-threshold", "10"]);
    c.call(&["SET", "fast", "1"]);
    c.call(&["DEBUG", "SLEEP", "0.05"]);
    assert_eq!(c.call_str(&["SLOWLOG", "LEN"]), ":1\r\n");
    let entry = c.call_str(&["SLOWLOG", "GET"]);
    // id 0, then time and duration, then the arguments, address and name.
    assert!(entry.starts_with("*1\r\n*6\r\n:0\r\n:"), "{entry}");
    assert!(
        entry.contains("*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$4\r\n0.05\r\n"),
        "{entry}"
    );
    assert!(entry.ends_with("$8\r\nslowpoke\r\n"), "{entry}");
    let usec: u64 = entry.split("\r\n").nth(4).unwrap()[1..].parse().unwrap();
    assert!(usec >= 50_000, "duration {usec}");
    let latest = c.call_str(&["LATENCY", "LATEST"]);
    assert!(
        latest.starts_with("*1\r\n*4\r\n$7\r\ncommand\r\n:"),
        "{latest}"
    );
    let graph = c.call_str(&["LATENCY", "GRAPH", "command"]);
    assert!(graph.contains("command - high "), "{graph}");
    let doctor = c.call_str(&["LATENCY", "DOCTOR"]);
    assert!(doctor.contains("1. command: 1 latency spikes"), "{doctor}");
    assert_eq!(c.call_str(&["LATENCY", "RESET"]), ":1\r\n");
    assert_eq!(c.call_str(&["LATENCY", "LATEST"]), "*0\r\n");
    assert_eq!(c.call_str(&["SLOWLOG", "RESET"]), "+OK\r\n");
    assert_eq!(c.call_str(&["SLOWLOG", "LEN"]), ":0\r\n");
}

#[test]
fn memory_stats_doctor_purge() {
    let h = start();
    let mut c = Conn::new(h.addr);
    c.call(&["SET", "a", "1"]);
    c.call(&["SELECT", "2"]);
    c.call(&["SET", "b", "2"]);
    c.call(&["SET", "c", "3"]);
    let stats = c.call_str(&["MEMORY", "STATS"]);
    assert!(stats.starts_with("*58\r\n"), "{stats}");
    assert!(stats.contains("$10\r\nkeys.count\r\n:3\r\n"), "{stats}");
    assert!(stats.contains("$4\r\ndb.0\r\n*6\r\n"), "{stats}");
    assert!(stats.contains("$4\r\ndb.2\r\n*6\r\n"), "{stats}");
    assert!(!stats.contains("db.1"), "{stats}");
    let doctor = c.call_str(&["MEMORY", "DOCTOR"]);
    assert!(doctor.contains("Sam"), "{doctor}");
    assert_eq!(c.call_str(&["MEMORY", "PURGE"]), "+OK\r\n");
    let malloc = c.call_str(&["MEMORY", "MALLOC-STATS"]);
    assert!(malloc.contains("Begin jemalloc statistics"), "{malloc}");
    let info = c.call_str(&["INFO", "memory"]);
    let used: u64 = info_field(&info, "used_memory").parse().unwrap();
    let peak: u64 = info_field(&info, "used_memory_peak").parse().unwrap();
    assert!(peak >= used, "peak {peak} used {used}");
    c.call(&["CONFIG", "SET", "maxmemory", "100mb"]);
    let info = c.call_str(&["INFO", "memory"]);
    assert_eq!(info_field(&info, "maxmemory"), "104857600");
    assert_eq!(info_field(&info, "maxmemory_policy"), "noeviction");
}

/// CONFIG REWRITE keeps comments, blank lines and unknown directives,
/// rewrites a known directive's first line in place (an alias under its
/// listpack name) and blanks its repeats, and appends changed directives
/// under the signature; memory sizes with their largest exact unit, strings
/// quoted. The expected lines are those redis-server 7.0.15 writes for the
/// same file and CONFIG SETs, less the directives latchkey does not have
/// (Redis appends in its hash table's order, latchkey in its table's).
#[test]
fn config_rewrite_in_place() {
    let dir = std::env::temp_dir().join(format!("latchkey-rewrite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("r.conf");
    std::fs::write(
        &path,
        "# my config\nport 0\nhash-max-ziplist-entries 100\nmaxmemory 10mb\ntimeout 5\n\
         timeout 6\nrequirepass \"s3cret\"\nloglevel notice\ndaemonize no\n\n\
         save \"\"\nappendonly no\n",
    )
    .unwrap();
    let mut config = Config::default();
    config.load(Some(&path), "").unwrap();
    let h = start_with(config);
    let mut c = Conn::new(h.addr);
    c.call(&["AUTH", "s3cret"]);
    assert_eq!(
        c.call_str(&[
            "CONFIG",
            "SET",
            "maxmemory",
            "3000000",
            "hash-max-listpack-value",
            "1024",
            "lfu-log-factor",
            "20",
            "slowlog-max-len",
            "200",
            "timeout",
            "0"
        ]),
        "+OK\r\n"
    );
    assert_eq!(c.call_str(&["CONFIG", "REWRITE"]), "+OK\r\n");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text,
        "# my config\nport 0\nhash-max-listpack-entries 100\nmaxmemory 3000000\ntimeout 0\n\n\
         requirepass \"s3cret\"\nloglevel notice\ndaemonize no\n\nsave \"\"\n\
         appendonly no\n\n# Generated by CONFIG REWRITE\nlfu-log-factor 20\n\
         slowlog-max-len 200\nhash-max-listpack-value 1kb\n"
    );
    // A second rewrite changes nothing; the file still loads.
    assert_eq!(c.call_str(&["CONFIG", "REWRITE"]), "+OK\r\n");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    let mut again = Config::default();
    again.load(Some(&path), "").unwrap();
    assert_eq!(again.maxmemory, 3_000_000);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn config_rewrite_without_a_file() {
    let h = start();
    let mut c = Conn::new(h.addr);
    assert_eq!(
        c.call_str(&["CONFIG", "REWRITE"]),
        "-ERR The server is running without a config file\r\n"
    );
}

#[test]
fn lolwut_draws_within_its_frame() {
    let h = start();
    let mut c = Conn::new(h.addr);
    assert_eq!(c.call_str(&["LOLWUT"]), "$18\r\nRedis ver. 7.0.15\n\r\n");
    // Schotter: 66 columns of Braille, 12 squares of (132-4)/8 = 16 dots
    // plus padding: 196 dots, 49 rows of four, each ending in a newline,
    // then a newline and the caption (as Redis, whose last row is never
    // the canvas's last).
    let s = c.call_str(&["LOLWUT", "VERSION", "5"]);
    let body = s
        .split_once("\r\n")
        .unwrap()
        .1
        .strip_suffix("\r\n")
        .unwrap();
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines.len(), 51, "{body}");
    assert_eq!(lines[49], "");
    assert!(lines[..49].iter().all(|l| l.chars().count() == 66));
    assert!(lines[..49]
        .iter()
        .all(|l| l.chars().all(|ch| ('\u{2800}'..='\u{28ff}').contains(&ch))));
    assert_eq!(
        lines[50],
        "Georg Nees - schotter, plotter on paper, 1968. Redis ver. 7.0.15"
    );
    // The skyline: rows x columns of colored cells, buildings on the
    // bottom row, then two caption lines.
    let s = c.call_str(&["LOLWUT", "VERSION", "6", "10", "3"]);
    let body = s
        .split_once("\r\n")
        .unwrap()
        .1
        .strip_suffix("\r\n")
        .unwrap();
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines.len(), 5, "{body}");
    assert!(lines[..3]
        .iter()
        .all(|l| l.matches("\x1b[0m").count() == 10));
    assert!(
        lines[2].contains("\x1b[0;30;40m")
            || lines[2].contains("\x1b[0;90;100m")
            || lines[2].contains("\x1b[0;37;47m")
    );
    assert_eq!(
        c.call_str(&["LOLWUT", "VERSION", "5", "x"]),
        "-ERR value is not an integer or out of range\r\n"
    );
}

/// DEBUG OBJECT gives Redis's fields; serializedlength is the RDB payload
/// without its type byte, and lists add the quicklist's figures.
#[test]
fn debug_object_fields() {
    let h = start_debug();
    let mut c = Conn::new(h.addr);
    assert_eq!(
        c.call_str(&["DEBUG", "OBJECT", "nokey"]),
        "-ERR no such key\r\n"
    );
    c.call_str(&["SET", "n", "123"]);
    c.call_str(&["SET", "s", "hello"]);
    c.call_str(&["RPUSH", "l", "a", "b", "c"]);
    let n = c.call_str(&["DEBUG", "OBJECT", "n"]);
    let re = |s: &str, enc: &str, len: usize, rc: &str| {
        let want = format!(" refcount:{rc} encoding:{enc} serializedlength:{len} lru:");
        assert!(
            s.starts_with("+Value at:0x") && s.contains(&want),
            "{s} / {want}"
        );
        assert!(s.contains(" lru_seconds_idle:"), "{s}");
    };
    // 123 as an RDB integer: one encoding byte and one byte of value.
    re(&n, "int", 2, "2147483647");
    re(&c.call_str(&["DEBUG", "OBJECT", "s"]), "embstr", 6, "1");
    let l = c.call_str(&["DEBUG", "OBJECT", "l"]);
    // The node count, the container, and the 16-byte listpack as a string
    // (as redis-server 7.0.15 answers for the same list).
    re(&l, "quicklist", 19, "1");
    // One node of 3 one-byte entries of 3 bytes each plus 7: 16 bytes.
    assert!(
        l.ends_with(" ql_nodes:1 ql_avg_node:3.00 ql_listpack_max:-2 ql_compressed:0 ql_uncompressed_size:16\r\n"),
        "{l}"
    );
    assert_eq!(
        c.call_str(&["DEBUG", "STRINGMATCH-TEST"]),
        "+Apparently Redis did not crash: test passed\r\n"
    );
}

/// A list made with list-compress-depth 2: DEBUG OBJECT's figures are
/// redis-server 7.0.15's for the same commands, with rdbcompression on and
/// off (off, only the nodes Redis keeps compressed are LZF blobs), and
/// after an LSET and an LINSERT in the middle (the ql_* figures).
#[test]
fn debug_object_compressed_list() {
    let h = start_debug();
    let mut c = Conn::new(h.addr);
    c.call_str(&["CONFIG", "SET", "list-max-listpack-size", "4"]);
    c.call_str(&["CONFIG", "SET", "list-compress-depth", "2"]);
    let mut push = vec!["RPUSH".to_string(), "s2".into()];
    push.extend((1..=40).map(|i| format!("{}-{i}", "v".repeat(46))));
    let push: Vec<&str> = push.iter().map(String::as_str).collect();
    assert_eq!(c.call_str(&push), ":40\r\n");
    let fields = |c: &mut Conn| {
        let s = c.call_str(&["DEBUG", "OBJECT", "s2"]);
        let len = s
            .split(" serializedlength:")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .map(str::to_string);
        let ql = s
            .split(" lru_seconds_idle:")
            .nth(1)
            .and_then(|r| r.split_once(' '))
            .map(|r| r.1.trim_end().to_string());
        (len.unwrap_or_default(), ql.unwrap_or_default())
    };
    let ql =
        "ql_nodes:10 ql_avg_node:4.00 ql_listpack_max:4 ql_compressed:1 ql_uncompressed_size:2101";
    assert_eq!(fields(&mut c), ("396".to_string(), ql.to_string()));
    c.call_str(&["CONFIG", "SET", "rdbcompression", "no"]);
    assert_eq!(fields(&mut c), ("1089".to_string(), ql.to_string()));
    c.call_str(&["LSET", "s2", "20", "x"]);
    c.call_str(&["LINSERT", "s2", "BEFORE", "x", "y"]);
    assert_eq!(
        fields(&mut c).1,
        "ql_nodes:11 ql_avg_node:3.73 ql_listpack_max:4 ql_compressed:1 ql_uncompressed_size:2063"
    );
}

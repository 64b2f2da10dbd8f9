//! Server command family end to end: CONFIG, INFO, DBSIZE/FLUSH*, DEBUG,
//! OBJECT, MEMORY, COMMAND, MONITOR, SHUTDOWN over a real socket.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use latchkey::config::Config;
use latchkey::server::ServerHandle;

// INFO's used_memory is jemalloc's counter, as in the real binary.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn start() -> ServerHandle {
    ServerHandle::start(Config {
        port: 0,
        ..Default::default()
    })
    .expect("server starts")
}

struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Client {
    fn new(h: &ServerHandle) -> Client {
        let s = TcpStream::connect(h.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    fn send(&mut self, args: &[&str]) {
        let mut b = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            b.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        self.w.write_all(&b).unwrap();
    }

    /// One whole reply, raw.
    fn reply(&mut self) -> String {
        let mut line = String::new();
        self.r.read_line(&mut line).unwrap();
        let n: i64 = line[1..line.len() - 2].parse().unwrap_or(0);
        match line.as_bytes()[0] {
            b'$' | b'=' if n >= 0 => {
                let mut body = vec![0; n as usize + 2];
                self.r.read_exact(&mut body).unwrap();
                line + &String::from_utf8_lossy(&body)
            }
            b'*' | b'~' | b'%' if n > 0 => {
                let k = if line.starts_with('%') { 2 * n } else { n };
                (0..k).fold(line, |acc, _| acc + &self.reply())
            }
            _ => line,
        }
    }

    fn cmd(&mut self, args: &[&str]) -> String {
        self.send(args);
        self.reply()
    }
}

fn info_field(info: &str, name: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in INFO"))
        .to_string()
}

#[test]
fn config_get_set() {
    let h = start();
    let mut c = Client::new(&h);
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "maxclients", "MAXCLIENTS"]),
        "*4\r\n$10\r\nmaxclients\r\n$5\r\n10000\r\n$10\r\nMAXCLIENTS\r\n$5\r\n10000\r\n"
    );
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "maxclients", "50", "timeout", "7"]),
        "+OK\r\n"
    );
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "time*"]),
        "*2\r\n$7\r\ntimeout\r\n$1\r\n7\r\n"
    );
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "foo", "1", "maxclients", "5"]),
        "-ERR Unknown option or number of arguments for CONFIG SET - 'foo'\r\n"
    );
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "maxclients", "5", "timeout", "x"]),
        "-ERR CONFIG SET failed (possibly related to argument 'timeout') - argument couldn't be parsed into an integer\r\n"
    );
    // All or nothing: maxclients kept its value.
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "maxclients"]),
        "*2\r\n$10\r\nmaxclients\r\n$2\r\n50\r\n"
    );
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "databases", "3"]),
        "-ERR CONFIG SET failed (possibly related to argument 'databases') - can't set immutable config\r\n"
    );
    // Redis directives latchkey does not honour are never listed.
    assert_eq!(c.cmd(&["CONFIG", "GET", "maxmemory"]), "*0\r\n");
    // Latchkey keeps nothing on disk: these values are true.
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "save"]),
        "*2\r\n$4\r\nsave\r\n$0\r\n\r\n"
    );
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "appendonly", "yes"]),
        "-ERR CONFIG SET failed (possibly related to argument 'appendonly') - latchkey does not persist data (only save \"\" and appendonly no)\r\n"
    );
    c.send(&["HELLO", "3"]);
    c.reply();
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "timeout"]),
        "%1\r\n$7\r\ntimeout\r\n$1\r\n7\r\n"
    );
}

#[test]
fn populate_info_flush() {
    let h = start();
    let mut c = Client::new(&h);
    assert_eq!(c.cmd(&["SET", "key:1", "mine"]), "+OK\r\n");
    assert_eq!(
        c.cmd(&["DEBUG", "POPULATE", "1000", "key", "12"]),
        "+OK\r\n"
    );
    assert_eq!(c.cmd(&["DBSIZE"]), ":1000\r\n");
    // Existing keys are skipped; values are "value:N" zero-padded to size.
    assert_eq!(c.cmd(&["GET", "key:1"]), "$4\r\nmine\r\n");
    assert_eq!(c.cmd(&["GET", "key:7"]), "$12\r\nvalue:7\0\0\0\0\0\r\n");
    assert_eq!(c.cmd(&["DEBUG", "POPULATE", "2", "cut", "3"]), "+OK\r\n");
    assert_eq!(c.cmd(&["GET", "cut:1"]), "$3\r\nval\r\n");
    assert_eq!(
        c.cmd(&["DEBUG", "POPULATE", "-1"]),
        "-ERR value is out of range, must be positive\r\n"
    );
    let info = c.cmd(&["INFO", "keyspace", "memory"]);
    assert!(info.contains("# Memory\r\n"), "{info}");
    assert!(info.contains("\r\n\r\n# Keyspace\r\ndb0:keys=1002,expires=0,avg_ttl=0\r\n"));
    let used: u64 = info_field(&info, "used_memory").parse().unwrap();
    let rss: u64 = info_field(&info, "used_memory_rss").parse().unwrap();
    assert!(used > 100_000 && rss > used / 2, "used {used} rss {rss}");
    assert!(info_field(&info, "mem_allocator").starts_with("jemalloc-"));
    assert_eq!(c.cmd(&["SELECT", "2"]), "+OK\r\n");
    assert_eq!(c.cmd(&["SET", "x", "1"]), "+OK\r\n");
    assert_eq!(c.cmd(&["FLUSHDB", "ASYNC"]), "+OK\r\n");
    assert_eq!(c.cmd(&["DBSIZE"]), ":0\r\n");
    assert_eq!(c.cmd(&["SELECT", "0"]), "+OK\r\n");
    assert_eq!(c.cmd(&["DBSIZE"]), ":1002\r\n");
    assert_eq!(c.cmd(&["FLUSHALL", "ASYNC"]), "+OK\r\n");
    assert_eq!(c.cmd(&["DBSIZE"]), ":0\r\n");
    assert_eq!(c.cmd(&["FLUSHALL", "now"]), "-ERR syntax error\r\n");
    let info = c.cmd(&["INFO"]);
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
    assert_eq!(c.cmd(&["INFO", "nosuch"]), "$0\r\n\r\n");
}

#[test]
fn object_and_memory() {
    let h = start();
    let mut c = Client::new(&h);
    c.cmd(&["SET", "small", "100"]);
    c.cmd(&["SET", "big", "10000"]);
    c.cmd(&["SET", "s", "hello"]);
    assert_eq!(c.cmd(&["OBJECT", "REFCOUNT", "small"]), ":2147483647\r\n");
    assert_eq!(c.cmd(&["OBJECT", "REFCOUNT", "big"]), ":1\r\n");
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "small"]), "$3\r\nint\r\n");
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "s"]), "$6\r\nembstr\r\n");
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "nokey"]), "$-1\r\n");
    // Whole seconds of the LRU clock: a second may tick over since the SET.
    let idle = c.cmd(&["OBJECT", "IDLETIME", "s"]);
    assert!(idle == ":0\r\n" || idle == ":1\r\n", "{idle:?}");
    assert!(c
        .cmd(&["OBJECT", "FREQ", "s"])
        .starts_with("-ERR An LFU maxmemory policy"));
    assert!(c.cmd(&["MEMORY", "USAGE", "s"]).starts_with(':'));
    assert_eq!(
        c.cmd(&["MEMORY", "USAGE", "s", "SAMPLES", "-1"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(c.cmd(&["MEMORY", "USAGE", "nokey"]), "$-1\r\n");
    assert_eq!(
        c.cmd(&["OBJECT", "ENCODING"]),
        "-ERR wrong number of arguments for 'object|encoding' command\r\n"
    );
}

#[test]
fn command_introspection() {
    let h = start();
    let mut c = Client::new(&h);
    let n = c.cmd(&["COMMAND", "COUNT"]);
    assert!(n.starts_with(':'));
    assert_eq!(
        c.cmd(&["COMMAND", "INFO", "dbsize", "nosuch"]),
        "*2\r\n*10\r\n$6\r\ndbsize\r\n:1\r\n*2\r\n+readonly\r\n+fast\r\n:0\r\n:0\r\n:0\r\n\
         *3\r\n+@keyspace\r\n+@read\r\n+@fast\r\n*0\r\n*0\r\n*0\r\n*-1\r\n"
    );
    let all = c.cmd(&["COMMAND"]);
    let count: usize = n[1..n.len() - 2].parse().unwrap();
    assert!(all.starts_with(&format!("*{count}\r\n")));
    let docs = c.cmd(&["COMMAND", "DOCS", "config|get"]);
    assert!(docs.contains("$9\r\narguments\r\n"), "{docs}");
    assert_eq!(
        c.cmd(&["COMMAND", "LIST", "FILTERBY", "pattern", "object|enc*"]),
        "*1\r\n$15\r\nobject|encoding\r\n"
    );
    assert_eq!(
        c.cmd(&["COMMAND", "COUNT", "x"]),
        "-ERR wrong number of arguments for 'command|count' command\r\n"
    );
    assert_eq!(
        c.cmd(&["COMMAND", "foo"]),
        "-ERR unknown subcommand 'foo'. Try COMMAND HELP.\r\n"
    );
}

#[test]
fn monitor_and_shutdown() {
    let h = start();
    let mut m = Client::new(&h);
    let mut c = Client::new(&h);
    assert_eq!(m.cmd(&["MONITOR"]), "+OK\r\n");
    c.cmd(&["SET", "k", "a b\n"]);
    let line = m.reply();
    let (_, rest) = line.split_once(" [0 127.0.0.1:").expect("monitor line");
    assert!(rest.ends_with("] \"SET\" \"k\" \"a b\\n\"\r\n"), "{line}");
    // Admin commands are not shown to monitors.
    c.cmd(&["CONFIG", "GET", "port"]);
    c.cmd(&["PING"]);
    assert!(m.reply().ends_with("\"PING\"\r\n"));
    assert_eq!(
        c.cmd(&["SHUTDOWN", "ABORT"]),
        "-ERR No shutdown in progress.\r\n"
    );
    assert_eq!(
        c.cmd(&["SHUTDOWN", "SAVE"]),
        "-ERR Errors trying to SHUTDOWN. Check logs.\r\n"
    );
    c.send(&["SHUTDOWN", "NOSAVE"]);
    let mut rest = Vec::new();
    let _ = c.r.read_to_end(&mut rest);
    assert!(rest.is_empty(), "no reply to SHUTDOWN");
    assert!(*h.shared.shutdown.borrow());
}

//! Third phase: data moves between redis-server 7.0.15 and latchkey in
//! Redis's own formats, both ways, and arrives whole.
//!
//! Both servers are filled with the same data set (every type in its small
//! and large encodings, TTLs as absolute times so both agree, several
//! databases, a function library, and a bulk of keys), and must agree on
//! DEBUG DIGEST before anything moves. Then:
//! - `rdb/redis-to-latchkey`: Redis SAVEs; the latchkey-server binary
//!   starts over that file; same digest, same key counts, the library runs.
//! - `rdb/latchkey-to-redis`: latchkey SAVEs; `redis-check-rdb` accepts the
//!   file; a redis-server starts over it with the same digest and gives
//!   every fixture key the encoding it gives it from its own file.
//! - `dump/redis-to-latchkey` and `dump/latchkey-to-redis`: every key
//!   DUMPed on one server is RESTOREd (with its PEXPIRETIME, ABSTTL) into
//!   the other, emptied first; same digest.
//! - `aof-latchkey-to-redis` / `aof-redis-to-latchkey`: a server started
//!   over Redis's file turns `appendonly` on (the data goes into the base
//!   file), takes more writes (into the incremental file: TTLs, a
//!   transaction, a script, several databases), and its `appendonlydir`
//!   starts the other server with the same digest; redis-check-aof
//!   accepts latchkey's. The `aof-commands-*` pair does the same with
//!   `aof-use-rdb-preamble no`: the base file holds commands.
//! - `bgsave-under-writes-to-redis`: latchkey, started over Redis's file,
//!   BGSAVEs while writes change every database; the file passes
//!   redis-check-rdb and loads into redis-server with the digest from
//!   before the writes.
//!
//! Each server runs as its own process in its own temporary directory; all
//! are killed and the directories removed when the phase ends, whatever
//! happened.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::cli::CliResult;
use crate::oracle::{free_port, RedisProc};
use crate::resp::{encode, escape, Conn, Node, Reply};

/// Keys DEBUG POPULATE adds to database 1 (the bulk of the data set).
const BULK_KEYS: usize = 100_000;
/// A function library (FCALL rt_answer 0 is 42).
const LIBRARY: &str =
    "#!lua name=rtlib\nredis.register_function('rt_answer', function() return 42 end)";

/// Members of each large collection.
const BIG: usize = 20_000;

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let d = std::env::temp_dir().join(format!(
            "latchkey-compat-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create a temporary directory");
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The latchkey-server binary, killed on drop.
struct LatchkeyProc {
    child: Child,
    port: u16,
}

impl LatchkeyProc {
    fn start_in(dir: &Path) -> Result<LatchkeyProc, String> {
        LatchkeyProc::start_with(dir, &[])
    }

    fn start_with(dir: &Path, extra: &[&str]) -> Result<LatchkeyProc, String> {
        let port = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_latchkey-server"));
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--enable-debug-command", "yes", "--save", ""])
            .arg("--dir")
            .arg(dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start latchkey-server: {e}"))?;
        let mut p = LatchkeyProc { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(st)) = p.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = p.child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                return Err(format!("latchkey-server exited ({st}): {err}"));
            }
            if let Ok(mut c) = Conn::connect_patient(port) {
                if text(&call(&mut c, &["PING"])) == "PONG" {
                    return Ok(p);
                }
            }
            if Instant::now() > deadline {
                return Err("latchkey-server did not start within 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for LatchkeyProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn args(a: &[&str]) -> Vec<Vec<u8>> {
    a.iter().map(|s| s.as_bytes().to_vec()).collect()
}

fn call(c: &mut Conn, a: &[&str]) -> Reply {
    c.send(&encode(&args(a)));
    c.read_reply()
}

/// A reply's text: a string's payload, an integer's digits, or else its
/// escaped bytes.
fn text(r: &Reply) -> String {
    match r {
        Reply::Node(n) if n.kind == b':' => {
            String::from_utf8_lossy(&n.head[1..n.head.len() - 2]).into_owned()
        }
        Reply::Node(n) => n.text().unwrap_or_else(|| escape(&n.bytes())),
        other => String::from_utf8_lossy(&other.render_bytes()).into_owned(),
    }
}

/// Sends `cmds` pipelined in batches and checks no reply is an error.
fn pipeline(c: &mut Conn, cmds: &[Vec<Vec<u8>>]) -> Result<(), String> {
    for batch in cmds.chunks(500) {
        let mut buf = Vec::new();
        for cmd in batch {
            buf.extend(encode(cmd));
        }
        c.send(&buf);
        for cmd in batch {
            let r = c.read_reply();
            match &r {
                Reply::Node(n) if n.kind != b'-' => {}
                _ => {
                    return Err(format!(
                        "{} -> {}",
                        String::from_utf8_lossy(&cmd[0]),
                        escape(&r.render_bytes())
                    ))
                }
            }
        }
    }
    Ok(())
}

fn cmd(parts: &[&str]) -> Vec<Vec<u8>> {
    args(parts)
}

fn cmd_owned(parts: Vec<String>) -> Vec<Vec<u8>> {
    parts.into_iter().map(String::into_bytes).collect()
}

/// The fixture keys of database 0, whose encodings are compared.
const FIXTURE: &[&str] = &[
    "str:int",
    "str:neg",
    "str:embstr",
    "str:raw",
    "str:bin",
    "str:empty",
    "str:bigint",
    "str:hll",
    "list:small",
    "list:quick",
    "list:bigelem",
    "list:compressed",
    "list:plain",
    "set:intset",
    "set:bigintset",
    "set:strs",
    "set:big",
    "hash:small",
    "hash:longval",
    "hash:big",
    "zset:small",
    "zset:longmember",
    "zset:big",
    "ttl:str",
    "ttl:hash",
    "ttl:list",
    "stream:small",
    "stream:big",
    "stream:empty",
];

/// Streams whose XINFO STREAM FULL (entries, groups, pending entries with
/// their times, consumers) is compared: the digest covers entries only.
const STREAMS: &[&str] = &["stream:small", "stream:big", "stream:empty"];

/// The data set, as commands; `at` is the absolute expire time (ms) all
/// TTL keys get, so both servers hold the same content.
fn data_set(at: i64) -> Vec<Vec<Vec<u8>>> {
    let mut v = vec![
        cmd(&["SET", "str:int", "12345"]),
        cmd(&["SET", "str:neg", "-7"]),
        cmd(&["SET", "str:embstr", "hello world"]),
        cmd_owned(vec![
            "SET".into(),
            "str:raw".into(),
            "abcdefgh".repeat(1000),
        ]),
        vec![
            b"SET".to_vec(),
            b"str:bin".to_vec(),
            b"\x00\xff\r\n\x01".to_vec(),
        ],
        cmd(&["SET", "str:empty", ""]),
        cmd(&["SET", "str:bigint", "9223372036854775808"]),
        cmd(&["PFADD", "str:hll", "a", "b", "c", "d"]),
        cmd(&["RPUSH", "list:small", "a", "1", "", "-5", "hello"]),
        cmd_owned(vec![
            "RPUSH".into(),
            "list:bigelem".into(),
            "x".repeat(20_000),
            "y".into(),
        ]),
        cmd(&["SADD", "set:intset", "1", "-70000", "9000000000"]),
        cmd(&["SADD", "set:strs", "a", "b", "c"]),
        cmd(&["HSET", "hash:small", "a", "1", "b", "", "c", "3"]),
        cmd_owned(vec![
            "HSET".into(),
            "hash:longval".into(),
            "f".into(),
            "v".repeat(100),
        ]),
        cmd(&[
            "ZADD",
            "zset:small",
            "1",
            "a",
            "2.5",
            "b",
            "-inf",
            "c",
            "inf",
            "d",
        ]),
        cmd_owned(vec![
            "ZADD".into(),
            "zset:longmember".into(),
            "1".into(),
            "m".repeat(100),
        ]),
        cmd(&["SET", "ttl:str", "v"]),
        cmd(&["HSET", "ttl:hash", "f", "v"]),
        cmd(&["RPUSH", "ttl:list", "a", "b"]),
    ];
    for k in ["ttl:str", "ttl:hash", "ttl:list"] {
        v.push(cmd_owned(vec![
            "PEXPIREAT".into(),
            k.into(),
            at.to_string(),
        ]));
    }
    // A list whose inner nodes are compressed (list-compress-depth 1,
    // two elements a node), and one with plain nodes between packed ones.
    v.push(cmd(&["CONFIG", "SET", "list-compress-depth", "1"]));
    v.push(cmd(&["CONFIG", "SET", "list-max-listpack-size", "2"]));
    let mut compressed = vec!["RPUSH".to_string(), "list:compressed".into()];
    compressed.extend((0..40).map(|i| format!("{}:{i}", "compressible".repeat(6))));
    v.push(cmd_owned(compressed));
    v.push(cmd(&["CONFIG", "SET", "list-max-listpack-size", "-2"]));
    v.push(cmd(&["CONFIG", "SET", "list-compress-depth", "0"]));
    v.push(cmd(&["DEBUG", "QUICKLIST-PACKED-THRESHOLD", "5b"]));
    v.push(cmd(&[
        "RPUSH",
        "list:plain",
        "aa",
        "bb",
        "cccccccccc",
        "dd",
        "12345678",
        "ee",
    ]));
    v.push(cmd(&["DEBUG", "QUICKLIST-PACKED-THRESHOLD", "0"]));
    let nums = |n: usize| (0..n).map(|i| i.to_string());
    let mut quick = vec!["RPUSH".to_string(), "list:quick".into()];
    quick.extend(nums(BIG));
    v.push(cmd_owned(quick));
    let mut bis = vec!["SADD".to_string(), "set:bigintset".into()];
    bis.extend(nums(500));
    v.push(cmd_owned(bis));
    let mut sb = vec!["SADD".to_string(), "set:big".into()];
    sb.extend((0..BIG).map(|i| format!("member:{i}")));
    v.push(cmd_owned(sb));
    let mut hb = vec!["HSET".to_string(), "hash:big".into()];
    for i in 0..BIG {
        hb.push(format!("field:{i}"));
        hb.push(format!("value:{}", i * 7));
    }
    v.push(cmd_owned(hb));
    let mut zb = vec!["ZADD".to_string(), "zset:big".into()];
    for i in 0..BIG {
        zb.push(format!("{}", i as f64 / 3.0));
        zb.push(format!("m{i}"));
    }
    v.push(cmd_owned(zb));
    // Streams: mixed fields, several nodes with deletions, groups with
    // pending entries and an idle consumer, an emptied one with an ID.
    v.push(cmd(&["XADD", "stream:small", "1-1", "a", "1", "b", "x"]));
    v.push(cmd(&["XADD", "stream:small", "1-2", "c", "-3"]));
    v.push(cmd(&["XGROUP", "CREATE", "stream:small", "g", "0"]));
    v.push(cmd(&[
        "XREADGROUP",
        "GROUP",
        "g",
        "alice",
        "COUNT",
        "1",
        "STREAMS",
        "stream:small",
        ">",
    ]));
    v.push(cmd(&[
        "XGROUP",
        "CREATECONSUMER",
        "stream:small",
        "g",
        "bob",
    ]));
    for i in 1..=BIG {
        v.push(cmd_owned(vec![
            "XADD".into(),
            "stream:big".into(),
            format!("{i}-0"),
            "field".into(),
            format!("value:{i}"),
            "n".into(),
            (i * 3).to_string(),
        ]));
    }
    v.push(cmd(&["XDEL", "stream:big", "1-0", "150-0", "151-0"]));
    v.push(cmd(&["XGROUP", "CREATE", "stream:big", "g1", "0"]));
    v.push(cmd(&["XGROUP", "CREATE", "stream:big", "g2", "$"]));
    v.push(cmd(&[
        "XREADGROUP",
        "GROUP",
        "g1",
        "c1",
        "COUNT",
        "120",
        "STREAMS",
        "stream:big",
        ">",
    ]));
    v.push(cmd(&[
        "XCLAIM",
        "stream:big",
        "g1",
        "c2",
        "0",
        "5-0",
        "6-0",
    ]));
    v.push(cmd(&["XACK", "stream:big", "g1", "7-0"]));
    v.push(cmd(&["XADD", "stream:empty", "5-5", "a", "1"]));
    v.push(cmd(&["XDEL", "stream:empty", "5-5"]));
    // The bulk, and other databases.
    v.push(cmd(&["SELECT", "1"]));
    v.push(cmd_owned(vec![
        "DEBUG".into(),
        "POPULATE".into(),
        BULK_KEYS.to_string(),
        "bulk".into(),
        "20".into(),
    ]));
    v.push(cmd(&["SELECT", "3"]));
    v.push(cmd(&["SET", "db3:a", "1"]));
    v.push(cmd(&["ZADD", "db3:z", "1", "x"]));
    v.push(cmd(&["SELECT", "15"]));
    v.push(cmd(&["HSET", "db15:h", "k", "v"]));
    v.push(cmd_owned(vec![
        "PEXPIREAT".into(),
        "db15:h".into(),
        at.to_string(),
    ]));
    v.push(cmd(&["SELECT", "0"]));
    v.push(cmd(&["FUNCTION", "LOAD", LIBRARY]));
    v
}

/// What the comparisons read from a server.
#[derive(Debug, PartialEq)]
struct Snapshot {
    digest: String,
    /// DBSIZE of databases 0..16.
    sizes: Vec<String>,
    /// FCALL rt_answer's reply.
    fcall: String,
    /// XINFO STREAM ... FULL COUNT 0 of each of `STREAMS`.
    streams: Vec<String>,
}

fn snapshot(port: u16) -> Result<Snapshot, String> {
    let mut c = Conn::connect_patient(port).map_err(|e| format!("connect: {e}"))?;
    let digest = text(&call(&mut c, &["DEBUG", "DIGEST"]));
    let mut sizes = Vec::new();
    for db in 0..16 {
        call(&mut c, &["SELECT", &db.to_string()]);
        sizes.push(text(&call(&mut c, &["DBSIZE"])));
    }
    call(&mut c, &["SELECT", "0"]);
    let fcall = text(&call(&mut c, &["FCALL", "rt_answer", "0"]));
    let streams = STREAMS
        .iter()
        .map(|k| stream_view(call(&mut c, &["XINFO", "STREAM", k, "FULL", "COUNT", "0"])))
        .collect();
    Ok(Snapshot {
        digest,
        sizes,
        fcall,
        streams,
    })
}

/// XINFO STREAM ... FULL without the clock: consumers' seen times and
/// pending entries' delivery times masked (the same commands run on two
/// servers at two moments), everything else kept.
fn stream_view(r: Reply) -> String {
    fn mask_times(n: &mut Node) {
        let mut i = 0;
        while i + 1 < n.kids.len() {
            if n.kids[i].text().as_deref() == Some("pending") {
                for e in &mut n.kids[i + 1].kids {
                    match e.kids.len() {
                        4 => e.kids[2].mask(),
                        3 => e.kids[1].mask(),
                        _ => {}
                    }
                }
            }
            i += 2;
        }
        for k in &mut n.kids {
            mask_times(k);
        }
    }
    match r {
        Reply::Node(mut n) => {
            n.mask_field("seen-time");
            mask_times(&mut n);
            escape(&n.bytes())
        }
        other => text(&other),
    }
}

fn encodings(port: u16) -> Result<Vec<(String, String)>, String> {
    let mut c = Conn::connect_patient(port).map_err(|e| format!("connect: {e}"))?;
    Ok(FIXTURE
        .iter()
        .map(|k| {
            (
                k.to_string(),
                text(&call(&mut c, &["OBJECT", "ENCODING", k])),
            )
        })
        .collect())
}

fn save(port: u16) -> Result<(), String> {
    let mut c = Conn::connect_patient(port).map_err(|e| format!("connect: {e}"))?;
    match text(&call(&mut c, &["SAVE"])) {
        s if s == "OK" => Ok(()),
        s => Err(format!("SAVE -> {s}")),
    }
}

fn compare(what: &str, want: &Snapshot, got: &Snapshot) -> Option<String> {
    (want != got).then(|| format!("  {what}\n    want: {want:?}\n    got:  {got:?}"))
}

/// Every key of every database of `from`, DUMPed and RESTOREd into `to`
/// (FLUSHALLed first; functions stay).
fn dump_restore(from: u16, to: u16) -> Result<(), String> {
    let mut src = Conn::connect_patient(from).map_err(|e| format!("connect: {e}"))?;
    let mut dst = Conn::connect_patient(to).map_err(|e| format!("connect: {e}"))?;
    call(&mut dst, &["FLUSHALL"]);
    for db in 0..16 {
        let d = db.to_string();
        call(&mut src, &["SELECT", &d]);
        call(&mut dst, &["SELECT", &d]);
        let mut cursor = "0".to_string();
        let mut rounds = 0;
        loop {
            rounds += 1;
            if rounds > 1_000_000 {
                return Err("SCAN did not end".into());
            }
            let r = call(&mut src, &["SCAN", &cursor, "COUNT", "1000"]);
            let Reply::Node(n) = r else {
                return Err(format!("SCAN -> {}", escape(&r.render_bytes())));
            };
            let (Some(next), Some(keys)) = (n.kids.first(), n.kids.get(1)) else {
                return Err(format!("SCAN -> {}", escape(&n.bytes())));
            };
            cursor = next.text().unwrap_or_default();
            let keys: Vec<Vec<u8>> = keys.kids.iter().filter_map(|k| k.payload()).collect();
            // Pipelined: DUMP and PEXPIRETIME of each key, then RESTOREs.
            let mut buf = Vec::new();
            for k in &keys {
                buf.extend(encode(&[b"DUMP".to_vec(), k.clone()]));
                buf.extend(encode(&[b"PEXPIRETIME".to_vec(), k.clone()]));
            }
            src.send(&buf);
            let mut restores = Vec::new();
            for k in &keys {
                let dump = src.read_reply();
                let ttl = text(&src.read_reply());
                let Reply::Node(d) = dump else {
                    return Err("DUMP: no reply".into());
                };
                let Some(payload) = d.payload() else {
                    continue; // expired in between
                };
                let at = if ttl.starts_with('-') {
                    "0".into()
                } else {
                    ttl
                };
                restores.push(vec![
                    b"RESTORE".to_vec(),
                    k.clone(),
                    at.into_bytes(),
                    payload,
                    b"ABSTTL".to_vec(),
                ]);
            }
            pipeline(&mut dst, &restores)?;
            if cursor == "0" {
                break;
            }
        }
    }
    call(&mut src, &["SELECT", "0"]);
    Ok(())
}

fn check_rdb(path: &Path) -> Option<String> {
    match Command::new("redis-check-rdb").arg(path).output() {
        Ok(o) => {
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            (!o.status.success() || !out.contains("RDB looks OK"))
                .then(|| format!("  redis-check-rdb {}:\n{out}", o.status))
        }
        Err(e) => Some(format!("  cannot run redis-check-rdb: {e}")),
    }
}

fn result(name: &str, f: Result<Option<String>, String>) -> CliResult {
    CliResult {
        name: name.into(),
        failure: match f {
            Ok(None) => None,
            Ok(Some(m)) => Some(m),
            Err(e) => Some(format!("  {e}")),
        },
    }
}

/// The servers and files the phase shares.
struct World {
    redis_dir: TempDir,
    lk_dir: TempDir,
    redis: RedisProc,
    lk: LatchkeyProc,
    want: Snapshot,
}

fn set_up() -> Result<World, String> {
    let redis_dir = TempDir::new("rt-redis");
    let lk_dir = TempDir::new("rt-latchkey");
    let redis = RedisProc::start_in(&redis_dir.0, &[])?;
    let lk = LatchkeyProc::start_in(&lk_dir.0)?;
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_millis() as i64
        + 3_600_000;
    let data = data_set(at);
    for port in [redis.port, lk.port] {
        let mut c = Conn::connect_patient(port).map_err(|e| format!("connect: {e}"))?;
        pipeline(&mut c, &data)?;
    }
    let want = snapshot(redis.port)?;
    // A comparison of two broken replies must not pass.
    let hex = want.digest.len() == 40 && want.digest.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex || want.digest == "0".repeat(40) || want.sizes[1] != BULK_KEYS.to_string() {
        return Err(format!(
            "Redis's data set is not what it should be: {want:?}"
        ));
    }
    let got = snapshot(lk.port)?;
    if let Some(m) = compare("the same commands gave different data", &want, &got) {
        return Err(m);
    }
    Ok(World {
        redis_dir,
        lk_dir,
        redis,
        lk,
        want,
    })
}

pub fn run(selected: &dyn Fn(&str) -> bool) -> Vec<CliResult> {
    let names = [
        "roundtrip/rdb-redis-to-latchkey",
        "roundtrip/rdb-latchkey-to-redis",
        "roundtrip/dump-redis-to-latchkey",
        "roundtrip/dump-latchkey-to-redis",
        "roundtrip/bgsave-under-writes-to-redis",
        "roundtrip/aof-latchkey-to-redis",
        "roundtrip/aof-redis-to-latchkey",
        "roundtrip/aof-commands-latchkey-to-redis",
        "roundtrip/aof-commands-redis-to-latchkey",
    ];
    let wanted: Vec<&str> = names.iter().copied().filter(|n| selected(n)).collect();
    if wanted.is_empty() {
        return Vec::new();
    }
    let w = match set_up() {
        Ok(w) => w,
        Err(e) => {
            return wanted
                .iter()
                .map(|n| result(n, Err(format!("set-up: {e}"))))
                .collect()
        }
    };
    let mut out = Vec::new();
    for name in wanted {
        let r = match name {
            "roundtrip/rdb-redis-to-latchkey" => rdb_redis_to_latchkey(&w),
            "roundtrip/rdb-latchkey-to-redis" => rdb_latchkey_to_redis(&w),
            "roundtrip/dump-redis-to-latchkey" => dump_redis_to_latchkey(&w),
            "roundtrip/bgsave-under-writes-to-redis" => bgsave_under_writes(&w),
            "roundtrip/aof-latchkey-to-redis" => aof_latchkey_to_redis(&w, true),
            "roundtrip/aof-redis-to-latchkey" => aof_redis_to_latchkey(&w, true),
            "roundtrip/aof-commands-latchkey-to-redis" => aof_latchkey_to_redis(&w, false),
            "roundtrip/aof-commands-redis-to-latchkey" => aof_redis_to_latchkey(&w, false),
            _ => dump_latchkey_to_redis(&w),
        };
        out.push(result(name, r));
    }
    out
}

fn rdb_redis_to_latchkey(w: &World) -> Result<Option<String>, String> {
    save(w.redis.port)?;
    let dir = TempDir::new("rt-load-lk");
    std::fs::copy(w.redis_dir.0.join("dump.rdb"), dir.0.join("dump.rdb"))
        .map_err(|e| format!("copy Redis's dump.rdb: {e}"))?;
    let lk = LatchkeyProc::start_in(&dir.0)?;
    let got = snapshot(lk.port)?;
    Ok(compare(
        "latchkey started over Redis's dump.rdb",
        &w.want,
        &got,
    ))
}

fn rdb_latchkey_to_redis(w: &World) -> Result<Option<String>, String> {
    save(w.lk.port)?;
    let file = w.lk_dir.0.join("dump.rdb");
    if let Some(m) = check_rdb(&file) {
        return Ok(Some(m));
    }
    let dir = TempDir::new("rt-load-redis");
    std::fs::copy(&file, dir.0.join("dump.rdb"))
        .map_err(|e| format!("copy latchkey's dump.rdb: {e}"))?;
    let redis = RedisProc::start_in(&dir.0, &[])?;
    let got = snapshot(redis.port)?;
    if let Some(m) = compare(
        "redis-server started over latchkey's dump.rdb",
        &w.want,
        &got,
    ) {
        return Ok(Some(m));
    }
    // The encodings Redis gives what it loads from its own file.
    save(w.redis.port)?;
    let own_dir = TempDir::new("rt-load-own");
    std::fs::copy(w.redis_dir.0.join("dump.rdb"), own_dir.0.join("dump.rdb"))
        .map_err(|e| format!("copy Redis's dump.rdb: {e}"))?;
    let own = RedisProc::start_in(&own_dir.0, &[])?;
    let want_enc = encodings(own.port)?;
    let enc = encodings(redis.port)?;
    let diff: Vec<String> = want_enc
        .iter()
        .zip(&enc)
        .filter(|(a, b)| a != b)
        .map(|(a, b)| {
            format!(
                "    {}: {} from Redis's file, {} from latchkey's",
                a.0, a.1, b.1
            )
        })
        .collect();
    Ok((!diff.is_empty()).then(|| format!("  encodings after the load:\n{}", diff.join("\n"))))
}

fn dump_redis_to_latchkey(w: &World) -> Result<Option<String>, String> {
    let dir = TempDir::new("rt-dump-lk");
    let lk = LatchkeyProc::start_in(&dir.0)?;
    let mut c = Conn::connect_patient(lk.port).map_err(|e| format!("connect: {e}"))?;
    call(&mut c, &["FUNCTION", "LOAD", LIBRARY]);
    dump_restore(w.redis.port, lk.port)?;
    let got = snapshot(lk.port)?;
    Ok(compare(
        "RESTOREd into latchkey from Redis's DUMPs",
        &w.want,
        &got,
    ))
}

fn dump_latchkey_to_redis(w: &World) -> Result<Option<String>, String> {
    let dir = TempDir::new("rt-dump-redis");
    let redis = RedisProc::start_in(&dir.0, &[])?;
    let mut c = Conn::connect_patient(redis.port).map_err(|e| format!("connect: {e}"))?;
    call(&mut c, &["FUNCTION", "LOAD", LIBRARY]);
    dump_restore(w.lk.port, redis.port)?;
    let got = snapshot(redis.port)?;
    Ok(compare(
        "RESTOREd into Redis from latchkey's DUMPs",
        &w.want,
        &got,
    ))
}

/// A BGSAVE while writes go on, in every database, is the data as it was
/// when the save began: redis-check-rdb accepts the file (whose databases
/// come in several sections when writes got ahead of the walk) and
/// redis-server loads it with the digest from before the writes.
fn bgsave_under_writes(w: &World) -> Result<Option<String>, String> {
    save(w.redis.port)?;
    let dir = TempDir::new("rt-bgsave");
    std::fs::copy(w.redis_dir.0.join("dump.rdb"), dir.0.join("dump.rdb"))
        .map_err(|e| format!("copy Redis's dump.rdb: {e}"))?;
    let lk = LatchkeyProc::start_in(&dir.0)?;
    let mut c = Conn::connect_patient(lk.port).map_err(|e| format!("connect: {e}"))?;
    call(&mut c, &["CONFIG", "SET", "rdb-key-save-delay", "20"]);
    let started = text(&call(&mut c, &["BGSAVE"]));
    if started != "Background saving started" {
        return Err(format!("BGSAVE -> {started}"));
    }
    let mut writes = Vec::new();
    for i in 0..2000 {
        let db = ["0", "1", "3", "15"][i % 4];
        writes.push(cmd(&["SELECT", db]));
        writes.push(cmd_owned(vec![
            "SET".into(),
            format!("bulk:{}", i * 37 % BULK_KEYS),
            "x".into(),
        ]));
        writes.push(cmd_owned(vec![
            "DEL".into(),
            format!("bulk:{}", i * 53 % BULK_KEYS),
        ]));
        writes.push(cmd_owned(vec![
            "HSET".into(),
            "hash:big".into(),
            format!("field:{i}"),
            "y".into(),
        ]));
        writes.push(cmd_owned(vec![
            "ZADD".into(),
            "zset:big".into(),
            "-1".into(),
            format!("m{i}"),
        ]));
        writes.push(cmd(&["LPOP", "list:quick"]));
        writes.push(cmd(&["DEL", "str:raw", "db3:a", "db15:h"]));
    }
    pipeline(&mut c, &writes)?;
    // The writes must have run while the save did, or this shows nothing.
    let info = text(&call(&mut c, &["INFO", "persistence"]));
    if !info.contains("rdb_bgsave_in_progress:1") {
        return Err("the save ended before the writes did".into());
    }
    call(&mut c, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = text(&call(&mut c, &["INFO", "persistence"]));
        if info.contains("rdb_bgsave_in_progress:0") {
            if !info.contains("rdb_last_bgsave_status:ok") {
                return Err(format!("the save failed:\n{info}"));
            }
            break;
        }
        if Instant::now() > deadline {
            return Err("BGSAVE did not end within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let file = dir.0.join("dump.rdb");
    if let Some(m) = check_rdb(&file) {
        return Ok(Some(m));
    }
    let rdir = TempDir::new("rt-bgsave-redis");
    std::fs::copy(&file, rdir.0.join("dump.rdb")).map_err(|e| format!("copy: {e}"))?;
    let redis = RedisProc::start_in(&rdir.0, &[])?;
    let got = snapshot(redis.port)?;
    Ok(compare(
        "redis-server over latchkey's BGSAVE taken under writes",
        &w.want,
        &got,
    ))
}

/// Writes that land in the incremental file after the base.
fn aof_writes() -> Vec<Vec<Vec<u8>>> {
    vec![
        cmd(&["SET", "aof:a", "1"]),
        cmd(&["SET", "aof:ttl", "v", "EX", "5000"]),
        cmd(&["EXPIRE", "str:int", "4000"]),
        cmd(&["INCR", "aof:n"]),
        cmd(&["HSET", "hash:big", "field:1", "changed"]),
        cmd(&["DEL", "list:quick"]),
        cmd(&["MULTI"]),
        cmd(&["SELECT", "3"]),
        cmd(&["SET", "aof:in3", "x"]),
        cmd(&["SELECT", "0"]),
        cmd(&["ZADD", "zset:big", "7", "aof-member"]),
        cmd(&["EXEC"]),
        cmd(&[
            "EVAL",
            "redis.call('SET', 'aof:script', 'yes') return redis.call('SADD', 'set:strs', 'z')",
            "0",
        ]),
        cmd(&["SELECT", "1"]),
        cmd(&["DEL", "bulk:7", "bulk:8"]),
        cmd(&["SELECT", "0"]),
    ]
}

fn info_until(port: u16, want: &[&str]) -> Result<(), String> {
    let mut c = Conn::connect_patient(port).map_err(|e| format!("connect: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = text(&call(&mut c, &["INFO", "persistence"]));
        if want.iter().all(|w| info.contains(w)) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("waited 60 s for {want:?}:\n{info}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| e.to_string())?;
    for e in std::fs::read_dir(from).map_err(|e| e.to_string())? {
        let e = e.map_err(|e| e.to_string())?;
        std::fs::copy(e.path(), to.join(e.file_name())).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn check_aof(manifest: &Path) -> Option<String> {
    match Command::new("redis-check-aof").arg(manifest).output() {
        Ok(o) => {
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            (!o.status.success() || !out.contains("are valid"))
                .then(|| format!("  redis-check-aof {}:\n{out}", o.status))
        }
        Err(e) => Some(format!("  cannot run redis-check-aof: {e}")),
    }
}

/// Turns the AOF on (its base an RDB file with `preamble`, commands
/// without), then `aof_writes`: the data after them, read back as a
/// Snapshot.
fn with_aof_writes(port: u16, preamble: bool) -> Result<Snapshot, String> {
    let mut c = Conn::connect_patient(port).map_err(|e| format!("connect: {e}"))?;
    let yes_no = if preamble { "yes" } else { "no" };
    call(&mut c, &["CONFIG", "SET", "aof-use-rdb-preamble", yes_no]);
    call(&mut c, &["CONFIG", "SET", "appendonly", "yes"]);
    info_until(
        port,
        &[
            "aof_enabled:1",
            "aof_rewrite_in_progress:0",
            "aof_rewrite_scheduled:0",
        ],
    )?;
    pipeline(&mut c, &aof_writes())?;
    snapshot(port)
}

/// The base file the manifest in `aof` names.
fn base_of(aof: &Path) -> Result<String, String> {
    let m = std::fs::read_to_string(aof.join("appendonly.aof.manifest"))
        .map_err(|e| format!("read the manifest: {e}"))?;
    m.split_whitespace()
        .skip_while(|w| *w != "file")
        .nth(1)
        .filter(|_| m.contains("type b"))
        .map(str::to_string)
        .ok_or_else(|| format!("no base in the manifest: {m}"))
}

/// The base's format is what `preamble` asked for.
fn check_base(aof: &Path, preamble: bool) -> Result<(), String> {
    let base = base_of(aof)?;
    let bytes = std::fs::read(aof.join(&base)).map_err(|e| format!("{base}: {e}"))?;
    let (want_ext, rdb) = if preamble {
        (".rdb", true)
    } else {
        (".aof", false)
    };
    if !base.ends_with(want_ext) || bytes.starts_with(b"REDIS") != rdb {
        return Err(format!(
            "base file {base} is not what aof-use-rdb-preamble asked"
        ));
    }
    Ok(())
}

fn aof_latchkey_to_redis(w: &World, preamble: bool) -> Result<Option<String>, String> {
    save(w.redis.port)?;
    let dir = TempDir::new("rt-aof-lk");
    std::fs::copy(w.redis_dir.0.join("dump.rdb"), dir.0.join("dump.rdb"))
        .map_err(|e| format!("copy Redis's dump.rdb: {e}"))?;
    let lk = LatchkeyProc::start_in(&dir.0)?;
    let want = with_aof_writes(lk.port, preamble)?;
    drop(lk);
    let aof = dir.0.join("appendonlydir");
    check_base(&aof, preamble)?;
    if let Some(m) = check_aof(&aof.join("appendonly.aof.manifest")) {
        return Ok(Some(m));
    }
    let rdir = TempDir::new("rt-aof-lk-redis");
    copy_dir(&aof, &rdir.0.join("appendonlydir"))?;
    let redis = RedisProc::start_in(&rdir.0, &["--appendonly", "yes"])?;
    let got = snapshot(redis.port)?;
    Ok(compare(
        "redis-server over latchkey's appendonlydir",
        &want,
        &got,
    ))
}

fn aof_redis_to_latchkey(w: &World, preamble: bool) -> Result<Option<String>, String> {
    save(w.redis.port)?;
    let dir = TempDir::new("rt-aof-redis");
    std::fs::copy(w.redis_dir.0.join("dump.rdb"), dir.0.join("dump.rdb"))
        .map_err(|e| format!("copy Redis's dump.rdb: {e}"))?;
    let redis = RedisProc::start_in(&dir.0, &[])?;
    let want = with_aof_writes(redis.port, preamble)?;
    drop(redis);
    check_base(&dir.0.join("appendonlydir"), preamble)?;
    let ldir = TempDir::new("rt-aof-redis-lk");
    copy_dir(&dir.0.join("appendonlydir"), &ldir.0.join("appendonlydir"))?;
    let lk = LatchkeyProc::start_with(&ldir.0, &["--appendonly", "yes"])?;
    let got = snapshot(lk.port)?;
    Ok(compare("latchkey over Redis's appendonlydir", &want, &got))
}

//! Lua scripts against a real socket: BUSY while a script runs past
//! busy-reply-threshold, SCRIPT KILL, UNKILLABLE after a write, SHUTDOWN
//! NOSAVE, and atomicity with respect to other clients.

mod common;
use std::time::{Duration, Instant};

use common::*;
use latchkey_server::config::Config;

const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

fn start_threshold(ms: u64) -> latchkey_server::runtime::ServerHandle {
    start_with(Config {
        port: 0,
        busy_reply_threshold: ms,
        ..Default::default()
    })
}

fn sha1(s: &str) -> String {
    latchkey_server::scripting::sha1hex(s.as_bytes())
}

/// Sends `cmd` on `c` until the reply is BUSY (the script is past the
/// threshold), for at most `WAIT`.
fn until_busy(c: &mut Conn, cmd: &[&str]) {
    let deadline = Instant::now() + WAIT;
    loop {
        match c.cmd(cmd) {
            V::Err(e) if e == BUSY => return,
            other => assert!(
                Instant::now() < deadline,
                "never BUSY, last reply {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn busy_then_script_kill() {
    let h = start_threshold(100);
    let mut a = Conn::ready(h.addr);
    let mut c2 = Conn::ready(h.addr);
    let script = "local i = 0 while true do i = i + 1 end";
    a.send(&["EVAL", script, "0"]);
    eventually("the script runs", || h.shared.script.running());
    // Sent before the threshold passed: waits, then gets BUSY instead of
    // waiting for the script to end.
    assert_eq!(c2.cmd(&["GET", "x"]), V::Err(BUSY.into()));
    assert_eq!(c2.cmd(&["PING"]), V::Err(BUSY.into()));
    // Unknown commands and arity errors are still answered as usual.
    assert!(matches!(c2.cmd(&["NOSUCH"]), V::Err(e) if e.starts_with("ERR unknown command")));
    assert_eq!(
        c2.cmd(&["GET"]),
        V::Err("ERR wrong number of arguments for 'get' command".into())
    );
    // A connection opened while busy is served BUSY too.
    let mut c = Conn::new(h.addr);
    assert_eq!(c.cmd(&["SET", "k", "v"]), V::Err(BUSY.into()));
    // HELLO and RESET run during a busy script, as in Redis.
    let mut d = Conn::ready(h.addr);
    d.pipeline(&[&["PING"], &["HELLO", "2"], &["PING"], &["RESET"], &["PING"]]);
    assert_eq!(d.frame(), V::Err(BUSY.into()));
    assert!(matches!(d.frame(), V::Arr(_)), "HELLO's map while busy");
    assert_eq!(d.frame(), V::Err(BUSY.into()));
    assert_eq!(d.frame(), V::Simple("RESET".into()));
    assert_eq!(d.frame(), V::Err(BUSY.into()));
    assert_eq!(c2.cmd(&["SCRIPT", "KILL"]), ok());
    assert_eq!(d.cmd(&["PING"]), V::Simple("PONG".into()));
    assert_eq!(
        a.reply(),
        V::Err(format!(
            "ERR Script killed by user with SCRIPT KILL... script: {}, on @user_script:1.",
            sha1(script)
        ))
    );
    // Served again, by the store.
    assert_eq!(c2.cmd(&["PING"]), V::Simple("PONG".into()));
    assert_eq!(
        c2.cmd(&["SCRIPT", "KILL"]),
        V::Err("NOTBUSY No scripts in execution right now.".into())
    );
    assert_eq!(c.cmd(&["SET", "k", "v"]), ok());
    assert_eq!(a.cmd(&["GET", "k"]), b("v"));
}

/// A script that ran briefly before runs on the worker directly; when it
/// turns long, the worker's other connections are still served (BUSY,
/// SCRIPT KILL), even with a single worker thread (the default).
#[test]
fn a_short_script_turning_long_still_gives_busy_on_one_worker() {
    let h = start_with(Config {
        port: 0,
        busy_reply_threshold: 100,
        io_threads: 1,
        ..Default::default()
    });
    let mut a = Conn::ready(h.addr);
    let mut c2 = Conn::ready(h.addr);
    let script = "if ARGV[1] == 'spin' then while true do end end return 1";
    for _ in 0..3 {
        assert_eq!(a.cmd(&["EVAL", script, "0", "once"]), V::Int(1));
    }
    a.send(&["EVAL", script, "0", "spin"]);
    eventually("the script runs", || h.shared.script.running());
    until_busy(&mut c2, &["PING"]);
    assert_eq!(c2.cmd(&["SCRIPT", "KILL"]), ok());
    assert!(matches!(a.reply(), V::Err(e) if e.contains("Script killed by user")));
    assert_eq!(c2.cmd(&["PING"]), V::Simple("PONG".into()));
    // And the short run stays short afterwards.
    assert_eq!(a.cmd(&["EVAL", script, "0", "once"]), V::Int(1));
}

#[test]
fn kill_survives_pcall() {
    let h = start_threshold(50);
    let mut a = Conn::ready(h.addr);
    let mut c2 = Conn::ready(h.addr);
    // pcall cannot swallow the kill: the hook raises again on every line.
    let script = "while true do pcall(function() local i = 0 while true do i = i + 1 end end) end";
    a.send(&["EVAL", script, "0"]);
    until_busy(&mut c2, &["PING"]);
    assert_eq!(c2.cmd(&["SCRIPT", "KILL"]), ok());
    assert!(
        matches!(a.reply(), V::Err(e) if e.starts_with("ERR Script killed by user with SCRIPT KILL...")),
        "the script ends with the kill error"
    );
    assert_eq!(c2.cmd(&["PING"]), V::Simple("PONG".into()));
}

#[test]
fn a_script_that_wrote_is_unkillable() {
    let h = start_threshold(50);
    let mut a = Conn::ready(h.addr);
    let mut c2 = Conn::ready(h.addr);
    // A long but finite script that writes first.
    let script =
        "redis.call('set', KEYS[1], 'started') local n = 0 for i = 1, tonumber(ARGV[1]) do n = n + 1 end redis.call('set', KEYS[1], n) return n";
    a.send(&["EVAL", script, "1", "w", "60000000"]);
    until_busy(&mut c2, &["GET", "w"]);
    assert_eq!(
        c2.cmd(&["SCRIPT", "KILL"]),
        V::Err("UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.".into())
    );
    // Plain SHUTDOWN is refused like everything else.
    assert_eq!(c2.cmd(&["SHUTDOWN"]), V::Err(BUSY.into()));
    // The script runs to its end.
    assert_eq!(a.reply(), V::Int(60_000_000));
    assert_eq!(c2.cmd(&["GET", "w"]), b("60000000"));
}

#[test]
fn shutdown_nosave_stops_a_busy_script() {
    let h = start_threshold(50);
    let mut a = Conn::ready(h.addr);
    let mut c2 = Conn::ready(h.addr);
    a.send(&["EVAL", "redis.call('set','k','v') while true do end", "0"]);
    until_busy(&mut c2, &["PING"]);
    c2.send(&["SHUTDOWN", "NOSAVE"]);
    assert!(c2.closed(), "the server closes the connection");
    // The script was stopped (its client gets the error or the close).
    let (_, closed) = a.read_all(Duration::from_millis(500));
    assert!(closed || !h.shared.script.running());
    eventually("the script stopped", || !h.shared.script.running());
}

#[test]
fn scripts_are_atomic() {
    let h = start();
    let mut a = Conn::ready(h.addr);
    let mut c2 = Conn::ready(h.addr);
    assert_eq!(c2.cmd(&["SET", "n", "0"]), ok());
    // Reads the counter, spins, reads it again: another client's INCR
    // cannot land in between.
    let script = "local x = redis.call('get','n') for i = 1, 20000000 do end return {x, redis.call('get','n')}";
    a.send(&["EVAL", script, "0"]);
    eventually("the script runs", || h.shared.script.running());
    c2.send(&["INCR", "n"]);
    // The INCR is answered only after the script replied.
    assert_eq!(a.reply(), V::Arr(vec![b("0"), b("0")]));
    assert_eq!(c2.reply(), V::Int(1));
    assert_eq!(a.cmd(&["GET", "n"]), b("1"));
}

#[test]
fn threshold_config_and_alias() {
    let h = start();
    let mut c = Conn::ready(h.addr);
    assert_eq!(
        c.call_str(&["CONFIG", "GET", "busy-reply-threshold"]),
        "*2\r\n$20\r\nbusy-reply-threshold\r\n$4\r\n5000\r\n"
    );
    assert_eq!(c.cmd(&["CONFIG", "SET", "lua-time-limit", "250"]), ok());
    assert_eq!(
        c.call_str(&["CONFIG", "GET", "busy-reply-threshold"]),
        "*2\r\n$20\r\nbusy-reply-threshold\r\n$3\r\n250\r\n"
    );
    // 0 disables BUSY: a long script just runs.
    assert_eq!(c.cmd(&["CONFIG", "SET", "busy-reply-threshold", "0"]), ok());
    assert_eq!(
        c.cmd(&["EVAL", "for i = 1, 1000000 do end return 1", "0"]),
        V::Int(1)
    );
}

#[test]
fn settp_in_a_script_binds_to_the_caller() {
    let h = start();
    let mut a = Conn::ready(h.addr);
    let mut c2 = Conn::ready(h.addr);
    assert_eq!(
        a.cmd(&[
            "EVAL",
            "return redis.call('settp', KEYS[1], 'v')",
            "1",
            "lock"
        ]),
        V::Int(1)
    );
    assert_eq!(
        a.cmd(&[
            "EVAL",
            "return redis.pcall('settp', KEYS[1], 'v', 'QUEUE')",
            "1",
            "lock"
        ]),
        V::Err("ERR This Redis command is not allowed from script".into())
    );
    assert_eq!(
        a.cmd(&[
            "EVAL",
            "return redis.pcall('watchex', KEYS[1])",
            "1",
            "lock"
        ]),
        V::Err("ERR This Redis command is not allowed from script".into())
    );
    // The key lives as long as the calling connection.
    assert_eq!(c2.cmd(&["GET", "lock"]), b("v"));
    drop(a);
    eventually("the bound key goes with its connection", || {
        c2.cmd(&["EXISTS", "lock"]) == V::Int(0)
    });
}

/// The `field:value` of an INFO reply.
fn info_field(c: &mut Conn, section: &str, field: &str) -> String {
    let V::Bulk(text) = c.cmd(&["INFO", section]) else {
        panic!("INFO replies a bulk string");
    };
    let text = String::from_utf8(text).unwrap();
    let prefix = format!("{field}:");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
        .to_string()
}

#[test]
fn info_counts_cached_scripts() {
    let h = start();
    let mut c = Conn::ready(h.addr);
    assert_eq!(
        info_field(&mut c, "memory", "number_of_cached_scripts"),
        "0"
    );
    assert_eq!(c.cmd(&["SCRIPT", "LOAD", "return 1"]), b(&sha1("return 1")));
    assert_eq!(c.cmd(&["EVAL", "return 2", "0"]), V::Int(2));
    assert_eq!(
        info_field(&mut c, "memory", "number_of_cached_scripts"),
        "2"
    );
    let scripts: u64 = info_field(&mut c, "memory", "used_memory_scripts_eval")
        .parse()
        .unwrap();
    assert!(scripts >= 2 * 40 + 16, "bodies and shas counted: {scripts}");
    assert!(
        info_field(&mut c, "memory", "used_memory_lua")
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert_eq!(c.cmd(&["SCRIPT", "FLUSH"]), ok());
    assert_eq!(
        info_field(&mut c, "memory", "number_of_cached_scripts"),
        "0"
    );
}

#[test]
fn monitor_shows_eval_then_its_commands_as_lua() {
    let h = start();
    let mut m = Conn::ready(h.addr);
    assert_eq!(m.cmd(&["MONITOR"]), ok());
    let mut c = Conn::ready(h.addr);
    assert_eq!(
        c.cmd(&["EVAL", "redis.call('set','k','v') return 1", "0"]),
        V::Int(1)
    );
    let lines: Vec<String> = (0..3)
        .map(|_| match m.frame() {
            V::Simple(s) => s,
            other => panic!("monitor line expected, got {other:?}"),
        })
        .collect();
    assert!(lines[0].ends_with(r#""PING""#), "{}", lines[0]);
    assert!(
        lines[1].contains(r#"] "EVAL" "redis.call('set','k','v') return 1" "0""#)
            && !lines[1].contains("[0 lua]"),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].ends_with(r#"[0 lua] "set" "k" "v""#),
        "{}",
        lines[2]
    );
}

#[test]
fn a_script_write_serves_blocked_clients() {
    let h = start();
    let mut waiter = Conn::ready(h.addr);
    let mut c = Conn::ready(h.addr);
    waiter.send(&["BLPOP", "queue", "0"]);
    eventually("the waiter blocks", || {
        h.shared.store.lock().ks.blocking.blocked_clients() == 1
    });
    assert_eq!(
        c.cmd(&[
            "EVAL",
            "return redis.call('rpush', KEYS[1], 'job')",
            "1",
            "queue"
        ]),
        V::Int(1)
    );
    assert_eq!(waiter.reply(), V::Arr(vec![b("queue"), b("job")]));
    // Inside a script nothing blocks: BLPOP is refused (noscript, as Redis 7.0).
    assert_eq!(
        c.cmd(&["EVAL", "return redis.pcall('blpop', 'none', 0)", "0"]),
        V::Err("ERR This Redis command is not allowed from script".into())
    );
}

#[test]
fn deep_tables_stop_at_the_lua_stack_limit() {
    let h = start();
    let mut c = Conn::ready(h.addr);
    // Redis 7.0.15 replies 7995 nested one-element arrays, then the error
    // where the Lua stack is full; the conversion must not overflow the
    // thread's stack on the way.
    c.send(&[
        "EVAL",
        "local t={} local c=t for i=1,10000 do c[1]={} c=c[1] end return t",
        "0",
    ]);
    let mut want = b"*1\r\n".repeat(7995);
    want.extend_from_slice(b"-ERR reached lua stack limit\r\n");
    c.expect_bytes(&want);
    assert_eq!(c.cmd(&["PING"]), V::Simple("PONG".into()));
}

/// A connection in MULTI is answered at once while a script is busy, as
/// Redis: MULTI opens (even sent while busy), a command is refused with
/// BUSY (an arity error as usual), each refusal flagging the transaction,
/// and EXEC after SCRIPT KILL aborts it.
#[test]
fn transaction_during_a_busy_script_is_aborted() {
    let h = start_threshold(50);
    let mut a = Conn::ready(h.addr);
    let mut t = Conn::ready(h.addr);
    let mut probe = Conn::ready(h.addr);
    a.send(&["EVAL", "local i = 0 while true do i = i + 1 end", "0"]);
    eventually("the script runs", || h.shared.script.running());
    until_busy(&mut probe, &["PING"]);
    assert_eq!(t.cmd(&["MULTI"]), ok());
    assert!(matches!(t.cmd(&["SET", "k", "v"]), V::Err(e) if e.starts_with("BUSY ")));
    assert_eq!(
        t.cmd(&["GET"]),
        V::Err("ERR wrong number of arguments for 'get' command".into())
    );
    assert_eq!(
        t.cmd(&["MULTI"]),
        V::Err("ERR MULTI calls can not be nested".into())
    );
    assert_eq!(probe.cmd(&["SCRIPT", "KILL"]), ok());
    assert!(matches!(a.frame(), V::Err(e) if e.starts_with("ERR Script killed by user")));
    assert_eq!(
        t.cmd(&["EXEC"]),
        V::Err("EXECABORT Transaction discarded because of previous errors.".into())
    );
    assert_eq!(t.cmd(&["EXISTS", "k"]), V::Int(0));
}

/// With a password required, a connection opened during an unkillable
/// script can still authenticate (AUTH is answered while busy, as in
/// Redis) and then stop the server with SHUTDOWN NOSAVE; a wrong password
/// is refused, and nothing else runs before AUTH.
#[test]
fn auth_then_shutdown_nosave_while_an_unkillable_script_runs() {
    let h = start_with(Config {
        port: 0,
        busy_reply_threshold: 50,
        requirepass: Some("s3cret".into()),
        ..Default::default()
    });
    let mut a = Conn::new(h.addr);
    assert_eq!(a.cmd(&["AUTH", "s3cret"]), ok());
    a.send(&["EVAL", "redis.call('set','k','v') while true do end", "0"]);
    eventually("the script runs", || h.shared.script.busy());
    let mut c = Conn::new(h.addr);
    assert!(matches!(c.cmd(&["SCRIPT", "KILL"]), V::Err(e) if e.starts_with("NOAUTH")));
    assert!(matches!(c.cmd(&["AUTH", "nope"]), V::Err(e) if e.starts_with("WRONGPASS")));
    assert_eq!(c.cmd(&["AUTH", "s3cret"]), ok());
    assert!(matches!(c.cmd(&["SCRIPT", "KILL"]), V::Err(e) if e.starts_with("UNKILLABLE")));
    c.send(&["SHUTDOWN", "NOSAVE"]);
    assert!(c.closed(), "the server closes the connection");
    eventually("the script stopped", || !h.shared.script.running());
}

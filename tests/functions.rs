//! Functions against a real socket: BUSY while a function runs past
//! busy-reply-threshold, FUNCTION KILL / SCRIPT KILL and which one applies,
//! FUNCTION STATS while busy, UNKILLABLE after a write, and the INFO
//! counters.

mod common;
use std::time::{Duration, Instant};

use common::*;
use latchkey_server::config::Config;

const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";
const BUSY_EVAL: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

const LIB: &str = "#!lua name=busy\n\
redis.register_function('spin', function() local i = 0 while true do i = i + 1 end end)\n\
redis.register_function('wspin', function(keys) redis.call('set', keys[1], '1') local i = 0 while true do i = i + 1 end end)";

fn start_threshold(ms: u64) -> latchkey_server::runtime::ServerHandle {
    start_with(Config {
        port: 0,
        busy_reply_threshold: ms,
        ..Default::default()
    })
}

/// Sends `cmd` on `c` until the reply is `busy`, for at most `WAIT`.
fn until_busy(c: &mut Conn, cmd: &[&str], busy: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        match c.cmd(cmd) {
            V::Err(e) if e == busy => return,
            other => assert!(
                Instant::now() < deadline,
                "never BUSY, last reply {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn map_get<'a>(v: &'a V, key: &str) -> &'a V {
    let V::Arr(items) = v else {
        panic!("not a flat map: {v:?}")
    };
    items
        .chunks(2)
        .find(|p| p[0] == b(key))
        .map(|p| &p[1])
        .unwrap_or_else(|| panic!("no {key} in {v:?}"))
}

#[test]
fn busy_function_then_function_kill() {
    let h = start_threshold(100);
    let mut a = Conn::ready(h.addr);
    let mut c2 = Conn::ready(h.addr);
    assert_eq!(a.cmd(&["FUNCTION", "LOAD", LIB]), b("busy"));
    a.send(&["FCALL", "spin", "0"]);
    until_busy(&mut c2, &["PING"], BUSY_FUNCTION);
    // SCRIPT KILL does not kill a function.
    assert_eq!(c2.cmd(&["SCRIPT", "KILL"]), V::Err(BUSY_FUNCTION.into()));
    // FUNCTION STATS is answered while busy, with the running function.
    let stats = c2.cmd(&["FUNCTION", "STATS"]);
    let running = map_get(&stats, "running_script");
    assert_eq!(map_get(running, "name"), &b("spin"));
    assert_eq!(
        map_get(running, "command"),
        &V::Arr(vec![b("FCALL"), b("spin"), b("0")])
    );
    assert!(matches!(map_get(running, "duration_ms"), V::Int(ms) if *ms >= 100));
    let lua = map_get(map_get(&stats, "engines"), "LUA");
    assert_eq!(map_get(lua, "libraries_count"), &V::Int(1));
    assert_eq!(map_get(lua, "functions_count"), &V::Int(2));
    assert_eq!(c2.cmd(&["FUNCTION", "KILL"]), ok());
    assert_eq!(
        a.reply(),
        V::Err(
            "ERR Script killed by user with SCRIPT KILL... script: spin, on @user_function:2."
                .into()
        )
    );
    assert_eq!(c2.cmd(&["PING"]), V::Simple("PONG".into()));
    assert_eq!(
        c2.cmd(&["FUNCTION", "KILL"]),
        V::Err("NOTBUSY No scripts in execution right now.".into())
    );
    let stats = c2.cmd(&["FUNCTION", "STATS"]);
    assert_eq!(map_get(&stats, "running_script"), &V::Nil);
}

#[test]
fn function_kill_does_not_kill_eval() {
    let h = start_threshold(100);
    let mut a = Conn::ready(h.addr);
    let mut c2 = Conn::ready(h.addr);
    a.send(&["EVAL", "local i = 0 while true do i = i + 1 end", "0"]);
    until_busy(&mut c2, &["PING"], BUSY_EVAL);
    assert_eq!(c2.cmd(&["FUNCTION", "KILL"]), V::Err(BUSY_EVAL.into()));
    assert_eq!(c2.cmd(&["FUNCTION", "STATS"]), V::Err(BUSY_EVAL.into()));
    assert_eq!(c2.cmd(&["SCRIPT", "KILL"]), ok());
    assert!(matches!(a.reply(), V::Err(e) if e.starts_with("ERR Script killed by user")));
}

#[test]
fn a_function_that_wrote_is_unkillable() {
    let h = start_threshold(100);
    let mut a = Conn::ready(h.addr);
    let mut c2 = Conn::ready(h.addr);
    assert_eq!(a.cmd(&["FUNCTION", "LOAD", LIB]), b("busy"));
    a.send(&["FCALL", "wspin", "1", "w"]);
    until_busy(&mut c2, &["GET", "w"], BUSY_FUNCTION);
    assert_eq!(
        c2.cmd(&["FUNCTION", "KILL"]),
        V::Err("UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.".into())
    );
    c2.send(&["SHUTDOWN", "NOSAVE"]);
    assert!(c2.closed(), "the server closes the connection");
    eventually("the function stopped", || !h.shared.script.running());
}

fn info_field(c: &mut Conn, field: &str) -> String {
    let V::Bulk(text) = c.cmd(&["INFO", "memory"]) else {
        panic!("INFO replies a bulk string");
    };
    let text = String::from_utf8(text).unwrap();
    let prefix = format!("{field}:");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {field} in INFO"))
        .to_string()
}

#[test]
fn info_counts_functions_and_libraries() {
    let h = start();
    let mut c = Conn::ready(h.addr);
    assert_eq!(info_field(&mut c, "number_of_functions"), "0");
    assert_eq!(info_field(&mut c, "number_of_libraries"), "0");
    assert_eq!(info_field(&mut c, "used_memory_functions"), "0");
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", LIB]), b("busy"));
    assert_eq!(info_field(&mut c, "number_of_functions"), "2");
    assert_eq!(info_field(&mut c, "number_of_libraries"), "1");
    let mem: u64 = info_field(&mut c, "used_memory_functions").parse().unwrap();
    assert!(mem > LIB.len() as u64);
    let vm: u64 = info_field(&mut c, "used_memory_vm_functions")
        .parse()
        .unwrap();
    assert!(vm > 0);
    // SCRIPT FLUSH leaves functions alone; FUNCTION FLUSH empties them.
    assert_eq!(c.cmd(&["SCRIPT", "FLUSH"]), ok());
    assert_eq!(info_field(&mut c, "number_of_libraries"), "1");
    assert_eq!(c.cmd(&["FUNCTION", "FLUSH"]), ok());
    assert_eq!(info_field(&mut c, "number_of_functions"), "0");
    assert_eq!(info_field(&mut c, "used_memory_functions"), "0");
}

#[test]
fn monitor_shows_fcall_then_its_commands_as_lua() {
    let h = start();
    let mut m = Conn::ready(h.addr);
    assert_eq!(m.cmd(&["MONITOR"]), ok());
    let mut c = Conn::ready(h.addr);
    let lib = "#!lua name=m\nredis.register_function('f', function(keys) return redis.call('set', keys[1], 'v') end)";
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", lib]), b("m"));
    assert_eq!(c.cmd(&["FCALL", "f", "1", "k"]), ok());
    let lines: Vec<String> = (0..4)
        .map(|_| match m.frame() {
            V::Simple(s) => s,
            other => panic!("monitor line expected, got {other:?}"),
        })
        .collect();
    assert!(lines[1].contains(r#""FUNCTION" "LOAD""#), "{}", lines[1]);
    assert!(
        lines[2].ends_with(r#"] "FCALL" "f" "1" "k""#) && !lines[2].contains("lua]"),
        "{}",
        lines[2]
    );
    assert!(
        lines[3].ends_with(r#"[0 lua] "set" "k" "v""#),
        "{}",
        lines[3]
    );
}

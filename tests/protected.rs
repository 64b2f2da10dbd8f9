//! Protected mode, against redis-server 7.0.15 side by side: with no
//! password on the default user, a client from a non-loopback address gets
//! Redis's DENIED text and is closed; `protected-mode no` or a password
//! lets it in.
//!
//! A non-loopback client needs a second address. The test makes one
//! where it touches nothing else: `unshare -n` gives the shell below a
//! network namespace of its own, with only a loopback interface, which it
//! brings up with a second address, 10.0.0.1/32. Both servers listen on
//! 10.0.0.1 and 127.0.0.1 inside it (any port is free there), and
//! redis-cli connecting to 10.0.0.1 comes from 10.0.0.1, which Redis does
//! not count as local (only 127.0.0.0/8 and ::1 are). Creating a
//! namespace needs root (CI runs as root); without it the test fails and
//! says so.

use std::process::Command;

mod common;

const SCRIPT: &str = r#"
set -u
ip link set lo up
ip addr add 10.0.0.1/32 dev lo
"$LK" --port 7000 --bind "10.0.0.1 127.0.0.1" --save "" >/dev/null 2>&1 &
A=$!
redis-server --port 7001 --bind "10.0.0.1 127.0.0.1" --save "" --daemonize no >/dev/null 2>&1 &
B=$!
trap 'kill $A $B 2>/dev/null; wait' EXIT
for p in 7000 7001; do
  for _ in $(seq 100); do
    redis-cli -h 127.0.0.1 -p $p PING >/dev/null 2>&1 && break
    sleep 0.05
  done
done
for p in 7000 7001; do
  echo "== server"
  redis-cli -h 10.0.0.1 -p $p PING
  redis-cli -h 127.0.0.1 -p $p PING
  redis-cli -h 127.0.0.1 -p $p CONFIG GET protected-mode
  redis-cli -h 127.0.0.1 -p $p CONFIG SET protected-mode no
  redis-cli -h 10.0.0.1 -p $p PING
  redis-cli -h 127.0.0.1 -p $p CONFIG SET protected-mode yes
  redis-cli -h 10.0.0.1 -p $p PING
  redis-cli -h 127.0.0.1 -p $p CONFIG SET requirepass pw
  redis-cli -h 10.0.0.1 -p $p PING
  redis-cli -h 10.0.0.1 -p $p -a pw --no-auth-warning PING
  redis-cli -h 127.0.0.1 -p $p -a pw --no-auth-warning INFO stats | grep rejected_connections
done
"#;

#[test]
fn protected_mode_refuses_non_loopback_clients_as_redis_does() {
    for (tool, package) in [
        ("unshare", "util-linux"),
        ("ip", "iproute2"),
        ("redis-server", "redis-server"),
        ("redis-cli", "redis-tools"),
    ] {
        common::require_tool(tool, package);
    }
    let probe = Command::new("unshare").args(["-n", "true"]).status();
    assert!(
        probe.is_ok_and(|s| s.success()),
        "this test makes a network namespace (unshare -n), which needs root: run it as root"
    );
    let out = Command::new("timeout")
        .args(["60", "unshare", "-n", "sh", "-c", SCRIPT])
        .env("LK", env!("CARGO_BIN_EXE_latchkey-server"))
        .output()
        .expect("runs unshare");
    let text = String::from_utf8_lossy(&out.stdout);
    let runs: Vec<&str> = text
        .split("== server\n")
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(
        runs.len(),
        2,
        "both servers ran: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (latchkey, redis) = (runs[0], runs[1]);
    assert!(
        redis.starts_with("DENIED Redis is running in protected mode"),
        "{redis}"
    );
    assert_eq!(latchkey, redis, "latchkey and redis-server answer alike");
    // What the transcript shows, in order (redis-cli prints an empty line
    // after an error).
    let lines: Vec<&str> = latchkey.lines().filter(|l| !l.is_empty()).collect();
    assert!(lines[0].starts_with("DENIED"), "{}", lines[0]);
    assert_eq!(lines[1], "PONG", "loopback is served");
    assert_eq!(&lines[2..4], ["protected-mode", "yes"]);
    assert_eq!(&lines[4..6], ["OK", "PONG"], "protected-mode no lets it in");
    assert_eq!(lines[6], "OK");
    assert!(lines[7].starts_with("DENIED"), "{}", lines[7]);
    assert_eq!(
        &lines[8..11],
        ["OK", "NOAUTH Authentication required.", "PONG"],
        "with a password set, it may authenticate"
    );
    assert_eq!(lines[11].trim(), "rejected_connections:2");
}

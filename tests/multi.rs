//! MULTI/EXEC and WATCH where the differential suite cannot reach: SETTP's
//! connection-bound keys (a watch broken by the owner's disconnect, SETTP
//! inside a transaction binding to the EXEC connection), a client library's
//! transactions under concurrent writers, and CLIENT LIST's view of a
//! transaction.

use std::net::SocketAddr;

use latchkey_server::runtime::ServerHandle;
use redis::Commands;

mod common;
use common::*;

fn addr(s: &ServerHandle) -> SocketAddr {
    format!("127.0.0.1:{}", s.port()).parse().unwrap()
}

fn lib_conn(s: &ServerHandle) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{}/", s.port()))
        .unwrap()
        .get_connection()
        .unwrap()
}

/// The `name=value` field of a CLIENT LIST / CLIENT INFO line.
fn field(line: &str, name: &str) -> String {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{name}=")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {name}= in {line}"))
}

/// The first line of CLIENT LIST asked by `c` (CLIENT INFO of the oldest
/// connection when asked from another).
fn first_client_line(c: &mut Conn, sub: &str) -> String {
    let V::Bulk(list) = c.cmd(&["CLIENT", sub]) else {
        panic!("CLIENT {sub} is a bulk string");
    };
    String::from_utf8(list)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string()
}

/// The `name=value` field of this connection's CLIENT INFO line.
fn client_field(c: &mut Conn, name: &str) -> String {
    field(&first_client_line(c, "INFO"), name)
}

#[test]
fn watch_is_broken_when_a_bound_keys_owner_disconnects() {
    let s = start();
    let a = addr(&s);
    let mut owner = Conn::ready(a);
    assert_eq!(owner.cmd(&["SETTP", "lock", "t1"]), V::Int(1));
    let mut w = Conn::ready(a);
    assert_eq!(w.cmd(&["WATCH", "lock"]), ok());
    // Nobody touches the key while its owner lives: EXEC goes through.
    assert_eq!(w.cmd(&["MULTI"]), ok());
    assert_eq!(w.cmd(&["GET", "lock"]), V::Simple("QUEUED".into()));
    assert_eq!(w.cmd(&["EXEC"]), V::Arr(vec![b("t1")]));

    assert_eq!(w.cmd(&["WATCH", "lock"]), ok());
    drop(owner);
    let mut probe = Conn::ready(a);
    eventually("the bound key is deleted", || {
        probe.cmd(&["EXISTS", "lock"]) == V::Int(0)
    });
    assert_eq!(w.cmd(&["MULTI"]), ok());
    assert_eq!(w.cmd(&["SET", "lock", "mine"]), V::Simple("QUEUED".into()));
    assert_eq!(w.cmd(&["EXEC"]), V::NilArr);
    assert_eq!(probe.cmd(&["EXISTS", "lock"]), V::Int(0));
}

#[test]
fn watch_on_a_missing_key_survives_an_unrelated_owner_leaving() {
    let s = start();
    let a = addr(&s);
    let mut owner = Conn::ready(a);
    assert_eq!(owner.cmd(&["SETTP", "other", "t1"]), V::Int(1));
    let mut w = Conn::ready(a);
    assert_eq!(w.cmd(&["WATCH", "lock"]), ok());
    drop(owner);
    let mut probe = Conn::ready(a);
    eventually("the bound key is deleted", || {
        probe.cmd(&["EXISTS", "other"]) == V::Int(0)
    });
    assert_eq!(w.cmd(&["MULTI"]), ok());
    assert_eq!(w.cmd(&["SETTP", "lock", "t2"]), V::Simple("QUEUED".into()));
    assert_eq!(w.cmd(&["EXEC"]), V::Arr(vec![V::Int(1)]));
}

#[test]
fn settp_inside_multi_binds_the_key_to_the_exec_connection() {
    let s = start();
    let a = addr(&s);
    let mut c = Conn::ready(a);
    let id = c.cmd(&["CLIENT", "ID"]);
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert_eq!(c.cmd(&["SETTP", "lk", "v"]), V::Simple("QUEUED".into()));
    assert_eq!(c.cmd(&["TPOWNER", "lk"]), V::Simple("QUEUED".into()));
    assert_eq!(c.cmd(&["EXEC"]), V::Arr(vec![V::Int(1), id.clone()]));
    let mut other = Conn::ready(a);
    assert_eq!(other.cmd(&["TPOWNER", "lk"]), id);
    drop(c);
    eventually("the key goes with its connection", || {
        other.cmd(&["EXISTS", "lk"]) == V::Int(0)
    });
}

#[test]
fn a_discarded_settp_binds_nothing() {
    let s = start();
    let mut c = Conn::ready(addr(&s));
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert_eq!(c.cmd(&["SETTP", "lk", "v"]), V::Simple("QUEUED".into()));
    assert_eq!(c.cmd(&["DISCARD"]), ok());
    assert_eq!(c.cmd(&["EXISTS", "lk"]), V::Int(0));
    assert_eq!(c.cmd(&["TPKEYS"]), V::Arr(vec![]));
}

/// A client library's optimistic-locking loop (WATCH, read, MULTI, write,
/// EXEC, retry on a null reply) against concurrent writers: no increment is
/// lost, and every transaction's writes land together or not at all.
#[test]
fn library_transactions_are_all_or_nothing() {
    let s = start();
    const WORKERS: usize = 4;
    const ROUNDS: usize = 50;
    let threads: Vec<_> = (0..WORKERS)
        .map(|_| {
            let mut c = lib_conn(&s);
            std::thread::spawn(move || {
                let mut retries = 0;
                for _ in 0..ROUNDS {
                    loop {
                        redis::cmd("WATCH").arg("n").query::<()>(&mut c).unwrap();
                        let n: i64 = c.get::<_, Option<i64>>("n").unwrap().unwrap_or(0);
                        let r: Option<(String, i64, i64)> = redis::pipe()
                            .atomic()
                            .set("n", n + 1)
                            .rpush("log", n + 1)
                            .incr("writes", 1)
                            .query(&mut c)
                            .unwrap();
                        match r {
                            Some((ok, _, _)) => {
                                assert_eq!(ok, "OK");
                                break;
                            }
                            None => retries += 1,
                        }
                    }
                }
                retries
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut c = lib_conn(&s);
    let total = (WORKERS * ROUNDS) as i64;
    assert_eq!(c.get::<_, i64>("n").unwrap(), total);
    assert_eq!(c.get::<_, i64>("writes").unwrap(), total);
    // Each committed transaction appended exactly its own new value.
    let log: Vec<i64> = c.lrange("log", 0, -1).unwrap();
    assert_eq!(log, (1..=total).collect::<Vec<_>>());
}

/// A queued command refused at queue time aborts the whole transaction,
/// even the commands queued before it.
#[test]
fn library_transaction_with_a_queue_error_writes_nothing() {
    let s = start();
    let mut c = lib_conn(&s);
    let r: redis::RedisResult<()> = redis::pipe()
        .atomic()
        .set("a", 1)
        .cmd("NOSUCHCOMMAND")
        .set("b", 2)
        .query(&mut c);
    // The library reports the first error of the block (the queue-time
    // one); EXEC answered EXECABORT, and the connection left MULTI.
    let err = r.unwrap_err();
    assert!(format!("{err:?}").contains("unknown command"), "{err:?}");
    assert_eq!(c.exists::<_, i64>(&["a", "b"][..]).unwrap(), 0);
    assert_eq!(c.get::<_, Option<i64>>("a").unwrap(), None);
}

#[test]
fn client_list_shows_the_transaction() {
    let s = start();
    let mut c = Conn::ready(addr(&s));
    assert_eq!(client_field(&mut c, "multi"), "-1");
    assert_eq!(client_field(&mut c, "flags"), "N");
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert_eq!(c.cmd(&["SET", "k", "v"]), V::Simple("QUEUED".into()));
    assert_eq!(c.cmd(&["CLIENT", "LIST"]), V::Simple("QUEUED".into()));
    // CLIENT INFO is queued too: look from outside, then from inside EXEC.
    let mut other = Conn::ready(addr(&s));
    let line = first_client_line(&mut other, "LIST");
    assert!(line.contains(" flags=x "), "{line}");
    assert!(line.contains(" multi=2 "), "{line}");
    // Redis's argv_len_sums: argument bytes plus a pointer per argument.
    assert!(line.contains(" multi-mem=55 "), "{line}");
    let V::Arr(r) = c.cmd(&["EXEC"]) else {
        panic!("EXEC replies an array");
    };
    let V::Bulk(inside) = &r[1] else {
        panic!("CLIENT LIST inside EXEC");
    };
    let inside = String::from_utf8_lossy(inside);
    assert!(inside.contains(" flags=x "), "{inside}");
    assert!(inside.contains(" multi=2 "), "{inside}");
    assert_eq!(client_field(&mut c, "multi"), "-1");
    assert_eq!(client_field(&mut c, "flags"), "N");
    // A watch broken before EXEC shows as `d` (dirty) until it is cleared.
    assert_eq!(c.cmd(&["WATCH", "k"]), ok());
    assert_eq!(other.cmd(&["SET", "k", "w"]), ok());
    assert_eq!(client_field(&mut c, "flags"), "d");
    assert_eq!(c.cmd(&["UNWATCH"]), ok());
    assert_eq!(client_field(&mut c, "flags"), "N");
    // RESET ends a transaction.
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert_eq!(c.cmd(&["RESET"]), V::Simple("RESET".into()));
    assert_eq!(client_field(&mut c, "multi"), "-1");
}

/// A transaction that a queue-time error or a broken watch will fail keeps
/// no commands (Redis stops queueing them), but still answers QUEUED.
#[test]
fn a_doomed_transaction_queues_nothing() {
    let s = start();
    let mut c = Conn::ready(addr(&s));
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert!(matches!(c.cmd(&["NOSUCH"]), V::Err(_)));
    assert_eq!(c.cmd(&["SET", "k", "v"]), V::Simple("QUEUED".into()));
    assert_eq!(client_field_from_outside(&s, "multi"), "0");
    assert!(matches!(c.cmd(&["EXEC"]), V::Err(e) if e.starts_with("EXECABORT")));
}

fn client_field_from_outside(s: &ServerHandle, name: &str) -> String {
    field(&first_client_line(&mut Conn::ready(addr(s)), "LIST"), name)
}

/// WATCHEX inside a transaction: its state reply is in the EXEC array; the
/// pushes the transaction caused before it go before the array, later ones
/// after it.
#[test]
fn watchex_inside_multi_orders_pushes_around_the_array() {
    for resp3 in [false, true] {
        let s = start();
        let mut c = Conn::proto(addr(&s), resp3);
        assert_eq!(c.cmd(&["WATCHEX", "k"]), V::Simple("NOEXIST".into()));
        c.cmd(&["MULTI"]);
        c.cmd(&["SET", "k", "1"]);
        c.cmd(&["WATCHEX", "k"]);
        c.cmd(&["DEL", "k"]);
        c.send(&["EXEC"]);
        let mut expect = push_bytes(resp3, "k", "ADD");
        expect.extend_from_slice(b"*3\r\n+OK\r\n+EXIST\r\n:1\r\n");
        expect.extend(push_bytes(resp3, "k", "DEL"));
        c.expect_bytes(&expect);
    }
}

/// DEBUG refused by `enable-debug-command no` (latchkey's default, as
/// Redis 7's) is a queue-time error: the transaction aborts. The compat
/// suite runs both servers with DEBUG enabled, so this is checked here.
#[test]
fn a_refused_debug_aborts_the_transaction() {
    let s = start();
    let mut c = Conn::ready(addr(&s));
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert_eq!(c.cmd(&["SET", "k", "v"]), V::Simple("QUEUED".into()));
    assert!(
        matches!(c.cmd(&["DEBUG", "SLEEP", "0"]), V::Err(e) if e.starts_with("ERR DEBUG command not allowed"))
    );
    assert_eq!(
        c.cmd(&["EXEC"]),
        V::Err("EXECABORT Transaction discarded because of previous errors.".into())
    );
    assert_eq!(c.cmd(&["EXISTS", "k"]), V::Int(0));
}

/// EXEC refused by the checks says why and discards, even outside MULTI
/// (Redis's execCommandAbort); checked against Redis 7.0.15 by hand, as
/// the compat suite runs without requirepass.
#[test]
fn exec_refused_before_auth_names_the_cause() {
    let s = start_with(latchkey_server::config::Config {
        port: 0,
        requirepass: Some("pw".into()),
        ..Default::default()
    });
    let mut c = Conn::new(addr(&s));
    assert_eq!(
        c.cmd(&["EXEC"]),
        V::Err(
            "EXECABORT Transaction discarded because of: NOAUTH Authentication required.".into()
        )
    );
    assert_eq!(
        c.cmd(&["MULTI"]),
        V::Err("NOAUTH Authentication required.".into())
    );
    assert_eq!(c.cmd(&["AUTH", "pw"]), ok());
    assert_eq!(c.cmd(&["EXEC"]), V::Err("ERR EXEC without MULTI".into()));
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert_eq!(c.cmd(&["SET", "k", "v"]), V::Simple("QUEUED".into()));
    assert_eq!(
        c.cmd(&["EXEC", "x"]),
        V::Err(
            "EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command"
                .into()
        )
    );
    assert_eq!(c.cmd(&["EXEC"]), V::Err("ERR EXEC without MULTI".into()));
    assert_eq!(c.cmd(&["EXISTS", "k"]), V::Int(0));
}

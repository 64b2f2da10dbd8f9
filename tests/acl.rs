//! ACL users around the lock service: a user limited to `~lock:*` and
//! `+@latchkey` locks and watches only there; deleting (or disabling) a
//! user closes its connections and so releases its locks to the next in
//! line; existence watches push only keys the user may read; users come
//! from `user` directives or an `aclfile` at start-up, and ACL SAVE/LOAD
//! round-trip them.

mod common;

use std::future::IntoFuture;
use std::time::Duration;

use common::*;
use latchkey::{cmd, Client, Error};
use latchkey_server::config::Config;

async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("test step took over 20 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_user_locks_and_watches_only_its_keys() {
    let h = start();
    let mut admin = Conn::ready(h.addr);
    assert_eq!(
        admin.cmd(&[
            "ACL",
            "SETUSER",
            "locker",
            "on",
            ">pw",
            "~lock:*",
            "+@latchkey"
        ]),
        ok()
    );
    let url = format!("redis://locker:pw@127.0.0.1:{}", h.port());
    let c = bounded(Client::connect(&url)).await.unwrap();
    let g = bounded(c.lock("lock:a").into_future()).await.unwrap();
    assert!(g.is_held());
    // Outside its pattern: refused, with Redis's NOPERM text.
    match bounded(c.try_lock("other")).await {
        Err(Error::Server(e)) => assert!(
            e.starts_with("NOPERM this user has no permissions to access one of the keys"),
            "{e}"
        ),
        r => panic!("expected NOPERM, got {:?}", r.map(|g| g.is_some())),
    }
    match bounded(c.watch_stream("other")).await {
        Err(Error::Server(e)) => assert!(e.starts_with("NOPERM"), "{e}"),
        r => panic!("expected NOPERM, got ok: {}", r.is_ok()),
    }
    // Not a latchkey command: refused even on its own keys.
    match bounded(c.query::<latchkey::Value>(&cmd("GET").arg("lock:a"))).await {
        Err(Error::Server(e)) => assert_eq!(
            e,
            "NOPERM this user has no permissions to run the 'get' command"
        ),
        r => panic!("expected NOPERM, got {r:?}"),
    }
    // Watching inside the pattern works, pushes and all.
    let mut w = bounded(c.watch_stream("lock:b")).await.unwrap();
    use futures::StreamExt;
    assert!(matches!(
        bounded(w.next()).await,
        Some(latchkey::WatchEvent::NotExists)
    ));
    admin.cmd(&["SET", "lock:b", "x"]);
    assert!(matches!(
        bounded(w.next()).await,
        Some(latchkey::WatchEvent::Added)
    ));
    assert!(bounded(g.unlock()).await.unwrap());
    // The denials are in ACL LOG.
    let log = admin.call_str(&["ACL", "LOG"]);
    assert!(log.contains("other") && log.contains("get"), "{log}");
}

#[test]
fn deleting_a_user_closes_its_connections_and_releases_its_locks() {
    let h = start();
    let mut admin = Conn::ready(h.addr);
    admin.cmd(&["ACL", "SETUSER", "holder", "on", ">pw", "~*", "+@all"]);
    let mut holder = Conn::ready(h.addr);
    assert_eq!(holder.cmd(&["AUTH", "holder", "pw"]), ok());
    assert_eq!(holder.cmd(&["SETTP", "lk", "mine"]), V::Int(1));
    // A waiter (the default user) is in line.
    let mut waiter = Conn::ready(h.addr);
    assert_eq!(waiter.cmd(&["SETTP", "lk", "next", "QUEUE"]), V::Int(0));
    assert_eq!(admin.cmd(&["ACL", "DELUSER", "holder"]), V::Int(1));
    waiter.expect_acquired(false, "lk", "next");
    assert!(holder.closed(), "the deleted user's connection is closed");
    assert_eq!(admin.cmd(&["GET", "lk"]), b("next"));
    // Disabling does the same (Redis keeps such connections; a lock
    // server must not let a revoked holder keep its locks).
    admin.cmd(&["ACL", "SETUSER", "h2", "on", "nopass", "~*", "+@all"]);
    let mut h2 = Conn::ready(h.addr);
    assert_eq!(h2.cmd(&["AUTH", "h2", "x"]), ok());
    assert_eq!(h2.cmd(&["SETTP", "lk2", "v"]), V::Int(1));
    assert_eq!(admin.cmd(&["ACL", "SETUSER", "h2", "off"]), ok());
    assert!(h2.closed());
    eventually("lk2 released", || {
        admin.cmd(&["EXISTS", "lk2"]) == V::Int(0)
    });
    // Off, it cannot log in.
    let mut again = Conn::ready(h.addr);
    assert_eq!(
        again.call_str(&["AUTH", "h2", "x"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
}

#[test]
fn watches_push_only_keys_the_user_may_read() {
    let h = start();
    let mut admin = Conn::ready(h.addr);
    admin.cmd(&["ACL", "SETUSER", "w", "on", "nopass", "~a*", "~b*", "+@all"]);
    let mut w = Conn::ready(h.addr);
    assert_eq!(w.cmd(&["AUTH", "w", "x"]), ok());
    assert_eq!(w.cmd(&["WATCHEX", "a1"]), V::Simple("NOEXIST".into()));
    assert_eq!(w.cmd(&["WATCHEX", "b1"]), V::Simple("NOEXIST".into()));
    admin.cmd(&["SET", "a1", "x"]);
    w.expect_push("a1", "ADD");
    // The user loses `a*`: its watch there stays registered but pushes
    // nothing; `b*` still pushes.
    assert_eq!(
        admin.cmd(&["ACL", "SETUSER", "w", "resetkeys", "~b*"]),
        ok()
    );
    admin.cmd(&["DEL", "a1"]);
    admin.cmd(&["SET", "b1", "x"]);
    w.expect_push("b1", "ADD");
    w.expect_quiet(100);
}

#[test]
fn users_come_from_the_config_file_or_an_acl_file() {
    // `user` directives.
    let config = Config {
        port: 0,
        users: vec![
            vec![
                "alice".into(),
                "on".into(),
                ">pa".into(),
                "~*".into(),
                "+@read".into(),
            ],
            vec![
                "default".into(),
                "on".into(),
                ">dp".into(),
                "~*".into(),
                "+@all".into(),
            ],
        ],
        ..Default::default()
    };
    let h = start_with(config);
    let mut c = Conn::new(h.addr);
    assert_eq!(
        c.call_str(&["GET", "k"]),
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(c.cmd(&["AUTH", "alice", "pa"]), ok());
    assert_eq!(c.cmd(&["GET", "k"]), V::Nil);
    assert!(c.call_str(&["SET", "k", "v"]).starts_with("-NOPERM"));
    assert_eq!(c.cmd(&["AUTH", "dp"]), ok());
    assert_eq!(c.cmd(&["SET", "k", "v"]), ok());
    drop(h);

    // An aclfile, saved and loaded again.
    let dir = TempDir::new("aclfile");
    let path = format!("{}/users.acl", dir.path());
    std::fs::write(
        &path,
        "user bob on >pb ~bob:* +@all\nuser default on nopass ~* &* +@all\n",
    )
    .unwrap();
    let config = Config {
        port: 0,
        aclfile: path.clone(),
        ..Default::default()
    };
    let h = start_with(config);
    let mut c = Conn::ready(h.addr);
    assert_eq!(
        c.cmd(&["ACL", "USERS"]),
        V::Arr(vec![b("bob"), b("default")])
    );
    assert_eq!(
        c.cmd(&["ACL", "SETUSER", "carol", "on", ">pc", "+ping"]),
        ok()
    );
    assert_eq!(c.cmd(&["ACL", "SAVE"]), ok());
    let saved = std::fs::read_to_string(&path).unwrap();
    assert!(saved.contains("user carol on #"), "{saved}");
    assert!(!saved.contains(">pc"), "passwords are saved hashed only");
    assert_eq!(c.cmd(&["ACL", "DELUSER", "carol"]), V::Int(1));
    assert_eq!(c.cmd(&["ACL", "LOAD"]), ok());
    assert_eq!(
        c.cmd(&["ACL", "USERS"]),
        V::Arr(vec![b("bob"), b("carol"), b("default")])
    );
    // A broken file changes nothing and says why.
    std::fs::write(&path, "user bob on +nosuch\n").unwrap();
    assert_eq!(
        c.call_str(&["ACL", "LOAD"]),
        format!("-ERR {path}:1: Error in applying operation '+nosuch': Unknown command or category name in ACL. WARNING: ACL errors detected, no change to the previously active ACL rules was performed\r\n")
    );
    assert!(matches!(c.cmd(&["ACL", "USERS"]), V::Arr(u) if u.len() == 3));
}

#[test]
fn a_bad_acl_setup_stops_start_up() {
    let config = Config {
        port: 0,
        users: vec![vec!["u".into(), "+nosuch".into()]],
        ..Default::default()
    };
    let e = latchkey_server::runtime::ServerHandle::start(config)
        .err()
        .unwrap();
    assert!(
        e.to_string()
            .contains("Error loading ACL rule '+nosuch' for the user named 'u'"),
        "{e}"
    );
    let config = Config {
        port: 0,
        users: vec![vec!["u".into()]],
        aclfile: "/nonexistent/users.acl".into(),
        ..Default::default()
    };
    let e = latchkey_server::runtime::ServerHandle::start(config)
        .err()
        .unwrap();
    assert!(e.to_string().contains("not both"), "{e}");
}

#[test]
fn secrets_never_reach_the_slowlog() {
    let h = start();
    let mut c = Conn::ready(h.addr);
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]),
        ok()
    );
    c.cmd(&["ACL", "SETUSER", "u", "on", ">s3cret-a", "+@all", "~*"]);
    c.cmd(&["AUTH", "u", "s3cret-a"]);
    c.cmd(&["HELLO", "2", "AUTH", "u", "s3cret-a"]);
    c.cmd(&["CONFIG", "SET", "requirepass", "s3cret-b", "hz", "10"]);
    c.cmd(&["AUTH", "default", "s3cret-b"]);
    let log = c.call_str(&["SLOWLOG", "GET", "20"]);
    c.cmd(&["CONFIG", "SET", "requirepass", ""]);
    assert!(!log.contains("s3cret"), "{log}");
    // As Redis shows them: ACL SETUSER's rules, AUTH's and HELLO's
    // credentials and the sensitive config's value are redacted, the
    // rest is kept.
    for shown in [
        "$3\r\nACL\r\n$7\r\nSETUSER\r\n$10\r\n(redacted)\r\n",
        "$4\r\nAUTH\r\n$10\r\n(redacted)\r\n$10\r\n(redacted)\r\n",
        "$5\r\nHELLO\r\n$1\r\n2\r\n$4\r\nAUTH\r\n$10\r\n(redacted)\r\n",
        "$11\r\nrequirepass\r\n$10\r\n(redacted)\r\n$2\r\nhz\r\n$2\r\n10\r\n",
    ] {
        assert!(log.contains(shown), "{shown:?} in {log}");
    }
}

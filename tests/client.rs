//! The bundled async client against the in-process server (and, for
//! timing-sensitive protocol cases, a tiny scripted fake server): typed
//! conversions, pipelining, push dispatch, shared watches, disconnects,
//! reconnect, heartbeat and timeouts. Every wait is bounded.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use latchkey::{cmd, Backoff, Client, Error, Options, SetOptions, Value, WatchEvent, WatchStream};
use latchkey_server::config::Config;
use latchkey_server::runtime::ServerHandle;

mod common;
use common::{start, start_debug, start_with};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn url(s: &ServerHandle) -> String {
    format!("redis://127.0.0.1:{}", s.port())
}

async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("test step took over 10 s")
}

async fn next(s: &mut WatchStream) -> Option<WatchEvent> {
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("no watch event within 5 s")
}

/// `watchex=N` from CLIENT INFO.
async fn watch_count(c: &Client) -> i64 {
    let info: String = c.query(&cmd("CLIENT").arg("INFO")).await.unwrap();
    let f = info
        .split_whitespace()
        .find_map(|f| f.strip_prefix("watchex="))
        .expect("watchex field");
    f.parse().unwrap()
}

#[tokio::test]
async fn typed_commands_and_conversions() {
    let s = start_debug();
    let c = Client::connect(&url(&s)).await.unwrap();
    assert!(c.is_connected());
    assert_eq!(c.connection_generation(), 1);

    c.set("k", "v").await.unwrap();
    assert_eq!(c.get("k").await.unwrap(), Some(Bytes::from("v")));
    assert_eq!(c.get("missing").await.unwrap(), None);
    assert_eq!(c.incr("n").await.unwrap(), 1);
    assert_eq!(c.incr("n").await.unwrap(), 2);
    c.mset(&[("a", "1"), ("b", "2")]).await.unwrap();
    assert_eq!(
        c.mget(&["a", "nope", "b"]).await.unwrap(),
        vec![Some(Bytes::from("1")), None, Some(Bytes::from("2"))]
    );
    assert_eq!(c.exists(&["a", "b", "nope"]).await.unwrap(), 2);
    assert_eq!(c.del(&["a", "nope"]).await.unwrap(), 1);
    assert!(c.expire("b", Duration::from_secs(100)).await.unwrap());
    assert!(!c.expire("nope", Duration::from_secs(100)).await.unwrap());
    let pttl: i64 = c.query(&cmd("PTTL").arg("b")).await.unwrap();
    assert!(pttl > 90_000 && pttl <= 100_000, "{pttl}");

    // SET options.
    let nx = SetOptions::default().nx();
    assert_eq!(
        c.set_with("s", "1", nx.clone()).await.unwrap(),
        Some(Bytes::from("OK"))
    );
    assert_eq!(c.set_with("s", "2", nx).await.unwrap(), None);
    let got = c
        .set_with("s", "3", SetOptions::default().get())
        .await
        .unwrap();
    assert_eq!(got, Some(Bytes::from("1")));
    assert_eq!(
        c.set_with("t", "x", SetOptions::default().xx())
            .await
            .unwrap(),
        None
    );
    c.set_with(
        "t",
        "x",
        SetOptions::default().px(Duration::from_millis(5000)),
    )
    .await
    .unwrap();
    let pttl: i64 = cmd("PTTL").arg("t").query(&c).await.unwrap();
    assert!(pttl > 4000, "{pttl}");
    // A transaction on a shared connection would take in other handles'
    // commands: refused.
    for name in ["MULTI", "exec", "WATCH"] {
        let r: latchkey::Result<Value> = c.query(&cmd(name).arg("x")).await;
        assert!(matches!(r, Err(Error::Protocol(_))), "{name}: {r:?}");
    }
    // So are the fair locks' own queue commands.
    for q in [
        cmd("SETTP").arg("k").arg("v").arg("queue"),
        cmd("TPDEQUEUE").arg("k"),
    ] {
        let r: latchkey::Result<Value> = c.query(&q).await;
        assert!(matches!(r, Err(Error::Protocol(_))), "{r:?}");
    }

    // SETTP / DELIFEQ / raw WATCHEX.
    assert!(c.settp("tp", "me").await.unwrap());
    assert!(!c.settp("tp", "other").await.unwrap());
    assert!(!c.delifeq("tp", "other").await.unwrap());
    assert!(c.delifeq("tp", "me").await.unwrap());
    assert!(!c.watchex("tp").await.unwrap());
    assert!(c.watchex("k").await.unwrap());
    assert_eq!(c.unwatchex(&["tp", "k", "zz"]).await.unwrap(), 2);
    assert_eq!(c.unwatchex(&[] as &[&str]).await.unwrap(), 0);

    // Generic query with typed conversions.
    let n: i64 = cmd("STRLEN").arg("k").query(&c).await.unwrap();
    assert_eq!(n, 1);
    let v: Value = c.query(&cmd("PING")).await.unwrap();
    assert_eq!(v, Value::Simple("PONG".into()));
    let b: bool = c.query(&cmd("EXISTS").arg("k")).await.unwrap();
    assert!(b);
    let f: f64 = c
        .query(&cmd("INCRBYFLOAT").arg("fl").arg(1.5))
        .await
        .unwrap();
    assert_eq!(f, 1.5);
    let s2: String = c.query(&cmd("ECHO").arg("héllo")).await.unwrap();
    assert_eq!(s2, "héllo");
    let v8: Vec<u8> = c.query(&cmd("ECHO").arg(&b"\x00\xff"[..])).await.unwrap();
    assert_eq!(v8, b"\x00\xff");
    let o: Option<String> = c.query(&cmd("GET").arg("missing")).await.unwrap();
    assert_eq!(o, None);
    let pair: (String, i64) = c
        .query(&cmd("CONFIG").arg("GET").arg("databases"))
        .await
        .unwrap();
    assert_eq!(pair, ("databases".to_string(), 16));
    let m: HashMap<String, String> = c
        .query(&cmd("CONFIG").arg("GET").arg("databases"))
        .await
        .unwrap();
    assert_eq!(m["databases"], "16");
    let v: Value = c
        .query(&cmd("CONFIG").arg("GET").arg("databases"))
        .await
        .unwrap();
    assert!(matches!(v, Value::Map(ref m) if m.len() == 1), "{v:?}");
    let keys: Vec<String> = c.query(&cmd("KEYS").arg("[ks]")).await.unwrap();
    assert_eq!(keys.len(), 2);
    let d: Value = c
        .query(&cmd("DEBUG").arg("HELP"))
        .await
        .map(|_: ()| Value::Nil)
        .unwrap();
    assert_eq!(d, Value::Nil);

    // Conversion errors are clear.
    let e = c.query::<i64>(&cmd("GET").arg("k")).await.unwrap_err();
    assert_eq!(
        e,
        Error::Type("expected integer, got bulk string \"v\"".into())
    );
    let e = c.query::<i64>(&cmd("KEYS").arg("*")).await.unwrap_err();
    assert_eq!(e, Error::Type("expected integer, got array".into()));
    let e = c
        .query::<String>(&cmd("GET").arg("missing"))
        .await
        .unwrap_err();
    assert_eq!(e, Error::Type("expected string, got nil".into()));

    // Error replies carry the full text.
    let e = c.incr("k").await.unwrap_err();
    assert_eq!(
        e,
        Error::Server("ERR value is not an integer or out of range".into())
    );
    let e = c.query::<Value>(&cmd("NOSUCH").arg("x")).await.unwrap_err();
    match e {
        Error::Server(t) => assert!(t.starts_with("ERR unknown command 'NOSUCH'"), "{t}"),
        e => panic!("{e:?}"),
    }
    c.set("k", "v").await.unwrap();
    let e = c.query::<()>(&cmd("GET")).await.unwrap_err();
    assert_eq!(
        e,
        Error::Server("ERR wrong number of arguments for 'get' command".into())
    );
    // The connection is still fine after errors.
    assert_eq!(c.get("k").await.unwrap(), Some(Bytes::from("v")));

    // Commands that would break the multiplexed connection are refused.
    for bad in [
        cmd("SELECT").arg(1),
        cmd("subscribe").arg("ch"),
        cmd("CLIENT").arg("REPLY").arg("OFF"),
    ] {
        assert!(matches!(
            c.query::<Value>(&bad).await,
            Err(Error::Protocol(_))
        ));
    }
    assert_eq!(c.get("k").await.unwrap(), Some(Bytes::from("v")));
}

#[tokio::test]
async fn url_database_auth_and_name() {
    let s = start_with(Config {
        port: 0,
        requirepass: Some("sesame".into()),
        ..Default::default()
    });
    let base = format!("127.0.0.1:{}", s.port());
    let e = Client::connect(&format!("redis://{base}"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Server(t) if t.starts_with("NOAUTH")),
        "{e:?}"
    );
    let e = Client::connect(&format!("redis://:wrong@{base}"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Server(t) if t.starts_with("WRONGPASS")),
        "{e:?}"
    );
    assert!(matches!(
        Client::connect("http://x").await,
        Err(Error::Url(_))
    ));

    let opts = Options {
        client_name: Some("tester".into()),
        ..Options::default()
    };
    let c3 = Client::connect_with(&format!("redis://default:sesame@{base}/3"), opts)
        .await
        .unwrap();
    let c0 = Client::connect(&format!("redis://:sesame@{base}"))
        .await
        .unwrap();
    c3.set("only3", "x").await.unwrap();
    assert_eq!(c0.exists(&["only3"]).await.unwrap(), 0);
    let name: Option<String> = c3.query(&cmd("CLIENT").arg("GETNAME")).await.unwrap();
    assert_eq!(name.as_deref(), Some("tester"));
    let info: String = c3.query(&cmd("CLIENT").arg("INFO")).await.unwrap();
    assert!(
        info.contains(" db=3 ") && info.contains(" resp=3 "),
        "{info}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_concurrent_requests_match() {
    let s = start();
    let c = Client::connect(&url(&s)).await.unwrap();
    let before: i64 = {
        let info: String = c.query(&cmd("CLIENT").arg("INFO")).await.unwrap();
        info.split_whitespace()
            .find_map(|f| f.strip_prefix("id="))
            .unwrap()
            .parse()
            .unwrap()
    };
    let mut tasks = Vec::new();
    for t in 0..50 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                let n = t * 20 + i;
                // Mixed types, so a mismatched reply could not pass.
                let echo: String = cmd("ECHO").arg(format!("v{n}")).query(&c).await.unwrap();
                assert_eq!(echo, format!("v{n}"));
                c.set(format!("k{n}"), n).await.unwrap();
                let got: i64 = c.query(&cmd("GET").arg(format!("k{n}"))).await.unwrap();
                assert_eq!(got, n);
            }
        }));
    }
    // And 1,000 more fired at once from one task (one big pipeline).
    let futs = (0..1000).map(|n| {
        let c = c.clone();
        async move { c.query::<i64>(&cmd("ECHO").arg(n)).await.unwrap() }
    });
    let got = bounded(futures::future::join_all(futs)).await;
    assert_eq!(got, (0..1000).collect::<Vec<i64>>());
    for t in tasks {
        bounded(t).await.unwrap();
    }
    // Still one connection.
    let info: String = c.query(&cmd("CLIENT").arg("INFO")).await.unwrap();
    assert!(info.contains(&format!("id={before} ")), "{info}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_never_consume_replies() {
    let s = start();
    let c = Client::connect(&url(&s)).await.unwrap();
    let other = Client::connect(&url(&s)).await.unwrap();
    let mut w = c.watch_stream("p").await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::NotExists));

    // Another connection flips the key while this one pipelines requests.
    let flipper = tokio::spawn(async move {
        for _ in 0..100 {
            other.set("p", "1").await.unwrap();
            other.del(&["p"]).await.unwrap();
        }
    });
    let futs = (0..2000).map(|n| {
        let c = c.clone();
        async move { c.query::<i64>(&cmd("ECHO").arg(n)).await.unwrap() }
    });
    let got = bounded(futures::future::join_all(futs)).await;
    assert_eq!(got, (0..2000).collect::<Vec<i64>>());
    bounded(flipper).await.unwrap();

    // The watcher's own writes: each push follows its command's reply.
    let futs = (0..200).map(|n| {
        let c = c.clone();
        async move {
            if n % 2 == 0 {
                c.query::<Value>(&cmd("SET").arg("p").arg(n)).await.unwrap()
            } else {
                c.query::<Value>(&cmd("DEL").arg("p")).await.unwrap()
            }
        }
    });
    let got = bounded(futures::future::join_all(futs)).await;
    for (n, v) in got.into_iter().enumerate() {
        let want = if n % 2 == 0 {
            Value::Simple("OK".into())
        } else {
            Value::Int(1)
        };
        assert_eq!(v, want, "reply {n}");
    }
    for i in 0..300 {
        let want = if i % 2 == 0 {
            WatchEvent::Added
        } else {
            WatchEvent::Deleted
        };
        assert_eq!(next(&mut w).await, Some(want), "event {i}");
    }
}

#[tokio::test]
async fn watch_stream_sequence() {
    let s = start();
    let c = Client::connect(&url(&s)).await.unwrap();
    let other = Client::connect(&url(&s)).await.unwrap();
    let mut w = c.watch_stream("job").await.unwrap();
    assert_eq!(w.key(), b"job");
    assert_eq!(next(&mut w).await, Some(WatchEvent::NotExists));
    other.set("job", "1").await.unwrap();
    other.set("job", "2").await.unwrap(); // overwrite: no event
    other.del(&["job"]).await.unwrap();
    assert!(other.settp("job", "x").await.unwrap());
    drop(other); // the bound key goes with its connection
    let want = [
        WatchEvent::Added,
        WatchEvent::Deleted,
        WatchEvent::Added,
        WatchEvent::Deleted,
    ];
    for (i, e) in want.into_iter().enumerate() {
        assert_eq!(next(&mut w).await, Some(e), "event {i}");
    }
    other_expire(&c).await;
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added));
    assert_eq!(next(&mut w).await, Some(WatchEvent::Deleted));
    // A later subscriber on an existing key starts with Exists.
    c.set("job", "again").await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added));
    let mut w2 = c.watch_stream("job").await.unwrap();
    assert_eq!(next(&mut w2).await, Some(WatchEvent::Exists));
    c.del(&["job"]).await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Deleted));
    assert_eq!(next(&mut w2).await, Some(WatchEvent::Deleted));

    // Callbacks get the same sequence, on their own task.
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let h = c.watch("cb", move |e| s2.lock().push(e)).await.unwrap();
    c.set("cb", 1).await.unwrap();
    c.del(&["cb"]).await.unwrap();
    bounded(async {
        while seen.lock().len() < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(
        *seen.lock(),
        vec![
            WatchEvent::NotExists,
            WatchEvent::Added,
            WatchEvent::Deleted
        ]
    );
    drop(h);
    assert_eq!(watch_count(&c).await, 1); // "job" only
}

/// A key that expires on its own: the watcher hears DEL without anyone
/// touching it.
async fn other_expire(c: &Client) {
    c.set_with(
        "job",
        "t",
        SetOptions::default().px(Duration::from_millis(30)),
    )
    .await
    .unwrap();
}

/// A new watcher's WATCHEX that lazily expires the key: the older watcher
/// gets Deleted, the new one starts at NotExists and never sees that DEL.
#[tokio::test]
async fn new_watcher_never_gets_a_stale_deleted() {
    let s = start_debug();
    let c = Client::connect(&url(&s)).await.unwrap();
    let admin = Client::connect(&url(&s)).await.unwrap();
    let _: Value = admin
        .query(&cmd("DEBUG").arg("SET-ACTIVE-EXPIRE").arg(0))
        .await
        .unwrap();
    admin.set("ek", "v").await.unwrap();
    let mut w1 = c.watch_stream("ek").await.unwrap();
    assert_eq!(next(&mut w1).await, Some(WatchEvent::Exists));
    assert!(admin.expire("ek", Duration::from_millis(1)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut w2 = c.watch_stream("ek").await.unwrap();
    assert_eq!(next(&mut w2).await, Some(WatchEvent::NotExists));
    assert_eq!(next(&mut w1).await, Some(WatchEvent::Deleted));
    assert!(tokio::time::timeout(Duration::from_millis(50), w2.next())
        .await
        .is_err());
}

#[tokio::test]
async fn watchers_share_one_server_watch() {
    let s = start();
    let c = Client::connect(&url(&s)).await.unwrap();
    let mut a = c.watch_stream("shared").await.unwrap();
    let mut b = c.watch_stream("shared").await.unwrap();
    let h = c.watch("shared", |_| {}).await.unwrap();
    assert_eq!(watch_count(&c).await, 1);
    assert_eq!(c.watched_keys(), 1);
    assert_eq!(next(&mut a).await, Some(WatchEvent::NotExists));
    assert_eq!(next(&mut b).await, Some(WatchEvent::NotExists));
    c.set("shared", 1).await.unwrap();
    assert_eq!(next(&mut a).await, Some(WatchEvent::Added));
    assert_eq!(next(&mut b).await, Some(WatchEvent::Added));
    drop(a);
    drop(h);
    assert_eq!(watch_count(&c).await, 1);
    c.del(&["shared"]).await.unwrap();
    assert_eq!(next(&mut b).await, Some(WatchEvent::Deleted));
    drop(b);
    // UNWATCHEX was queued before CLIENT INFO on the same connection.
    assert_eq!(watch_count(&c).await, 0);
    assert_eq!(c.watched_keys(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_and_rewatch_races_keep_the_watch() {
    let s = start();
    let c = Client::connect(&url(&s)).await.unwrap();
    let other = Client::connect(&url(&s)).await.unwrap();
    for i in 0..300 {
        // Drop the last watcher (UNWATCHEX in flight) and watch again at once,
        // or start a second WATCHEX while the first one's holder drops.
        let w = c.watch_stream("r").await.unwrap();
        let pending = {
            let c = c.clone();
            tokio::spawn(async move { c.watch_stream("r").await.unwrap() })
        };
        if i % 2 == 0 {
            drop(w);
        } else {
            tokio::task::yield_now().await;
            drop(w);
        }
        let mut w2 = bounded(pending).await.unwrap();
        let first = next(&mut w2).await.unwrap();
        let exists = first == WatchEvent::Exists;
        assert!(exists || first == WatchEvent::NotExists);
        // The server watch must be there: a flip reaches w2.
        if exists {
            other.del(&["r"]).await.unwrap();
            assert_eq!(next(&mut w2).await, Some(WatchEvent::Deleted), "round {i}");
        } else {
            other.set("r", i).await.unwrap();
            assert_eq!(next(&mut w2).await, Some(WatchEvent::Added), "round {i}");
        }
        drop(w2);
    }
    assert_eq!(watch_count(&c).await, 0);
    // A subscriber cancelled while its WATCHEX is in flight leaves nothing.
    for _ in 0..50 {
        let f = c.watch_stream("gone");
        let _ = tokio::time::timeout(Duration::from_micros(1), f).await;
        tokio::task::yield_now().await;
    }
    // Their replies come back later; the last one queues UNWATCHEX.
    bounded(async {
        while c.watched_keys() != 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    assert_eq!(watch_count(&c).await, 0);
}

async fn client_id(c: &Client) -> i64 {
    c.query(&cmd("CLIENT").arg("ID")).await.unwrap()
}

#[tokio::test]
async fn disconnect_is_reported_everywhere() {
    let s = start();
    let c = Client::connect(&url(&s)).await.unwrap();
    let admin = Client::connect(&url(&s)).await.unwrap();
    let mut w = c.watch_stream("d").await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::NotExists));
    let lost = c.connection_lost();
    let id = client_id(&c).await;

    // Requests queued behind the server-side kill of this very connection
    // never get replies: they fail with Disconnected.
    let kill = cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .arg("SKIPME")
        .arg("no");
    let futs = (0..20).map(|n| {
        let c = c.clone();
        let kill = kill.clone();
        async move {
            if n == 0 {
                c.query::<Value>(&kill).await
            } else {
                c.query::<Value>(&cmd("ECHO").arg(n)).await
            }
        }
    });
    let res = bounded(futures::future::join_all(futs)).await;
    let failed = res
        .iter()
        .filter(|r| **r == Err(Error::Disconnected))
        .count();
    println!(
        "kill reply {:?}; {failed} of 19 queued requests failed",
        res[0]
    );
    assert!(failed >= 19, "{res:?}");
    bounded(lost).await;
    assert!(!c.is_connected());
    assert_eq!(next(&mut w).await, Some(WatchEvent::Disconnected));
    assert_eq!(next(&mut w).await, None); // no reconnect: the watch ends
    assert_eq!(c.get("x").await, Err(Error::Disconnected));
    assert!(matches!(
        c.watch_stream("d").await,
        Err(Error::Disconnected)
    ));
    // connection_lost with no connection resolves at once.
    bounded(c.connection_lost()).await;
    let _ = admin;
}

#[tokio::test]
async fn killed_from_outside_fails_pending_requests() {
    let s = start();
    let c = Client::connect(&url(&s)).await.unwrap();
    let admin = Client::connect(&url(&s)).await.unwrap();
    let id = client_id(&c).await;
    let mut w = c.watch_stream("x").await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::NotExists));
    let killed: i64 = admin
        .query(&cmd("CLIENT").arg("KILL").arg("ID").arg(id))
        .await
        .unwrap();
    assert_eq!(killed, 1);
    assert_eq!(next(&mut w).await, Some(WatchEvent::Disconnected));
    assert_eq!(c.get("x").await, Err(Error::Disconnected));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_reregisters_watches() {
    let s = start();
    let opts = Options {
        // The first retry waits long enough for the SET below to land
        // while the client is away, even on a loaded machine.
        reconnect: Some(Backoff {
            initial: Duration::from_millis(500),
            max: Duration::from_millis(500),
            max_attempts: Some(20),
        }),
        ..Options::default()
    };
    let c = Client::connect_with(&url(&s), opts).await.unwrap();
    let admin = Client::connect(&url(&s)).await.unwrap();
    let mut w = c.watch_stream("rk").await.unwrap();
    let mut w2 = c.watch_stream("rk").await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::NotExists));
    assert_eq!(next(&mut w2).await, Some(WatchEvent::NotExists));
    let id = client_id(&c).await;
    let lost = c.connection_lost();
    let _: i64 = admin
        .query(&cmd("CLIENT").arg("KILL").arg("ID").arg(id))
        .await
        .unwrap();
    bounded(lost).await;
    // The key appears while the client is away.
    admin.set("rk", "v").await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Disconnected));
    assert_eq!(next(&mut w).await, Some(WatchEvent::Exists));
    assert_eq!(next(&mut w2).await, Some(WatchEvent::Disconnected));
    assert_eq!(next(&mut w2).await, Some(WatchEvent::Exists));
    assert!(c.is_connected());
    assert_eq!(c.connection_generation(), 2);
    assert_ne!(client_id(&c).await, id);
    assert_eq!(watch_count(&c).await, 1);
    admin.del(&["rk"]).await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Deleted));
    assert_eq!(next(&mut w2).await, Some(WatchEvent::Deleted));
    // New watchers work on the new connection too.
    let mut w3 = c.watch_stream("rk").await.unwrap();
    assert_eq!(next(&mut w3).await, Some(WatchEvent::NotExists));
    drop((w, w2, w3));
    assert_eq!(watch_count(&c).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_gives_up_after_max_attempts() {
    let s = start();
    let addr = url(&s);
    let opts = Options {
        reconnect: Some(Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(20),
            max_attempts: Some(3),
        }),
        ..Options::default()
    };
    let c = Client::connect_with(&addr, opts).await.unwrap();
    let mut w = c.watch_stream("g").await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::NotExists));
    s.stop();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Disconnected));
    assert_eq!(next(&mut w).await, None);
    assert_eq!(c.get("g").await, Err(Error::Disconnected));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_drops_a_silent_connection() {
    let s = start_debug();
    let opts = Options {
        heartbeat: Some(Duration::from_millis(250)),
        request_timeout: Some(Duration::from_secs(1)),
        ..Options::default()
    };
    let c = Client::connect_with(&url(&s), opts).await.unwrap();
    let admin = Client::connect(&url(&s)).await.unwrap();
    let mut w = c.watch_stream("h").await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::NotExists));
    // Healthy: a few heartbeats pass without trouble (each PING may take
    // up to 250 ms, so a loaded machine does not fail this).
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(c.is_connected());
    // The whole server freezes for 2 s: PINGs go unanswered.
    let frozen = tokio::spawn(async move {
        let _: Value = admin
            .query(&cmd("DEBUG").arg("SLEEP").arg("2"))
            .await
            .unwrap();
    });
    let t = std::time::Instant::now();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Disconnected));
    println!(
        "heartbeat noticed the frozen server after {:?}",
        t.elapsed()
    );
    assert!(!c.is_connected());
    bounded(frozen).await.unwrap();
}

/// A fake server: answers HELLO, then hands every later command (as its
/// argument list) to `script`, which writes whatever it likes.
async fn fake_server<F, Fut>(script: F) -> String
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        if let Ok((mut sock, _)) = l.accept().await {
            read_cmd(&mut sock).await; // HELLO
            sock.write_all(b"%1\r\n+proto\r\n:3\r\n").await.unwrap();
            // The session timeout (Options::session_timeout's default).
            assert_eq!(read_cmd(&mut sock).await, ["TPSESSION", "10000"]);
            sock.write_all(b"+OK\r\n").await.unwrap();
            script(sock).await;
        }
    });
    format!("redis://{addr}")
}

/// Reads one command (array of bulk strings) and returns its arguments.
async fn read_cmd(sock: &mut tokio::net::TcpStream) -> Vec<String> {
    async fn line(sock: &mut tokio::net::TcpStream) -> String {
        let mut l = Vec::new();
        let mut b = [0u8; 1];
        while !l.ends_with(b"\r\n") {
            if sock.read(&mut b).await.unwrap_or(0) == 0 {
                return String::new();
            }
            l.push(b[0]);
        }
        String::from_utf8(l[..l.len() - 2].to_vec()).unwrap()
    }
    let head = line(sock).await;
    let n: usize = head.get(1..).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut args = Vec::new();
    for _ in 0..n {
        line(sock).await;
        args.push(line(sock).await);
    }
    args
}

#[tokio::test]
async fn timed_out_request_keeps_its_slot() {
    let u = fake_server(|mut sock| async move {
        // First request: answer late. Second: at once (after the late one).
        let a = read_cmd(&mut sock).await;
        let b = read_cmd(&mut sock).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let reply = |s: &str| format!("${}\r\n{}\r\n", s.len(), s);
        sock.write_all(reply(&a[1]).as_bytes()).await.unwrap();
        sock.write_all(reply(&b[1]).as_bytes()).await.unwrap();
        // A push between replies is not a reply.
        sock.write_all(b">3\r\n$7\r\nwatchex\r\n$1\r\nk\r\n$3\r\nADD\r\n")
            .await
            .unwrap();
        let c = read_cmd(&mut sock).await;
        sock.write_all(reply(&c[1]).as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
    })
    .await;
    let opts = Options {
        request_timeout: Some(Duration::from_millis(100)),
        ..Options::default()
    };
    let c = Client::connect_with(&u, opts).await.unwrap();
    let late = cmd("ECHO").arg("late");
    let first = c.query::<String>(&late);
    let second = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        c.query::<String>(&cmd("ECHO").arg("second")).await
    };
    let (a, b) = tokio::join!(first, second);
    assert_eq!(a, Err(Error::Timeout));
    // The second request timed out too (the server held both); its slot and
    // the first one's swallow the two late replies.
    assert_eq!(b, Err(Error::Timeout));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let third: String = c.query(&cmd("ECHO").arg("third")).await.unwrap();
    assert_eq!(third, "third");
}

/// A sub-second EX is not cut to whole seconds (it goes out as PX), and a
/// sub-millisecond expiry is rounded up, not down to "delete now". Checked
/// on the wire: a live server's PTTL would race the clock.
#[tokio::test]
async fn durations_are_rounded_up_on_the_wire() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let u = fake_server(move |mut sock| {
        let tx = tx.clone();
        async move {
            for reply in [&b"+OK\r\n"[..], b"+OK\r\n", b":1\r\n", b":1\r\n", b":1\r\n"] {
                let args = read_cmd(&mut sock).await;
                let _ = tx.send(args.join(" "));
                sock.write_all(reply).await.unwrap();
            }
        }
    })
    .await;
    let c = Client::connect(&u).await.unwrap();
    let ex = |ms| SetOptions::default().ex(Duration::from_millis(ms));
    c.set_with("t", "x", ex(1500)).await.unwrap();
    c.set_with("t", "x", ex(2000)).await.unwrap();
    assert!(c.expire("t", Duration::from_micros(1500)).await.unwrap());
    assert!(c.expire("t", Duration::from_secs(3)).await.unwrap());
    // "Forever" saturates instead of wrapping round to 0 (delete now).
    assert!(c.expire("t", Duration::MAX).await.unwrap());
    let mut sent = Vec::new();
    while let Ok(s) = rx.try_recv() {
        sent.push(s);
    }
    assert_eq!(
        sent,
        [
            "SET t x PX 1500",
            "SET t x EX 2",
            "PEXPIRE t 2",
            "PEXPIRE t 3000",
            "PEXPIRE t 18446744073709551615"
        ]
    );
}

#[tokio::test]
async fn connection_closed_by_peer_fails_pending() {
    let u = fake_server(|mut sock| async move {
        for _ in 0..3 {
            read_cmd(&mut sock).await;
        }
        // Close without answering.
    })
    .await;
    let c = Client::connect(&u).await.unwrap();
    let futs = (0..3).map(|n| {
        let c = c.clone();
        async move { c.query::<Value>(&cmd("ECHO").arg(n)).await }
    });
    let res = bounded(futures::future::join_all(futs)).await;
    assert!(
        res.iter().all(|r| *r == Err(Error::Disconnected)),
        "{res:?}"
    );
}

#[tokio::test]
async fn connect_timeout() {
    // Accepts TCP (backlog) but never answers HELLO.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let u = format!("redis://{}", l.local_addr().unwrap());
    let opts = Options {
        connect_timeout: Duration::from_millis(150),
        ..Options::default()
    };
    let t = std::time::Instant::now();
    assert_eq!(
        Client::connect_with(&u, opts).await.unwrap_err(),
        Error::Timeout
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    // Nothing listening: an I/O error.
    drop(l);
    assert!(matches!(Client::connect(&u).await, Err(Error::Io(_))));
}

#[tokio::test]
async fn dropping_the_last_clone_closes_the_connection() {
    let s = start();
    let admin = Client::connect(&url(&s)).await.unwrap();
    let count = || async {
        let list: String = admin.query(&cmd("CLIENT").arg("LIST")).await.unwrap();
        list.lines().count()
    };
    let c = Client::connect(&url(&s)).await.unwrap();
    let c2 = c.clone();
    assert!(c2.settp("bound", "x").await.unwrap());
    assert_eq!(count().await, 2);
    drop(c);
    assert_eq!(count().await, 2);
    drop(c2);
    let done = AtomicUsize::new(0);
    bounded(async {
        while count().await != 1 {
            done.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(admin.exists(&["bound"]).await.unwrap(), 0);
}

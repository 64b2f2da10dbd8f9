//! Locks from the bundled client (SETTP + WATCHEX + DELIFEQ) against the
//! in-process server: mutual exclusion, release on connection loss,
//! timeouts, with_lock on error/panic/cancellation, the DELIFEQ race, lease.
//! Every wait is bounded.

use std::future::{Future, IntoFuture};
use std::sync::Arc;
use std::time::{Duration, Instant};

use latchkey::{cmd, Client, Error};
use latchkey_server::runtime::ServerHandle;

mod common;
use common::start;

async fn connect(s: &ServerHandle) -> Client {
    Client::connect(&format!("redis://127.0.0.1:{}", s.port()))
        .await
        .unwrap()
}

async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("test step took over 10 s")
}

async fn kill(admin: &Client, victim: &Client) {
    let id: i64 = victim.query(&cmd("CLIENT").arg("ID")).await.unwrap();
    let n: i64 = admin
        .query(&cmd("CLIENT").arg("KILL").arg("ID").arg(id))
        .await
        .unwrap();
    assert_eq!(n, 1);
}

/// Polls `try_lock` until it succeeds (the release may be in flight on
/// another connection).
async fn eventually_free(c: &Client, name: &str) {
    bounded(async {
        loop {
            if let Some(g) = c.try_lock(name).await.unwrap() {
                assert!(g.unlock().await.unwrap());
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_counter_is_exact() {
    // The default (the server's queue) and the WATCHEX retry loop.
    for watch_loop in [false, true] {
        counter_rounds(watch_loop).await;
    }
}

async fn counter_rounds(watch_loop: bool) {
    let s = start();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(connect(&s).await);
    }
    clients[0].set("counter", 0).await.unwrap();
    let t = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..32 {
        let c = clients[i % 4].clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..100 {
                let b = c.lock("counter-lock");
                let b = if watch_loop { b.watch_loop() } else { b };
                let g = b.await.unwrap();
                assert!(g.is_held());
                let n: i64 = c.query(&cmd("GET").arg("counter")).await.unwrap();
                c.set("counter", n + 1).await.unwrap();
                assert!(g.unlock().await.unwrap());
            }
        }));
    }
    tokio::time::timeout(Duration::from_secs(60), async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
    .expect("mutual exclusion test took over 60 s");
    let n: i64 = clients[0].query(&cmd("GET").arg("counter")).await.unwrap();
    println!(
        "3200 lock/GET/SET/unlock rounds over 4 connections in {:?} (watch loop: {watch_loop})",
        t.elapsed()
    );
    assert_eq!(n, 32 * 100);
    assert_eq!(clients[0].exists(&["counter-lock"]).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_acquires_when_holder_connection_dies() {
    let s = start();
    let admin = connect(&s).await;
    let holder = connect(&s).await;
    let waiter = connect(&s).await;
    let g = holder.lock("job").await.unwrap();
    let lost = g.lost();
    let w = waiter.clone();
    let waiting = tokio::spawn(async move {
        let g = w.lock("job").await.unwrap();
        (Instant::now(), g)
    });
    // Let the waiter reach its watch.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished());
    let t = Instant::now();
    kill(&admin, &holder).await;
    let (acquired_at, g2) = bounded(waiting).await.unwrap();
    let latency = acquired_at.duration_since(t);
    println!("waiter acquired {latency:?} after CLIENT KILL of the holder");
    assert!(latency < Duration::from_secs(5), "{latency:?}");
    bounded(lost).await;
    assert!(!g.is_held());
    assert!(g2.is_held());
    let owner: Option<String> = admin.query(&cmd("GET").arg("job")).await.unwrap();
    assert_eq!(owner.as_deref(), Some(g2.value()));
    // Unlocking the lost guard reports it was no longer ours.
    assert!(!g.unlock().await.unwrap());
    assert!(g2.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_acquires_when_holder_crashes_without_unlock() {
    let s = start();
    let holder = connect(&s).await;
    let waiter = connect(&s).await;
    // A holder that "crashes": its guard is never dropped (no DELIFEQ) and
    // its connection goes away; the server releases the bound key.
    let g = holder.lock("job").await.unwrap();
    let w = waiter.clone();
    let waiting = tokio::spawn(async move {
        let g = w.lock("job").await.unwrap();
        (Instant::now(), g)
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t = Instant::now();
    let lost = g.lost();
    let id: i64 = holder.query(&cmd("CLIENT").arg("ID")).await.unwrap();
    std::mem::forget(g);
    let admin = connect(&s).await;
    let _: i64 = admin
        .query(&cmd("CLIENT").arg("KILL").arg("ID").arg(id))
        .await
        .unwrap();
    drop(holder);
    let (acquired_at, g2) = bounded(waiting).await.unwrap();
    println!(
        "waiter acquired {:?} after the holder's connection closed",
        acquired_at.duration_since(t)
    );
    bounded(lost).await;
    assert!(g2.unlock().await.unwrap());
}

#[tokio::test]
async fn lock_timeout_reports_lock_timeout() {
    let s = start();
    let a = connect(&s).await;
    let b = connect(&s).await;
    let g = a.lock("busy").await.unwrap();
    let t = Instant::now();
    let e = b
        .lock_timeout("busy", Duration::from_millis(150))
        .await
        .unwrap_err();
    let took = t.elapsed();
    match e {
        Error::LockTimeout { name, waited } => {
            assert_eq!(name, "busy");
            assert!(waited >= Duration::from_millis(150), "{waited:?}");
        }
        e => panic!("{e:?}"),
    }
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(b.try_lock("busy").await.unwrap().is_none());
    // The builder form, and a timeout that is met.
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.lock("busy").timeout(Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(g.unlock().await.unwrap());
    let g2 = bounded(waiting).await.unwrap().unwrap();
    assert!(g2.is_held());
    // Nothing left watched on b once the waiter is done.
    let info: String = b.query(&cmd("CLIENT").arg("INFO")).await.unwrap();
    assert!(info.contains(" watchex=0"), "{info}");
    // "Forever" as a wait or a lease: no overflow panic.
    let g_max = b
        .lock("max")
        .timeout(Duration::MAX)
        .lease(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(g_max.is_held());
    assert!(g_max.unlock().await.unwrap());
    let r = b.lock("max").lease(Duration::MAX).await;
    assert!(matches!(&r, Err(Error::Server(_))), "{:?}", r.err());
    // A zero wait still takes a free lock (the wait is bounded, not the
    // attempt) and gives up at once on a held one.
    let e = a.lock_timeout("busy", Duration::ZERO).await.unwrap_err();
    assert!(matches!(e, Error::LockTimeout { .. }), "{e:?}");
    let free = a.lock_timeout("free", Duration::ZERO).await.unwrap();
    assert!(free.is_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_releases_on_error_panic_and_cancel() {
    let s = start();
    let a = connect(&s).await;
    let b = connect(&s).await;

    // Ok and Err outputs: the body runs holding the lock (another
    // connection cannot take it), which is released before returning.
    let held_by_other = || async { b.try_lock("wl").await.unwrap().is_some() };
    let r = a
        .with_lock("wl", async { (held_by_other().await, 7) })
        .await
        .unwrap();
    assert_eq!(r, (false, 7));
    assert_eq!(a.exists(&["wl"]).await.unwrap(), 0);
    let r: Result<(), bool> = a
        .with_lock("wl", async { Err(held_by_other().await) })
        .await
        .unwrap();
    assert_eq!(r, Err(false));
    assert_eq!(a.exists(&["wl"]).await.unwrap(), 0);

    // Panic: released, then the panic continues.
    let a2 = a.clone();
    let j = tokio::spawn(async move {
        a2.with_lock("wl", async {
            panic!("inside the lock");
        })
        .await
    });
    let e = bounded(j).await.unwrap_err();
    assert!(e.is_panic());
    assert_eq!(a.exists(&["wl"]).await.unwrap(), 0);

    // Cancellation while the body runs with the lock: the guard's drop
    // releases.
    let (inside_tx, inside_rx) = tokio::sync::oneshot::channel();
    let a2 = a.clone();
    let j = tokio::spawn(async move {
        a2.with_lock("wl", async move {
            let _ = inside_tx.send(());
            tokio::time::sleep(Duration::from_secs(30)).await;
        })
        .await
    });
    bounded(inside_rx).await.unwrap();
    assert_eq!(b.exists(&["wl"]).await.unwrap(), 1);
    j.abort();
    assert!(bounded(j).await.unwrap_err().is_cancelled());
    eventually_free(&b, "wl").await;

    // Cancelling a waiter never leaves a lock behind, even if its SETTP
    // succeeded after the cancellation.
    for i in 0..100 {
        let _ = tokio::time::timeout(Duration::from_micros(i % 7), a.lock("wl")).await;
    }
    eventually_free(&b, "wl").await;
}

#[tokio::test]
async fn unlock_never_deletes_someone_elses_lock() {
    let s = start();
    let a = connect(&s).await;
    let b = connect(&s).await;
    let op = connect(&s).await;
    let ga = a.lock("res").await.unwrap();
    // An operator deletes the key; B takes the lock.
    assert_eq!(op.del(&["res"]).await.unwrap(), 1);
    let gb = bounded(b.lock("res").into_future()).await.unwrap();
    // A is told (LOST): its guard counts itself lost; B's fencing token
    // is higher.
    bounded(ga.lost()).await;
    assert!(!ga.is_held());
    assert_eq!(ga.lost_reason().as_deref(), Some("del"));
    assert!(gb.token() > ga.token(), "{} {}", gb.token(), ga.token());
    assert!(!ga.unlock().await.unwrap());
    assert!(gb.is_held());
    let v: Option<String> = op.query(&cmd("GET").arg("res")).await.unwrap();
    assert_eq!(v.as_deref(), Some(gb.value()));
    // Dropping a guard releases too.
    drop(gb);
    eventually_free(&op, "res").await;
}

#[tokio::test]
async fn guard_lost_on_kill_and_try_lock() {
    let s = start();
    let a = connect(&s).await;
    let admin = connect(&s).await;
    let g = a.try_lock("t").await.unwrap().expect("free");
    assert_eq!(g.name(), b"t");
    assert_eq!(g.value().len(), 32);
    assert!(a.try_lock("t").await.unwrap().is_none());
    let lost = g.lost();
    // Not lost while held.
    assert!(tokio::time::timeout(Duration::from_millis(30), g.lost())
        .await
        .is_err());
    kill(&admin, &a).await;
    bounded(lost).await;
    assert!(!g.is_held());
    assert_eq!(admin.exists(&["t"]).await.unwrap(), 0);
    // Locking on a dead client fails, never hangs.
    assert!(matches!(a.lock("t").await, Err(Error::Disconnected)));
    assert!(matches!(a.try_lock("t").await, Err(Error::Disconnected)));
}

#[tokio::test]
async fn waiter_fails_when_its_own_connection_dies() {
    let s = start();
    let a = connect(&s).await;
    let b = connect(&s).await;
    let admin = connect(&s).await;
    let _g = a.lock("x").await.unwrap();
    let b2 = b.clone();
    let waiting = tokio::spawn(async move { b2.lock("x").await });
    tokio::time::sleep(Duration::from_millis(30)).await;
    kill(&admin, &b).await;
    let r = bounded(waiting).await.unwrap();
    assert!(matches!(r, Err(Error::Disconnected)), "{r:?}");
}

#[tokio::test]
async fn lease_sets_a_ttl_and_expires_the_guard() {
    let s = start();
    let a = connect(&s).await;
    let b = connect(&s).await;
    let g = a
        .lock("leased")
        .lease(Duration::from_millis(1000))
        .await
        .unwrap();
    let pttl: i64 = a.query(&cmd("PTTL").arg("leased")).await.unwrap();
    assert!(pttl > 0 && pttl <= 1000, "{pttl}");
    assert!(g.is_held());
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.lock("leased").await })
    };
    let t = Instant::now();
    bounded(g.lost()).await;
    assert!(!g.is_held());
    // Around the 1 s lease; the bound only catches a lease ignored.
    assert!(
        t.elapsed() <= Duration::from_millis(5000),
        "{:?}",
        t.elapsed()
    );
    // The key expires on the server and the waiter gets it.
    let g2 = bounded(waiting).await.unwrap().unwrap();
    assert!(g2.is_held());
    assert!(!g.unlock().await.unwrap());
    let _ = Arc::new(g2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_never_reacquires_a_lock_the_server_ended_the_session() {
    let s = start();
    let admin = connect(&s).await;
    let opts = latchkey::Options {
        reconnect: Some(latchkey::Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(50),
            max_attempts: Some(100),
        }),
        ..Default::default()
    };
    let a = Client::connect_with(&format!("redis://127.0.0.1:{}", s.port()), opts)
        .await
        .unwrap();
    let g = a.lock("r").await.unwrap();
    let lost = g.lost();
    // `kill` asks the victim's CLIENT ID first: by its reply the session's
    // identity (asked after the first lock) is known, so the drop suspends
    // the guard and the reconnection tries to resume the session, which
    // the server ended with the connection (no failover).
    kill(&admin, &a).await;
    bounded(lost).await;
    assert_eq!(g.lost_reason().as_deref(), Some("session ended"));
    assert_eq!(g.state(), latchkey::LockState::Lost);
    bounded(async {
        while !a.is_connected() || a.session_state() != latchkey::SessionState::Lost {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(a.connection_generation(), 2);
    assert!(!g.is_held());
    assert_eq!(admin.exists(&["r"]).await.unwrap(), 0);
    assert!(!g.unlock().await.unwrap());
    // The reconnected client can lock again, explicitly.
    let g2 = a.lock("r").await.unwrap();
    assert!(g2.is_held());
}

// ---- fair (queued, herd-free) locks ----

/// The ids of the connections queued for `name` (TPQUEUE), in order.
async fn queued(c: &Client, name: &str) -> Vec<i64> {
    c.query(&cmd("TPQUEUE").arg(name)).await.unwrap()
}

/// Polls TPQUEUE until it lists exactly `want` (bounded).
async fn queue_becomes(c: &Client, name: &str, want: &[i64]) {
    bounded(async {
        while queued(c, name).await != want {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_mutual_exclusion() {
    let s = start();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(connect(&s).await);
    }
    let mut tasks = Vec::new();
    for t in 0..16 {
        let c = clients[t % 4].clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..30 {
                let g = c.lock("fair-ctr").fair().await.unwrap();
                let v: Option<i64> = c.query(&cmd("GET").arg("fair-n")).await.unwrap();
                c.set("fair-n", v.unwrap_or(0) + 1).await.unwrap();
                assert!(g.unlock().await.unwrap());
            }
        }));
    }
    bounded(async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    let n: i64 = clients[0].query(&cmd("GET").arg("fair-n")).await.unwrap();
    assert_eq!(n, 16 * 30);
    // Nobody is left in line, and no helper keys were made.
    assert!(queued(&clients[0], "fair-ctr").await.is_empty());
    assert_eq!(clients[0].query::<i64>(&cmd("DBSIZE")).await.unwrap(), 1);
}

/// Waiters get the lock in the order they asked for it, an abandoned wait
/// in the middle of the queue leaves it (and strands nobody), and nobody
/// watches: the server hands the key over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_is_fifo_and_survives_abandoned_waits() {
    let s = start();
    let admin = connect(&s).await;
    let holder = connect(&s).await;
    let g = holder.lock("fifo").fair().await.unwrap();
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut ids = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..5 {
        let c = connect(&s).await;
        ids.push(c.query::<i64>(&cmd("CLIENT").arg("ID")).await.unwrap());
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            // Waiter 2 gives up while queued between 1 and 3.
            let r = if i == 2 {
                c.lock("fifo")
                    .fair()
                    .timeout(Duration::from_millis(300))
                    .await
            } else {
                c.lock("fifo").fair().await
            };
            match r {
                Ok(g) => {
                    order.lock().push(i);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    assert!(g.unlock().await.unwrap());
                }
                Err(Error::LockTimeout { .. }) => assert_eq!(i, 2),
                Err(e) => panic!("{e:?}"),
            }
        }));
        // Each waiter joins the queue before the next one starts (unless
        // waiter 2 has already timed out and left).
        bounded(async {
            while !queued(&admin, "fifo").await.contains(&ids[i]) && !tasks[i].is_finished() {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await;
    }
    // Waiter 2 times out and leaves; 0, 1, 3, 4 stay in arrival order.
    queue_becomes(&admin, "fifo", &[ids[0], ids[1], ids[3], ids[4]]).await;
    // Herd-free: nobody watches the key, so a release pushes to one
    // connection only (the next in line).
    let list: String = admin.query(&cmd("CLIENT").arg("LIST")).await.unwrap();
    assert!(list.lines().all(|l| l.ends_with(" watchex=0")), "{list}");
    assert!(g.unlock().await.unwrap());
    bounded(async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    assert_eq!(*order.lock(), vec![0, 1, 3, 4]);
    assert!(queued(&admin, "fifo").await.is_empty());
    assert_eq!(admin.exists(&["fifo"]).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_holder_death_and_lease() {
    let s = start();
    let admin = connect(&s).await;
    let holder = connect(&s).await;
    let waiter = connect(&s).await;
    let g = holder.lock("fd").fair().await.unwrap();
    let w = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.lock("fd").fair().await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    let t = Instant::now();
    kill(&admin, &holder).await;
    let g2 = bounded(w).await.unwrap().unwrap();
    println!(
        "fair lock: waiter acquired {:?} after the holder's connection was killed",
        t.elapsed()
    );
    // The server hands over before the old holder's client has read its
    // EOF, so wait for it to notice rather than race it.
    bounded(g.lost()).await;
    assert!(!g.is_held());
    // A leased holder that never releases: the lease frees the lock and
    // hands it to the next in line.
    drop(g2);
    let stuck = connect(&s).await;
    // Before the SETTP, so the server's TTL surely starts after it.
    let t = Instant::now();
    let g3 = stuck
        .lock("fd")
        .fair()
        .lease(Duration::from_millis(150))
        .await
        .unwrap();
    let g4 = bounded(waiter.lock("fd").fair().into_future())
        .await
        .unwrap();
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(150), "{took:?}");
    assert!(!g3.is_held());
    assert!(g4.unlock().await.unwrap());
    std::mem::forget(g3);
}

/// Fair waits cancelled at every point, some while the holder releases: a
/// hand-off that crosses the cancellation is given back, so the lock never
/// stays held by nobody and the queue ends empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_fair_waits_never_keep_the_lock() {
    let s = start();
    let a = connect(&s).await;
    let b = connect(&s).await;
    for i in 0..60u64 {
        let g = bounded(b.lock("fc").fair().into_future()).await.unwrap();
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_micros(300 * (i % 7)), a.lock("fc").fair())
                    .await
            })
        };
        tokio::time::sleep(Duration::from_micros(200 * (i % 5))).await;
        assert!(g.unlock().await.unwrap());
        // Acquired in time: release; timed out: nothing may be left held.
        if let Ok(Ok(g)) = bounded(waiter).await.unwrap() {
            assert!(g.unlock().await.unwrap());
        }
    }
    eventually_free(&b, "fc").await;
    // A cancelled wait's SETTP and TPDEQUEUE may still be in flight.
    queue_becomes(&b, "fc", &[]).await;
}

/// A fair waiter with a lease whose process stalls past the lease right
/// after the server handed it the lock: the key expires and someone else
/// takes it. When the waiter wakes it must notice it no longer holds the
/// key (and must not put its lease on the new holder's key) and wait on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_hand_off_lost_to_a_stall_is_not_taken_for_held() {
    let s = start();
    let url = format!("redis://127.0.0.1:{}", s.port());
    let admin = connect(&s).await;
    let holder = connect(&s).await;
    let g = holder.lock("st").fair().await.unwrap();
    // The waiter runs on its own one-thread runtime, which the test can
    // freeze: a blocking wait on that thread stops its reader task too.
    let (id_tx, id_rx) = tokio::sync::oneshot::channel::<i64>();
    let (stall_tx, stall_rx) = tokio::sync::oneshot::channel::<()>();
    let (stalled_tx, stalled_rx) = tokio::sync::oneshot::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let waiter = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let c = Client::connect(&url).await.unwrap();
            let id: i64 = c.query(&cmd("CLIENT").arg("ID")).await.unwrap();
            let _ = id_tx.send(id);
            let lock = {
                let c = c.clone();
                tokio::spawn(async move {
                    c.lock("st")
                        .fair()
                        .lease(Duration::from_millis(500))
                        .timeout(Duration::from_secs(10))
                        .await
                })
            };
            stall_rx.await.unwrap();
            let _ = stalled_tx.send(());
            let _ = go_rx.recv_timeout(Duration::from_secs(10));
            let g = lock.await.unwrap()?;
            // Checked here: this runtime's end closes the connection.
            let v: Option<String> = c.query(&cmd("GET").arg("st")).await.unwrap();
            let r = (g.value().to_string(), g.is_held(), v);
            let _ = g.unlock().await;
            Ok::<_, Error>(r)
        })
    });
    let wid = bounded(id_rx).await.unwrap();
    queue_becomes(&admin, "st", &[wid]).await;
    stall_tx.send(()).unwrap();
    bounded(stalled_rx).await.unwrap();
    // Hand-off to the frozen waiter; its 500 ms lease runs out on the
    // server and a plain client takes the free lock, without a lease.
    assert!(g.unlock().await.unwrap());
    let other = connect(&s).await;
    let g2 = bounded(async {
        loop {
            if let Some(g) = other.try_lock("st").await.unwrap() {
                return g;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    // The waiter wakes and reads its hand-off: it must see the key is not
    // its own and queue again, leaving the new holder's key alone.
    go_tx.send(()).unwrap();
    let pttl = || async { admin.query::<i64>(&cmd("PTTL").arg("st")).await.unwrap() };
    bounded(async {
        while queued(&admin, "st").await != [wid] && pttl().await == -1 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    assert_eq!(
        pttl().await,
        -1,
        "the waiter put its lease on another holder's key"
    );
    assert_eq!(queued(&admin, "st").await, [wid]);
    assert!(g2.is_held());
    assert!(g2.unlock().await.unwrap());
    // The waiter waited on and got the lock for real.
    let (token, held, v) = tokio::task::spawn_blocking(move || waiter.join().unwrap())
        .await
        .unwrap()
        .expect("the waiter acquires once the other holder releases");
    assert!(held);
    assert_eq!(v.as_deref(), Some(token.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_semaphores_and_reentrant_locks() {
    let s = start();
    let a = connect(&s).await;
    let b = connect(&s).await;
    let w = connect(&s).await;
    // Readers share; a writer waits for both.
    let ra = bounded(a.read_lock("rw").into_future()).await.unwrap();
    let rb = bounded(b.read_lock("rw").into_future()).await.unwrap();
    assert!(ra.is_held() && rb.is_held());
    assert!(rb.token() > ra.token());
    assert!(matches!(
        w.write_lock("rw").timeout(Duration::from_millis(100)).await,
        Err(Error::LockTimeout { .. })
    ));
    let writer = tokio::spawn({
        let w = w.clone();
        async move { w.write_lock("rw").await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(ra.unlock().await.unwrap());
    assert!(!writer.is_finished());
    drop(rb);
    let wg = bounded(writer).await.unwrap().unwrap();
    assert!(wg.is_held());
    assert!(wg.unlock().await.unwrap());
    eventually_free(&a, "rw").await;

    // A semaphore of 3 permits: never more than 3 inside, and 3 reached.
    let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let c = if i % 2 == 0 { a.clone() } else { b.clone() };
        let (inside, most) = (inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let g = c.semaphore("sem", 3).await.unwrap();
                let n = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                most.fetch_max(n, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                assert!(g.unlock().await.unwrap());
            }
        }));
    }
    for t in tasks {
        bounded(t).await.unwrap();
    }
    assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), 3);
    eventually_free(&a, "sem").await;

    // Reentrant: the same owner again; released with the last guard.
    let re = a.reentrant_lock("re");
    let g1 = bounded(re.lock()).await.unwrap();
    let g2 = bounded(re.clone().lock()).await.unwrap();
    assert_eq!(re.count(), 2);
    assert!(b.try_lock("re").await.unwrap().is_none());
    drop(g1);
    assert!(re.is_held());
    assert!(b.try_lock("re").await.unwrap().is_none());
    drop(g2);
    assert_eq!(re.count(), 0);
    eventually_free(&a, "re").await;
}

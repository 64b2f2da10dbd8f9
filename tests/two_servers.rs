//! Two servers in one process keep their own per-server state: eviction
//! policy and LFU parameters, keymiss recording, log level, run_id and
//! master_replid, and the memory peak. (What is process-wide, jemalloc's
//! allocated bytes behind `used_memory`, is named in docs/architecture.md;
//! tests that depend on it run the server as a process.)

// used_memory is jemalloc's counter, as in the server binary.
#[global_allocator]
static A: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod common;

use common::*;
use latchkey_server::config::Config;
use latchkey_server::db::evict::{Access, Policy};
use latchkey_server::db::Settings;
use latchkey_server::runtime::ServerHandle;
use latchkey_server::server::Store;

fn info_field(c: &mut Conn, section: &str, name: &str) -> String {
    let info = c.call_str(&["INFO", section]);
    info.split("\r\n")
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in INFO {section}"))
        .to_string()
}

/// Every database's settings and the log level, as the store holds them.
fn state(h: &ServerHandle) -> (Vec<Settings>, &'static str) {
    let store = h.shared.lock_store_blocking();
    let dbs = store.ks.dbs().iter().map(|d| d.settings).collect();
    (dbs, store.log_level().name())
}

fn config_get(c: &mut Conn, name: &str) -> V {
    match c.cmd(&["CONFIG", "GET", name]) {
        V::Arr(mut kv) if kv.len() == 2 => kv.pop().unwrap(),
        v => panic!("CONFIG GET {name}: {v:?}"),
    }
}

#[test]
fn each_server_keeps_its_own_settings() {
    let sa = start_with(Config {
        port: 0,
        maxmemory_policy: Policy::AllKeysLfu,
        lfu_log_factor: 3,
        lfu_decay_time: 7,
        notify_keyspace_events: latchkey_server::pubsub::parse_flags(b"Em").unwrap(),
        loglevel: "warning".into(),
        ..Default::default()
    });
    let sb = start_with(Config {
        port: 0,
        ..Default::default()
    });
    let want_a = Settings {
        access: Access {
            policy: Policy::AllKeysLfu,
            lfu_log_factor: 3,
            lfu_decay_time: 7,
            frozen: false,
        },
        keymiss: true,
        paused_until: 0,
        lazy_expire: false,
        lazy_evict: false,
        lazy_server_del: false,
    };
    let (dbs, log) = state(&sa);
    assert!(dbs.iter().all(|s| *s == want_a), "{dbs:?}");
    assert_eq!(log, "warning");
    let (dbs, log) = state(&sb);
    assert!(dbs.iter().all(|s| *s == Settings::default()), "{dbs:?}");
    assert_eq!(log, "notice");

    let mut ca = Conn::new(sa.addr);
    let mut cb = Conn::new(sb.addr);
    // The policy decides what each server's OBJECT FREQ answers.
    for c in [&mut ca, &mut cb] {
        assert_eq!(c.cmd(&["SET", "k", "v"]), ok());
    }
    assert!(matches!(ca.cmd(&["OBJECT", "FREQ", "k"]), V::Int(_)));
    assert!(matches!(cb.cmd(&["OBJECT", "FREQ", "k"]),
        V::Err(e) if e.starts_with("ERR An LFU maxmemory policy is not selected")));
    // Keymiss notifications: A publishes them, B records none.
    let mut sub = Conn::new(sa.addr);
    sub.call(&["SUBSCRIBE", "__keyevent@0__:keymiss"]);
    assert_eq!(ca.cmd(&["GET", "nokey"]), V::Nil);
    assert_eq!(
        sub.frame(),
        V::Arr(vec![b("message"), b("__keyevent@0__:keymiss"), b("nokey")])
    );
    // INFO's ids differ between the servers.
    for (section, field) in [("server", "run_id"), ("replication", "master_replid")] {
        let (ia, ib) = (
            info_field(&mut ca, section, field),
            info_field(&mut cb, section, field),
        );
        assert_eq!(ia.len(), 40);
        assert_ne!(ia, ib, "{field}");
    }

    // CONFIG SET on B changes B only, and A's settings stay.
    for (name, value) in [
        ("maxmemory-policy", "volatile-lfu"),
        ("lfu-log-factor", "20"),
        ("lfu-decay-time", "2"),
        ("notify-keyspace-events", "KEm"),
        ("loglevel", "debug"),
    ] {
        assert_eq!(cb.cmd(&["CONFIG", "SET", name, value]), ok());
        assert_eq!(config_get(&mut cb, name), b(value), "{name}");
        assert_ne!(config_get(&mut ca, name), b(value), "{name}");
    }
    let (dbs, log) = state(&sb);
    let want_b = Settings {
        access: Access {
            policy: Policy::VolatileLfu,
            lfu_log_factor: 20,
            lfu_decay_time: 2,
            frozen: false,
        },
        keymiss: true,
        paused_until: 0,
        lazy_expire: false,
        lazy_evict: false,
        lazy_server_del: false,
    };
    assert!(dbs.iter().all(|s| *s == want_b), "{dbs:?}");
    assert_eq!(log, "debug");
    assert!(state(&sb).1 == "debug" && state(&sa).1 == "warning");
    let (dbs, _) = state(&sa);
    assert!(dbs.iter().all(|s| *s == want_a), "{dbs:?}");
    assert!(matches!(cb.cmd(&["OBJECT", "FREQ", "k"]), V::Int(_)));
    assert_eq!(
        ca.cmd(&["CONFIG", "SET", "notify-keyspace-events", ""]),
        ok()
    );
    assert!(state(&sa).0.iter().all(|s| !s.keymiss));
    assert!(state(&sb).0.iter().all(|s| s.keymiss));
}

/// Each store's peak is what its own samples saw: one that sampled while
/// the process held a large allocation has the higher peak; one that did
/// not sample then keeps its lower one.
#[test]
fn each_store_keeps_its_own_memory_peak() {
    let catalog = latchkey_server::commands::acl_catalog;
    let quiet = Store::new(Config::default(), catalog());
    let busy = Store::new(Config::default(), catalog());
    let big: Vec<u8> = vec![1; 64 << 20];
    let seen = busy.sample_memory();
    drop(std::hint::black_box(big));
    quiet.sample_memory();
    assert!(busy.peak_memory() >= seen);
    assert!(
        quiet.peak_memory() < seen,
        "quiet {} busy {seen}",
        quiet.peak_memory()
    );
}

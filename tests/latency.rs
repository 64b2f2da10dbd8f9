//! Per-command latency tracking (Redis 7.0's `latency-tracking`):
//! LATENCY HISTOGRAM's calls and cumulative counts, INFO latencystats'
//! percentile lines, CONFIG RESETSTAT clearing them. Redis's own
//! tests/unit/latency-monitor.tcl checks the same shapes (the values are
//! timings).

mod common;

use common::*;

fn map_pairs(v: V) -> Vec<(V, V)> {
    match v {
        V::Arr(items) => {
            let mut it = items.into_iter();
            let mut out = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                out.push((k, v));
            }
            out
        }
        other => panic!("{other:?}"),
    }
}

fn info_latencystats(c: &mut Conn) -> String {
    match c.cmd(&["INFO", "latencystats"]) {
        V::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn histograms_count_calls_and_cumulate() {
    let h = start();
    let mut c = Conn::ready(h.addr);
    assert_eq!(c.cmd(&["CONFIG", "RESETSTAT"]), ok());
    for _ in 0..50 {
        assert_eq!(c.cmd(&["SET", "k", "v"]), ok());
    }
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "maxmemory"]),
        V::Arr(vec![b("maxmemory"), b("0")])
    );
    let all = map_pairs(c.cmd(&["LATENCY", "HISTOGRAM", "set", "config"]));
    let names: Vec<V> = all.iter().map(|(k, _)| k.clone()).collect();
    assert!(names.contains(&b("set")), "{names:?}");
    assert!(names.contains(&b("config|get")), "{names:?}");
    assert!(names.contains(&b("config|resetstat")), "{names:?}");
    assert!(!names.contains(&b("get")), "never called: {names:?}");
    for (name, body) in all {
        let fields = map_pairs(body);
        assert_eq!(fields[0].0, b("calls"));
        assert_eq!(fields[1].0, b("histogram_usec"));
        let calls = match fields[0].1 {
            V::Int(n) => n,
            ref other => panic!("{other:?}"),
        };
        let want = if name == b("set") { 50 } else { 1 };
        assert_eq!(calls, want, "{name:?}");
        // Buckets rise, counts rise, the last is every call.
        let cdf = map_pairs(fields[1].1.clone());
        let mut last = (0, 0);
        for (bucket, count) in &cdf {
            let (V::Int(bucket), V::Int(count)) = (bucket, count) else {
                panic!("{cdf:?}");
            };
            assert!(*bucket > last.0 && *count > last.1, "{cdf:?}");
            last = (*bucket, *count);
        }
        assert_eq!(last.1, calls, "{name:?} {cdf:?}");
    }
    // INFO latencystats: one line per command with a histogram.
    let info = info_latencystats(&mut c);
    assert!(info.starts_with("# Latencystats\r\n"), "{info}");
    let set = info
        .lines()
        .find(|l| l.starts_with("latency_percentiles_usec_set:"))
        .unwrap_or_else(|| panic!("{info}"));
    let values: Vec<&str> = set.split(':').nth(1).unwrap().split(',').collect();
    assert_eq!(values.len(), 3, "{set}");
    for (v, key) in values.iter().zip(["p50=", "p99=", "p99.9="]) {
        assert!(v.starts_with(key), "{set}");
        let value = &v[key.len()..];
        let n: f64 = value.parse().unwrap();
        assert!(
            n > 0.0 && value.split('.').nth(1).map(str::len) == Some(3),
            "{set}"
        );
    }
    // Not in the default sections; in `all`.
    match c.cmd(&["INFO"]) {
        V::Bulk(b) => assert!(!String::from_utf8_lossy(&b).contains("# Latencystats")),
        other => panic!("{other:?}"),
    }
    match c.cmd(&["INFO", "all"]) {
        V::Bulk(b) => assert!(String::from_utf8_lossy(&b).contains("# Latencystats")),
        other => panic!("{other:?}"),
    }
    // RESETSTAT forgets them.
    assert_eq!(c.cmd(&["CONFIG", "RESETSTAT"]), ok());
    assert_eq!(c.cmd(&["LATENCY", "HISTOGRAM", "set"]), V::Arr(vec![]));
}

/// Redis's latency-monitor.tcl "LATENCY of expire events are correctly
/// collected": a big key expiring in the active cycle is an `expire-cycle`
/// event past latency-monitor-threshold.
#[test]
fn a_long_expire_cycle_is_a_latency_event() {
    let h = start();
    let mut c = Conn::ready(h.addr);
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "latency-monitor-threshold", "1"]),
        ok()
    );
    c.cmd(&[
        "EVAL",
        "for i = 1, 200000 do redis.call('sadd', KEYS[1], i) end",
        "1",
        "mybigkey",
    ]);
    assert_eq!(c.cmd(&["PEXPIRE", "mybigkey", "10"]), V::Int(1));
    eventually("the key expires actively", || {
        c.cmd(&["DBSIZE"]) == V::Int(0)
    });
    let latest = c.cmd(&["LATENCY", "LATEST"]);
    let V::Arr(events) = latest else {
        panic!("{latest:?}")
    };
    assert!(
        events
            .iter()
            .any(|e| matches!(e, V::Arr(f) if f.first() == Some(&b("expire-cycle")))),
        "{events:?}"
    );
}

//! The command table against Redis 7.0.15's: every command and subcommand
//! Redis has must carry the same flags and arity in latchkey's table (as
//! COMMAND shows it, which reads the table). Latchkey's own rules for where a
//! command may run live beside the flags (`Spec::rules`), so the flags stay
//! Redis's; the walk of admission over the table is in
//! `src/commands/dispatch.rs`'s tests.

use std::collections::BTreeMap;

mod common;
use common::*;

/// Commands whose Redis 7.2+ form latchkey has, so their arity differs from
/// 7.0.15's on purpose: (name, 7.0.15's arity, latchkey's arity, why).
const NEWER: &[(&str, i64, i64, &str)] = &[
    // https://redis.io/docs/latest/commands/zrank/ : 7.2.0 added WITHSCORE.
    ("zrank", 3, -3, "ZRANK key member [WITHSCORE], Redis 7.2"),
    // https://redis.io/docs/latest/commands/zrevrank/ : 7.2.0 added WITHSCORE.
    (
        "zrevrank",
        3,
        -3,
        "ZREVRANK key member [WITHSCORE], Redis 7.2",
    ),
];

/// name ("get", "client|list") -> (arity, sorted flags), from COMMAND.
fn table(addr: std::net::SocketAddr) -> BTreeMap<String, (i64, Vec<String>)> {
    let mut c = Conn::ready(addr);
    let V::Arr(all) = c.cmd(&["COMMAND"]) else {
        panic!("COMMAND did not reply with an array")
    };
    let mut out = BTreeMap::new();
    for e in &all {
        add(e, &mut out);
    }
    out
}

fn text(v: &V) -> String {
    match v {
        V::Simple(s) => s.clone(),
        V::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("not a string: {other:?}"),
    }
}

fn add(e: &V, out: &mut BTreeMap<String, (i64, Vec<String>)>) {
    let V::Arr(f) = e else { panic!("entry {e:?}") };
    let V::Int(arity) = f[1] else {
        panic!("arity of {e:?}")
    };
    let V::Arr(flags) = &f[2] else {
        panic!("flags of {e:?}")
    };
    let mut flags: Vec<String> = flags.iter().map(text).collect();
    flags.sort();
    out.insert(text(&f[0]).to_ascii_lowercase(), (arity, flags));
    if let Some(V::Arr(subs)) = f.get(9) {
        for s in subs {
            add(s, out);
        }
    }
}

#[test]
fn flags_and_arity_equal_redis_7_0() {
    let redis = RealRedis::start();
    let ours = start();
    let theirs = table(redis.addr);
    let mine = table(ours.addr);
    assert!(
        theirs.len() > 300,
        "Redis's COMMAND listed only {} commands",
        theirs.len()
    );
    let mut compared = 0;
    let mut diffs = Vec::new();
    for (name, want) in &theirs {
        let Some(got) = mine.get(name) else { continue };
        compared += 1;
        if let Some((_, old, new, why)) = NEWER.iter().find(|n| n.0 == name) {
            // Only the arity may differ, and exactly as listed.
            assert_eq!(want.0, *old, "{name}: Redis 7.0.15's arity changed ({why})");
            assert_eq!(got.0, *new, "{name}: latchkey's arity ({why})");
            assert_eq!(got.1, want.1, "{name}: flags differ from Redis");
            continue;
        }
        if got != want {
            diffs.push(format!("{name}: redis {want:?}, latchkey {got:?}"));
        }
    }
    assert!(compared > 250, "only {compared} commands in common");
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}

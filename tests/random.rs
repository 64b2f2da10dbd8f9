//! Random picks are uniform, checked as Redis 7.0's own tests check them
//! (tests/unit/type/set.tcl "SRANDMEMBER histogram distribution" and
//! tests/unit/type/hash.tcl "HRANDFIELD with <count>"): a chi-square over
//! 10 members must stay under 40 (9 degrees of freedom, p = 1e-5), for a
//! negative count (repeats allowed) and positive counts 8 and 2, on every
//! encoding (hashtable, intset / listpack).

mod common;

use std::collections::HashMap;

use common::*;

/// Redis's chi_square_value (tests/support/util.tcl): each member's count
/// against the mean count (integer division, as Tcl's `expr`).
fn chi_square(picks: &[Vec<u8>]) -> f64 {
    let mut counts: HashMap<&[u8], u64> = HashMap::new();
    for p in picks {
        *counts.entry(p.as_slice()).or_default() += 1;
    }
    let expected = (picks.len() / counts.len()) as f64;
    counts
        .values()
        .map(|&v| (v as f64 - expected).powi(2) / expected)
        .sum()
}

fn bulks(v: V) -> Vec<Vec<u8>> {
    match v {
        V::Arr(items) => items
            .into_iter()
            .map(|i| match i {
                V::Bulk(b) => b,
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// Negative count -1000, then positive counts 8 and 2 repeated up to 1000
/// picks: each histogram's chi-square under 40.
fn check_uniform(c: &mut Conn, cmd: &str, key: &str, what: &str) {
    let all = bulks(c.cmd(&[cmd, key, "-1000"]));
    assert_eq!(all.len(), 1000);
    let x2 = chi_square(&all);
    assert!(x2 < 40.0, "{what}: {cmd} -1000 chi-square {x2}");
    for size in [8usize, 2] {
        let mut picks = Vec::new();
        for _ in 0..1000 / size {
            let got = bulks(c.cmd(&[cmd, key, &size.to_string()]));
            assert_eq!(got.len(), size);
            picks.extend(got);
        }
        let x2 = chi_square(&picks);
        assert!(x2 < 40.0, "{what}: {cmd} {size} chi-square {x2}");
    }
}

#[test]
fn srandmember_and_hrandfield_are_uniform_on_every_encoding() {
    let h = start();
    let mut c = Conn::ready(h.addr);
    let sets: [(&str, &[&str], &str); 2] = [
        (
            "hashtable",
            &[
                "1",
                "5",
                "10",
                "50",
                "125",
                "MARY",
                "PATRICIA",
                "LINDA",
                "BARBARA",
                "ELIZABETH",
            ],
            "hashtable",
        ),
        (
            "intset",
            &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"],
            "intset",
        ),
    ];
    for (name, members, encoding) in sets {
        c.cmd(&["DEL", "s"]);
        let mut args = vec!["SADD", "s"];
        args.extend_from_slice(members);
        assert_eq!(c.cmd(&args), V::Int(10));
        assert_eq!(c.cmd(&["OBJECT", "ENCODING", "s"]), b(encoding));
        check_uniform(&mut c, "SRANDMEMBER", "s", name);
    }
    // As hash.tcl: hash-max-listpack-value 10, and one field name long
    // enough to make the hash a hashtable.
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "hash-max-listpack-value", "10"]),
        ok()
    );
    let long = "x".repeat(80);
    for (name, last, encoding) in [
        ("hashtable", long.as_str(), "hashtable"),
        ("listpack", "10", "listpack"),
    ] {
        c.cmd(&["DEL", "h"]);
        let mut args = vec!["HSET", "h"];
        let pairs = [
            ("a", "1"),
            ("b", "2"),
            ("c", "3"),
            ("d", "4"),
            ("e", "5"),
            ("6", "f"),
            ("7", "g"),
            ("8", "h"),
            ("9", "i"),
        ];
        for (f, v) in pairs {
            args.push(f);
            args.push(v);
        }
        args.push(last);
        args.push("j");
        assert_eq!(c.cmd(&args), V::Int(10));
        assert_eq!(c.cmd(&["OBJECT", "ENCODING", "h"]), b(encoding));
        check_uniform(&mut c, "HRANDFIELD", "h", name);
    }
}

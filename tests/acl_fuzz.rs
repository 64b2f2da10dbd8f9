//! Fuzzes the ACL rule parser with the real command table: random rules,
//! well-formed and not, must never panic; every user that was accepted
//! must describe itself in text that, loaded again as an ACL file, gives
//! the same user (the round trip ACL SAVE / ACL LOAD relies on), and
//! every described rule must parse.

use latchkey_server::acl::Users;

/// xorshift64*: deterministic, so a failure names its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[self.below(v.len())]
    }
}

const WORDS: &[&str] = &[
    "on",
    "off",
    "nopass",
    "resetpass",
    "reset",
    "allkeys",
    "resetkeys",
    "allchannels",
    "resetchannels",
    "allcommands",
    "nocommands",
    "clearselectors",
    "sanitize-payload",
    "skip-sanitize-payload",
    "+@all",
    "-@all",
    "~*",
    "&*",
];
const CMDS: &[&str] = &[
    "get",
    "set",
    "config",
    "config|get",
    "config|set",
    "client",
    "client|kill",
    "select",
    "acl",
    "acl|whoami",
    "settp",
    "watchex",
    "eval",
    "hset",
    "zadd",
    "nosuch",
    "debug",
];
const CATS: &[&str] = &[
    "read",
    "write",
    "string",
    "hash",
    "admin",
    "dangerous",
    "fast",
    "slow",
    "latchkey",
    "keyspace",
    "pubsub",
    "nosuch",
    "all",
];
const JUNK: &[&str] = &[
    "", "(", ")", "|", "%", "~", "&", ">", "<", "#", "!", "+", "-", "@", " ", "\0", "R", "W",
];

fn rule(r: &mut Rng) -> Vec<u8> {
    let s = match r.below(12) {
        0 => r.pick(WORDS).to_string(),
        1 => format!("+{}", r.pick(CMDS)),
        2 => format!("-{}", r.pick(CMDS)),
        3 => format!("+@{}", r.pick(CATS)),
        4 => format!("-@{}", r.pick(CATS)),
        5 => format!("~{}*", r.pick(&["a", "b", "lock:", "", "x?y", "[ab]"])),
        6 => format!(
            "%{}~k{}",
            r.pick(&["R", "W", "RW", "WR", "r", "", "X", "RR"]),
            r.below(3)
        ),
        7 => format!("&ch{}", r.pick(&["*", "", "?", "a"])),
        8 => format!(">{}", r.below(1000)),
        9 => format!("<{}", r.below(1000)),
        10 => format!(
            "({} {})",
            String::from_utf8_lossy(&rule(r)),
            String::from_utf8_lossy(&rule(r))
        ),
        _ => {
            let n = 1 + r.below(4);
            (0..n).map(|_| r.pick(JUNK)).collect()
        }
    };
    s.into_bytes()
}

#[test]
fn random_rules_never_panic_and_round_trip() {
    let cat = latchkey_server::commands::acl_catalog();
    let seed = 0x5eed_ac10_u64 ^ 0x9e37_79b9;
    let mut r = Rng(seed);
    let mut accepted = 0;
    // Bounded: a fixed number of users of a few rules each.
    for i in 0..6000 {
        let mut users = Users::new(cat.clone());
        let rules: Vec<Vec<u8>> = (0..1 + r.below(6)).map(|_| rule(&mut r)).collect();
        let all = r.below(2) == 0;
        if users.set_user(b"u", &rules, all).is_err() {
            continue;
        }
        accepted += 1;
        let text = users.file_text();
        let back = users
            .parse_file(&text, "fuzz.acl", all)
            .unwrap_or_else(|e| {
                panic!("case {i} (seed {seed:#x}): {rules:?} saved as {text:?} does not load: {e}")
            });
        assert_eq!(
            back.get(b"u".as_slice()),
            users.get(b"u"),
            "case {i}: {rules:?} saved as {}",
            String::from_utf8_lossy(&text)
        );
    }
    assert!(accepted > 1500, "too few valid rule sets: {accepted}");
}

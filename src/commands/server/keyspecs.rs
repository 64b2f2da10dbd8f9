//! Redis 7.0's key specifications (COMMAND INFO of redis-server 7.0.15,
//! stored as its RESP3 reply in `redis70_info.resp`), and finding a
//! command's keys from them as Redis's getKeysUsingKeySpecs does: COMMAND
//! INFO shows them, COMMAND GETKEYS and GETKEYSANDFLAGS evaluate them.
//! Commands newer than 7.0 that latchkey has (DELEX, DIGEST, ...) take
//! their entries from `newer_info.resp`, written by `newer.py` from the
//! published pages. Latchkey's own commands (SETTP, WATCHEX, ...) have no
//! stored entry and fall back to the table's legacy (first, last, step).
//!
//! Must not touch the store: it reads the stored replies (through `docs`'
//! parser), the table's `Spec`s, and SET's option names (`strings::opts`)
//! for SET's and DELEX's variable key flags only.

use std::collections::HashMap;
use std::sync::OnceLock;

use bytes::Bytes;

use super::docs::{field, parse, V};
use super::*;

static RAW: &[u8] = include_bytes!("redis70_info.resp");
static NEWER: &[u8] = include_bytes!("newer_info.resp");

/// COMMAND INFO entries by full name ("get", "config|get"): Redis 7.0's,
/// then the newer ones in their place.
fn infos() -> &'static HashMap<String, &'static [V]> {
    static ROOTS: OnceLock<[Option<V>; 2]> = OnceLock::new();
    static INDEX: OnceLock<HashMap<String, &'static [V]>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut idx = HashMap::new();
        let roots = ROOTS.get_or_init(|| [parse(RAW, &mut 0), parse(NEWER, &mut 0)]);
        for root in roots {
            if let Some(V::Arr(all)) = root {
                for e in all {
                    add(&mut idx, e);
                }
            }
        }
        idx
    })
}

fn add(idx: &mut HashMap<String, &'static [V]>, e: &'static V) {
    let V::Arr(items) = e else { return };
    let Some(V::Bulk(name)) = items.first() else {
        return;
    };
    idx.insert(String::from_utf8_lossy(name).to_ascii_lowercase(), items);
    if let Some(V::Arr(subs)) = items.get(9) {
        for s in subs {
            add(idx, s);
        }
    }
}

fn info_of(full: &str) -> Option<&'static [V]> {
    infos().get(full).copied()
}

/// Redis's stored key specs of a command (None for latchkey's own).
pub fn key_specs(full: &str) -> Option<&'static V> {
    info_of(full)?.get(8)
}

/// Redis's command tips (request_policy, nondeterministic_output, ...).
pub fn tips(full: &str) -> Option<&'static V> {
    info_of(full)?.get(7)
}

/// Whether Redis flags the command `movablekeys` (its keys are found by
/// parsing the arguments, not by fixed positions).
pub fn movable(full: &str) -> bool {
    matches!(info_of(full).and_then(|i| i.get(2)), Some(V::Set(flags))
        if flags.iter().any(|f| matches!(f, V::Simple("movablekeys"))))
}

/// One key found in a command's arguments, with its key-spec flags.
#[derive(Debug, PartialEq)]
pub struct Found {
    pub pos: usize,
    pub flags: Vec<&'static str>,
}

fn spec_flags(ks: &'static V) -> Vec<&'static str> {
    match field(ks, "flags") {
        Some(V::Set(fs)) | Some(V::Arr(fs)) => fs
            .iter()
            .filter_map(|f| match f {
                V::Simple(s) => Some(*s),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn int_field(v: Option<&'static V>, name: &str) -> Option<i64> {
    match field(v?, name)? {
        V::Int(n) => Some(*n),
        _ => None,
    }
}

fn str_field(v: Option<&'static V>, name: &str) -> Option<&'static [u8]> {
    match field(v?, name)? {
        V::Bulk(b) => Some(b),
        V::Simple(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// The keys of `args` (args[0] is the command name) for the command
/// `full`, as Redis 7.0's COMMAND GETKEYS finds them. An empty result
/// means none (or invalid arguments); the caller words the error.
pub fn find_keys(spec: &Spec, full: &str, args: &[Bytes]) -> Vec<Found> {
    match full {
        // Redis uses these commands' own getkeys procedures: SORT's STORE
        // has no fixed place, SET's and BITFIELD's flags depend on options.
        "sort" | "sort_ro" => return sort_keys(args),
        "set" => {
            // GET, and Redis 8.4's IFEQ/IFNE/IFDEQ/IFDNE, read the value.
            let get = args[3..].iter().any(|a| {
                a.eq_ignore_ascii_case(b"get")
                    || crate::commands::strings::opts::condition(a).is_some()
            });
            let flags = if get {
                vec!["RW", "access", "update"]
            } else {
                vec!["OW", "update"]
            };
            return vec![Found { pos: 1, flags }];
        }
        // Redis 8.4's delexGetKeys: a condition reads the value.
        "delex" => {
            let flags = if args.len() > 2 {
                vec!["RW", "access", "delete"]
            } else {
                vec!["RM", "delete"]
            };
            return vec![Found { pos: 1, flags }];
        }
        "bitfield" => {
            let writes = args[2..]
                .iter()
                .any(|a| a.eq_ignore_ascii_case(b"set") || a.eq_ignore_ascii_case(b"incrby"));
            let flags = if writes {
                vec!["RW", "access", "update"]
            } else {
                vec!["RO", "access"]
            };
            return vec![Found { pos: 1, flags }];
        }
        _ => {}
    }
    match key_specs(full) {
        Some(V::Set(specs)) | Some(V::Arr(specs)) => by_specs(specs, args).unwrap_or_default(),
        _ => legacy(spec, args),
    }
}

/// Redis's getKeysUsingKeySpecs; None for an invalid spec (a bad or
/// out-of-range key count), which Redis's fallback procedures turn into
/// no keys for every command latchkey has.
fn by_specs(specs: &'static [V], args: &[Bytes]) -> Option<Vec<Found>> {
    let argc = args.len() as i64;
    let mut out = Vec::new();
    for ks in specs {
        let flags = spec_flags(ks);
        if flags.contains(&"NOT_KEY") {
            continue;
        }
        let bs = field(ks, "begin_search");
        let bs_spec = bs.and_then(|b| field(b, "spec"));
        let first = match str_field(bs, "type")? {
            b"index" => int_field(bs_spec, "index")?,
            b"keyword" => {
                let kw = str_field(bs_spec, "keyword")?;
                let from = int_field(bs_spec, "startfrom")?;
                let (start, end) = if from > 0 {
                    (from, argc - 1)
                } else {
                    (argc + from, 1)
                };
                let mut found = 0;
                let mut i = start;
                loop {
                    if i >= argc || i < 1 {
                        break;
                    }
                    if args[i as usize].eq_ignore_ascii_case(kw) {
                        found = i + 1;
                        break;
                    }
                    if i == end {
                        break;
                    }
                    i += if start <= end { 1 } else { -1 };
                }
                if found == 0 {
                    continue;
                }
                found
            }
            _ => return None,
        };
        let fk = field(ks, "find_keys");
        let fk_spec = fk.and_then(|f| field(f, "spec"));
        let (first, last, step) = match str_field(fk, "type")? {
            b"range" => {
                let lastkey = int_field(fk_spec, "lastkey")?;
                let step = int_field(fk_spec, "keystep")?;
                let limit = int_field(fk_spec, "limit")?;
                let last = if lastkey >= 0 {
                    first + lastkey
                } else if limit == 0 {
                    argc + lastkey
                } else {
                    first + ((argc - first) / limit + lastkey)
                };
                (first, last, step)
            }
            b"keynum" => {
                let idx = int_field(fk_spec, "keynumidx")?;
                let firstkey = int_field(fk_spec, "firstkey")?;
                let step = int_field(fk_spec, "keystep")?;
                if idx >= argc - first {
                    return None;
                }
                let n = crate::util::parse_i64(&args[(first + idx) as usize])?;
                if n < 0 {
                    return None;
                }
                let first = first + firstkey;
                (first, first + n - 1, step)
            }
            _ => return None,
        };
        if last >= argc || last < first || first >= argc {
            return None;
        }
        let mut i = first;
        while i <= last {
            out.push(Found {
                pos: i as usize,
                flags: flags.clone(),
            });
            i += step.max(1);
        }
    }
    Some(out)
}

/// A latchkey command's keys from the table's (first, last, step).
fn legacy(spec: &Spec, args: &[Bytes]) -> Vec<Found> {
    if spec.first_key <= 0 {
        return Vec::new();
    }
    let argc = args.len() as i64;
    let first = spec.first_key as i64;
    let last = if spec.last_key < 0 {
        argc + spec.last_key as i64
    } else {
        spec.last_key as i64
    };
    // Flags as Redis's own specs would give them, for ACL key permissions:
    // SETTP only inserts (like SETNX); other writes read and change the
    // key; the rest read it.
    let flags = match spec.name {
        "settp" => vec!["OW", "insert"],
        _ if spec.flags & WRITE != 0 => vec!["RW", "access", "update"],
        _ => vec!["RO", "access"],
    };
    let mut out = Vec::new();
    let mut i = first;
    while i <= last && i < argc {
        out.push(Found {
            pos: i as usize,
            flags: flags.clone(),
        });
        i += (spec.step as i64).max(1);
    }
    out
}

/// Redis's sortGetKeys: the sorted key, and the last STORE's destination
/// (LIMIT takes two arguments, GET and BY one, which are skipped).
fn sort_keys(args: &[Bytes]) -> Vec<Found> {
    let mut out = vec![Found {
        pos: 1,
        flags: vec!["RO", "access"],
    }];
    let mut store = None;
    let mut i = 2;
    while i < args.len() {
        let a = &args[i];
        let skip = if a.eq_ignore_ascii_case(b"limit") {
            2
        } else if a.eq_ignore_ascii_case(b"get") || a.eq_ignore_ascii_case(b"by") {
            1
        } else {
            0
        };
        if skip > 0 {
            i += skip;
        } else if a.eq_ignore_ascii_case(b"store") && i + 1 < args.len() {
            store = Some(i + 1);
            i += 1;
        }
        i += 1;
    }
    if let Some(pos) = store {
        out.push(Found {
            pos,
            flags: vec!["OW", "update"],
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<Bytes> {
        s.split(' ')
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect()
    }

    fn keys(full: &str, line: &str) -> Vec<usize> {
        let spec = lookup(full.split('|').next().unwrap().as_bytes()).unwrap();
        find_keys(spec, full, &args(line))
            .iter()
            .map(|f| f.pos)
            .collect()
    }

    #[test]
    fn stored_info_parses() {
        assert!(infos().len() > 300);
        assert!(key_specs("get").is_some());
        assert!(key_specs("config|get").is_some());
        assert!(movable("zunionstore"));
        assert!(!movable("get"));
    }

    #[test]
    fn keys_by_spec() {
        assert_eq!(keys("mset", "mset a 1 b 2"), vec![1, 3]);
        assert_eq!(keys("zunionstore", "zunionstore d 2 a b"), vec![1, 3, 4]);
        assert_eq!(
            keys("zunionstore", "zunionstore d 5 a b"),
            Vec::<usize>::new()
        );
        assert_eq!(keys("lmpop", "lmpop 2 a b left"), vec![2, 3]);
        assert_eq!(
            keys("sort", "sort a limit 0 1 store b by x store c"),
            vec![1, 10]
        );
        assert_eq!(keys("object|encoding", "object encoding k"), vec![2]);
    }
}

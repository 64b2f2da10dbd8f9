//! Redis 7.0's command documentation (COMMAND DOCS of redis-server 7.0.15,
//! stored as its RESP3 reply in `redis70_docs.resp`). COMMAND DOCS serves it
//! for the commands latchkey implements, so clients that build hints and
//! help from it (redis-cli) see each command's real argument syntax. The
//! commands and forms newer than 7.0 (SET's IFEQ..., DELEX, DIGEST) are
//! in `newer_docs.resp`, written by `newer.py` from the published pages;
//! an entry there replaces 7.0's.
//!
//! Must not touch the store or the command table: it owns the stored replies
//! and their parser; `command_cmd` and `keyspecs` pick what they need.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::resp::Out;

static RAW: &[u8] = include_bytes!("redis70_docs.resp");
static NEWER: &[u8] = include_bytes!("newer_docs.resp");

/// A parsed RESP3 value of the stored reply.
pub enum V {
    Bulk(&'static [u8]),
    Simple(&'static str),
    Int(i64),
    Arr(Vec<V>),
    Set(Vec<V>),
    Map(Vec<(V, V)>),
}

/// Parses one RESP3 value of a stored reply starting at `*i`.
pub fn parse(b: &'static [u8], i: &mut usize) -> Option<V> {
    let t = *b.get(*i)?;
    let end = *i + memchr::memchr(b'\r', &b[*i..])?;
    let line = std::str::from_utf8(&b[*i + 1..end]).ok()?;
    *i = end + 2;
    let n = || line.parse::<i64>().ok();
    Some(match t {
        b'+' => V::Simple(line),
        b':' => V::Int(n()?),
        b'$' => {
            let len = n()? as usize;
            let v = b.get(*i..*i + len)?;
            *i += len + 2;
            V::Bulk(v)
        }
        b'*' | b'~' => {
            let items = (0..n()?).map(|_| parse(b, i)).collect::<Option<Vec<_>>>()?;
            if t == b'*' {
                V::Arr(items)
            } else {
                V::Set(items)
            }
        }
        b'%' => V::Map(
            (0..n()?)
                .map(|_| Some((parse(b, i)?, parse(b, i)?)))
                .collect::<Option<Vec<_>>>()?,
        ),
        _ => return None,
    })
}

/// Doc maps by full command name ("get", "config|get").
pub fn docs() -> &'static HashMap<String, &'static V> {
    static ROOTS: OnceLock<[Option<V>; 2]> = OnceLock::new();
    static INDEX: OnceLock<HashMap<String, &'static V>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let roots = ROOTS.get_or_init(|| [parse(RAW, &mut 0), parse(NEWER, &mut 0)]);
        let mut idx = HashMap::new();
        for root in roots {
            if let Some(V::Map(top)) = root {
                for (k, v) in top {
                    add(&mut idx, k, v);
                }
            }
        }
        idx
    })
}

fn add(idx: &mut HashMap<String, &'static V>, k: &'static V, v: &'static V) {
    let V::Bulk(name) = k else { return };
    idx.insert(String::from_utf8_lossy(name).into_owned(), v);
    if let Some(V::Map(subs)) = field(v, "subcommands") {
        for (sk, sv) in subs {
            add(idx, sk, sv);
        }
    }
}

pub fn field<'a>(doc: &'a V, name: &str) -> Option<&'a V> {
    let V::Map(pairs) = doc else { return None };
    pairs
        .iter()
        .find(|(k, _)| matches!(k, V::Bulk(b) if *b == name.as_bytes()))
        .map(|(_, v)| v)
}

/// Writes a value in the connection's protocol (maps and sets become arrays
/// in RESP2, as Redis does).
pub fn write(out: &mut Out, v: &V) {
    match v {
        V::Bulk(b) => out.bulk(b),
        V::Simple(s) => out.simple(s),
        V::Int(n) => out.int(*n),
        V::Arr(items) => {
            out.array(items.len());
            items.iter().for_each(|x| write(out, x));
        }
        V::Set(items) => {
            out.set(items.len());
            items.iter().for_each(|x| write(out, x));
        }
        V::Map(pairs) => {
            out.map(pairs.len());
            for (k, x) in pairs {
                write(out, k);
                write(out, x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_docs_parse() {
        let d = docs();
        assert!(d.len() > 300, "{}", d.len());
        assert!(field(d["get"], "arguments").is_some());
        assert!(d.contains_key("config|get"));
    }
}

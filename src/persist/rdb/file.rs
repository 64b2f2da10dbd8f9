//! A whole RDB file (version 10): `REDIS0010`, AUX fields, function
//! libraries (FUNCTION2), then per non-empty database SELECTDB, RESIZEDB
//! and its keys (each with EXPIRETIME_MS when it has a TTL), EOF and the
//! CRC64 of everything before it (zero when `rdbchecksum no`).
//!
//! Bytes in, bytes out: must not touch the disk or fill the keyspace; it
//! reads the `Db`s it is lent (`for_each_stored`), and `crate::persist`'s
//! loads put what `load_with` yields into the keyspace.

use std::borrow::Cow;

use super::codec::{crc64, load_len, load_string_ref, save_len, save_string_with};
use super::value::{self, Limits};
use crate::db::{Db, ValueRef};
use crate::types::Value;

pub const VERSION: u32 = 10;

const OP_FUNCTION_PRE_GA: u8 = 246;
const OP_FUNCTION2: u8 = 245;
const OP_MODULE_AUX: u8 = 247;
const OP_IDLE: u8 = 248;
const OP_FREQ: u8 = 249;
const OP_AUX: u8 = 250;
const OP_RESIZEDB: u8 = 251;
const OP_EXPIRETIME_MS: u8 = 252;
const OP_EXPIRETIME: u8 = 253;
const OP_SELECTDB: u8 = 254;
const OP_EOF: u8 = 255;

/// How a file is written.
pub struct SaveOptions<'a> {
    /// `rdbcompression`.
    pub compress: bool,
    /// `rdbchecksum`.
    pub checksum: bool,
    /// `list-max-listpack-size`, to cut lists into nodes.
    pub list_fill: i64,
    /// AUX fields, in order (redis-ver, redis-bits, ctime, used-mem, ...).
    pub aux: Vec<(&'a str, Vec<u8>)>,
    /// Function libraries' code.
    pub functions: Vec<&'a [u8]>,
}

/// Writes `dbs`: their stored keys, expired or not, as Redis's rdbSave,
/// except keys bound to a connection (SETTP): their connection cannot
/// exist after a restart.
pub fn save<'a>(dbs: impl Iterator<Item = &'a Db>, opts: &SaveOptions<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 << 16);
    write_header(&mut out, opts);
    for (j, db) in dbs.enumerate() {
        if db.is_empty() {
            continue;
        }
        write_select(&mut out, j, Some((db.len(), db.expires_len())));
        db.for_each_stored(|key, v: ValueRef<'_>, expire, bound| {
            if !bound {
                write_key(&mut out, key, v, expire, opts.compress, opts.list_fill);
            }
        });
    }
    write_eof(&mut out);
    let crc = if opts.checksum { crc64(0, &out) } else { 0 };
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The start of a file: the signature, AUX fields, function libraries.
pub fn write_header(out: &mut Vec<u8>, opts: &SaveOptions<'_>) {
    out.extend_from_slice(format!("REDIS{VERSION:04}").as_bytes());
    for (k, v) in &opts.aux {
        out.push(OP_AUX);
        save_string_with(out, k.as_bytes(), opts.compress);
        save_string_with(out, v, opts.compress);
    }
    for code in &opts.functions {
        out.push(OP_FUNCTION2);
        save_string_with(out, code, opts.compress);
    }
}

/// SELECTDB: the keys that follow are database `db`'s; with its sizes
/// (keys, keys with a TTL), the RESIZEDB hint too. A database may have
/// several sections (a background save writes keys out of order).
pub fn write_select(out: &mut Vec<u8>, db: usize, sizes: Option<(usize, usize)>) {
    out.push(OP_SELECTDB);
    save_len(out, db);
    if let Some((keys, expires)) = sizes {
        out.push(OP_RESIZEDB);
        save_len(out, keys);
        save_len(out, expires);
    }
}

/// One key: its expire time, type, name and value.
pub fn write_key(
    out: &mut Vec<u8>,
    key: &[u8],
    v: ValueRef<'_>,
    expire: Option<i64>,
    compress: bool,
    list_fill: i64,
) {
    if let Some(when) = expire {
        out.push(OP_EXPIRETIME_MS);
        out.extend_from_slice(&when.to_le_bytes());
    }
    // The type byte goes before the key: write the value, then move the
    // type byte in front of the key.
    let at = out.len();
    value::save(out, v, compress, list_fill);
    let t = out.remove(at);
    let mut key_bytes = Vec::with_capacity(key.len() + 5);
    save_string_with(&mut key_bytes, key, compress);
    out.splice(at..at, std::iter::once(t).chain(key_bytes));
}

/// The EOF opcode; the CRC64 of everything up to here follows it.
pub fn write_eof(out: &mut Vec<u8>) {
    out.push(OP_EOF);
}

/// One loaded key.
pub struct Key {
    pub key: Vec<u8>,
    pub value: Value,
    pub expire: Option<i64>,
}

/// What a file holds.
#[derive(Default)]
pub struct Loaded {
    /// (database number, keys), in file order.
    pub dbs: Vec<(usize, Vec<Key>)>,
    pub functions: Vec<Vec<u8>>,
    pub aux: Vec<(Vec<u8>, Vec<u8>)>,
    /// Keys left out because their TTL had passed at `now`.
    pub expired_skipped: usize,
    /// Empty collections left out.
    pub empty_skipped: usize,
    /// Where the file ended (after the checksum): an AOF base may go on
    /// with commands after its RDB preamble.
    pub end: usize,
}

/// A load failure and the file offset where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    pub offset: usize,
    pub message: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at offset {}", self.message, self.offset)
    }
}

/// What a file holds, item by item (`load_with`).
pub enum Item<'a> {
    /// The keys that follow are database `n`'s.
    Select(usize),
    /// RESIZEDB: about this many keys follow (a hint).
    Resize(u64),
    Key {
        key: Cow<'a, [u8]>,
        value: Val<'a>,
        expire: Option<i64>,
    },
    Function(Vec<u8>),
    Aux(Vec<u8>, Vec<u8>),
}

/// A loaded value: a string borrowed from the file where it can be.
pub enum Val<'a> {
    Str(Cow<'a, [u8]>),
    Obj(Value),
}

/// Counts of a load.
#[derive(Debug, Default)]
pub struct Counts {
    pub keys: usize,
    /// Keys left out because their TTL had passed at `now`.
    pub expired_skipped: usize,
    /// Empty collections left out.
    pub empty_skipped: usize,
    /// Where the file ended (after the checksum): an AOF base may go on
    /// with commands after its RDB preamble.
    pub end: usize,
}

/// Reads a whole file. Keys whose expire is before `now` (ms) are left
/// out, as a Redis master does; `databases` bounds SELECTDB.
pub fn load(p: &[u8], lim: &Limits, now: i64, databases: usize) -> Result<Loaded, LoadError> {
    let mut out = Loaded::default();
    let mut db: Option<usize> = None;
    let counts = load_with(p, lim, now, databases, &mut |item| {
        match item {
            Item::Select(n) => {
                db = Some(n);
                out.dbs.push((n, Vec::new()));
            }
            Item::Resize(_) => {}
            Item::Key { key, value, expire } => {
                if db.is_none() {
                    db = Some(0);
                    out.dbs.push((0, Vec::new()));
                }
                let value = match value {
                    Val::Str(s) => Value::Str(s.into_owned()),
                    Val::Obj(v) => v,
                };
                out.dbs.last_mut().expect("a database").1.push(Key {
                    key: key.into_owned(),
                    value,
                    expire,
                });
            }
            Item::Function(code) => out.functions.push(code),
            Item::Aux(k, v) => out.aux.push((k, v)),
        }
        Ok(())
    })?
    .whole(p.len())?;
    out.expired_skipped = counts.expired_skipped;
    out.empty_skipped = counts.empty_skipped;
    Ok(out)
}

/// Reads a whole file, handing each item to `sink` as it is read (keys
/// before any SELECTDB are database 0's; expired keys and empty
/// collections never reach it). An error from `sink` stops the load.
pub fn load_with<'a>(
    p: &'a [u8],
    lim: &Limits,
    now: i64,
    databases: usize,
    sink: &mut dyn FnMut(Item<'a>) -> Result<(), String>,
) -> Result<Counts, LoadError> {
    let err = |offset: usize, m: &str| LoadError {
        offset,
        message: m.to_string(),
    };
    if p.len() < 9 || &p[..5] != b"REDIS" {
        return Err(err(0, "wrong signature trying to load DB from file"));
    }
    let version: u32 = std::str::from_utf8(&p[5..9])
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| err(5, "bad RDB version"))?;
    if !(1..=VERSION).contains(&version) {
        return Err(err(
            5,
            &format!("can't handle RDB format version {version}"),
        ));
    }
    let mut pos = 9;
    let mut counts = Counts::default();
    let mut selected = false;
    let mut expire: Option<i64> = None;
    let len = |pos: &mut usize| -> Result<u64, LoadError> {
        let at = *pos;
        match load_len(p, pos) {
            Some((false, n)) => Ok(n),
            _ => Err(err(at, "corrupt length")),
        }
    };
    let string = |pos: &mut usize| -> Result<Cow<'a, [u8]>, LoadError> {
        let at = *pos;
        load_string_ref(p, pos).ok_or_else(|| err(at, "corrupt string"))
    };
    let mut give = |at: usize, item: Item<'a>| sink(item).map_err(|m| err(at, &m));
    loop {
        let at = pos;
        let Some(&t) = p.get(pos) else {
            return Err(err(at, "unexpected end of file"));
        };
        pos += 1;
        match t {
            OP_EOF => break,
            OP_SELECTDB => {
                let n = len(&mut pos)? as usize;
                if n >= databases {
                    return Err(err(at, &format!("FATAL: Data file was created with a Redis server configured to handle more than {databases} databases")));
                }
                selected = true;
                give(at, Item::Select(n))?;
            }
            OP_RESIZEDB => {
                let keys = len(&mut pos)?;
                len(&mut pos)?;
                give(at, Item::Resize(keys))?;
            }
            OP_EXPIRETIME_MS => {
                let b = p
                    .get(pos..pos + 8)
                    .ok_or_else(|| err(at, "corrupt expire"))?;
                expire = Some(i64::from_le_bytes(b.try_into().unwrap_or_default()));
                pos += 8;
            }
            OP_EXPIRETIME => {
                let b = p
                    .get(pos..pos + 4)
                    .ok_or_else(|| err(at, "corrupt expire"))?;
                expire = Some(i32::from_le_bytes(b.try_into().unwrap_or_default()) as i64 * 1000);
                pos += 4;
            }
            OP_IDLE => {
                len(&mut pos)?;
            }
            OP_FREQ => {
                p.get(pos).ok_or_else(|| err(at, "corrupt freq"))?;
                pos += 1;
            }
            OP_AUX => {
                let k = string(&mut pos)?.into_owned();
                let v = string(&mut pos)?.into_owned();
                give(at, Item::Aux(k, v))?;
            }
            OP_MODULE_AUX => {
                return Err(err(at, "module data (MODULE_AUX) is not supported"));
            }
            OP_FUNCTION2 => {
                let code = string(&mut pos)?.into_owned();
                give(at, Item::Function(code))?;
            }
            OP_FUNCTION_PRE_GA => {
                return Err(err(at, "Pre-GA function format not supported"));
            }
            t if value::is_value_type(t) => {
                let key = string(&mut pos)?;
                let vat = pos;
                let v = if t == value::TYPE_STRING {
                    Val::Str(string(&mut pos)?)
                } else {
                    let v = value::load(p, &mut pos, t, lim).map_err(|m| err(vat, &m))?;
                    // An empty collection cannot live at a key: Redis skips it.
                    if v.is_empty_collection() {
                        expire = None;
                        counts.empty_skipped += 1;
                        continue;
                    }
                    Val::Obj(v)
                };
                let e = expire.take();
                if e.is_some_and(|w| w < now) {
                    counts.expired_skipped += 1;
                    continue;
                }
                if !selected {
                    // Keys before any SELECTDB go to database 0.
                    selected = true;
                    give(at, Item::Select(0))?;
                }
                counts.keys += 1;
                give(
                    at,
                    Item::Key {
                        key,
                        value: v,
                        expire: e,
                    },
                )?;
            }
            t => return Err(err(at, &format!("Unknown RDB encoding type {t}"))),
        }
    }
    if version >= 5 {
        let b = p
            .get(pos..pos + 8)
            .ok_or_else(|| err(pos, "missing checksum"))?;
        let want = u64::from_le_bytes(b.try_into().unwrap_or_default());
        if want != 0 && want != crc64(0, &p[..pos]) {
            return Err(err(pos, "Wrong RDB checksum"));
        }
        pos += 8;
    }
    counts.end = pos;
    Ok(counts)
}

impl Counts {
    /// Err unless the file of `len` bytes ended with its RDB data.
    pub fn whole(self, len: usize) -> Result<Counts, LoadError> {
        if self.end != len {
            return Err(LoadError {
                offset: self.end,
                message: "data after the end of the file".into(),
            });
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file with one key per case: expired at `now`, an empty list,
    /// and a live string (the order of Redis's rdbLoad checks).
    #[test]
    fn expired_keys_and_empty_collections_are_left_out() {
        let mut f = b"REDIS0010".to_vec();
        f.extend_from_slice(&[OP_SELECTDB, 0]);
        f.push(OP_EXPIRETIME_MS);
        f.extend_from_slice(&999i64.to_le_bytes());
        f.extend_from_slice(&[value::TYPE_STRING, 3, b'o', b'l', b'd', 1, b'v']);
        f.extend_from_slice(&[value::TYPE_LIST, 5, b'e', b'm', b'p', b't', b'y', 0]);
        f.push(OP_EXPIRETIME_MS);
        f.extend_from_slice(&1000i64.to_le_bytes());
        f.extend_from_slice(&[value::TYPE_STRING, 4, b'l', b'i', b'v', b'e', 1, b'v']);
        f.push(OP_EOF);
        let crc = crc64(0, &f);
        f.extend_from_slice(&crc.to_le_bytes());
        let got = load(&f, &Limits::default(), 1000, 16).unwrap();
        assert_eq!(got.expired_skipped, 1);
        assert_eq!(got.empty_skipped, 1);
        let keys: Vec<_> = got.dbs[0]
            .1
            .iter()
            .map(|k| (k.key.clone(), k.expire))
            .collect();
        assert_eq!(keys, vec![(b"live".to_vec(), Some(1000))]);
        // A flipped bit is a checksum error at the footer's offset.
        let mut bad = f.clone();
        bad[12] ^= 1;
        let e = load(&bad, &Limits::default(), 1000, 16).err().unwrap();
        assert!(
            e.message.contains("checksum") || e.message.contains("corrupt"),
            "{e}"
        );
    }
}

//! DEBUG DIGEST and DEBUG DIGEST-VALUE: Redis's content signature, so the
//! data of two servers (latchkey and Redis, or latchkey before and after a
//! reload) can be compared with one command.
//!
//! The algorithm is Redis's (debug.c): two SHA-1 based operations on a
//! 20-byte digest, `xor` (xor in the SHA-1 of some bytes: order does not
//! matter) and `mix` (xor, then replace the digest by its own SHA-1: order
//! matters). A key's digest mixes its name, its type number, then its value
//! (list elements mixed in order; set members xored; a sorted set's and a
//! hash's entries each digested on their own and xored in), then xors the
//! mark `!!expire!!` when it has a TTL. The dataset's digest mixes each
//! non-empty database's number and xors in every key's digest.

use super::{Db, ValueRef};
use crate::types::Value;
use crate::util::fmt_double;

pub type Digest = [u8; 20];

fn sha1(data: &[u8]) -> Digest {
    sha1_smol::Sha1::from(data).digest().bytes()
}

/// Redis's xorDigest (also used to combine two digests: like any bytes,
/// the second is hashed first).
fn xor(d: &mut Digest, data: &[u8]) {
    for (a, b) in d.iter_mut().zip(sha1(data)) {
        *a ^= b;
    }
}

/// Redis's mixDigest.
fn mix(d: &mut Digest, data: &[u8]) {
    xor(d, data);
    *d = sha1(d);
}

/// Redis's object type numbers (OBJ_STRING ...), as the digest mixes them.
fn type_number(v: ValueRef<'_>) -> u32 {
    match v {
        ValueRef::Str(_) | ValueRef::Obj(Value::Str(_)) => 0,
        ValueRef::Obj(Value::List(_)) => 1,
        ValueRef::Obj(Value::Set(_)) => 2,
        ValueRef::Obj(Value::ZSet(_)) => 3,
        ValueRef::Obj(Value::Hash(_)) => 4,
        ValueRef::Obj(Value::Stream(_)) => 6,
    }
}

/// Redis's xorObjectDigest: mixes the value at a key (and its TTL mark)
/// into `d`.
pub fn value_into(d: &mut Digest, v: ValueRef<'_>, expire: Option<i64>) {
    mix(d, &type_number(v).to_be_bytes());
    match v {
        ValueRef::Str(s) => mix(d, s),
        ValueRef::Obj(Value::Str(s)) => mix(d, s),
        ValueRef::Obj(Value::List(l)) => {
            for e in l.iter() {
                mix(d, &e);
            }
        }
        ValueRef::Obj(Value::Set(s)) => {
            for m in s.iter() {
                xor(d, &m.to_cow());
            }
        }
        ValueRef::Obj(Value::ZSet(z)) => {
            for (member, score) in z.iter() {
                let mut e = Digest::default();
                mix(&mut e, member);
                mix(&mut e, fmt_double(score).as_bytes());
                xor(d, &e);
            }
        }
        ValueRef::Obj(Value::Hash(h)) => {
            for (field, value) in h.iter() {
                let mut e = Digest::default();
                mix(&mut e, field);
                mix(&mut e, value);
                // A field TTL (Redis 7.4) counts as part of the field.
                if let Some(w) = h.field_ttl(field) {
                    mix(&mut e, &w.to_be_bytes());
                }
                xor(d, &e);
            }
        }
        // Entries in order, `ms.seq` then each field and value; the
        // groups are not part of it.
        ValueRef::Obj(Value::Stream(s)) => {
            use crate::types::stream::StreamId;
            for e in s.range(StreamId::MIN, StreamId::MAX, false) {
                mix(d, format!("{}.{}", e.id.ms, e.id.seq).as_bytes());
                for (f, v) in e.fields() {
                    mix(d, &f.to_vec());
                    mix(d, &v.to_vec());
                }
            }
        }
    }
    if expire.is_some() {
        xor(d, b"!!expire!!");
    }
}

/// The digest of one key's value, as DEBUG DIGEST-VALUE gives it: zeros
/// for a missing key.
pub fn of_value(db: &Db, key: &[u8]) -> Digest {
    let mut d = Digest::default();
    if let Some((v, expire)) = db.find_stored(key) {
        value_into(&mut d, v, expire);
    }
    d
}

/// The dataset's digest (DEBUG DIGEST): zeros when every database is empty.
pub fn of_dataset<'a>(dbs: impl Iterator<Item = &'a Db>) -> Digest {
    let mut fin = Digest::default();
    for (j, db) in dbs.enumerate() {
        if db.is_empty() {
            continue;
        }
        mix(&mut fin, &(j as u32).to_be_bytes());
        db.for_each_stored(|key, v, expire, _| {
            let mut d = Digest::default();
            mix(&mut d, key);
            value_into(&mut d, v, expire);
            xor(&mut fin, &d);
        });
    }
    fin
}

/// Lower-case hex, as Redis prints a digest.
pub fn hex(d: &Digest) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_dataset_is_zeros() {
        let dbs = [Db::new(0), Db::new(1)];
        assert_eq!(hex(&of_dataset(dbs.iter())), "0".repeat(40));
        assert_eq!(of_value(&dbs[0], b"missing"), Digest::default());
    }

    #[test]
    fn order_matters_for_mix_only() {
        let (mut a, mut b) = (Digest::default(), Digest::default());
        xor(&mut a, b"x");
        xor(&mut a, b"y");
        xor(&mut b, b"y");
        xor(&mut b, b"x");
        assert_eq!(a, b);
        let (mut a, mut b) = (Digest::default(), Digest::default());
        mix(&mut a, b"x");
        mix(&mut a, b"y");
        mix(&mut b, b"y");
        mix(&mut b, b"x");
        assert_ne!(a, b);
    }
}

//! SET / GETEX option parsing and expire arithmetic (Redis's
//! parseExtendedStringArgumentsOrReply and getExpireMillisecondsOrReply),
//! with Redis 8.4's SET conditions (IFEQ, IFNE, IFDEQ, IFDNE).
//!
//! Parsing only: must not touch `Ctx` or the store; it knows `util`'s
//! parsing and the command clock.

use bytes::Bytes;

use crate::util::{cmd_time_ms, parse_i64};

pub const NX: u32 = 1;
pub const XX: u32 = 1 << 1;
pub const EX: u32 = 1 << 2;
pub const PX: u32 = 1 << 3;
pub const KEEPTTL: u32 = 1 << 4;
pub const GET: u32 = 1 << 5;
pub const EXAT: u32 = 1 << 6;
pub const PXAT: u32 = 1 << 7;
pub const PERSIST: u32 = 1 << 8;
/// Redis 8.4 (https://redis.io/docs/latest/commands/set/): write only if
/// the current value equals / differs from the given one, or its digest
/// equals / differs from the given digest.
pub const IFEQ: u32 = 1 << 9;
pub const IFNE: u32 = 1 << 10;
pub const IFDEQ: u32 = 1 << 11;
pub const IFDNE: u32 = 1 << 12;

/// SET's conditions: at most one of them (Redis 8.4's SET syntax).
pub const ANY_CONDITION: u32 = NX | XX | IFEQ | IFNE | IFDEQ | IFDNE;

const ANY_EXPIRE: u32 = EX | PX | EXAT | PXAT;

/// Parsed options: flag bits and the expire argument, if any.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Opts<'a> {
    pub flags: u32,
    pub expire: Option<&'a [u8]>,
    /// The IFEQ/IFNE value or IFDEQ/IFDNE digest.
    pub cmp: Option<&'a [u8]>,
}

use crate::util::c_str as cstr;

/// Parses `args[start..]`. `set` selects SET's options (NX, XX, GET, KEEPTTL)
/// versus GETEX's (PERSIST). Err(()) means "ERR syntax error".
///
/// As in Redis, repeating an option is allowed (the last expire wins) and
/// only conflicting options are rejected.
pub fn parse(args: &[Bytes], start: usize, set: bool) -> Result<Opts<'_>, ()> {
    let mut o = Opts::default();
    let mut j = start;
    while j < args.len() {
        let opt = cstr(&args[j]);
        let next = args.get(j + 1).map(|b| &b[..]);
        let f = o.flags;
        let is = |name: &str| opt.eq_ignore_ascii_case(name.as_bytes());
        let cond = f & ANY_CONDITION;
        if set && is("nx") && cond & !NX == 0 {
            o.flags |= NX;
        } else if set && is("xx") && cond & !XX == 0 {
            o.flags |= XX;
        } else if let (true, Some(c), Some(v)) = (set, condition(opt), next) {
            // One condition only; repeating the same one keeps the last
            // value, as a repeated expire does.
            if cond & !c != 0 {
                return Err(());
            }
            o.flags |= c;
            o.cmp = Some(v);
            j += 1;
        } else if set && is("get") {
            o.flags |= GET;
        } else if set && is("keepttl") && f & (PERSIST | ANY_EXPIRE) == 0 {
            o.flags |= KEEPTTL;
        } else if !set && is("persist") && f & (ANY_EXPIRE | KEEPTTL) == 0 {
            o.flags |= PERSIST;
        } else if let (Some(unit), Some(n)) = (expire_unit(opt), next) {
            if f & (KEEPTTL | PERSIST) != 0 || f & ANY_EXPIRE & !unit != 0 {
                return Err(());
            }
            o.flags |= unit;
            o.expire = Some(n);
            j += 1;
        } else {
            return Err(());
        }
        j += 1;
    }
    Ok(o)
}

/// IFEQ, IFNE, IFDEQ or IFDNE named by `opt` (SET's and DELEX's).
pub fn condition(opt: &[u8]) -> Option<u32> {
    [
        ("ifeq", IFEQ),
        ("ifne", IFNE),
        ("ifdeq", IFDEQ),
        ("ifdne", IFDNE),
    ]
    .into_iter()
    .find(|(n, _)| opt.eq_ignore_ascii_case(n.as_bytes()))
    .map(|(_, f)| f)
}

fn expire_unit(opt: &[u8]) -> Option<u32> {
    [("ex", EX), ("px", PX), ("exat", EXAT), ("pxat", PXAT)]
        .into_iter()
        .find(|(n, _)| opt.eq_ignore_ascii_case(n.as_bytes()))
        .map(|(_, f)| f)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpireError {
    /// "ERR value is not an integer or out of range"
    NotInt,
    /// "ERR invalid expire time in '<cmd>' command"
    Invalid,
}

/// The absolute expire time in ms for `arg` given as EX/PX/EXAT/PXAT
/// (`flags` holds exactly one of them), rejecting non-positive values and
/// overflow exactly where Redis does.
pub fn expire_at(flags: u32, arg: &[u8]) -> Result<i64, ExpireError> {
    let n = parse_i64(arg).ok_or(ExpireError::NotInt)?;
    let seconds = flags & (EX | EXAT) != 0;
    if n <= 0 || (seconds && n > i64::MAX / 1000) {
        return Err(ExpireError::Invalid);
    }
    let mut ms = if seconds { n * 1000 } else { n };
    if flags & (EX | PX) != 0 {
        // Redis adds in C and rejects a wrapped (non-positive) result.
        ms = ms.wrapping_add(cmd_time_ms());
    }
    if ms <= 0 {
        return Err(ExpireError::Invalid);
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<Bytes> {
        v.iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect()
    }

    fn set_flags(v: &[&str]) -> Result<u32, ()> {
        let a = args(v);
        parse(&a, 0, true).map(|o| o.flags)
    }

    #[test]
    fn set_option_combinations() {
        assert_eq!(set_flags(&["nx", "GET"]), Ok(NX | GET));
        assert_eq!(set_flags(&["NX", "XX"]), Err(()));
        assert_eq!(set_flags(&["XX", "nx"]), Err(()));
        assert_eq!(set_flags(&["NX", "NX"]), Ok(NX));
        assert_eq!(set_flags(&["EX", "1", "EX", "2"]), Ok(EX));
        assert_eq!(set_flags(&["EX", "1", "PX", "2"]), Err(()));
        assert_eq!(set_flags(&["EX", "1", "KEEPTTL"]), Err(()));
        assert_eq!(set_flags(&["KEEPTTL", "PXAT", "1"]), Err(()));
        assert_eq!(set_flags(&["EX"]), Err(()));
        assert_eq!(set_flags(&["PERSIST"]), Err(()));
        assert_eq!(set_flags(&["NX\0junk"]), Ok(NX));
        assert_eq!(set_flags(&[""]), Err(()));
        let a = args(&["EX", "1", "EX", "abc"]);
        assert_eq!(parse(&a, 0, true).unwrap().expire, Some(&b"abc"[..]));
        let a = args(&["PERSIST", "PERSIST"]);
        assert_eq!(parse(&a, 0, false).unwrap().flags, PERSIST);
        let a = args(&["PERSIST", "EX", "1"]);
        assert!(parse(&a, 0, false).is_err());
        let a = args(&["NX"]);
        assert!(parse(&a, 0, false).is_err());
    }

    #[test]
    fn set_conditions_exclude_each_other() {
        assert_eq!(
            set_flags(&["IFEQ", "v", "GET", "EX", "1"]),
            Ok(IFEQ | GET | EX)
        );
        assert_eq!(set_flags(&["ifdne", "0123456789abcdef"]), Ok(IFDNE));
        assert_eq!(set_flags(&["IFEQ", "a", "IFEQ", "b"]), Ok(IFEQ));
        assert_eq!(set_flags(&["IFEQ", "a", "IFNE", "b"]), Err(()));
        assert_eq!(set_flags(&["NX", "IFEQ", "a"]), Err(()));
        assert_eq!(set_flags(&["IFDEQ", "a", "XX"]), Err(()));
        assert_eq!(set_flags(&["IFNE"]), Err(()));
        let a = args(&["IFEQ", "a", "IFEQ", "b"]);
        assert_eq!(parse(&a, 0, true).unwrap().cmp, Some(&b"b"[..]));
        let a = args(&["IFEQ", "a"]);
        assert!(parse(&a, 0, false).is_err());
    }

    #[test]
    fn expire_arithmetic() {
        assert_eq!(expire_at(EX, b"0"), Err(ExpireError::Invalid));
        assert_eq!(expire_at(EX, b"-1"), Err(ExpireError::Invalid));
        assert_eq!(expire_at(EX, b"abc"), Err(ExpireError::NotInt));
        assert_eq!(
            expire_at(EX, b"9223372036854776"),
            Err(ExpireError::Invalid)
        );
        assert_eq!(
            expire_at(EX, b"9223372036854775"),
            Err(ExpireError::Invalid)
        );
        assert_eq!(
            expire_at(EXAT, b"9223372036854775"),
            Ok(9223372036854775000)
        );
        assert_eq!(
            expire_at(PX, b"9223372036854775807"),
            Err(ExpireError::Invalid)
        );
        assert_eq!(expire_at(PXAT, b"9223372036854775807"), Ok(i64::MAX));
        assert_eq!(expire_at(PXAT, b"1"), Ok(1));
        assert!(expire_at(PX, b"100").unwrap() > 100);
    }
}

//! Lock records on the wire to Latchkey replicas, and the log of the last
//! ones sent (kept beside the backlog for a partial resync).
//!
//! A lock record (`effects::LockRecord`) travels as one command frame,
//! `TPREPL <seq> <kind> <fields...>`, in its place among the stream's
//! commands, only to replicas that said `REPLCONF capa latchkey`. It is
//! outside the stream's offsets: a Latchkey replica counts none of its
//! bytes, so its offset stays its primary's and a Redis replica's, and
//! Sentinel and PSYNC see the same numbers on every kind of replica. Its
//! own order is the sequence number `seq`, one per record of a history
//! (a promoted replica goes on from the last it applied).
//!
//! [`LockLog`] keeps the frames sent last with the stream offset each came
//! after, so a replica that continues partially gets the backlog's bytes
//! with the lock records it lacks put back in their places; one that asks
//! for records the log no longer has takes a full sync.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::effects::LockRecord;
use crate::ids::{ShareKind, Sid};

/// The command name of a lock frame.
pub const NAME: &[u8] = b"TPREPL";

/// One field of a frame, without an allocation of its own: a record is
/// encoded for every Latchkey replica's stream with each grant, release
/// and place, so its cost is part of a lock hand-over's.
enum Arg<'a> {
    Bytes(&'a [u8]),
    /// An integer's decimal digits (at most 20 and a sign).
    Num([u8; 24], u8),
    /// A session ID as 32 hex digits.
    Hex([u8; 32]),
}

impl AsRef<[u8]> for Arg<'_> {
    fn as_ref(&self) -> &[u8] {
        match self {
            Arg::Bytes(b) => b,
            Arg::Num(d, n) => &d[..*n as usize],
            Arg::Hex(h) => h,
        }
    }
}

fn hex(sid: Sid) -> Arg<'static> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut h = [0u8; 32];
    for (i, d) in h.iter_mut().enumerate() {
        *d = DIGITS[((sid >> (124 - 4 * i)) & 0xf) as usize];
    }
    Arg::Hex(h)
}

fn num(n: impl itoa::Integer) -> Arg<'static> {
    let mut b = itoa::Buffer::new();
    let s = b.format(n).as_bytes();
    let mut d = [0u8; 24];
    d[..s.len()].copy_from_slice(s);
    Arg::Num(d, s.len() as u8)
}

/// The frame of record number `seq`.
pub fn encode(seq: u64, r: &LockRecord) -> Vec<u8> {
    let b = Arg::Bytes;
    let mut a: Vec<Arg> = Vec::with_capacity(10);
    a.extend([b(NAME), num(seq)]);
    match r {
        LockRecord::Bound {
            db,
            key,
            sid,
            value,
            expire_at,
            token,
        } => a.extend([
            b(b"BOUND"),
            num(*db),
            b(key),
            hex(*sid),
            b(value),
            num(expire_at.unwrap_or(-1)),
            num(*token),
        ]),
        LockRecord::ShareAdded {
            db,
            key,
            sid,
            permits,
            value,
            token,
        } => a.extend([
            b(b"SHARE"),
            num(*db),
            b(key),
            hex(*sid),
            num(permits.map_or(-1, i64::from)),
            b(value),
            num(*token),
        ]),
        LockRecord::ShareReleased {
            db,
            key,
            sid,
            value,
        } => {
            a.extend([b(b"RELEASE"), num(*db), b(key), hex(*sid)]);
            a.extend(value.as_deref().map(b));
        }
        LockRecord::Unbound { db, key } => a.extend([b(b"UNBOUND"), num(*db), b(key)]),
        LockRecord::Moved { from, to } => {
            a.extend([b(b"MOVED"), num(from.0), b(&from.1), num(to.0), b(&to.1)])
        }
        LockRecord::Granted { db, key, sid } => {
            a.extend([b(b"GRANTED"), num(*db), b(key), hex(*sid)])
        }
        LockRecord::Queued {
            db,
            key,
            sid,
            value,
            ttl_ms,
            share,
            first,
        } => a.extend([
            b(b"QUEUED"),
            num(*db),
            b(key),
            hex(*sid),
            b(value),
            num(ttl_ms.unwrap_or(-1)),
            // -1: the key itself; 0: a reader's share; n: one of n permits.
            num(match share {
                None => -1,
                Some(ShareKind::Read) => 0,
                Some(ShareKind::Permits(n)) => i64::from(*n),
            }),
            num(u8::from(*first)),
        ]),
        LockRecord::Dequeued {
            db,
            key,
            sid,
            value,
        } => {
            a.extend([b(b"DEQUEUED"), num(*db), b(key), hex(*sid)]);
            a.extend(value.as_deref().map(b));
        }
        LockRecord::SessionClosed { sid } => a.extend([b(b"CLOSED"), hex(*sid)]),
        LockRecord::Fenced { token } => a.extend([b(b"FENCED"), num(*token)]),
        LockRecord::SessionTimeout { sid, ms } => a.extend([b(b"TIMEOUT"), hex(*sid), num(*ms)]),
        LockRecord::Owner { sid, user } => a.extend([b(b"OWNER"), hex(*sid), b(user)]),
    }
    let mut out = Vec::new();
    crate::persist::aof::encode(&mut out, &a);
    out
}

/// Whether a frame of the master's stream is a lock frame.
pub fn is_lock_frame(args: &[Bytes]) -> bool {
    args.first().is_some_and(|a| a.eq_ignore_ascii_case(NAME))
}

/// A lock frame's sequence number and record; None when it is not one.
pub fn decode(args: &[Bytes]) -> Option<(u64, LockRecord)> {
    if !is_lock_frame(args) || args.len() < 3 {
        return None;
    }
    let n = |i: usize| -> Option<i64> { crate::util::parse_i64(args.get(i)?) };
    let u = |i: usize| -> Option<u64> {
        let a = args.get(i)?;
        if a.is_empty() || !a.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(a).ok()?.parse().ok()
    };
    let db = |i: usize| -> Option<usize> { usize::try_from(n(i)?).ok() };
    let key = |i: usize| -> Option<Bytes> { args.get(i).cloned() };
    let sid = |i: usize| -> Option<Sid> {
        let a = args.get(i)?;
        if a.len() != 32 {
            return None;
        }
        Sid::from_str_radix(std::str::from_utf8(a).ok()?, 16).ok()
    };
    let seq = u(1)?;
    let kind = args[2].to_ascii_uppercase();
    let r = match (&kind[..], args.len()) {
        (b"BOUND", 9) => LockRecord::Bound {
            db: db(3)?,
            key: key(4)?,
            sid: sid(5)?,
            value: key(6)?,
            expire_at: Some(n(7)?).filter(|t| *t >= 0),
            token: u(8)?,
        },
        (b"SHARE", 9) => LockRecord::ShareAdded {
            db: db(3)?,
            key: key(4)?,
            sid: sid(5)?,
            permits: match n(6)? {
                -1 => None,
                p => Some(u32::try_from(p).ok()?),
            },
            value: key(7)?,
            token: u(8)?,
        },
        (b"RELEASE", 6 | 7) => LockRecord::ShareReleased {
            db: db(3)?,
            key: key(4)?,
            sid: sid(5)?,
            value: args.get(6).cloned(),
        },
        (b"UNBOUND", 5) => LockRecord::Unbound {
            db: db(3)?,
            key: key(4)?,
        },
        (b"MOVED", 7) => LockRecord::Moved {
            from: (db(3)?, key(4)?),
            to: (db(5)?, key(6)?),
        },
        (b"GRANTED", 6) => LockRecord::Granted {
            db: db(3)?,
            key: key(4)?,
            sid: sid(5)?,
        },
        (b"QUEUED", 10) => LockRecord::Queued {
            db: db(3)?,
            key: key(4)?,
            sid: sid(5)?,
            value: key(6)?,
            ttl_ms: Some(n(7)?).filter(|t| *t >= 0),
            share: match n(8)? {
                -1 => None,
                0 => Some(ShareKind::Read),
                p => Some(ShareKind::Permits(u32::try_from(p).ok()?)),
            },
            first: match n(9)? {
                0 => false,
                1 => true,
                _ => return None,
            },
        },
        (b"DEQUEUED", 6 | 7) => LockRecord::Dequeued {
            db: db(3)?,
            key: key(4)?,
            sid: sid(5)?,
            value: args.get(6).cloned(),
        },
        (b"CLOSED", 4) => LockRecord::SessionClosed { sid: sid(3)? },
        (b"FENCED", 4) => LockRecord::Fenced { token: u(3)? },
        (b"TIMEOUT", 5) => LockRecord::SessionTimeout {
            sid: sid(3)?,
            ms: u(4)?,
        },
        (b"OWNER", 5) => LockRecord::Owner {
            sid: sid(3)?,
            user: key(4)?,
        },
        _ => return None,
    };
    Some((seq, r))
}

/// The records of a full sync's lock state (`lk-locks`: lock frames one
/// after another); None when it is not that.
pub fn decode_state(bytes: &[u8]) -> Option<Vec<LockRecord>> {
    let mut buf = bytes::BytesMut::from(bytes);
    let mut frames = Vec::new();
    crate::resp::drain_frames(&mut crate::resp::Parser::new(), &mut buf, &mut frames).ok()?;
    if !buf.is_empty() {
        return None;
    }
    frames.iter().map(|f| decode(f).map(|(_, r)| r)).collect()
}

/// The bytes a frame of `args` takes in the stream (as a master writes
/// it: an array of bulk strings).
pub fn frame_len(args: &[Bytes]) -> usize {
    let digits = |n: usize| itoa::Buffer::new().format(n).len();
    1 + digits(args.len())
        + 2
        + args
            .iter()
            .map(|a| 1 + digits(a.len()) + 2 + a.len() + 2)
            .sum::<usize>()
}

/// The lock frames sent last, each with its sequence number and the
/// stream offset it came after.
#[derive(Debug, Default)]
pub struct LockLog {
    /// The last sequence number of this history (0: none yet).
    seq: u64,
    frames: VecDeque<(u64, i64, Bytes)>,
    bytes: usize,
}

impl LockLog {
    /// The last sequence number given or taken.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The next record's frame, after stream offset `offset`, kept within
    /// `cap` bytes of frames.
    pub fn append(&mut self, r: &LockRecord, offset: i64, cap: usize) -> Bytes {
        self.seq += 1;
        let f = Bytes::from(encode(self.seq, r));
        self.keep(self.seq, offset, f.clone(), cap);
        f
    }

    /// A frame of the master's, number `seq`, forwarded as it came.
    pub fn forwarded(&mut self, seq: u64, offset: i64, frame: Bytes, cap: usize) {
        self.seq = seq;
        self.keep(seq, offset, frame, cap);
    }

    fn keep(&mut self, seq: u64, offset: i64, frame: Bytes, cap: usize) {
        self.bytes += frame.len();
        self.frames.push_back((seq, offset, frame));
        while self.bytes > cap.max(1) {
            let Some((_, _, f)) = self.frames.pop_front() else {
                break;
            };
            self.bytes -= f.len();
        }
    }

    /// A new history from number `seq` (a full sync's state): nothing
    /// older can be served.
    pub fn reset(&mut self, seq: u64) {
        self.seq = seq;
        self.frames.clear();
        self.bytes = 0;
    }

    /// What a replica that applied records up to `applied` and has the
    /// stream up to offset `have` lacks: every later frame with the
    /// offset it comes after; None when the log cannot tell (records it
    /// no longer has, or a history the replica is ahead of).
    pub fn since(&self, applied: u64, have: i64) -> Option<Vec<(i64, Bytes)>> {
        if applied > self.seq {
            return None;
        }
        if applied == self.seq {
            return Some(Vec::new());
        }
        if self.frames.front().is_none_or(|(s, _, _)| *s > applied + 1) {
            return None;
        }
        let out: Vec<(i64, Bytes)> = self
            .frames
            .iter()
            .filter(|(s, _, _)| *s > applied)
            .map(|(_, o, f)| (*o, f.clone()))
            .collect();
        // A record it lacks before data it has: its state cannot be
        // rebuilt by adding records.
        if out.iter().any(|(o, _)| *o < have) {
            return None;
        }
        Some(out)
    }

    /// The stream offset the last frame came after.
    pub fn last_offset(&self) -> Option<i64> {
        self.frames.back().map(|f| f.1)
    }

    /// Memory held (INFO).
    pub fn allocated(&self) -> usize {
        self.bytes
    }
}

/// `bytes` (the stream from offset `have + 1`) with `frames` (each after
/// its offset, none before `have`) put in their places.
pub fn merge(bytes: &[u8], have: i64, frames: &[(i64, Bytes)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + frames.iter().map(|f| f.1.len()).sum::<usize>());
    let mut at = 0usize;
    for (o, f) in frames {
        let cut = usize::try_from(o - have).unwrap_or(0).min(bytes.len());
        if cut > at {
            out.extend_from_slice(&bytes[at..cut]);
            at = cut;
        }
        out.extend_from_slice(f);
    }
    out.extend_from_slice(&bytes[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::{drain_frames, Parser};

    fn parse(bytes: &[u8]) -> Vec<Vec<Bytes>> {
        let mut buf = bytes::BytesMut::from(bytes);
        let mut frames = Vec::new();
        drain_frames(&mut Parser::new(), &mut buf, &mut frames).expect("frames");
        assert!(buf.is_empty());
        frames
    }

    #[test]
    fn every_record_round_trips() {
        let k = |s: &'static str| Bytes::from_static(s.as_bytes());
        let sid: Sid = 0x0123_4567_89ab_cdef_0011_2233_4455_6677;
        let all = [
            LockRecord::Bound {
                db: 3,
                key: k("lk"),
                sid,
                value: k(""),
                expire_at: Some(1_700_000_000_000),
                token: 9,
            },
            LockRecord::Bound {
                db: 0,
                key: k("a b"),
                sid: 1,
                value: k("v\r\n"),
                expire_at: None,
                token: u64::MAX,
            },
            LockRecord::ShareAdded {
                db: 1,
                key: k("s"),
                sid,
                permits: Some(3),
                value: k("r"),
                token: 10,
            },
            LockRecord::ShareAdded {
                db: 1,
                key: k("s"),
                sid,
                permits: None,
                value: k("r"),
                token: 11,
            },
            LockRecord::ShareReleased {
                db: 1,
                key: k("s"),
                sid,
                value: Some(k("r")),
            },
            LockRecord::ShareReleased {
                db: 1,
                key: k("s"),
                sid,
                value: None,
            },
            LockRecord::Unbound { db: 2, key: k("x") },
            LockRecord::Moved {
                from: (0, k("a")),
                to: (5, k("b")),
            },
            LockRecord::Granted {
                db: 0,
                key: k("q"),
                sid,
            },
            LockRecord::Queued {
                db: 0,
                key: k("q"),
                sid,
                value: k("w1"),
                ttl_ms: Some(3000),
                share: None,
                first: false,
            },
            LockRecord::Queued {
                db: 2,
                key: k("q"),
                sid,
                value: k(""),
                ttl_ms: None,
                share: Some(ShareKind::Read),
                first: true,
            },
            LockRecord::Queued {
                db: 2,
                key: k("q"),
                sid,
                value: k("p"),
                ttl_ms: None,
                share: Some(ShareKind::Permits(4)),
                first: false,
            },
            LockRecord::Dequeued {
                db: 0,
                key: k("q"),
                sid,
                value: Some(k("w1")),
            },
            LockRecord::Dequeued {
                db: 0,
                key: k("q"),
                sid,
                value: None,
            },
            LockRecord::SessionClosed { sid },
            LockRecord::Fenced { token: 77 },
            LockRecord::Owner {
                sid,
                user: k("alice"),
            },
            LockRecord::SessionTimeout { sid, ms: 2500 },
        ];
        for (i, r) in all.iter().enumerate() {
            let bytes = encode(i as u64 + 1, r);
            let frames = parse(&bytes);
            assert_eq!(frames.len(), 1);
            assert_eq!(frame_len(&frames[0]), bytes.len());
            assert_eq!(decode(&frames[0]), Some((i as u64 + 1, r.clone())));
        }
        // The bytes on the wire, exactly (a replica of another build
        // reads them): the session as 32 lowercase hex digits.
        let granted = LockRecord::Granted {
            db: 3,
            key: k("q"),
            sid: 0xab,
        };
        assert_eq!(
            encode(u64::MAX, &granted),
            b"*6\r\n$6\r\nTPREPL\r\n$20\r\n18446744073709551615\r\n$7\r\nGRANTED\r\n$1\r\n3\r\n$1\r\nq\r\n$32\r\n000000000000000000000000000000ab\r\n"
        );
        let bound = LockRecord::Bound {
            db: 0,
            key: k("k"),
            sid,
            value: k("v"),
            expire_at: None,
            token: 9,
        };
        assert_eq!(
            encode(1, &bound),
            b"*9\r\n$6\r\nTPREPL\r\n$1\r\n1\r\n$5\r\nBOUND\r\n$1\r\n0\r\n$1\r\nk\r\n$32\r\n0123456789abcdef0011223344556677\r\n$1\r\nv\r\n$2\r\n-1\r\n$1\r\n9\r\n"
        );
        // Not a lock frame, or a bad one: nothing.
        assert_eq!(decode(&[k("SET"), k("a"), k("b")]), None);
        assert_eq!(decode(&[k("TPREPL"), k("1"), k("CLOSED"), k("xyz")]), None);
        assert_eq!(decode(&[k("TPREPL"), k("-1"), k("FENCED"), k("1")]), None);
        assert_eq!(decode(&[k("TPREPL")]), None);
    }

    #[test]
    fn the_log_serves_what_a_replica_lacks_in_place() {
        let r = |t| LockRecord::Fenced { token: t };
        let mut log = LockLog::default();
        let f1 = log.append(&r(1), 10, 1 << 20);
        let f2 = log.append(&r(2), 20, 1 << 20);
        let f3 = log.append(&r(3), 20, 1 << 20);
        assert_eq!(log.seq(), 3);
        // Applied 1, has the stream to 20: 2 and 3, both after 20.
        assert_eq!(
            log.since(1, 20),
            Some(vec![(20, f2.clone()), (20, f3.clone())])
        );
        assert_eq!(log.since(3, 25), Some(vec![]));
        // Ahead of this history, or lacking a record before its data.
        assert_eq!(log.since(4, 25), None);
        assert_eq!(log.since(0, 15), None);
        assert_eq!(
            log.since(0, 10),
            Some(vec![(10, f1.clone()), (20, f2.clone()), (20, f3.clone())])
        );
        // Kept within its cap: the oldest go, and what needs them syncs.
        log.append(&r(4), 30, f1.len() * 2);
        assert_eq!(log.since(1, 20), None);
        assert!(log.since(2, 20).is_some());
        // Frames put back among the bytes, each after its offset.
        let bytes = b"abcdefghij"; // offsets 11..=20 after have = 10
        let m = merge(
            bytes,
            10,
            &[
                (10, Bytes::from_static(b"<1>")),
                (15, Bytes::from_static(b"<2>")),
                (20, Bytes::from_static(b"<3>")),
            ],
        );
        assert_eq!(&m[..], b"<1>abcde<2>fghij<3>");
        log.reset(9);
        assert_eq!((log.seq(), log.since(9, 0)), (9, Some(vec![])));
        assert_eq!(log.since(8, 0), None);
    }
}

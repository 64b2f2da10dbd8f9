//! Resumable request parser: multibulk (`*N\r\n$L\r\n...`) and inline commands.
//!
//! The parser never copies argument bytes: it finds frame boundaries in the read
//! buffer, then the caller freezes the consumed prefix and arguments become
//! `Bytes` slices of it. A partial frame records how many bytes it still needs so
//! a 512 MB bulk is not rescanned on every read.

use bytes::{Bytes, BytesMut};

/// Redis's `proto-max-bulk-len` default.
pub const MAX_BULK_LEN: i64 = 512 * 1024 * 1024;
/// Redis 7 rejects a multibulk count over INT_MAX.
pub const MAX_MULTIBULK: i64 = i32::MAX as i64;
/// Redis 7.0.15's limits for a client that has not authenticated yet.
const UNAUTH_MAX_MULTIBULK: i64 = 10;
const UNAUTH_MAX_BULK: usize = 16384;
/// Redis's PROTO_INLINE_MAX_SIZE: inline lines and length headers.
pub const MAX_INLINE: usize = 64 * 1024;
/// Argument slots reserved up front, whatever count a client announces
/// (Redis preallocates min(count, 1024) too).
const MAX_PREALLOC: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtoError {
    /// Text after `-ERR Protocol error: `.
    Msg(&'static str),
    /// `expected '$', got 'X'`.
    ExpectedDollar(u8),
}

impl ProtoError {
    pub fn message(&self) -> String {
        match self {
            ProtoError::Msg(m) => format!("Protocol error: {m}"),
            ProtoError::ExpectedDollar(c) => {
                format!("Protocol error: expected '$', got '{}'", *c as char)
            }
        }
    }
}

/// Resumable parser state for one connection.
///
/// A multibulk frame that is not complete yet keeps its parsed arguments, so
/// each read only parses what is new (a 1M-argument frame arriving in 16 KB
/// reads is not rescanned from its start every time).
#[derive(Debug, Default)]
pub struct Parser {
    /// Argument (start, end) offsets of the frame being assembled.
    ranges: Vec<(usize, usize)>,
    /// The buffer must hold at least this many bytes before parsing is retried.
    need: usize,
    /// Arguments the multibulk frame in progress still expects (0 = none).
    left: usize,
    /// Offset of that frame's next argument header.
    pos: usize,
    /// `drain_frames` scratch space, kept to avoid allocating per call:
    /// (offset, argument count) of each complete frame, and their ranges.
    done_frames: Vec<(usize, usize)>,
    done_ranges: Vec<(usize, usize)>,
    /// The client has not authenticated (requirepass is set): Redis's
    /// smaller request limits apply and `drain_frames` stops after one
    /// frame, so an AUTH lifts them for the requests after it.
    pub unauth: bool,
    /// `proto-max-bulk-len` (None: Redis's default, 512 MB).
    pub max_bulk: Option<i64>,
}

/// Result of trying to parse one frame at the start of a buffer.
pub enum Parsed {
    /// A complete frame of `len` bytes; its argument ranges are in `Parser::ranges()`.
    Frame { len: usize },
    /// More bytes are needed.
    Incomplete,
}

/// Finds the `\r` ending a length header the way Redis does (`strchr`): a NUL
/// byte ends the search, and the `\n` after the `\r` must already be there.
fn find_cr(buf: &[u8], from: usize) -> Option<usize> {
    let at = from + memchr::memchr2(b'\r', 0, &buf[from..])?;
    if buf[at] == b'\r' && at + 1 < buf.len() {
        Some(at)
    } else {
        None
    }
}

/// Parses a length header like Redis's `string2ll`: optional '-', digits, no
/// '+', no leading zero, no "-0", at most 20 bytes.
fn parse_len(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (neg, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

/// The common header `<tag><digits>\r?` in one pass: 1 to 9 digits, no
/// sign, no leading zero (but "0"), the `\r` and one byte after it in
/// `buf`. Returns (value, offset of the `\r`). Anything else (a sign, an
/// error, an incomplete header) is None, and the caller takes the general
/// path (`find_cr` and `parse_len`), which decides it exactly as Redis.
#[inline]
fn quick_header(buf: &[u8], pos: usize, tag: u8) -> Option<(usize, usize)> {
    let b = buf.get(pos..)?;
    if b.len() < 4 || b[0] != tag || !(b'1'..=b'9').contains(&b[1]) && b[1..3] != *b"0\r" {
        return None;
    }
    let mut v = 0usize;
    for (i, &c) in b.iter().enumerate().take(11).skip(1) {
        match c {
            b'0'..=b'9' => v = v * 10 + (c - b'0') as usize,
            b'\r' if i > 1 && i + 1 < b.len() => return Some((v, pos + i)),
            _ => return None,
        }
    }
    None
}

impl Parser {
    pub fn new() -> Self {
        Self::default()
    }

    fn max_bulk(&self) -> i64 {
        self.max_bulk.unwrap_or(MAX_BULK_LEN)
    }

    /// Argument ranges of the last complete frame.
    pub fn ranges(&self) -> &[(usize, usize)] {
        &self.ranges
    }

    /// Bytes the buffer must hold before a retry can make progress.
    pub fn need(&self) -> usize {
        self.need
    }

    /// Tries to parse one frame starting at `buf[0]`. After `Incomplete`, the
    /// next call must get the same frame start (with more bytes appended).
    pub fn parse(&mut self, buf: &[u8]) -> Result<Parsed, ProtoError> {
        if buf.len() < self.need {
            return Ok(Parsed::Incomplete);
        }
        self.need = 0;
        let r = if self.left > 0 {
            self.parse_args(buf)
        } else {
            self.ranges.clear();
            match buf.first() {
                None => return Ok(Parsed::Incomplete),
                Some(b'*') => self.parse_multibulk(buf),
                Some(_) => self.parse_inline(buf),
            }
        };
        if r.is_err() {
            self.left = 0;
        }
        r
    }

    fn parse_multibulk(&mut self, buf: &[u8]) -> Result<Parsed, ProtoError> {
        if let Some((count, eol)) = quick_header(buf, 0, b'*') {
            if count > 0 && !(self.unauth && count as i64 > UNAUTH_MAX_MULTIBULK) {
                self.ranges.reserve(count.min(MAX_PREALLOC));
                self.left = count;
                self.pos = eol + 2;
                return self.parse_args(buf);
            }
        }
        let Some(eol) = find_cr(buf, 1) else {
            if buf.len() > MAX_INLINE {
                return Err(ProtoError::Msg("too big mbulk count string"));
            }
            return Ok(Parsed::Incomplete);
        };
        let count = match parse_len(&buf[1..eol]) {
            Some(n) if n <= MAX_MULTIBULK => n,
            _ => return Err(ProtoError::Msg("invalid multibulk length")),
        };
        if self.unauth && count > UNAUTH_MAX_MULTIBULK {
            return Err(ProtoError::Msg("unauthenticated multibulk length"));
        }
        if count <= 0 {
            return Ok(Parsed::Frame { len: eol + 2 });
        }
        self.ranges.reserve((count as usize).min(MAX_PREALLOC));
        self.left = count as usize;
        self.pos = eol + 2;
        self.parse_args(buf)
    }

    /// Parses the `$len\r\npayload\r\n` arguments of the frame in progress.
    fn parse_args(&mut self, buf: &[u8]) -> Result<Parsed, ProtoError> {
        while self.left > 0 {
            let pos = self.pos;
            if let Some((len, eol)) = quick_header(buf, pos, b'$') {
                if len as i64 <= self.max_bulk() && (!self.unauth || len <= UNAUTH_MAX_BULK) {
                    if !self.take_payload(buf, eol, len) {
                        return Ok(Parsed::Incomplete);
                    }
                    continue;
                }
            }
            // Like Redis, the '$' is checked only once the header's CRLF is in.
            let Some(eol) = find_cr(buf, pos) else {
                if buf.len() - pos > MAX_INLINE {
                    return Err(ProtoError::Msg("too big bulk count string"));
                }
                self.need = buf.len() + 1;
                return Ok(Parsed::Incomplete);
            };
            if buf[pos] != b'$' {
                return Err(ProtoError::ExpectedDollar(buf[pos]));
            }
            let len = match parse_len(&buf[pos + 1..eol]) {
                Some(n) if (0..=self.max_bulk()).contains(&n) => n as usize,
                _ => return Err(ProtoError::Msg("invalid bulk length")),
            };
            if self.unauth && len > UNAUTH_MAX_BULK {
                return Err(ProtoError::Msg("unauthenticated bulk length"));
            }
            if !self.take_payload(buf, eol, len) {
                return Ok(Parsed::Incomplete);
            }
        }
        Ok(Parsed::Frame { len: self.pos })
    }

    /// The payload of `len` bytes after the header ending at `eol`: taken
    /// as the next argument (true), or the bytes still to come are noted
    /// (false). Like Redis, the two bytes after it are skipped unchecked.
    #[inline(always)]
    fn take_payload(&mut self, buf: &[u8], eol: usize, len: usize) -> bool {
        let start = eol + 2;
        let end = start + len;
        if end + 2 > buf.len() {
            self.need = end + 2;
            return false;
        }
        self.ranges.push((start, end));
        self.pos = end + 2;
        self.left -= 1;
        true
    }

    fn parse_inline(&mut self, buf: &[u8]) -> Result<Parsed, ProtoError> {
        // Redis uses strchr: a NUL before the newline means "no line yet".
        let nl = match memchr::memchr2(b'\n', 0, buf) {
            Some(i) if buf[i] == b'\n' => i,
            _ => {
                if buf.len() > MAX_INLINE {
                    return Err(ProtoError::Msg("too big inline request"));
                }
                return Ok(Parsed::Incomplete);
            }
        };
        let mut line_end = nl;
        if line_end > 0 && buf[line_end - 1] == b'\r' {
            line_end -= 1;
        }
        // Inline arguments may need unescaping, so they are reported as ranges
        // only when no quoting is used; otherwise `drain_frames` copies.
        split_inline_ranges(&buf[..line_end], &mut self.ranges)?;
        Ok(Parsed::Frame { len: nl + 1 })
    }
}

/// Splits a line into arguments like Redis's `sdssplitargs`, the one splitter
/// for inline commands and config-file lines: whitespace-separated words,
/// "double quotes" with \n \r \t \b \a \xHH escapes, 'single quotes' with
/// only \' ; a closing quote must be followed by a space. None = unbalanced
/// quotes.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut ranges = Vec::new();
    split_inline_ranges(line, &mut ranges).ok()?;
    Some(
        ranges
            .into_iter()
            .map(|(start, end)| {
                if start & QUOTED != 0 {
                    unquote(&line[start & !QUOTED..end])
                } else {
                    line[start..end].to_vec()
                }
            })
            .collect(),
    )
}

/// Marks an inline argument that needs unquoting (start, end of the raw token).
pub const QUOTED: usize = 1 << (usize::BITS - 1);

/// Splits an inline line into token ranges like Redis's `sdssplitargs`.
/// Quoted tokens have `QUOTED` set on their start offset and must be decoded
/// with `unquote`.
fn split_inline_ranges(line: &[u8], out: &mut Vec<(usize, usize)>) -> Result<(), ProtoError> {
    let mut i = 0;
    let n = line.len();
    loop {
        while i < n && is_space(line[i]) {
            i += 1;
        }
        if i >= n {
            return Ok(());
        }
        let start = i;
        let mut quoted = false;
        // The open quote byte (`"` or `'`) while inside a quoted section.
        let mut in_quote: Option<u8> = None;
        loop {
            if let Some(q) = in_quote {
                if i >= n {
                    return Err(ProtoError::Msg("unbalanced quotes in request"));
                }
                if let Some(len) = quoted_escape_len(&line[i..], q) {
                    i += len;
                } else if line[i] == q {
                    // The closing quote must be followed by a space or end.
                    if i + 1 < n && !is_space(line[i + 1]) {
                        return Err(ProtoError::Msg("unbalanced quotes in request"));
                    }
                    i += 1;
                    break;
                } else {
                    i += 1;
                }
            } else {
                // Inside a token only these end it; isspace() (with \v, \f)
                // applies between tokens and after a closing quote.
                if i >= n || matches!(line[i], b' ' | b'\n' | b'\r' | b'\t') {
                    break;
                }
                if matches!(line[i], b'"' | b'\'') {
                    in_quote = Some(line[i]);
                    quoted = true;
                }
                i += 1;
            }
        }
        out.push((if quoted { start | QUOTED } else { start }, i));
    }
}

/// Length of the escape sequence at the start of `rest` inside a section
/// quoted by `q`, if one starts there: within `"` a `\xHH` (4 bytes) or a
/// backslash and any byte (2); within `'` only `\'` (2).
fn quoted_escape_len(rest: &[u8], q: u8) -> Option<usize> {
    match rest {
        [b'\\', b'x', h1, h2, ..] if q == b'"' && is_hex(*h1) && is_hex(*h2) => Some(4),
        [b'\\', next, ..] if q == b'"' || *next == b'\'' => Some(2),
        _ => None,
    }
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\n' | b'\r' | b'\t' | 0x0b | 0x0c)
}

fn is_hex(c: u8) -> bool {
    c.is_ascii_hexdigit()
}

fn hex_val(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c - b'A' + 10,
    }
}

/// Decodes a token that contains quotes, as `sdssplitargs` does.
pub fn unquote(tok: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(tok.len());
    let mut i = 0;
    let n = tok.len();
    let mut in_dq = false;
    let mut in_sq = false;
    while i < n {
        let c = tok[i];
        if in_dq {
            if c == b'\\'
                && i + 3 < n
                && tok[i + 1] == b'x'
                && is_hex(tok[i + 2])
                && is_hex(tok[i + 3])
            {
                out.push(hex_val(tok[i + 2]) * 16 + hex_val(tok[i + 3]));
                i += 4;
                continue;
            } else if c == b'\\' && i + 1 < n {
                out.push(match tok[i + 1] {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 0x08,
                    b'a' => 0x07,
                    o => o,
                });
                i += 2;
                continue;
            } else if c == b'"' {
                in_dq = false;
            } else {
                out.push(c);
            }
        } else if in_sq {
            if c == b'\\' && i + 1 < n && tok[i + 1] == b'\'' {
                out.push(b'\'');
                i += 2;
                continue;
            } else if c == b'\'' {
                in_sq = false;
            } else {
                out.push(c);
            }
        } else if c == b'"' {
            in_dq = true;
        } else if c == b'\'' {
            in_sq = true;
        } else {
            out.push(c);
        }
        i += 1;
    }
    out
}

/// Splits complete frames off `buf` into argument vectors.
///
/// Complete frames are appended to `out`; an incomplete one stays in `buf`.
/// On a protocol error the frames parsed before it are still in `out`.
pub fn drain_frames(
    parser: &mut Parser,
    buf: &mut BytesMut,
    out: &mut Vec<Vec<Bytes>>,
) -> Result<(), ProtoError> {
    // Complete frames are collected as (offset, arg count) plus their argument
    // ranges in reusable buffers, then the consumed prefix is frozen once.
    let mut consumed = 0usize;
    let mut result = Ok(());
    parser.done_frames.clear();
    parser.done_ranges.clear();
    loop {
        match parser.parse(&buf[consumed..]) {
            Ok(Parsed::Frame { len }) => {
                parser.done_frames.push((consumed, parser.ranges.len()));
                parser.done_ranges.extend_from_slice(&parser.ranges);
                consumed += len;
                if parser.unauth {
                    break;
                }
            }
            Ok(Parsed::Incomplete) => break,
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    if consumed > 0 {
        // `need` counts from the start of the incomplete frame, which is
        // where `buf` starts after the split: it stays as it is.
        let frozen = buf.split_to(consumed).freeze();
        let mut ranges = parser.done_ranges.iter();
        for &(base, n) in &parser.done_frames {
            let mut args = Vec::with_capacity(n);
            for &(s, e) in ranges.by_ref().take(n) {
                if s & QUOTED != 0 {
                    let s = s & !QUOTED;
                    args.push(Bytes::from(unquote(&frozen[base + s..base + e])));
                } else {
                    args.push(frozen.slice(base + s..base + e));
                }
            }
            out.push(args);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8]) -> (Vec<Vec<Bytes>>, Result<(), ProtoError>, usize) {
        let mut p = Parser::new();
        let mut buf = BytesMut::from(input);
        let mut out = vec![];
        let r = drain_frames(&mut p, &mut buf, &mut out);
        (out, r, buf.len())
    }

    #[test]
    fn multibulk_and_inline() {
        let (f, r, rest) =
            all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\nset a \"b c\"\r\n*1\r\n$4\r\nPI");
        assert!(r.is_ok());
        assert_eq!(rest, 10);
        assert_eq!(f.len(), 3);
        assert_eq!(f[0], vec![Bytes::from("GET"), Bytes::from("k")]);
        assert_eq!(f[1], vec![Bytes::from("PING")]);
        assert_eq!(
            f[2],
            vec![Bytes::from("set"), Bytes::from("a"), Bytes::from("b c")]
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            all(b"*abc\r\n").1,
            Err(ProtoError::Msg("invalid multibulk length"))
        );
        assert_eq!(all(b"*1\r\nx\r\n").1, Err(ProtoError::ExpectedDollar(b'x')));
        assert_eq!(
            all(b"*1\r\n$-5\r\n").1,
            Err(ProtoError::Msg("invalid bulk length"))
        );
        assert_eq!(
            all(b"*1\r\n$536870913\r\n").1,
            Err(ProtoError::Msg("invalid bulk length"))
        );
        assert_eq!(
            all(b"*2147483648\r\n").1,
            Err(ProtoError::Msg("invalid multibulk length"))
        );
        assert_eq!(
            all(b"set \"a\r\n").1,
            Err(ProtoError::Msg("unbalanced quotes in request"))
        );
        assert_eq!(
            all(&vec![b'a'; 70000]).1,
            Err(ProtoError::Msg("too big inline request"))
        );
    }

    #[test]
    fn unquote_escapes() {
        assert_eq!(unquote(b"\"a\\x41\\n\""), b"aA\n");
        assert_eq!(unquote(b"'it\\'s'"), b"it's");
    }

    /// Feeds `chunks` one after another, as reads would deliver them.
    fn chunked(chunks: &[&[u8]]) -> (Vec<Vec<Bytes>>, Result<(), ProtoError>, usize) {
        let mut p = Parser::new();
        let mut buf = BytesMut::new();
        let mut out = vec![];
        for c in chunks {
            buf.extend_from_slice(c);
            let r = drain_frames(&mut p, &mut buf, &mut out);
            if r.is_err() {
                return (out, r, buf.len());
            }
        }
        (out, Ok(()), buf.len())
    }

    fn splits<'a>(input: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        cuts.sort_unstable();
        let mut v = vec![];
        let mut at = 0;
        for c in cuts {
            v.push(&input[at..c]);
            at = c;
        }
        v.push(&input[at..]);
        v
    }

    fn encode(frames: &[Vec<Vec<u8>>]) -> Vec<u8> {
        let mut v = vec![];
        for f in frames {
            v.extend_from_slice(format!("*{}\r\n", f.len()).as_bytes());
            for a in f {
                v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                v.extend_from_slice(a);
                v.extend_from_slice(b"\r\n");
            }
        }
        v
    }

    #[test]
    fn lengths_like_string2ll() {
        assert_eq!(parse_len(b"0"), Some(0));
        assert_eq!(parse_len(b"-0"), None);
        assert_eq!(parse_len(b"01"), None);
        assert_eq!(parse_len(b"+1"), None);
        assert_eq!(parse_len(b"-"), None);
        assert_eq!(parse_len(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_len(b"9223372036854775808"), None);
        assert_eq!(parse_len(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_len(b"-9223372036854775809"), None);
        assert_eq!(parse_len(b"000000000000000000001"), None);
    }

    #[test]
    fn redis7_edge_cases() {
        // "-0" is not a number for Redis; i64::MIN counts as an empty frame.
        assert_eq!(
            all(b"*-0\r\n").1,
            Err(ProtoError::Msg("invalid multibulk length"))
        );
        assert_eq!(
            all(b"*1\r\n$-0\r\n").1,
            Err(ProtoError::Msg("invalid bulk length"))
        );
        let (f, r, rest) = all(b"*-9223372036854775808\r\nPING\r\n");
        assert!(r.is_ok() && rest == 0);
        assert_eq!(f, vec![vec![], vec![Bytes::from("PING")]]);
        // Redis 7 allows up to INT_MAX arguments; nothing is preallocated for them.
        let mut p = Parser::new();
        let mut buf = BytesMut::from(&b"*2147483647\r\n$1\r\na\r\n"[..]);
        let mut out = vec![];
        assert!(drain_frames(&mut p, &mut buf, &mut out).is_ok());
        assert!(out.is_empty() && p.ranges.capacity() <= 2 * MAX_PREALLOC);
        // The '$' is only checked once the header line is complete.
        assert_eq!(all(b"*1\r\nxyz").1, Ok(()));
        assert_eq!(all(b"*1\r\n\r\n").1, Err(ProtoError::ExpectedDollar(b'\r')));
        // A NUL before the line end hides it, as with Redis's strchr.
        let (f, r, rest) = all(b"PI\x00NG\r\n");
        assert!(f.is_empty() && r.is_ok() && rest == 7);
        assert_eq!(all(b"*1\x00\r\n").1, Ok(()));
        // \v and \f separate tokens only outside a token.
        let (f, _, _) = all(b"echo a\x0bb \x0cc\r\n");
        assert_eq!(
            f[0],
            vec![Bytes::from("echo"), Bytes::from("a\x0bb"), Bytes::from("c")]
        );
        // Lines over 64 KB are fine once their newline is in.
        let mut long = vec![b'a'; 70000];
        long.extend_from_slice(b"\r\n");
        let (f, r, _) = all(&long);
        assert!(r.is_ok() && f.len() == 1 && f[0][0].len() == 70000);
    }

    #[test]
    fn resumes_a_large_frame() {
        let frames: Vec<Vec<Vec<u8>>> =
            vec![(0..5000).map(|i| format!("arg{i}").into_bytes()).collect()];
        let input = encode(&frames);
        let chunks: Vec<&[u8]> = input.chunks(7).collect();
        let (f, r, rest) = chunked(&chunks);
        assert!(r.is_ok() && rest == 0);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].len(), 5000);
        assert_eq!(f[0][4999], Bytes::from("arg4999"));
    }

    #[test]
    fn need_is_kept_after_split() {
        let mut p = Parser::new();
        let mut buf = BytesMut::from(&b"PING\r\n*1\r\n$100\r\nab"[..]);
        let mut out = vec![];
        drain_frames(&mut p, &mut buf, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        // The frame left in `buf` needs its header (10 bytes) + 100 + CRLF.
        assert_eq!(p.need(), 10 + 100 + 2);
    }

    #[test]
    fn quick_header_takes_the_common_forms() {
        assert_eq!(quick_header(b"$3\r\nGET", 0, b'$'), Some((3, 2)));
        assert_eq!(quick_header(b"*0\r\n", 0, b'*'), Some((0, 2)));
        assert_eq!(
            quick_header(b"x*123456789\r\n", 1, b'*'),
            Some((123456789, 11))
        );
        for odd in [
            &b"$03\r\n"[..],
            b"$-1\r\n",
            b"$3\r",
            b"$1234567890\r\n",
            b"*3\r\n",
        ] {
            assert_eq!(quick_header(odd, 0, b'$'), None, "{odd:?}");
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn arg() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..40),
                proptest::collection::vec(prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'$')], 0..6),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn valid_frames_roundtrip_whatever_the_splits(
                frames in proptest::collection::vec(proptest::collection::vec(arg(), 1..8), 1..12),
                cuts in proptest::collection::vec(any::<usize>(), 0..12),
            ) {
                let input = encode(&frames);
                let (out, r, rest) = chunked(&splits(&input, &cuts));
                prop_assert_eq!(r, Ok(()));
                prop_assert_eq!(rest, 0);
                let got: Vec<Vec<Vec<u8>>> = out
                    .iter()
                    .map(|f| f.iter().map(|a| a.to_vec()).collect())
                    .collect();
                prop_assert_eq!(got, frames);
            }

            #[test]
            fn quick_header_agrees_with_the_general_path(
                tag in prop_oneof![Just(b'$'), Just(b'*')],
                rest in proptest::collection::vec(
                    prop_oneof![
                        b'0'..=b'9', Just(b'\r'), Just(b'\n'), Just(b'-'), Just(b'+'),
                        Just(0u8), Just(b'$'),
                    ],
                    0..16,
                ),
            ) {
                let mut buf = vec![tag];
                buf.extend_from_slice(&rest);
                if let Some((v, eol)) = quick_header(&buf, 0, tag) {
                    prop_assert_eq!(find_cr(&buf, 0), Some(eol));
                    prop_assert_eq!(parse_len(&buf[1..eol]), Some(v as i64));
                }
            }

            #[test]
            fn random_bytes_parse_the_same_whatever_the_splits(
                input in prop_oneof![
                    proptest::collection::vec(any::<u8>(), 0..300),
                    // Mostly protocol-looking bytes, to get past the headers.
                    proptest::collection::vec(
                        prop_oneof![
                            Just(b'*'), Just(b'$'), Just(b'\r'), Just(b'\n'), Just(b'-'),
                            Just(b'"'), Just(b'\''), Just(b'\\'), Just(b' '), Just(b'x'),
                            Just(0u8), b'0'..=b'9',
                        ],
                        0..300,
                    ),
                ],
                cuts in proptest::collection::vec(any::<usize>(), 0..10),
            ) {
                let (f1, r1, rest1) = all(&input);
                let (f2, r2, rest2) = chunked(&splits(&input, &cuts));
                prop_assert_eq!(f1, f2);
                // After an error the unread rest depends on where reads ended.
                if r1.is_ok() {
                    prop_assert_eq!(rest1, rest2);
                }
                prop_assert_eq!(r1, r2);
            }
        }
    }
}

//! Resumable request parser: multibulk (`*N\r\n$L\r\n...`) and inline commands.
//!
//! The parser never copies argument bytes: it finds frame boundaries in the read
//! buffer, then the caller freezes the consumed prefix and arguments become
//! `Bytes` slices of it. A partial frame records how many bytes it still needs so
//! a 512 MB bulk is not rescanned on every read.

use bytes::{Bytes, BytesMut};

/// Redis's `proto-max-bulk-len` default.
pub const MAX_BULK_LEN: i64 = 512 * 1024 * 1024;
/// Redis rejects a multibulk count over this.
pub const MAX_MULTIBULK: i64 = 1024 * 1024;
/// Redis's PROTO_INLINE_MAX_SIZE: inline lines and length headers.
pub const MAX_INLINE: usize = 64 * 1024;

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

/// One parsed request: argument ranges into the buffer.
#[derive(Debug, Default)]
pub struct Parser {
    /// Argument (start, end) offsets of the frame being assembled.
    ranges: Vec<(usize, usize)>,
    /// The buffer must hold at least this many bytes before parsing is retried.
    need: usize,
}

/// Result of trying to parse one frame at the start of a buffer.
pub enum Parsed {
    /// A complete frame of `len` bytes; its argument ranges are in `Parser::ranges()`.
    Frame { len: usize },
    /// More bytes are needed.
    Incomplete,
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    memchr::memchr(b'\r', &buf[from..]).and_then(|i| {
        let at = from + i;
        // Redis only looks for '\r' and requires the '\n' after it to be present.
        if at + 1 < buf.len() {
            Some(at)
        } else {
            None
        }
    })
}

/// Parses a length header like Redis's `string2ll`: optional '-', digits, no '+'.
fn parse_len(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let (neg, digits) = if s[0] == b'-' {
        (true, &s[1..])
    } else {
        (false, s)
    };
    if digits.is_empty() || (digits.len() > 1 && digits[0] == b'0') {
        return None;
    }
    let mut v: i64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as i64)?;
    }
    Some(if neg { -v } else { v })
}

impl Parser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Argument ranges of the last complete frame.
    pub fn ranges(&self) -> &[(usize, usize)] {
        &self.ranges
    }

    /// Bytes the buffer must hold before a retry can make progress.
    pub fn need(&self) -> usize {
        self.need
    }

    /// Tries to parse one frame starting at `buf[0]`.
    pub fn parse(&mut self, buf: &[u8]) -> Result<Parsed, ProtoError> {
        self.ranges.clear();
        if buf.len() < self.need {
            return Ok(Parsed::Incomplete);
        }
        self.need = 0;
        if buf.is_empty() {
            return Ok(Parsed::Incomplete);
        }
        if buf[0] == b'*' {
            self.parse_multibulk(buf)
        } else {
            self.parse_inline(buf)
        }
    }

    fn parse_multibulk(&mut self, buf: &[u8]) -> Result<Parsed, ProtoError> {
        let Some(eol) = find_crlf(buf, 1) else {
            if buf.len() > MAX_INLINE {
                return Err(ProtoError::Msg("too big mbulk count string"));
            }
            return Ok(Parsed::Incomplete);
        };
        if eol > MAX_INLINE {
            return Err(ProtoError::Msg("too big mbulk count string"));
        }
        let count = match parse_len(&buf[1..eol]) {
            Some(n) if n <= MAX_MULTIBULK => n,
            _ => return Err(ProtoError::Msg("invalid multibulk length")),
        };
        let mut pos = eol + 2;
        if count <= 0 {
            return Ok(Parsed::Frame { len: pos });
        }
        self.ranges.reserve(count as usize);
        for _ in 0..count {
            if pos >= buf.len() {
                self.need = pos + 1;
                return Ok(Parsed::Incomplete);
            }
            if buf[pos] != b'$' {
                return Err(ProtoError::ExpectedDollar(buf[pos]));
            }
            let Some(eol) = find_crlf(buf, pos + 1) else {
                if buf.len() - pos > MAX_INLINE {
                    return Err(ProtoError::Msg("too big bulk count string"));
                }
                return Ok(Parsed::Incomplete);
            };
            if eol - pos > MAX_INLINE {
                return Err(ProtoError::Msg("too big bulk count string"));
            }
            let len = match parse_len(&buf[pos + 1..eol]) {
                Some(n) if (0..=MAX_BULK_LEN).contains(&n) => n as usize,
                _ => return Err(ProtoError::Msg("invalid bulk length")),
            };
            let start = eol + 2;
            let end = start + len;
            if end + 2 > buf.len() {
                self.need = end + 2;
                return Ok(Parsed::Incomplete);
            }
            // Like Redis, the two bytes after the payload are skipped unchecked.
            self.ranges.push((start, end));
            pos = end + 2;
        }
        Ok(Parsed::Frame { len: pos })
    }

    fn parse_inline(&mut self, buf: &[u8]) -> Result<Parsed, ProtoError> {
        let Some(nl) = memchr::memchr(b'\n', buf) else {
            if buf.len() > MAX_INLINE {
                return Err(ProtoError::Msg("too big inline request"));
            }
            return Ok(Parsed::Incomplete);
        };
        if nl > MAX_INLINE {
            return Err(ProtoError::Msg("too big inline request"));
        }
        let mut line_end = nl;
        if line_end > 0 && buf[line_end - 1] == b'\r' {
            line_end -= 1;
        }
        // Inline arguments may need unescaping, so they are reported as ranges
        // only when no quoting is used; otherwise `split_inline` copies.
        self.ranges.clear();
        split_inline_ranges(&buf[..line_end], &mut self.ranges)?;
        Ok(Parsed::Frame { len: nl + 1 })
    }
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
        let mut in_dq = false;
        let mut in_sq = false;
        loop {
            if in_dq {
                if i >= n {
                    return Err(ProtoError::Msg("unbalanced quotes in request"));
                }
                if line[i] == b'\\'
                    && i + 3 < n
                    && line[i + 1] == b'x'
                    && is_hex(line[i + 2])
                    && is_hex(line[i + 3])
                {
                    i += 4;
                } else if line[i] == b'\\' && i + 1 < n {
                    i += 2;
                } else if line[i] == b'"' {
                    // The closing quote must be followed by a space or end.
                    if i + 1 < n && !is_space(line[i + 1]) {
                        return Err(ProtoError::Msg("unbalanced quotes in request"));
                    }
                    i += 1;
                    break;
                } else {
                    i += 1;
                }
            } else if in_sq {
                if i >= n {
                    return Err(ProtoError::Msg("unbalanced quotes in request"));
                }
                if line[i] == b'\\' && i + 1 < n && line[i + 1] == b'\'' {
                    i += 2;
                } else if line[i] == b'\'' {
                    if i + 1 < n && !is_space(line[i + 1]) {
                        return Err(ProtoError::Msg("unbalanced quotes in request"));
                    }
                    i += 1;
                    break;
                } else {
                    i += 1;
                }
            } else {
                if i >= n || is_space(line[i]) {
                    break;
                }
                match line[i] {
                    b'"' => {
                        in_dq = true;
                        quoted = true;
                    }
                    b'\'' => {
                        in_sq = true;
                        quoted = true;
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        out.push((if quoted { start | QUOTED } else { start }, i));
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
/// Returns `Ok(true)` when at least one frame was produced. On a protocol error
/// the frames parsed before it are still in `out`.
pub fn drain_frames(
    parser: &mut Parser,
    buf: &mut BytesMut,
    out: &mut Vec<Vec<Bytes>>,
) -> Result<(), ProtoError> {
    // Offsets of complete frames relative to the start of `buf`.
    let mut consumed = 0usize;
    let mut pending: Vec<(usize, Vec<(usize, usize)>)> = Vec::new();
    let mut result = Ok(());
    loop {
        match parser.parse(&buf[consumed..]) {
            Ok(Parsed::Frame { len }) => {
                pending.push((consumed, parser.ranges().to_vec()));
                consumed += len;
            }
            Ok(Parsed::Incomplete) => break,
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    if consumed > 0 {
        // Make `need` relative to what remains.
        parser.need = parser.need.saturating_sub(consumed);
        let frozen = buf.split_to(consumed).freeze();
        for (base, ranges) in pending {
            let mut args = Vec::with_capacity(ranges.len());
            for (s, e) in ranges {
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
        assert_eq!(all(b"*1\r\nx").1, Err(ProtoError::ExpectedDollar(b'x')));
        assert_eq!(
            all(b"*1\r\n$-5\r\n").1,
            Err(ProtoError::Msg("invalid bulk length"))
        );
        assert_eq!(
            all(b"*1\r\n$536870913\r\n").1,
            Err(ProtoError::Msg("invalid bulk length"))
        );
        assert_eq!(
            all(b"*1048577\r\n").1,
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
}

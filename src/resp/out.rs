//! Reply writer. One `Out` per connection; every reply is appended to its buffer
//! and the whole batch goes out in one write. Methods pick the RESP2 or RESP3
//! form from `resp3`, so command code never branches on the protocol.

#[derive(Debug, Default)]
pub struct Out {
    pub buf: Vec<u8>,
    pub resp3: bool,
    /// Where each error reply written since the dispatcher last looked
    /// starts in `buf` (INFO errorstats and failed_calls count them).
    errors: Vec<usize>,
}

impl Out {
    pub fn new(resp3: bool) -> Self {
        Out {
            buf: Vec::with_capacity(16 * 1024),
            resp3,
            errors: Vec::new(),
        }
    }

    /// An unallocated writer for a reply built aside and copied in.
    pub fn scratch(resp3: bool) -> Self {
        Out {
            buf: Vec::new(),
            resp3,
            errors: Vec::new(),
        }
    }

    fn header(&mut self, prefix: u8, n: i64) {
        self.buf.push(prefix);
        self.buf
            .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    /// `+text`; the text must not contain CR or LF.
    pub fn simple(&mut self, s: &str) {
        self.buf.push(b'+');
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    /// `-ERR ...`-style error. `msg` carries its own code (`ERR`, `WRONGTYPE`, ...).
    /// CR and LF are replaced with spaces, as Redis does.
    pub fn error(&mut self, msg: &str) {
        self.error_bytes(msg.as_bytes());
    }

    /// `error` for messages that quote raw client bytes (not always UTF-8).
    pub fn error_bytes(&mut self, msg: &[u8]) {
        self.errors.push(self.buf.len());
        self.buf.push(b'-');
        for &c in msg {
            self.buf
                .push(if c == b'\r' || c == b'\n' { b' ' } else { c });
        }
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn int(&mut self, n: i64) {
        self.header(b':', n);
    }

    pub fn bulk(&mut self, b: &[u8]) {
        self.header(b'$', b.len() as i64);
        self.buf.extend_from_slice(b);
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn bulk_int(&mut self, n: i64) {
        let mut f = itoa::Buffer::new();
        self.bulk(f.format(n).as_bytes());
    }

    /// Null bulk string: `$-1` in RESP2, `_` in RESP3.
    pub fn null(&mut self) {
        if self.resp3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"$-1\r\n");
        }
    }

    /// Null array: `*-1` in RESP2, `_` in RESP3.
    pub fn null_array(&mut self) {
        if self.resp3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"*-1\r\n");
        }
    }

    pub fn array(&mut self, n: usize) {
        self.header(b'*', n as i64);
    }

    /// A set: `~n` in RESP3, an array in RESP2.
    pub fn set(&mut self, n: usize) {
        self.header(if self.resp3 { b'~' } else { b'*' }, n as i64);
    }

    /// A map of `n` pairs: `%n` in RESP3, an array of 2n in RESP2.
    pub fn map(&mut self, n: usize) {
        if self.resp3 {
            self.header(b'%', n as i64);
        } else {
            self.header(b'*', 2 * n as i64);
        }
    }

    /// A push frame header (`>n`); RESP2 gets a plain array.
    pub fn push(&mut self, n: usize) {
        self.header(if self.resp3 { b'>' } else { b'*' }, n as i64);
    }

    pub fn boolean(&mut self, b: bool) {
        if self.resp3 {
            self.buf
                .extend_from_slice(if b { b"#t\r\n" } else { b"#f\r\n" });
        } else {
            self.int(b as i64);
        }
    }

    /// A double: `,` in RESP3, a bulk string in RESP2 (formatted like Redis's `%.17g`).
    pub fn double(&mut self, d: f64) {
        self.resp3_text(b',', crate::util::fmt_double(d).as_bytes());
    }

    /// A RESP3 value of the one-line type `marker` (`,` a double, `(` a big
    /// number) whose text is already formatted; in RESP2 a bulk string of
    /// the same text.
    pub fn resp3_text(&mut self, marker: u8, text: &[u8]) {
        if self.resp3 {
            self.buf.push(marker);
            self.buf.extend_from_slice(text);
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text);
        }
    }

    /// Verbatim text (`=len\r\ntxt:...`) in RESP3, a bulk string in RESP2.
    pub fn verbatim(&mut self, text: &[u8]) {
        if self.resp3 {
            self.header(b'=', text.len() as i64 + 4);
            self.buf.extend_from_slice(b"txt:");
            self.buf.extend_from_slice(text);
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text);
        }
    }

    pub fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Empties the buffer after it was written out.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.errors.clear();
    }

    /// Drops the first `n` bytes, written out while the rest waits (no
    /// error reply is pending between batches).
    pub fn consume_front(&mut self, n: usize) {
        self.buf.drain(..n);
        self.errors.clear();
    }

    /// Drops everything written from `at` on, error replies included (a
    /// reply replaced or silenced before the dispatcher counts it).
    pub fn truncate(&mut self, at: usize) {
        self.buf.truncate(at);
        self.errors.retain(|&e| e < at);
    }

    /// Whether error replies were written since the last `take_errors`.
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// Passes each error reply written since the last call (its bytes from
    /// the `-`, as far as they are still in `buf`) to `f`, and forgets them.
    pub fn take_errors(&mut self, mut f: impl FnMut(&[u8])) {
        for at in self.errors.drain(..) {
            if let Some(e) = self.buf.get(at..) {
                f(e);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

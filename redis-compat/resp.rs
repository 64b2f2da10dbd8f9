//! Raw RESP2/RESP3 reply framing, masking and escaping.
//!
//! A reply is read as a tree of nodes that keep their exact bytes, so an
//! unmasked reply re-serializes to exactly what the server sent.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One reply (or element of an aggregate) with its exact bytes.
#[derive(Clone, Debug)]
pub struct Node {
    /// Type byte ('+', '$', '*', '%', ...).
    pub kind: u8,
    /// The header line and, for blob types, the payload, as sent.
    pub head: Vec<u8>,
    pub kids: Vec<Node>,
}

impl Node {
    pub fn bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.write_to(&mut v);
        v
    }

    fn write_to(&self, v: &mut Vec<u8>) {
        v.extend_from_slice(&self.head);
        for k in &self.kids {
            k.write_to(v);
        }
    }

    fn placeholder(kind: u8, what: &str) -> Node {
        Node {
            kind,
            head: format!("{}<{}>\r\n", kind as char, what).into_bytes(),
            kids: Vec::new(),
        }
    }

    /// Any reply of the same top-level RESP type.
    pub fn mask(&mut self) {
        *self = Node::placeholder(self.kind, "masked");
    }

    /// Any integer; anything else is left as is (and so mismatches).
    pub fn mask_int(&mut self) {
        if self.kind == b':' {
            *self = Node::placeholder(b':', "int");
        }
    }

    /// An integer within [lo, hi].
    pub fn range(&mut self, lo: i64, hi: i64) {
        if self.kind != b':' {
            return;
        }
        let s = String::from_utf8_lossy(&self.head[1..self.head.len() - 2]).to_string();
        if let Ok(n) = s.parse::<i64>() {
            if n >= lo && n <= hi {
                *self = Node::placeholder(b':', &format!("{lo}..{hi}"));
            }
        }
    }

    /// Same types and aggregate lengths at every level, any leaf values.
    pub fn shape(&mut self) {
        if self.kids.is_empty() {
            self.mask();
        } else {
            for k in &mut self.kids {
                k.shape();
            }
        }
    }

    /// Sorts the elements of every aggregate (map entries by pair).
    pub fn sort(&mut self) {
        for k in &mut self.kids {
            k.sort();
        }
        if matches!(self.kind, b'%' | b'|') {
            let mut pairs: Vec<(Vec<u8>, Node, Node)> = Vec::new();
            let mut it = std::mem::take(&mut self.kids).into_iter();
            while let (Some(a), Some(b)) = (it.next(), it.next()) {
                let mut key = a.bytes();
                key.extend(b.bytes());
                pairs.push((key, a, b));
            }
            pairs.sort_by(|x, y| x.0.cmp(&y.0));
            for (_, a, b) in pairs {
                self.kids.push(a);
                self.kids.push(b);
            }
        } else {
            self.kids.sort_by_key(|k| k.bytes());
        }
    }

    /// Masks the value after key `name` in this map or flat key/value
    /// array, and in every one nested in it (ACL LOG's list of entries).
    pub fn mask_field(&mut self, name: &str) {
        let mut i = 0;
        while i + 1 < self.kids.len() {
            let k = &self.kids[i];
            let text = k.text();
            if text.as_deref() == Some(name) {
                self.kids[i + 1].mask();
            }
            i += 2;
        }
        for k in &mut self.kids {
            if !k.kids.is_empty() {
                k.mask_field(name);
            }
        }
    }

    /// The payload of a simple or bulk string.
    pub fn payload(&self) -> Option<Vec<u8>> {
        let h = &self.head;
        match self.kind {
            b'+' => Some(h[1..h.len() - 2].to_vec()),
            b'$' => {
                let nl = h.iter().position(|&c| c == b'\n')?;
                if nl + 3 > h.len() {
                    return None;
                }
                Some(h[nl + 1..h.len() - 2].to_vec())
            }
            _ => None,
        }
    }

    pub fn text(&self) -> Option<String> {
        self.payload()
            .map(|p| String::from_utf8_lossy(&p).into_owned())
    }
}

/// A synthetic array of bulk strings (for `!scan`).
pub fn bulk_array(items: &[Vec<u8>]) -> Node {
    let kids = items
        .iter()
        .map(|b| {
            let mut head = format!("${}\r\n", b.len()).into_bytes();
            head.extend_from_slice(b);
            head.extend_from_slice(b"\r\n");
            Node {
                kind: b'$',
                head,
                kids: Vec::new(),
            }
        })
        .collect();
    Node {
        kind: b'*',
        head: format!("*{}\r\n", items.len()).into_bytes(),
        kids,
    }
}

/// Encodes a command as a RESP multibulk.
pub fn encode(args: &[Vec<u8>]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend(format!("${}\r\n", a.len()).bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// What a read produced.
pub enum Reply {
    Node(Node),
    /// The server closed the connection.
    Closed,
    Timeout,
    /// Not valid RESP (the bytes are kept for the report).
    Garbage(Vec<u8>),
}

impl Reply {
    pub fn render_bytes(&self) -> Vec<u8> {
        match self {
            Reply::Node(n) => n.bytes(),
            Reply::Closed => b"<closed>".to_vec(),
            Reply::Timeout => b"<timeout>".to_vec(),
            Reply::Garbage(b) => {
                let mut v = b"<garbage>".to_vec();
                v.extend_from_slice(b);
                v
            }
        }
    }
}

/// One client connection with a buffered reader.
pub struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
    /// Set after a timeout or garbage: the stream can no longer be framed.
    pub broken: bool,
    /// How long a reply may take.
    timeout: Duration,
}

const READ_TIMEOUT: Duration = Duration::from_secs(3);

impl Conn {
    pub fn connect(port: u16) -> io::Result<Conn> {
        Self::connect_with(port, READ_TIMEOUT)
    }

    /// A connection whose replies may take 60 s: the round trips' bulk
    /// work (DEBUG DIGEST over 100,000 keys, SAVE) on a loaded machine.
    pub fn connect_patient(port: u16) -> io::Result<Conn> {
        Self::connect_with(port, Duration::from_secs(60))
    }

    fn connect_with(port: u16, timeout: Duration) -> io::Result<Conn> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(timeout))?;
        Ok(Conn {
            r: BufReader::new(s.try_clone()?),
            w: s,
            broken: false,
            timeout,
        })
    }

    pub fn send(&mut self, bytes: &[u8]) {
        // A write error (peer closed) shows up as <closed> on the read.
        let _ = self.w.write_all(bytes);
    }

    pub fn read_reply(&mut self) -> Reply {
        if self.broken {
            return Reply::Timeout;
        }
        match read_node(&mut self.r) {
            Ok(Some(n)) => Reply::Node(n),
            Ok(None) => Reply::Closed,
            Err(e) => {
                self.broken = true;
                match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Reply::Timeout,
                    io::ErrorKind::InvalidData => Reply::Garbage(e.to_string().into_bytes()),
                    _ => Reply::Closed,
                }
            }
        }
    }

    /// Waits up to `patience` for at least `want` bytes (counting a
    /// "<closed>" marker), then reads on until `quiet`. A short quiet alone
    /// would cut off output that is merely late on a loaded machine.
    pub fn read_at_least(&mut self, want: usize, patience: Duration, quiet: Duration) -> Vec<u8> {
        let deadline = std::time::Instant::now() + patience;
        let mut out = Vec::new();
        while out.len() < want && !out.ends_with(b"<closed>") {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            out.extend(self.read_until_quiet(left.min(Duration::from_millis(250))));
        }
        if !out.ends_with(b"<closed>") {
            out.extend(self.read_until_quiet(quiet));
        }
        out
    }

    /// Reads whatever arrives until `quiet` passes with nothing new (or the
    /// peer closes). The result is the raw bytes plus "<closed>" if closed.
    pub fn read_until_quiet(&mut self, quiet: Duration) -> Vec<u8> {
        let mut out = Vec::new();
        let _ = self.r.get_ref().set_read_timeout(Some(quiet));
        loop {
            let buffered = self.r.buffer().to_vec();
            if !buffered.is_empty() {
                out.extend_from_slice(&buffered);
                self.r.consume(buffered.len());
                continue;
            }
            let mut buf = [0u8; 65536];
            match self.r.get_mut().read(&mut buf) {
                Ok(0) => {
                    out.extend_from_slice(b"<closed>");
                    break;
                }
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    break
                }
                Err(_) => {
                    out.extend_from_slice(b"<closed>");
                    break;
                }
            }
        }
        let _ = self.r.get_ref().set_read_timeout(Some(self.timeout));
        out
    }
}

/// Reads one line including its CRLF; None at a clean EOF before any byte.
fn read_line(r: &mut impl BufRead) -> io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let n = r.read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unterminated line {:?}", escape(&line)),
        ));
    }
    Ok(Some(line))
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn header_num(line: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(&line[1..line.len() - 2])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("bad length line {}", escape(line))))
}

fn read_node(r: &mut impl BufRead) -> io::Result<Option<Node>> {
    let Some(line) = read_line(r)? else {
        return Ok(None);
    };
    let kind = line[0];
    let mut node = Node {
        kind,
        head: line,
        kids: Vec::new(),
    };
    match kind {
        b'+' | b'-' | b':' | b',' | b'#' | b'_' | b'(' => {}
        b'$' | b'=' | b'!' => {
            let n = header_num(&node.head)?;
            if n >= 0 {
                let mut buf = vec![0u8; n as usize + 2];
                r.read_exact(&mut buf)?;
                if !buf.ends_with(b"\r\n") {
                    return Err(bad("bulk payload not followed by CRLF".into()));
                }
                node.head.extend_from_slice(&buf);
            }
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = header_num(&node.head)?;
            let count = if matches!(kind, b'%' | b'|') {
                n * 2
            } else {
                n
            };
            for _ in 0..count.max(0) {
                match read_node(r)? {
                    Some(k) => node.kids.push(k),
                    None => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
                }
            }
        }
        _ => return Err(bad(format!("unknown type byte in {}", escape(&node.head)))),
    }
    Ok(Some(node))
}

/// Escapes bytes for the report; long values are cut in the middle.
pub fn escape(b: &[u8]) -> String {
    const MAX: usize = 600;
    let mut s = String::new();
    let part = |s: &mut String, b: &[u8]| {
        for &c in b {
            match c {
                b'\r' => s.push_str("\\r"),
                b'\n' => s.push_str("\\n"),
                b'\\' => s.push_str("\\\\"),
                b'"' => s.push_str("\\\""),
                0x20..=0x7e => s.push(c as char),
                _ => s.push_str(&format!("\\x{c:02x}")),
            }
        }
    };
    s.push('"');
    if b.len() > MAX {
        part(&mut s, &b[..MAX / 2]);
        s.push_str(&format!("\"...<{} bytes>...\"", b.len()));
        part(&mut s, &b[b.len() - MAX / 2..]);
    } else {
        part(&mut s, b);
    }
    s.push('"');
    s
}

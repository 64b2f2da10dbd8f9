//! The case file format (see README.md): `=== name` starts a case, `#`
//! starts a comment, every other line is one command in redis-cli quoting,
//! optionally preceded by `!directives`.

use std::path::Path;

/// How a reply is masked before the byte comparison.
#[derive(Clone, Debug, PartialEq)]
pub enum Mask {
    Sort,
    Any,
    AnyInt,
    Shape,
    Range(i64, i64),
    Field(String),
}

#[derive(Clone, Debug)]
pub enum Step {
    /// Send a command and compare its one reply.
    Cmd {
        args: Vec<Vec<u8>>,
        masks: Vec<Mask>,
        /// The reply must be absent (CLIENT REPLY OFF/SKIP).
        noreply: bool,
        /// Full SCAN-style iteration; the cursor is argument 1.
        scan: bool,
    },
    /// Send raw bytes; compare everything that arrives until quiet.
    Raw(Vec<u8>),
    Sleep(u64),
    /// The server must close the connection.
    ExpectClose,
    /// Send nothing; compare the next reply or push that arrives (a
    /// subscriber's message), `<timeout>` after 3 s.
    Recv {
        masks: Vec<Mask>,
    },
    /// Send nothing; compare everything that arrives within 60 ms (usually
    /// nothing: a client that must not be sent a message).
    Quiet,
}

#[derive(Clone, Debug)]
pub struct Line {
    pub lineno: usize,
    pub text: String,
    pub step: Step,
    /// Which of the case's connections the step uses: 0 is the case's own,
    /// `!on N` (N = 2..=MAX_CONNS) another one, opened on first use (and
    /// switched to RESP3 in the RESP3 run).
    pub conn: usize,
    /// `!differs`, only in `pending/`: the known deviation. Latchkey's reply
    /// must differ from Redis's here (it matching means the case moves to
    /// `cases/`), and only here (a new difference is a failure too).
    pub differs: bool,
}

/// Connections a case may use (`!on 2` .. `!on 4`).
pub const MAX_CONNS: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Proto {
    Both,
    Resp2,
    Resp3,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub file: String,
    pub name: String,
    pub lineno: usize,
    pub proto: Proto,
    pub lines: Vec<Line>,
    /// From `redis-compat/pending/`: a known deviation, run as expected
    /// differences (its `!differs` lines).
    pub pending: bool,
}

impl Case {
    /// "file/name", or "pending/file/name": what a filter matches.
    pub fn full_name(&self) -> String {
        if self.pending {
            format!("pending/{}/{}", self.file, self.name)
        } else {
            format!("{}/{}", self.file, self.name)
        }
    }

    /// Where the case is, for a failure report.
    pub fn location(&self) -> String {
        let dir = if self.pending { "pending" } else { "cases" };
        format!("redis-compat/{dir}/{}.txt:{}", self.file, self.lineno)
    }
}

/// Splits a line like redis-cli's `sdssplitargs`: "..." with \xHH \n \r
/// \t \b \a \\ \" escapes, '...' with \' only. Unquoted `@repeat:N:text`
/// expands to text repeated N times (for big values).
pub fn split_args(line: &str) -> Result<Vec<Vec<u8>>, String> {
    let b = line.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= b.len() {
            return Ok(out);
        }
        let mut cur = Vec::new();
        let mut quoted = false;
        if b[i] == b'"' {
            quoted = true;
            i += 1;
            loop {
                if i >= b.len() {
                    return Err("unbalanced \"".into());
                }
                match b[i] {
                    b'\\' if i + 1 < b.len() => {
                        let c = b[i + 1];
                        if c == b'x'
                            && i + 3 < b.len()
                            && b[i + 2].is_ascii_hexdigit()
                            && b[i + 3].is_ascii_hexdigit()
                        {
                            let h = std::str::from_utf8(&b[i + 2..i + 4]).unwrap();
                            cur.push(u8::from_str_radix(h, 16).unwrap());
                            i += 4;
                            continue;
                        }
                        cur.push(match c {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 8,
                            b'a' => 7,
                            c => c,
                        });
                        i += 2;
                    }
                    b'"' => {
                        i += 1;
                        break;
                    }
                    c => {
                        cur.push(c);
                        i += 1;
                    }
                }
            }
        } else if b[i] == b'\'' {
            quoted = true;
            i += 1;
            loop {
                if i >= b.len() {
                    return Err("unbalanced '".into());
                }
                if b[i] == b'\\' && i + 1 < b.len() && b[i + 1] == b'\'' {
                    cur.push(b'\'');
                    i += 2;
                } else if b[i] == b'\'' {
                    i += 1;
                    break;
                } else {
                    cur.push(b[i]);
                    i += 1;
                }
            }
        } else {
            while i < b.len() && !b[i].is_ascii_whitespace() {
                cur.push(b[i]);
                i += 1;
            }
        }
        if quoted && i < b.len() && !b[i].is_ascii_whitespace() {
            return Err("closing quote must be followed by a space".into());
        }
        if !quoted {
            if let Some(rest) = cur.strip_prefix(b"@repeat:") {
                let rest = String::from_utf8_lossy(rest).to_string();
                let (n, text) = rest.split_once(':').ok_or("@repeat needs @repeat:N:text")?;
                let n: usize = n.parse().map_err(|_| "@repeat count")?;
                cur = text.repeat(n).into_bytes();
            }
        }
        out.push(cur);
    }
}

/// Splits off the first whitespace-separated word.
fn word(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    let (a, b) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
    (a, b.trim_start())
}

/// A case line: its step, its connection, and whether it is marked `!differs`.
fn parse_line(text: &str) -> Result<(Step, usize, bool), String> {
    let mut rest = text.trim();
    let mut differs = false;
    if let Some(tail) = rest.strip_prefix("!differs") {
        if !tail.starts_with(char::is_whitespace) {
            return Err("!differs goes before a command".into());
        }
        differs = true;
        rest = tail.trim_start();
    }
    let (step, conn) = parse_step(rest)?;
    Ok((step, conn, differs))
}

fn parse_step(text: &str) -> Result<(Step, usize), String> {
    let mut rest = text.trim();
    let mut masks = Vec::new();
    let mut noreply = false;
    let mut scan = false;
    let mut conn = 0;
    while rest.starts_with('!') {
        let (w, tail) = word(&rest[1..]);
        rest = tail;
        match w {
            "on" => {
                let (n, tail) = word(rest);
                match n.parse::<usize>() {
                    Ok(n) if (1..=MAX_CONNS).contains(&n) => conn = n - 1,
                    _ => return Err(format!("!on N takes 1..={MAX_CONNS}")),
                }
                rest = tail;
            }
            "recv" => return Ok((Step::Recv { masks }, conn)),
            "quiet" => return Ok((Step::Quiet, conn)),
            "sort" => masks.push(Mask::Sort),
            "mask" => masks.push(Mask::Any),
            "mask-int" => masks.push(Mask::AnyInt),
            "shape" => masks.push(Mask::Shape),
            "noreply" => noreply = true,
            "scan" => scan = true,
            "mask-field" => {
                let (name, tail) = word(rest);
                if name.is_empty() {
                    return Err("!mask-field NAME".into());
                }
                masks.push(Mask::Field(name.to_string()));
                rest = tail;
            }
            "range" => {
                let (lo, tail) = word(rest);
                let (hi, tail) = word(tail);
                let lo = lo.parse().map_err(|_| "!range LO HI")?;
                let hi = hi.parse().map_err(|_| "!range LO HI")?;
                masks.push(Mask::Range(lo, hi));
                rest = tail;
            }
            "sleep" => {
                let ms = rest.trim().parse().map_err(|_| "!sleep MS")?;
                return Ok((Step::Sleep(ms), conn));
            }
            "raw" => {
                let a = split_args(rest)?;
                if a.len() != 1 {
                    return Err("!raw takes one quoted string".into());
                }
                return Ok((Step::Raw(a.into_iter().next().unwrap()), conn));
            }
            "expect-close" => return Ok((Step::ExpectClose, conn)),
            _ => return Err(format!("unknown directive !{w}")),
        }
    }
    let args = split_args(rest)?;
    if args.is_empty() {
        return Err("directive without a command".into());
    }
    Ok((
        Step::Cmd {
            args,
            masks,
            noreply,
            scan,
        },
        conn,
    ))
}

/// The `*.txt` files of `redis-compat/<sub>/`, sorted.
pub fn case_files(sub: &str) -> Result<Vec<std::path::PathBuf>, String> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("redis-compat")
        .join(sub);
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    Ok(files)
}

/// The cases of one file; `pending` for a file of `redis-compat/pending/`,
/// where every case must mark its known deviation with `!differs` (and
/// only there may a line be so marked).
pub fn parse_file(path: &Path, pending: bool) -> Result<Vec<Case>, String> {
    let file = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut cases: Vec<Case> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let lineno = i + 1;
        let line = raw.trim();
        let err = |m: String| format!("{}:{lineno}: {m}", path.display());
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix("===") {
            let name = name.trim();
            if name.is_empty() {
                return Err(err("case without a name".into()));
            }
            if cases.iter().any(|c| c.name == name) {
                return Err(err(format!("duplicate case name {name}")));
            }
            cases.push(Case {
                file: file.clone(),
                name: name.to_string(),
                lineno,
                proto: Proto::Both,
                lines: Vec::new(),
                pending,
            });
            continue;
        }
        let Some(case) = cases.last_mut() else {
            return Err(err("command before the first === case".into()));
        };
        if line == "!resp2" || line == "!resp3" {
            if !case.lines.is_empty() {
                return Err(err("!resp2/!resp3 must come before the commands".into()));
            }
            case.proto = if line == "!resp2" {
                Proto::Resp2
            } else {
                Proto::Resp3
            };
            continue;
        }
        let (step, conn, differs) = parse_line(line).map_err(err)?;
        if differs && !pending {
            return Err(err(
                "!differs is only for known deviations, in redis-compat/pending/".into(),
            ));
        }
        case.lines.push(Line {
            lineno,
            text: line.to_string(),
            step,
            conn,
            differs,
        });
    }
    for c in &cases {
        if c.lines.is_empty() {
            return Err(format!("{}: case {} is empty", path.display(), c.name));
        }
        if pending && !c.lines.iter().any(|l| l.differs) {
            return Err(format!(
                "{}: pending case {} marks no line !differs",
                path.display(),
                c.name
            ));
        }
    }
    Ok(cases)
}

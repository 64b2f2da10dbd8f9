//! Latchkey-only cases (redis-compat/latchkey/*.txt): commands Redis does not
//! have (SETTP, WATCHEX, ...) cannot be compared with the oracle, so each
//! reply is checked against the exact bytes written in the case file.
//!
//!     === name
//!     !resp3                 optional, before the steps (or !resp2)
//!     @2 WATCHEX k           a command on connection 2 (default @1)
//!     -> "+NOEXIST\r\n"      its one reply, in both protocols
//!     SET k v
//!     ->2 "+OK\r\n"          RESP2 only ...
//!     ->3 "+OK\r\n"          ... and RESP3 only
//!     @2 !raw "bytes"        send raw bytes (a pipeline), then read as !read
//!     @2 !read               everything that arrives until 120 ms of quiet
//!     ->2 "*3\r\n$7\r\nwatchex\r\n$1\r\nk\r\n$3\r\nADD\r\n"
//!     ->3 ">3\r\n$7\r\nwatchex\r\n$1\r\nk\r\n$3\r\nADD\r\n"
//!     @1 !close              closes connection 1 (expects nothing)
//!
//! In expected bytes, `{n}` stands for one or more digits (a fencing
//! token, which comes from the clock).
//! Connections open on first use (RESP3 runs send HELLO 3 first, unchecked).
//! Every case runs in RESP2 and RESP3 after FLUSHALL.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::cases::{split_args, Proto};
use crate::resp::{encode, escape, Conn};

const QUIET: Duration = Duration::from_millis(120);
const PATIENCE: Duration = Duration::from_secs(3);

#[derive(Clone, Debug)]
enum Action {
    Cmd(Vec<Vec<u8>>),
    /// Send raw bytes (a pipeline), then read until quiet.
    Raw(Vec<u8>),
    Read,
    Close,
}

#[derive(Clone, Debug)]
struct Step {
    lineno: usize,
    text: String,
    conn: usize,
    action: Action,
    /// Expected bytes in RESP2 and RESP3 (None: not run in that protocol).
    want2: Option<Vec<u8>>,
    want3: Option<Vec<u8>>,
}

#[derive(Clone, Debug)]
pub struct ExactCase {
    pub name: String,
    file: String,
    lineno: usize,
    proto: Proto,
    steps: Vec<Step>,
}

/// Whether `got` is `want`, where `{n}` in `want` matches one or more digits.
fn same(want: &[u8], got: &[u8]) -> bool {
    const N: &[u8] = b"{n}";
    let Some(i) = want.windows(N.len()).position(|w| w == N) else {
        return want == got;
    };
    if !got.starts_with(&want[..i]) {
        return false;
    }
    let digits = got[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    digits > 0 && same(&want[i + N.len()..], &got[i + digits..])
}

fn quoted(s: &str) -> Result<Vec<u8>, String> {
    let a = split_args(s)?;
    match a.len() {
        1 => Ok(a.into_iter().next().unwrap()),
        _ => Err("expected bytes must be one quoted string".into()),
    }
}

fn parse_file(path: &Path) -> Result<Vec<ExactCase>, String> {
    let file = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut cases: Vec<ExactCase> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let lineno = i + 1;
        let line = raw.trim();
        let err = |m: &str| format!("{}:{lineno}: {m}", path.display());
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix("===") {
            let name = name.trim().to_string();
            if name.is_empty() || cases.iter().any(|c| c.name == name) {
                return Err(err("missing or duplicate case name"));
            }
            cases.push(ExactCase {
                name,
                file: file.clone(),
                lineno,
                proto: Proto::Both,
                steps: Vec::new(),
            });
            continue;
        }
        let Some(case) = cases.last_mut() else {
            return Err(err("step before the first === case"));
        };
        if line == "!resp2" || line == "!resp3" {
            if !case.steps.is_empty() {
                return Err(err("!resp2/!resp3 must come first"));
            }
            case.proto = if line == "!resp2" {
                Proto::Resp2
            } else {
                Proto::Resp3
            };
            continue;
        }
        for (prefix, two, three) in [
            ("->2 ", true, false),
            ("->3 ", false, true),
            ("-> ", true, true),
        ] {
            if let Some(rest) = line.strip_prefix(prefix) {
                let Some(step) = case.steps.last_mut() else {
                    return Err(err("expectation before any step"));
                };
                let bytes = quoted(rest).map_err(|e| err(&e))?;
                if two {
                    step.want2 = Some(bytes.clone());
                }
                if three {
                    step.want3 = Some(bytes);
                }
                break;
            }
        }
        if line.starts_with("->") {
            continue;
        }
        let mut rest = line;
        let mut conn = 1;
        if let Some(r) = rest.strip_prefix('@') {
            let (n, tail) = r.split_once(' ').ok_or_else(|| err("@N needs a step"))?;
            conn = n.parse().map_err(|_| err("bad @N"))?;
            rest = tail.trim_start();
        }
        let action = match rest {
            "!read" => Action::Read,
            "!close" => Action::Close,
            _ if rest.starts_with("!raw ") => Action::Raw(quoted(&rest[5..]).map_err(|e| err(&e))?),
            _ if rest.starts_with('!') => return Err(err("unknown directive")),
            _ => Action::Cmd(split_args(rest).map_err(|e| err(&e))?),
        };
        case.steps.push(Step {
            lineno,
            text: line.to_string(),
            conn,
            action,
            want2: None,
            want3: None,
        });
    }
    for c in &cases {
        for s in &c.steps {
            let closes = matches!(s.action, Action::Close);
            if !closes && (s.want2.is_none() || s.want3.is_none()) && c.proto == Proto::Both {
                return Err(format!(
                    "{}:{}: step needs -> (or ->2 and ->3)",
                    path.display(),
                    s.lineno
                ));
            }
        }
    }
    Ok(cases)
}

pub fn load() -> Result<Vec<ExactCase>, String> {
    let mut all = Vec::new();
    for f in crate::cases::case_files("latchkey")? {
        all.extend(parse_file(&f)?);
    }
    Ok(all)
}

impl ExactCase {
    pub fn full_name(&self) -> String {
        format!("latchkey/{}/{}", self.file, self.name)
    }

    /// Where the case starts, for the report.
    pub fn location(&self) -> String {
        format!("redis-compat/latchkey/{}.txt:{}", self.file, self.lineno)
    }

    /// Runs the case in both protocols; returns the failure report, if any.
    pub fn run(&self, port: u16) -> Option<String> {
        let mut report = String::new();
        for resp3 in [false, true] {
            let wanted = match self.proto {
                Proto::Both => true,
                Proto::Resp2 => !resp3,
                Proto::Resp3 => resp3,
            };
            if wanted {
                self.run_one(port, resp3, &mut report);
            }
        }
        (!report.is_empty()).then_some(report)
    }

    fn run_one(&self, port: u16, resp3: bool, report: &mut String) {
        let label = if resp3 { "resp3" } else { "resp2" };
        let fail = |report: &mut String, step: &Step, msg: String| {
            report.push_str(&format!(
                "  [{label}] redis-compat/latchkey/{}.txt:{}: {}\n    {msg}\n",
                self.file, step.lineno, step.text
            ));
        };
        match Conn::connect(port) {
            Ok(mut admin) => {
                admin.send(&encode(&[b"FLUSHALL".to_vec()]));
                let _ = admin.read_reply();
            }
            Err(e) => {
                report.push_str(&format!("  [{label}] connect: {e}\n"));
                return;
            }
        }
        let mut conns: BTreeMap<usize, Conn> = BTreeMap::new();
        for step in &self.steps {
            if let std::collections::btree_map::Entry::Vacant(e) = conns.entry(step.conn) {
                let Ok(mut c) = Conn::connect(port) else {
                    fail(report, step, "cannot connect".into());
                    return;
                };
                if resp3 {
                    c.send(&encode(&[b"HELLO".to_vec(), b"3".to_vec()]));
                    let _ = c.read_reply();
                }
                e.insert(c);
            }
            let c = conns.get_mut(&step.conn).unwrap();
            let want = if resp3 { &step.want3 } else { &step.want2 };
            // Expected bytes may come late (a push caused by another
            // connection, a close noticed asynchronously): wait for them.
            let want_len = want.as_ref().map_or(0, |w| w.len());
            let got = match &step.action {
                Action::Close => {
                    conns.remove(&step.conn);
                    continue;
                }
                Action::Read => c.read_at_least(want_len, PATIENCE, QUIET),
                Action::Raw(bytes) => {
                    c.send(bytes);
                    c.read_at_least(want_len, PATIENCE, QUIET)
                }
                Action::Cmd(args) => {
                    c.send(&encode(args));
                    c.read_reply().render_bytes()
                }
            };
            if let Some(want) = want {
                if !same(want, &got) {
                    fail(
                        report,
                        step,
                        format!("expected {}\n    got      {}", escape(want), escape(&got)),
                    );
                }
            }
        }
    }
}

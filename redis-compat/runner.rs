//! Runs one case against the oracle and the server under test, in lock step.

use std::time::Duration;

use crate::cases::{Case, Line, Mask, Step, MAX_CONNS};
use crate::resp::{bulk_array, encode, escape, Conn, Reply};

/// One step whose masked replies differ.
pub struct Mismatch {
    pub lineno: usize,
    pub text: String,
    pub expected: Vec<u8>,
    pub actual: Vec<u8>,
}

/// The two servers being compared.
pub struct Pair {
    pub expected_port: u16,
    pub actual_port: u16,
    admin_exp: Conn,
    admin_act: Conn,
    /// COMPAT_DUMP=1: print every step's reply from both servers.
    dump: bool,
    /// An ACL case ran: users, the log and acl-pubsub-default are reset
    /// before the next case.
    acl_dirty: bool,
}

const NOREPLY_WAIT: Duration = Duration::from_millis(60);
const RAW_QUIET: Duration = Duration::from_millis(120);
const RAW_PATIENCE: Duration = Duration::from_secs(3);
const CLOSE_WAIT: Duration = Duration::from_millis(1500);

impl Pair {
    pub fn new(expected_port: u16, actual_port: u16) -> std::io::Result<Pair> {
        Ok(Pair {
            expected_port,
            actual_port,
            admin_exp: Conn::connect(expected_port)?,
            admin_act: Conn::connect(actual_port)?,
            dump: std::env::var("COMPAT_DUMP").is_ok_and(|v| v == "1"),
            acl_dirty: false,
        })
    }

    /// Resets ACL state if the last case was an ACL one.
    pub fn end_acl_cases(&mut self) {
        if std::mem::take(&mut self.acl_dirty) {
            self.reset_acl();
        }
    }

    /// Back to the default user alone, as a fresh server: every other
    /// user deleted, the log emptied.
    fn reset_acl(&mut self) {
        let cmd = |words: &[&[u8]]| encode(&words.iter().map(|w| w.to_vec()).collect::<Vec<_>>());
        for c in [&mut self.admin_exp, &mut self.admin_act] {
            c.send(&cmd(&[b"ACL", b"USERS"]));
            let names: Vec<Vec<u8>> = match c.read_reply() {
                Reply::Node(n) => n
                    .kids
                    .iter()
                    .filter_map(|k| k.payload())
                    .filter(|n| n != b"default")
                    .collect(),
                _ => Vec::new(),
            };
            if !names.is_empty() {
                let mut del = vec![b"ACL".to_vec(), b"DELUSER".to_vec()];
                del.extend(names);
                c.send(&encode(&del));
                let _ = c.read_reply();
            }
            for words in [
                &[
                    b"ACL".as_slice(),
                    b"SETUSER",
                    b"default",
                    b"clearselectors",
                    b"on",
                    b"nopass",
                    b"~*",
                    b"&*",
                    b"+@all",
                ][..],
                &[b"ACL", b"LOG", b"RESET"],
                &[b"CONFIG", b"SET", b"acl-pubsub-default", b"resetchannels"],
            ] {
                c.send(&cmd(words));
                let _ = c.read_reply();
            }
        }
    }

    /// Waits (at most 2 s) until only the admin connection is left on each
    /// server: the previous case's connections close asynchronously, and
    /// their subscriptions must not count in this case's PUBLISH replies.
    fn wait_for_closed_connections(&mut self) {
        let cmd = encode(&[b"INFO".to_vec(), b"clients".to_vec()]);
        for c in [&mut self.admin_exp, &mut self.admin_act] {
            for _ in 0..200 {
                c.send(&cmd);
                let Reply::Node(n) = c.read_reply() else {
                    break;
                };
                let text = n.bytes();
                if text.windows(20).any(|w| w == b"connected_clients:1\r") {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// FLUSHALL through a long-lived connection (re-opened if it broke).
    fn flushall(&mut self) {
        self.wait_for_closed_connections();
        let cmd = encode(&[b"FLUSHALL".to_vec()]);
        for (c, port) in [
            (&mut self.admin_exp, self.expected_port),
            (&mut self.admin_act, self.actual_port),
        ] {
            c.send(&cmd);
            if !matches!(c.read_reply(), Reply::Node(_)) {
                if let Ok(n) = Conn::connect(port) {
                    *c = n;
                    c.send(&cmd);
                    let _ = c.read_reply();
                }
            }
        }
    }

    /// Runs a case in one protocol; an error opening a connection is
    /// reported as a mismatch of the first line.
    pub fn run(&mut self, case: &Case, resp3: bool) -> Vec<Mismatch> {
        if self.dump {
            println!(
                "--- {}/{} [{}]",
                case.file,
                case.name,
                if resp3 { "resp3" } else { "resp2" }
            );
        }
        let acl_case = case.file == "acl";
        if acl_case || self.acl_dirty {
            self.reset_acl();
        }
        self.acl_dirty = acl_case;
        self.flushall();
        let mut conns: Vec<Option<(Conn, Conn)>> = (0..MAX_CONNS).map(|_| None).collect();
        let mut out = Vec::new();
        // The case's own connection first, then each `!on N` when first used.
        match self.open(case.lineno, resp3, &mut out) {
            Some(pair) => conns[0] = Some(pair),
            None => return out,
        }
        for line in &case.lines {
            if conns[line.conn].is_none() {
                match self.open(line.lineno, resp3, &mut out) {
                    Some(pair) => conns[line.conn] = Some(pair),
                    None => return out,
                }
            }
            let (e, a) = conns[line.conn].as_mut().expect("opened above");
            compare(line, e, a, &mut out, self.dump);
        }
        out
    }

    /// Opens one connection to each server; in the RESP3 run it says
    /// HELLO 3 first. An error opening it is reported as a mismatch.
    fn open(&self, lineno: usize, resp3: bool, out: &mut Vec<Mismatch>) -> Option<(Conn, Conn)> {
        let (mut e, mut a) = match (
            Conn::connect(self.expected_port),
            Conn::connect(self.actual_port),
        ) {
            (Ok(e), Ok(a)) => (e, a),
            (e, a) => {
                out.push(Mismatch {
                    lineno,
                    text: "<connect>".into(),
                    expected: format!("{:?}", e.err()).into_bytes(),
                    actual: format!("{:?}", a.err()).into_bytes(),
                });
                return None;
            }
        };
        if resp3 {
            // The preamble masks the volatile client id, and the version,
            // which dedicated HELLO cases compare exactly.
            let hello = Step::Cmd {
                args: vec![b"HELLO".to_vec(), b"3".to_vec()],
                masks: vec![Mask::Field("id".into()), Mask::Field("version".into())],
                noreply: false,
                scan: false,
            };
            let line = Line {
                lineno,
                text: "HELLO 3 (RESP3 preamble)".into(),
                step: hello,
                conn: 0,
                differs: false,
            };
            compare(&line, &mut e, &mut a, out, self.dump);
        }
        Some((e, a))
    }
}

fn compare(line: &Line, e: &mut Conn, a: &mut Conn, out: &mut Vec<Mismatch>, dump: bool) {
    let (x, y) = match &line.step {
        Step::Sleep(ms) => {
            std::thread::sleep(Duration::from_millis(*ms));
            return;
        }
        Step::Raw(bytes) => {
            e.send(bytes);
            a.send(bytes);
            // Whichever side is slower on a loaded machine gets time to
            // catch up with the other before the outputs are compared.
            let mut x = e.read_until_quiet(RAW_QUIET);
            let y = a.read_at_least(x.len(), RAW_PATIENCE, RAW_QUIET);
            if y.len() > x.len() && !x.ends_with(b"<closed>") {
                x.extend(e.read_at_least(y.len() - x.len(), RAW_PATIENCE, RAW_QUIET));
            }
            (x, y)
        }
        Step::ExpectClose => (
            e.read_until_quiet(CLOSE_WAIT),
            a.read_until_quiet(CLOSE_WAIT),
        ),
        Step::Quiet => (
            e.read_until_quiet(NOREPLY_WAIT),
            a.read_until_quiet(NOREPLY_WAIT),
        ),
        Step::Recv { masks } => (masked(e.read_reply(), masks), masked(a.read_reply(), masks)),
        Step::Cmd {
            args,
            masks,
            noreply,
            scan,
        } => {
            if *noreply {
                let cmd = encode(args);
                e.send(&cmd);
                a.send(&cmd);
                (
                    e.read_until_quiet(NOREPLY_WAIT),
                    a.read_until_quiet(NOREPLY_WAIT),
                )
            } else if *scan {
                (
                    masked(scan_all(e, args), masks),
                    masked(scan_all(a, args), masks),
                )
            } else {
                let cmd = encode(args);
                e.send(&cmd);
                a.send(&cmd);
                (masked(e.read_reply(), masks), masked(a.read_reply(), masks))
            }
        }
    };
    if dump {
        println!(
            "  {:>4}: {}\n        = {}",
            line.lineno,
            line.text,
            escape(&x)
        );
        if x != y {
            println!("       != {}", escape(&y));
        }
    }
    if x != y {
        out.push(Mismatch {
            lineno: line.lineno,
            text: line.text.clone(),
            expected: x,
            actual: y,
        });
    }
}

fn masked(r: Reply, masks: &[Mask]) -> Vec<u8> {
    let Reply::Node(mut n) = r else {
        return r.render_bytes();
    };
    // Error replies are never masked: their text is always compared.
    if n.kind != b'-' {
        for m in masks {
            match m {
                Mask::Sort => n.sort(),
                Mask::Any => n.mask(),
                Mask::AnyInt => n.mask_int(),
                Mask::Shape => n.shape(),
                Mask::Range(lo, hi) => n.range(*lo, *hi),
                Mask::Field(f) => n.mask_field(f),
            }
        }
    }
    n.bytes()
}

/// Iterates a SCAN-style command to the end (cursor is argument 1) and
/// returns the sorted union of what it returned. A reply of another shape
/// (an error) is returned as it is.
fn scan_all(c: &mut Conn, args: &[Vec<u8>]) -> Reply {
    let mut args = args.to_vec();
    // SCAN's cursor is argument 1; HSCAN/SSCAN/ZSCAN's (after the key) 2.
    let at = if args
        .first()
        .is_some_and(|a| a.eq_ignore_ascii_case(b"scan"))
    {
        1
    } else {
        2
    };
    // HSCAN and ZSCAN return field/value (member/score) pairs.
    let pairs = args
        .first()
        .is_some_and(|a| a.eq_ignore_ascii_case(b"hscan") || a.eq_ignore_ascii_case(b"zscan"));
    let mut items = Vec::new();
    for _ in 0..100_000 {
        c.send(&encode(&args));
        let r = c.read_reply();
        let Reply::Node(n) = &r else { return r };
        if n.kind != b'*' || n.kids.len() != 2 || n.kids[1].kind != b'*' {
            return r;
        }
        let Some(cursor) = n.kids[0].text() else {
            return r;
        };
        for k in &n.kids[1].kids {
            items.push(k.payload().unwrap_or_else(|| k.bytes()));
        }
        if cursor == "0" {
            // A scan may return an element more than once: compare the
            // sorted set of what was returned (pairs kept together).
            let items = if pairs {
                let mut ps: Vec<Vec<Vec<u8>>> = items.chunks(2).map(|c| c.to_vec()).collect();
                ps.sort();
                ps.dedup();
                ps.concat()
            } else {
                items.sort();
                items.dedup();
                items
            };
            return Reply::Node(bulk_array(&items));
        }
        if args.len() <= at {
            return r;
        }
        args[at] = cursor.into_bytes();
    }
    Reply::Garbage(b"scan did not finish in 100000 calls".to_vec())
}

/// Prints a failing case with each differing step.
pub fn report(case: &Case, proto: &str, ms: &[Mismatch], actual_name: &str) {
    println!("FAIL {} [{proto}] ({})", case.full_name(), case.location());
    for m in ms {
        println!("  line {}: {}", m.lineno, m.text);
        println!("    {:<9} {}", "redis:", escape(&m.expected));
        println!("    {:<9} {}", format!("{actual_name}:"), escape(&m.actual));
    }
}

//! Second phase: the real redis-cli against both servers. Each test runs
//! the same redis-cli invocation on both and compares stdout, stderr and
//! the exit status (after the normalization each test states).

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::resp::{encode, escape, Conn};

pub struct CliResult {
    pub name: String,
    /// None when redis-cli behaved the same against both servers.
    pub failure: Option<String>,
}

struct Output {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    status: String,
}

const CLI_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs redis-cli with `args` and `stdin`, killing it after CLI_TIMEOUT.
fn redis_cli(port: u16, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = match Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            return Output {
                stdout: Vec::new(),
                stderr: format!("cannot run redis-cli: {e}").into_bytes(),
                status: "spawn failed".into(),
            }
        }
    };
    let mut sin = child.stdin.take().unwrap();
    let input = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = sin.write_all(&input);
    });
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let ro = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let re = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + CLI_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st.to_string(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break "killed after timeout".into();
            }
        }
    };
    let _ = writer.join();
    Output {
        stdout: ro.join().unwrap_or_default(),
        stderr: re.join().unwrap_or_default(),
        status,
    }
}

/// Sends commands on a fresh connection and returns the raw replies.
fn send(port: u16, cmds: &[Vec<Vec<u8>>]) -> Vec<u8> {
    let mut out = Vec::new();
    let Ok(mut c) = Conn::connect(port) else {
        return b"<connect failed>".to_vec();
    };
    for cmd in cmds {
        c.send(&encode(cmd));
        out.extend(c.read_reply().render_bytes());
        if c.broken {
            break;
        }
    }
    out
}

fn cmd(s: &str) -> Vec<Vec<u8>> {
    s.split(' ').map(|w| w.as_bytes().to_vec()).collect()
}

fn flushall(port: u16) {
    send(port, &[cmd("FLUSHALL")]);
}

type Normalize = fn(&[u8]) -> Vec<u8>;

fn same(b: &[u8]) -> Vec<u8> {
    b.to_vec()
}

fn sorted_lines(b: &[u8]) -> Vec<u8> {
    let mut lines: Vec<&[u8]> = b.split(|&c| c == b'\n').filter(|l| !l.is_empty()).collect();
    lines.sort();
    lines.join(&b'\n')
}

/// Masks the value of HELLO's `id` (raw: "id 5"; --no-raw:
/// `4# "id" => (integer) 5`), the one field that differs between servers.
fn mask_hello_id(b: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(b);
    let mut out = String::new();
    for line in text.split_inclusive('\n') {
        if line.starts_with("id ") {
            out.push_str("id <id>\n");
        } else if let Some(p) = line.find("\"id\" => ") {
            out.push_str(&line[..p]);
            out.push_str("\"id\" => <id>\n");
        } else {
            out.push_str(line);
        }
    }
    out.into_bytes()
}

struct CliTest {
    name: &'static str,
    /// Commands sent (by a plain connection) before redis-cli runs.
    setup: Vec<Vec<Vec<u8>>>,
    args: Vec<&'static str>,
    stdin: Vec<u8>,
    normalize: Normalize,
    /// Commands whose replies are compared after redis-cli ran.
    after: Vec<Vec<Vec<u8>>>,
    /// A line the output must contain (checked on both servers).
    must_contain: Option<&'static str>,
}

const STDIN_SCRIPT: &str = "\
PING
SET greeting \"hello world\"
GET greeting
GET missing
SET counter 41
INCR counter
INCRBY counter -50
INCRBYFLOAT counter 0.5
APPEND greeting \"!\"
STRLEN greeting
GETRANGE greeting 0 4
MSET a 1 b 2
MGET a missing b
EXISTS a b missing
TYPE a
TYPE missing
SET bin \"\\x00\\x01\\xff\"
GET bin
ECHO \"quoted \\\"text\\\"\"
TTL a
SET t 1 EX 100
TTL t
DEL a b
DBSIZE
INCR greeting
SET k v NX XX
GET
NOSUCHCOMMAND arg
SELECT 1
DBSIZE
SELECT 0
KEYS greeting
CONFIG GET databases
";

fn tests() -> Vec<CliTest> {
    let mut pipe_input = Vec::new();
    for i in 0..10_000 {
        pipe_input.extend(encode(&[
            b"SET".to_vec(),
            format!("key:{i}").into_bytes(),
            format!("value:{i}").into_bytes(),
        ]));
    }
    let mut scan_setup = Vec::new();
    for chunk in 0..5 {
        let mut mset = vec![b"MSET".to_vec()];
        for i in chunk * 100..(chunk + 1) * 100 {
            mset.push(format!("user:{i}").into_bytes());
            mset.push(b"x".to_vec());
            mset.push(format!("item:{i}").into_bytes());
            mset.push(b"y".to_vec());
        }
        scan_setup.push(mset);
    }
    vec![
        CliTest {
            name: "stdin-raw",
            setup: vec![],
            args: vec![],
            stdin: STDIN_SCRIPT.as_bytes().to_vec(),
            normalize: same,
            after: vec![],
            must_contain: None,
        },
        CliTest {
            name: "stdin-no-raw",
            setup: vec![],
            args: vec!["--no-raw"],
            stdin: STDIN_SCRIPT.as_bytes().to_vec(),
            normalize: same,
            after: vec![],
            must_contain: None,
        },
        CliTest {
            name: "args-mode-error",
            setup: vec![cmd("SET s abc")],
            args: vec!["--no-raw", "INCR", "s"],
            stdin: vec![],
            normalize: same,
            after: vec![],
            must_contain: None,
        },
        CliTest {
            name: "args-mode-set-get",
            setup: vec![],
            args: vec!["SET", "k", "v w", "PX", "100000"],
            stdin: vec![],
            normalize: same,
            after: vec![cmd("GET k"), cmd("DBSIZE")],
            must_contain: None,
        },
        CliTest {
            name: "pipe-10000-sets",
            setup: vec![],
            args: vec!["--pipe"],
            stdin: pipe_input,
            normalize: same,
            after: vec![cmd("DBSIZE"), cmd("GET key:9999"), cmd("GET key:0")],
            must_contain: Some("errors: 0, replies: 10000"),
        },
        CliTest {
            name: "resp3-hello-raw",
            setup: vec![],
            args: vec!["-3", "HELLO", "3"],
            stdin: vec![],
            normalize: mask_hello_id,
            after: vec![],
            must_contain: None,
        },
        CliTest {
            name: "resp3-hello-no-raw",
            setup: vec![],
            args: vec!["-3", "--no-raw", "HELLO", "3"],
            stdin: vec![],
            normalize: mask_hello_id,
            after: vec![],
            must_contain: None,
        },
        CliTest {
            name: "resp3-null",
            setup: vec![],
            args: vec!["-3", "--no-raw", "GET", "missing"],
            stdin: vec![],
            normalize: same,
            after: vec![],
            must_contain: Some("(nil)"),
        },
        CliTest {
            name: "resp3-map-config-get",
            setup: vec![],
            args: vec!["-3", "--no-raw", "CONFIG", "GET", "databases"],
            stdin: vec![],
            normalize: same,
            after: vec![],
            must_contain: Some("1# \"databases\" => \"16\""),
        },
        CliTest {
            name: "resp3-stdin",
            setup: vec![],
            args: vec!["-3", "--no-raw"],
            stdin: b"SET a 1\nGET a\nGET nope\nINCRBYFLOAT a 1.5\nMGET a nope\nCONFIG GET databases\nEXISTS a\n"
                .to_vec(),
            normalize: same,
            after: vec![],
            must_contain: None,
        },
        CliTest {
            name: "scan-pattern",
            setup: scan_setup.clone(),
            args: vec!["--scan", "--pattern", "user:1*"],
            stdin: vec![],
            normalize: sorted_lines,
            after: vec![],
            must_contain: Some("user:199"),
        },
        CliTest {
            name: "scan-all",
            setup: scan_setup,
            args: vec!["--scan"],
            stdin: vec![],
            normalize: sorted_lines,
            after: vec![cmd("DBSIZE")],
            must_contain: Some("item:0"),
        },
    ]
}

fn show(o: &Output, after: &[u8]) -> String {
    format!(
        "stdout={} stderr={} status={} after={}",
        escape(&o.stdout),
        escape(&o.stderr),
        o.status,
        escape(after)
    )
}

/// Runs every selected redis-cli test; `actual_name` labels the second server.
pub fn run(
    expected_port: u16,
    actual_port: u16,
    actual_name: &str,
    selected: &dyn Fn(&str) -> bool,
) -> Vec<CliResult> {
    let mut results = Vec::new();
    for t in tests() {
        let name = format!("cli/{}", t.name);
        if !selected(&name) {
            continue;
        }
        let mut outs = Vec::new();
        for port in [expected_port, actual_port] {
            flushall(port);
            send(port, &t.setup);
            let o = redis_cli(port, &t.args, &t.stdin);
            let o = Output {
                stdout: (t.normalize)(&o.stdout),
                stderr: (t.normalize)(&o.stderr),
                status: o.status,
            };
            let after = send(port, &t.after);
            outs.push((o, after));
        }
        let (e, a) = (&outs[0], &outs[1]);
        let mut failure = None;
        if let Some(needle) = t.must_contain {
            if !String::from_utf8_lossy(&e.0.stdout).contains(needle) {
                failure = Some(format!(
                    "  redis output lacks {needle:?}: {}",
                    show(&e.0, &e.1)
                ));
            }
        }
        let differs = e.0.stdout != a.0.stdout
            || e.0.stderr != a.0.stderr
            || e.0.status != a.0.status
            || e.1 != a.1;
        if failure.is_none() && differs {
            failure = Some(format!(
                "  {:<9} {}\n  {:<9} {}",
                "redis:",
                show(&e.0, &e.1),
                format!("{actual_name}:"),
                show(&a.0, &a.1)
            ));
        }
        results.push(CliResult { name, failure });
    }
    results
}

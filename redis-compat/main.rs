//! Differential compatibility suite: every case in redis-compat/cases/*.txt
//! runs against a real redis-server (the oracle) and latchkey, in RESP2 and
//! RESP3, and the replies must match byte for byte after the case's masks.
//! Then redis-cli itself is run against both (cli.rs).
//!
//! `cargo test --test compat -- FILTER` runs the cases whose "file/name"
//! contains FILTER. COMPAT_SELF=1 compares Redis with a second Redis (proves
//! the cases are deterministic and the masks sufficient).
//! COMPAT_LIST_FAILURES=1 prints only the failing case names.

#[global_allocator]
static A: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod cases;
mod cli;
mod exact;
mod oracle;
mod resp;
mod roundtrip;
mod runner;

use cases::{Case, Proto};
use oracle::RedisProc;
use runner::Pair;

/// The server under test: latchkey in-process, or a second Redis.
enum Subject {
    Latchkey(latchkey_server::runtime::ServerHandle),
    Redis(RedisProc),
}

impl Subject {
    fn port(&self) -> u16 {
        match self {
            Subject::Latchkey(h) => h.port(),
            Subject::Redis(r) => r.port,
        }
    }
}

/// The cases of `cases/`, then the known deviations of `pending/`.
fn load_cases() -> Result<Vec<Case>, String> {
    let mut all = Vec::new();
    for (sub, pending) in [("cases", false), ("pending", true)] {
        for f in cases::case_files(sub)? {
            all.extend(cases::parse_file(&f, pending)?);
        }
    }
    Ok(all)
}

/// A pending case's run judged as expected differences: what differs on a
/// line not marked `!differs` stays a failure, and a marked line that now
/// matches Redis is one too (the case moves to `cases/`), reported as such.
fn judge_pending(case: &Case, ms: Vec<runner::Mismatch>, label: &str) -> Vec<runner::Mismatch> {
    let (expected, mut unexpected): (Vec<_>, Vec<_>) = ms
        .into_iter()
        .partition(|m| case.lines.iter().any(|l| l.differs && l.lineno == m.lineno));
    for l in case.lines.iter().filter(|l| l.differs) {
        if !expected.iter().any(|m| m.lineno == l.lineno) {
            unexpected.push(runner::Mismatch {
                lineno: l.lineno,
                text: format!(
                    "{} [{label}] now matches Redis: move the case to redis-compat/cases/ without its !differs",
                    l.text
                ),
                expected: Vec::new(),
                actual: Vec::new(),
            });
        }
    }
    unexpected
}

fn run() -> i32 {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let self_mode = std::env::var("COMPAT_SELF").is_ok_and(|v| v == "1");
    let list_only = std::env::var("COMPAT_LIST_FAILURES").is_ok_and(|v| v == "1");
    let selected = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));

    let all = match load_cases() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("compat: bad case file: {e}");
            return 2;
        }
    };
    let redis = match RedisProc::start() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("compat: FAILED: {e}");
            return 2;
        }
    };
    let subject = if self_mode {
        match RedisProc::start() {
            Ok(r) => Subject::Redis(r),
            Err(e) => {
                eprintln!("compat: FAILED: {e}");
                return 2;
            }
        }
    } else {
        // As the oracle: cases use DEBUG (POPULATE, SET-ACTIVE-EXPIRE).
        let config = latchkey_server::config::Config {
            port: 0,
            enable_debug_command: "yes".into(),
            // As the oracle's `--save ""`, and its files in the temp dir.
            save: Vec::new(),
            dir: std::env::temp_dir().to_string_lossy().into_owned(),
            ..Default::default()
        };
        match latchkey_server::runtime::ServerHandle::start(config) {
            Ok(h) => Subject::Latchkey(h),
            Err(e) => {
                eprintln!("compat: FAILED: cannot start latchkey: {e}");
                return 2;
            }
        }
    };
    let actual_name = if self_mode { "redis#2" } else { "latchkey" };
    if self_mode {
        // Shift the second Redis's client ids so an unmasked id shows up.
        for _ in 0..3 {
            let _ = resp::Conn::connect(subject.port());
        }
    }
    if !list_only {
        println!(
            "compat: oracle {} on port {}, {} on port {}",
            RedisProc::version(),
            redis.port,
            actual_name,
            subject.port()
        );
    }

    let mut pair = match Pair::new(redis.port, subject.port()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("compat: FAILED: cannot connect: {e}");
            return 2;
        }
    };
    let (mut total, mut passed) = (0usize, 0usize);
    let mut failed_names = Vec::new();
    for case in all.iter().filter(|c| selected(&c.full_name())) {
        total += 1;
        let mut ok = true;
        for (resp3, label) in [(false, "resp2"), (true, "resp3")] {
            let wanted = match case.proto {
                Proto::Both => true,
                Proto::Resp2 => !resp3,
                Proto::Resp3 => resp3,
            };
            if !wanted {
                continue;
            }
            let mut ms = pair.run(case, resp3);
            // Against a second Redis a pending case must match like any other.
            if case.pending && !self_mode {
                ms = judge_pending(case, ms, label);
            }
            if !ms.is_empty() {
                ok = false;
                if !list_only {
                    runner::report(case, label, &ms, actual_name);
                }
            }
        }
        if ok {
            passed += 1;
        } else {
            failed_names.push(case.full_name());
        }
    }

    // redis-cli against both; then data moved between the servers in
    // Redis's formats (RDB, DUMP), latchkey's binary against Redis.
    let mut phases = cli::run(redis.port, subject.port(), actual_name, &selected);
    if !self_mode {
        phases.extend(roundtrip::run(&selected));
    }
    for r in phases {
        total += 1;
        match r.failure {
            None => passed += 1,
            Some(f) => {
                if !list_only {
                    println!("FAIL {}\n{f}", r.name);
                }
                failed_names.push(r.name);
            }
        }
    }

    // What the ACL cases left goes before the exact cases run.
    pair.end_acl_cases();

    // Latchkey's own commands: exact expected bytes, latchkey only.
    if !self_mode {
        let exact_cases = match exact::load() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("compat: bad latchkey case file: {e}");
                return 2;
            }
        };
        for case in exact_cases.iter().filter(|c| selected(&c.full_name())) {
            total += 1;
            match case.run(subject.port()) {
                None => passed += 1,
                Some(f) => {
                    if !list_only {
                        println!("FAIL {} ({})\n{f}", case.full_name(), case.location());
                    }
                    failed_names.push(case.full_name());
                }
            }
        }
    }

    if list_only {
        for n in &failed_names {
            println!("{n}");
        }
    }
    let failed = total - passed;
    if total == 0 {
        println!("compat: no case matches {filter:?}");
    }
    println!("compat: {total} cases, {passed} passed, {failed} failed");
    drop(pair);
    drop(subject);
    drop(redis);
    if failed > 0 || total == 0 {
        1
    } else {
        0
    }
}

fn main() {
    std::process::exit(run());
}

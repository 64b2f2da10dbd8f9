//! Server commands (INFO, CONFIG, DBSIZE, FLUSHDB, DEBUG, MONITOR, ...).

use bytes::Bytes;

use super::*;

pub static COMMANDS: &[Spec] = &[];

/// Sends a command to every MONITOR client, in Redis's line format:
/// `+<unix time.micros> [<db> <addr>] "arg" "arg"`.
pub fn feed_monitors(ctx: &mut Ctx, args: &[Bytes]) {
    let t = crate::util::now_us();
    let addr = ctx
        .store
        .clients
        .get(&ctx.conn.id)
        .map(|c| c.addr.clone())
        .unwrap_or_default();
    let mut line = format!(
        "+{}.{:06} [{} {}]",
        t / 1_000_000,
        t % 1_000_000,
        ctx.conn.db,
        addr
    );
    for a in args {
        line.push(' ');
        line.push_str(&repr(a));
    }
    line.push_str("\r\n");
    let monitors = ctx.store.monitors.clone();
    for m in monitors {
        ctx.store.push_to(m, line.as_bytes());
    }
}

/// Quotes bytes like Redis's `sdscatrepr`.
pub fn repr(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() + 2);
    s.push('"');
    for &c in b {
        match c {
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            0x07 => s.push_str("\\a"),
            0x08 => s.push_str("\\b"),
            c if c.is_ascii_graphic() || c == b' ' => s.push(c as char),
            c => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s.push('"');
    s
}

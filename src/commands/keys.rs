//! Generic key commands (Redis's db.c and expire.c).

use bytes::Bytes;

use super::*;

const KEYSPACE_WRITE: &[&str] = &["keyspace", "write", "slow"];

pub static COMMANDS: &[Spec] = &[spec(
    "del",
    -2,
    WRITE,
    (1, -1, 1),
    "generic",
    "1.0.0",
    "Deletes one or more keys.",
    KEYSPACE_WRITE,
    del,
)];

fn del(ctx: &mut Ctx, args: &[Bytes]) {
    let mut n = 0;
    for k in &args[1..] {
        if ctx.db().remove(k) {
            n += 1;
        }
    }
    ctx.out.int(n);
}

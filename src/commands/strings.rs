//! String commands (Redis's t_string.c).

use bytes::Bytes;

use super::*;
use crate::util::{cmd_time_ms, eq_ic};

const STRING_READ: &[&str] = &["read", "string", "fast"];
const STRING_WRITE: &[&str] = &["write", "string", "slow"];

pub static COMMANDS: &[Spec] = &[
    spec("get", 2, READONLY | FAST, (1, 1, 1), "string", "1.0.0", "Returns the string value of a key.", STRING_READ, get),
    spec("set", -3, WRITE | DENYOOM, (1, 1, 1), "string", "1.0.0", "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.", STRING_WRITE, set),
];

fn get(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    match db.get_str(&args[1]) {
        Ok(Some(v)) => out.bulk(v),
        Ok(None) => out.null(),
        Err(_) => out.error(WRONGTYPE),
    }
}

/// SET key value [NX | XX] [GET] [EX s | PX ms | EXAT ts | PXAT ms-ts | KEEPTTL]
fn set(ctx: &mut Ctx, args: &[Bytes]) {
    let mut nx = false;
    let mut xx = false;
    let mut get = false;
    let mut keep_ttl = false;
    let mut expire: Option<(u8, i64)> = None;
    let mut i = 3;
    while i < args.len() {
        let a = &args[i];
        let next = args.get(i + 1);
        if eq_ic(a, "nx") && !xx {
            nx = true;
        } else if eq_ic(a, "xx") && !nx {
            xx = true;
        } else if eq_ic(a, "get") {
            get = true;
        } else if eq_ic(a, "keepttl") && expire.is_none() {
            keep_ttl = true;
        } else if (eq_ic(a, "ex") || eq_ic(a, "px") || eq_ic(a, "exat") || eq_ic(a, "pxat"))
            && !keep_ttl
            && expire.is_none()
            && next.is_some()
        {
            let unit = a[0].to_ascii_lowercase();
            let unit = if a.len() == 2 {
                unit
            } else {
                unit.to_ascii_uppercase()
            };
            let Some(n) = crate::util::parse_i64(next.unwrap()) else {
                return ctx.error(NOT_INT);
            };
            expire = Some((unit, n));
            i += 1;
        } else {
            return ctx.error(SYNTAX);
        }
        i += 1;
    }
    let when = match expire {
        None => None,
        Some((unit, n)) => {
            if n <= 0 {
                return ctx.error("ERR invalid expire time in 'set' command");
            }
            let ms = match unit {
                b'e' => n
                    .checked_mul(1000)
                    .and_then(|v| v.checked_add(cmd_time_ms())),
                b'p' => n.checked_add(cmd_time_ms()),
                b'E' => n.checked_mul(1000),
                _ => Some(n),
            };
            match ms {
                Some(ms) => Some(ms),
                None => return ctx.error("ERR invalid expire time in 'set' command"),
            }
        }
    };
    let key = &args[1];
    let db = ctx.db();
    let old = match db.get_str(key) {
        Ok(v) => v.map(|v| v.to_vec()),
        Err(_) if get => return ctx.error(WRONGTYPE),
        Err(_) => None,
    };
    let exists = old.is_some() || db.exists(key);
    if (nx && exists) || (xx && !exists) {
        if get {
            match old {
                Some(v) => ctx.out.bulk(&v),
                None => ctx.out.null(),
            }
        } else {
            ctx.out.null();
        }
        return;
    }
    db.set_str(key, &args[2], keep_ttl, false);
    if let Some(ms) = when {
        db.set_expire(key, ms);
    }
    if get {
        match old {
            Some(v) => ctx.out.bulk(&v),
            None => ctx.out.null(),
        }
    } else {
        ctx.out.ok();
    }
}

//! Conversions between RESP replies and Lua values, as Redis's
//! script_lua.c does them (redisProtocolToLuaType, luaReplyToRedisReply).
//!
//! Conversions only: must not touch the store, commands or connections; it
//! reads the RESP bytes it is handed and writes through `crate::resp::Out`.

use std::ffi::{c_char, c_int};

use mlua::ffi;
use mlua::ffi::lua_State;

use crate::resp::Out;

fn line(buf: &[u8], pos: usize) -> (&[u8], usize) {
    let end = memchr::memmem::find(&buf[pos..], b"\r\n").map_or(buf.len(), |e| pos + e);
    (&buf[pos..end], (end + 2).min(buf.len()))
}

fn num(b: &[u8]) -> i64 {
    crate::util::parse_i64(b).unwrap_or(0)
}

/// Pushes the Lua form of the reply `buf` (one complete reply).
pub unsafe fn push_reply(l: *mut lua_State, buf: &[u8]) {
    if buf.is_empty() {
        ffi::lua_pushboolean(l, 0);
        return;
    }
    parse(l, buf, 0);
}

unsafe fn push(l: *mut lua_State, b: &[u8]) {
    ffi::lua_pushlstring_(l, b.as_ptr() as *const c_char, b.len());
}

/// Parses the reply at `pos`, pushing it when `l` is not null (attribute
/// contents are parsed but dropped). Returns the position after it.
unsafe fn parse(l: *mut lua_State, buf: &[u8], pos: usize) -> usize {
    let t = buf[pos];
    let (hdr, next) = line(buf, pos + 1);
    let on = !l.is_null();
    if on {
        ffi::luaL_checkstack_(l, 4, c"lua stack limit reached".as_ptr());
    }
    match t {
        b':' => {
            if on {
                ffi::lua_pushnumber(l, num(hdr) as f64);
            }
            next
        }
        b'$' => {
            let n = num(hdr);
            if n < 0 {
                if on {
                    ffi::lua_pushboolean(l, 0);
                }
                return next;
            }
            let end = next + n as usize;
            if on {
                push(l, &buf[next..end]);
            }
            end + 2
        }
        // Status and big number: a table with one string field.
        b'+' | b'(' => {
            if on {
                let field = if t == b'+' { c"ok" } else { c"big_number" };
                ffi::lua_createtable(l, 0, 1);
                push(l, hdr);
                ffi::lua_setfield(l, -2, field.as_ptr());
            }
            next
        }
        b'-' => {
            if on {
                let mut e = Vec::with_capacity(hdr.len() + 1);
                e.push(b'-');
                e.extend_from_slice(hdr);
                super::push_error_ignore_stats(l, &e);
            }
            next
        }
        // A push never comes back from a script's own command: as an array.
        b'*' | b'>' => {
            let n = num(hdr);
            if n < 0 {
                if on {
                    ffi::lua_pushboolean(l, 0);
                }
                return next;
            }
            if on {
                ffi::lua_createtable(l, n as c_int, 0);
            }
            let mut p = next;
            for j in 0..n {
                if on {
                    ffi::lua_pushnumber(l, (j + 1) as f64);
                }
                p = parse(l, buf, p);
                if on {
                    ffi::lua_settable(l, -3);
                }
            }
            p
        }
        // Map and set: a table with one field, `map` or `set`, holding the
        // entries; a set's members map to true.
        b'%' | b'~' => {
            let is_map = t == b'%';
            let n = num(hdr);
            if on {
                ffi::lua_createtable(l, 0, 1);
                ffi::lua_createtable(l, 0, n as c_int);
            }
            let mut p = next;
            for _ in 0..n {
                p = parse(l, buf, p);
                if is_map {
                    p = parse(l, buf, p);
                } else if on {
                    ffi::lua_pushboolean(l, 1);
                }
                if on {
                    ffi::lua_settable(l, -3);
                }
            }
            if on {
                let field = if is_map { c"map" } else { c"set" };
                ffi::lua_setfield(l, -2, field.as_ptr());
            }
            p
        }
        b'|' => {
            let n = num(hdr);
            let mut p = next;
            for _ in 0..n {
                p = parse(std::ptr::null_mut(), buf, p);
                p = parse(std::ptr::null_mut(), buf, p);
            }
            parse(l, buf, p)
        }
        b'_' => {
            if on {
                ffi::lua_pushnil(l);
            }
            next
        }
        b'#' => {
            if on {
                ffi::lua_pushboolean(l, (hdr == b"t") as c_int);
            }
            next
        }
        b',' => {
            if on {
                let d = match hdr {
                    b"inf" => f64::INFINITY,
                    b"-inf" => f64::NEG_INFINITY,
                    _ => crate::util::parse_f64(hdr).unwrap_or(f64::NAN),
                };
                ffi::lua_createtable(l, 0, 1);
                ffi::lua_pushnumber(l, d);
                ffi::lua_setfield(l, -2, c"double".as_ptr());
            }
            next
        }
        b'=' => {
            let n = num(hdr) as usize;
            let body = &buf[next..next + n];
            if on {
                ffi::lua_createtable(l, 0, 1);
                ffi::lua_createtable(l, 0, 2);
                push(l, &body[4.min(n)..]);
                ffi::lua_setfield(l, -2, c"string".as_ptr());
                push(l, &body[..3.min(n)]);
                ffi::lua_setfield(l, -2, c"format".as_ptr());
                ffi::lua_setfield(l, -2, c"verbatim_string".as_ptr());
            }
            next + n + 2
        }
        _ => {
            if on {
                ffi::lua_pushnil(l);
            }
            buf.len()
        }
    }
}

/// A raw string field of the table at `idx` (no metamethods).
unsafe fn raw_field(l: *mut lua_State, idx: c_int, name: &std::ffi::CStr) -> c_int {
    ffi::lua_pushstring_(l, name.as_ptr());
    ffi::lua_rawget_(l, if idx < 0 { idx - 1 } else { idx });
    ffi::lua_type(l, -1)
}

unsafe fn bytes_at<'a>(l: *mut lua_State, idx: c_int) -> &'a [u8] {
    super::to_bytes(l, idx).unwrap_or(b"")
}

/// Lua number to a reply integer like C's `(long long)` on x86-64.
fn to_ll(n: f64) -> i64 {
    // 2^63: the first double out of range.
    if n.is_nan() || !(-9.223_372_036_854_775e18..9.223_372_036_854_775e18).contains(&n) {
        i64::MIN
    } else {
        n as i64
    }
}

fn no_crlf(b: &[u8]) -> Vec<u8> {
    b.iter()
        .map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c })
        .collect()
}

/// Work left in [`lua_to_resp`]: the Lua stack holds the tables being
/// walked, this stack what to do with them (no Rust recursion, so a
/// deeply nested table cannot overflow the thread's stack; the Lua stack
/// limit stops it first, as in Redis).
enum Step {
    /// Convert and pop the value on top of the Lua stack.
    Value,
    /// Array table on top: element `j` next; `n` written; header at `at`.
    Array { j: c_int, n: usize, at: usize },
    /// Stack: outer table, map table, last key.
    Map { n: usize, at: usize },
    /// Stack: outer table, set table, last key.
    Set { n: usize, at: usize },
}

/// Converts and pops the value on top of the stack into a reply
/// (luaReplyToRedisReply). `script_resp3`: the protocol the script set
/// with redis.setresp (it decides how booleans go out).
pub unsafe fn lua_to_resp(l: *mut lua_State, out: &mut Out, script_resp3: bool) {
    let mut steps = vec![Step::Value];
    while let Some(step) = steps.pop() {
        match step {
            Step::Value => value_to_resp(l, out, script_resp3, &mut steps),
            Step::Array { j, n, at } => {
                ffi::lua_rawgeti_(l, -1, j);
                if ffi::lua_type(l, -1) == ffi::LUA_TNIL {
                    ffi::lua_pop(l, 2);
                    fill_deferred(out, at, b'*', n);
                } else {
                    steps.push(Step::Array {
                        j: j + 1,
                        n: n + 1,
                        at,
                    });
                    steps.push(Step::Value);
                }
            }
            Step::Map { n, at } => {
                if ffi::lua_next(l, -2) != 0 {
                    // key value -> key value key: the key, then the value.
                    ffi::lua_pushvalue(l, -2);
                    steps.push(Step::Map { n: n + 1, at });
                    steps.push(Step::Value);
                    steps.push(Step::Value);
                } else {
                    ffi::lua_pop(l, 2);
                    let (hdr, n) = if out.resp3 { (b'%', n) } else { (b'*', 2 * n) };
                    fill_deferred(out, at, hdr, n);
                }
            }
            Step::Set { n, at } => {
                if ffi::lua_next(l, -2) != 0 {
                    ffi::lua_pop(l, 1);
                    ffi::lua_pushvalue(l, -1);
                    steps.push(Step::Set { n: n + 1, at });
                    steps.push(Step::Value);
                } else {
                    ffi::lua_pop(l, 2);
                    fill_deferred(out, at, if out.resp3 { b'~' } else { b'*' }, n);
                }
            }
        }
    }
}

unsafe fn value_to_resp(
    l: *mut lua_State,
    out: &mut Out,
    script_resp3: bool,
    steps: &mut Vec<Step>,
) {
    if ffi::lua_checkstack(l, 4) == 0 {
        out.error("ERR reached lua stack limit");
        ffi::lua_pop(l, 1);
        return;
    }
    match ffi::lua_type(l, -1) {
        ffi::LUA_TSTRING => out.bulk(bytes_at(l, -1)),
        ffi::LUA_TBOOLEAN => {
            let b = ffi::lua_toboolean(l, -1) != 0;
            if !script_resp3 {
                if b {
                    out.int(1);
                } else {
                    out.null();
                }
            } else {
                out.boolean(b);
            }
        }
        ffi::LUA_TNUMBER => out.int(to_ll(ffi::lua_tonumber(l, -1))),
        ffi::LUA_TTABLE => {
            table_to_resp(l, out, steps);
            return;
        }
        _ => out.null(),
    }
    ffi::lua_pop(l, 1);
}

/// A table value: a special reply, or the start of an aggregate whose
/// elements `steps` will convert.
unsafe fn table_to_resp(l: *mut lua_State, out: &mut Out, steps: &mut Vec<Step>) {
    if raw_field(l, -1, c"err") == ffi::LUA_TSTRING {
        ffi::lua_pop(l, 1);
        let mut e = Vec::new();
        if raw_field(l, -1, c"err") == ffi::LUA_TSTRING {
            e.extend_from_slice(crate::util::c_str(bytes_at(l, -1)));
        }
        ffi::lua_pop(l, 2);
        out.error_bytes(&e);
        return;
    }
    ffi::lua_pop(l, 1);
    if raw_field(l, -1, c"ok") == ffi::LUA_TSTRING {
        let ok = no_crlf(crate::util::c_str(bytes_at(l, -1)));
        out.raw(b"+");
        out.raw(&ok);
        out.raw(b"\r\n");
        ffi::lua_pop(l, 2);
        return;
    }
    ffi::lua_pop(l, 1);
    if raw_field(l, -1, c"double") == ffi::LUA_TNUMBER {
        let d = ffi::lua_tonumber(l, -1);
        if d.is_nan() {
            // Redis prints it with %.17g: glibc keeps NaN's sign.
            let s: &[u8] = if d.is_sign_negative() {
                b"-nan"
            } else {
                b"nan"
            };
            out.resp3_text(b',', s);
        } else {
            out.double(d);
        }
        ffi::lua_pop(l, 2);
        return;
    }
    ffi::lua_pop(l, 1);
    if raw_field(l, -1, c"big_number") == ffi::LUA_TSTRING {
        let n = no_crlf(bytes_at(l, -1));
        out.resp3_text(b'(', &n);
        ffi::lua_pop(l, 2);
        return;
    }
    ffi::lua_pop(l, 1);
    if raw_field(l, -1, c"verbatim_string") == ffi::LUA_TTABLE {
        if raw_field(l, -1, c"format") == ffi::LUA_TSTRING {
            if raw_field(l, -2, c"string") == ffi::LUA_TSTRING {
                let fmt = crate::util::c_str(bytes_at(l, -2));
                let s = bytes_at(l, -1);
                if out.resp3 {
                    let mut f = [b' '; 3];
                    for (d, c) in f.iter_mut().zip(fmt) {
                        *d = *c;
                    }
                    out.raw(b"=");
                    out.raw(itoa::Buffer::new().format(s.len() + 4).as_bytes());
                    out.raw(b"\r\n");
                    out.raw(&f);
                    out.raw(b":");
                    out.raw(s);
                    out.raw(b"\r\n");
                } else {
                    out.bulk(s);
                }
                ffi::lua_pop(l, 4);
                return;
            }
            ffi::lua_pop(l, 1);
        }
        ffi::lua_pop(l, 1);
    }
    ffi::lua_pop(l, 1);
    if raw_field(l, -1, c"map") == ffi::LUA_TTABLE {
        let at = deferred(out);
        ffi::lua_pushnil(l);
        steps.push(Step::Map { n: 0, at });
        return;
    }
    ffi::lua_pop(l, 1);
    if raw_field(l, -1, c"set") == ffi::LUA_TTABLE {
        let at = deferred(out);
        ffi::lua_pushnil(l);
        steps.push(Step::Set { n: 0, at });
        return;
    }
    ffi::lua_pop(l, 1);
    let at = deferred(out);
    steps.push(Step::Array { j: 1, n: 0, at });
}

/// Marks where an aggregate's header goes once its length is known.
fn deferred(out: &mut Out) -> usize {
    out.buf.len()
}

fn fill_deferred(out: &mut Out, at: usize, prefix: u8, n: usize) {
    let mut hdr = vec![prefix];
    hdr.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    hdr.extend_from_slice(b"\r\n");
    out.buf.splice(at..at, hdr);
}

/// The reply of a script that raised (luaCallFunction's error branch);
/// pops the error.
pub unsafe fn error_reply(l: *mut lua_State, out: &mut Out, funcname: &str) {
    if ffi::lua_type(l, -1) != ffi::LUA_TTABLE {
        let msg = if ffi::lua_isstring(l, -1) != 0 {
            bytes_at(l, -1).to_vec()
        } else {
            b"execution failure".to_vec()
        };
        let mut e = format!("ERR Error running script {funcname}, ").into_bytes();
        e.extend_from_slice(&msg[..msg.len().min(100)]);
        out.error_bytes(&e);
        ffi::lua_pop(l, 1);
        return;
    }
    let get = |name: &std::ffi::CStr| -> Option<Vec<u8>> {
        let t = raw_field(l, -1, name);
        let v = (t == ffi::LUA_TSTRING || t == ffi::LUA_TNUMBER)
            .then(|| crate::util::c_str(bytes_at(l, -1)).to_vec());
        ffi::lua_pop(l, 1);
        v
    };
    let msg = get(c"err").unwrap_or_default();
    let source = get(c"source");
    let line = get(c"line");
    let mut e = msg;
    if let (Some(src), Some(line)) = (source, line) {
        e.extend_from_slice(format!(" script: {funcname}, on ").as_bytes());
        e.extend_from_slice(&src);
        e.push(b':');
        e.extend_from_slice(&line);
        e.push(b'.');
    }
    out.error_bytes(&e);
    ffi::lua_pop(l, 1);
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::*;

    /// The number at `t[k]` (table at the top of the stack), or None when
    /// it is not a number; a boolean counts as 1 or 0.
    unsafe fn field(l: *mut lua_State, k: &CStr) -> Option<f64> {
        ffi::lua_getfield_(l, -1, k.as_ptr());
        let v = match ffi::lua_type(l, -1) {
            ffi::LUA_TNUMBER => Some(ffi::lua_tonumber(l, -1)),
            ffi::LUA_TBOOLEAN => Some(ffi::lua_toboolean(l, -1) as f64),
            _ => None,
        };
        ffi::lua_settop(l, -2);
        v
    }

    #[test]
    fn maps_and_sets_become_tables_of_one_field() {
        // SAFETY: a fresh state used only here; every value read is checked
        // for its type first.
        unsafe {
            let l = ffi::luaL_newstate();
            assert!(!l.is_null());
            push_reply(l, b"%2\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n:2\r\n");
            assert_eq!(field(l, c"set"), None);
            ffi::lua_getfield_(l, -1, c"map".as_ptr());
            assert_eq!(ffi::lua_type(l, -1), ffi::LUA_TTABLE);
            assert_eq!(field(l, c"a"), Some(1.0));
            assert_eq!(field(l, c"b"), Some(2.0));
            ffi::lua_settop(l, 0);

            // An attribute's map and set are parsed past, not pushed.
            let set = b"|1\r\n%1\r\n$1\r\nk\r\n:9\r\n~1\r\n$1\r\nz\r\n\
                        ~2\r\n$1\r\nx\r\n$1\r\ny\r\n";
            push_reply(l, set);
            assert_eq!(ffi::lua_gettop(l), 1);
            assert_eq!(field(l, c"map"), None);
            ffi::lua_getfield_(l, -1, c"set".as_ptr());
            assert_eq!(ffi::lua_type(l, -1), ffi::LUA_TTABLE);
            assert_eq!(field(l, c"x"), Some(1.0));
            assert_eq!(field(l, c"y"), Some(1.0));
            assert_eq!(field(l, c"z"), None);
            ffi::lua_close(l);
        }
    }
}

//! The `cmsgpack` library as Redis 7.0 bundles it (lua-cmsgpack 0.4.0):
//! `pack(...)` (each argument packed, the results concatenated),
//! `unpack`, `unpack_one`, `unpack_limit`.
//!
//! A Lua library only: must not touch the store, commands or the `redis.*`
//! API; it knows the Lua C API and `super`'s stack helpers.

use std::ffi::{c_int, CStr};

use mlua::ffi;
use mlua::ffi::lua_State;

use super::{push_bytes, raise, to_bytes};

const MAX_NESTING: i32 = 16;

fn encode_bytes(buf: &mut Vec<u8>, s: &[u8]) {
    let len = s.len();
    if len < 32 {
        buf.push(0xa0 | len as u8);
    } else if len <= 0xff {
        buf.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= 0xffff {
        buf.push(0xda);
        buf.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        buf.push(0xdb);
        buf.extend_from_slice(&(len as u32).to_be_bytes());
    }
    buf.extend_from_slice(s);
}

fn encode_double(buf: &mut Vec<u8>, d: f64) {
    let f = d as f32;
    if d == f as f64 {
        buf.push(0xca);
        buf.extend_from_slice(&f.to_be_bytes());
    } else {
        buf.push(0xcb);
        buf.extend_from_slice(&d.to_be_bytes());
    }
}

fn encode_int(buf: &mut Vec<u8>, n: i64) {
    if n >= 0 {
        if n <= 127 {
            buf.push(n as u8);
        } else if n <= 0xff {
            buf.extend_from_slice(&[0xcc, n as u8]);
        } else if n <= 0xffff {
            buf.push(0xcd);
            buf.extend_from_slice(&(n as u16).to_be_bytes());
        } else if n <= 0xffff_ffff {
            buf.push(0xce);
            buf.extend_from_slice(&(n as u32).to_be_bytes());
        } else {
            buf.push(0xcf);
            buf.extend_from_slice(&(n as u64).to_be_bytes());
        }
    } else if n >= -32 {
        buf.push(n as i8 as u8);
    } else if n >= -128 {
        buf.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        buf.push(0xd1);
        buf.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        buf.push(0xd2);
        buf.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        buf.push(0xd3);
        buf.extend_from_slice(&n.to_be_bytes());
    }
}

fn encode_len(buf: &mut Vec<u8>, n: usize, fix: u8, b16: u8, b32: u8) {
    if n <= 15 {
        buf.push(fix | n as u8);
    } else if n <= 0xffff {
        buf.push(b16);
        buf.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        buf.push(b32);
        buf.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// (int64_t)x == x, as x86-64 converts: out of range gives INT64_MIN.
fn int64_equivalent(x: f64) -> Option<i64> {
    if x.is_infinite() || x.is_nan() {
        return None;
    }
    let i = if (-9.223_372_036_854_775e18..9.223_372_036_854_775e18).contains(&x) {
        x as i64
    } else {
        i64::MIN
    };
    (i as f64 == x).then_some(i)
}

/// Whether the table on top has exactly the keys 1..n.
unsafe fn is_array(l: *mut lua_State) -> bool {
    let top = ffi::lua_gettop(l);
    let (mut count, mut max) = (0i64, 0i64);
    ffi::lua_pushnil(l);
    while ffi::lua_next(l, -2) != 0 {
        ffi::lua_pop(l, 1);
        let n = if ffi::lua_type(l, -1) == ffi::LUA_TNUMBER {
            ffi::lua_tonumber(l, -1)
        } else {
            0.0
        };
        // IS_INT_EQUIVALENT: (int)n == n.
        if n <= 0.0 || n != (n as i32) as f64 {
            ffi::lua_settop(l, top);
            return false;
        }
        max = max.max(n as i64);
        count += 1;
    }
    ffi::lua_settop(l, top);
    max == count
}

/// Encodes and pops the value on top of the stack.
unsafe fn encode_value(l: *mut lua_State, buf: &mut Vec<u8>, level: i32) {
    ffi::lua_checkstack(l, 3);
    let mut t = ffi::lua_type(l, -1);
    if t == ffi::LUA_TTABLE && level == MAX_NESTING {
        t = ffi::LUA_TNIL;
    }
    match t {
        ffi::LUA_TSTRING => encode_bytes(buf, to_bytes(l, -1).unwrap_or(b"")),
        ffi::LUA_TBOOLEAN => buf.push(if ffi::lua_toboolean(l, -1) != 0 {
            0xc3
        } else {
            0xc2
        }),
        ffi::LUA_TNUMBER => {
            let n = ffi::lua_tonumber(l, -1);
            match int64_equivalent(n) {
                Some(i) => encode_int(buf, i),
                None => encode_double(buf, n),
            }
        }
        ffi::LUA_TTABLE => {
            if is_array(l) {
                let len = ffi::lua_objlen(l, -1);
                encode_len(buf, len, 0x90, 0xdc, 0xdd);
                for j in 1..=len {
                    ffi::lua_rawgeti_(l, -1, j as c_int);
                    encode_value(l, buf, level + 1);
                }
            } else {
                let mut len = 0;
                ffi::lua_pushnil(l);
                while ffi::lua_next(l, -2) != 0 {
                    ffi::lua_pop(l, 1);
                    len += 1;
                }
                encode_len(buf, len, 0x80, 0xde, 0xdf);
                ffi::lua_pushnil(l);
                while ffi::lua_next(l, -2) != 0 {
                    ffi::lua_pushvalue(l, -2);
                    encode_value(l, buf, level + 1);
                    encode_value(l, buf, level + 1);
                }
            }
        }
        _ => buf.push(0xc0),
    }
    ffi::lua_pop(l, 1);
}

unsafe extern "C-unwind" fn pack(l: *mut lua_State) -> c_int {
    let nargs = ffi::lua_gettop(l);
    if nargs == 0 {
        ffi::luaL_argerror(l, 0, c"MessagePack pack needs input.".as_ptr());
    }
    if ffi::lua_checkstack(l, nargs + 4) == 0 {
        ffi::luaL_argerror(l, 0, c"Too many arguments for MessagePack pack.".as_ptr());
    }
    for i in 1..=nargs {
        ffi::lua_pushvalue(l, i);
        let mut buf = Vec::new();
        encode_value(l, &mut buf, 0);
        push_bytes(l, &buf);
    }
    ffi::lua_concat(l, nargs);
    1
}

// ---------------------------------------------------------------------------
// Decoding: into a tree first (no Lua error can jump over Rust values),
// then onto the stack.

enum Mp {
    Nil,
    Bool(bool),
    Num(f64),
    Str(Vec<u8>),
    Arr(Vec<Mp>),
    Map(Vec<(Mp, Mp)>),
}

enum DecErr {
    Eof,
    BadFmt,
    /// The Lua stack would overflow (lua-cmsgpack's luaL_checkstack text).
    Stack(&'static str),
}

/// Nesting at which lua-cmsgpack runs out of Lua stack (two slots a level
/// of the 8000 Lua allows a C function).
const MAX_DECODE_DEPTH: usize = 4000;

struct Cur<'a> {
    d: &'a [u8],
    p: usize,
    depth: usize,
}

impl Cur<'_> {
    fn left(&self) -> usize {
        self.d.len() - self.p
    }

    fn need(&self, n: usize) -> Result<&[u8], DecErr> {
        if self.left() < n {
            Err(DecErr::Eof)
        } else {
            Ok(&self.d[self.p..self.p + n])
        }
    }

    fn be(&self, off: usize, n: usize) -> Result<u64, DecErr> {
        let b = self.need(off + n)?;
        Ok(b[off..].iter().fold(0u64, |a, &x| (a << 8) | x as u64))
    }

    fn bytes(&mut self, hdr: usize, len: usize) -> Result<Mp, DecErr> {
        let b = self.need(hdr + len)?[hdr..].to_vec();
        self.p += hdr + len;
        Ok(Mp::Str(b))
    }

    fn descend(&mut self, what: &'static str) -> Result<(), DecErr> {
        self.depth += 1;
        if self.depth >= MAX_DECODE_DEPTH {
            return Err(DecErr::Stack(what));
        }
        Ok(())
    }

    fn array(&mut self, hdr: usize, len: usize) -> Result<Mp, DecErr> {
        self.p += hdr;
        self.descend("stack overflow (in function mp_decode_to_lua_array)")?;
        let mut v = Vec::new();
        for _ in 0..len {
            v.push(self.value()?);
        }
        self.depth -= 1;
        Ok(Mp::Arr(v))
    }

    fn map(&mut self, hdr: usize, len: usize) -> Result<Mp, DecErr> {
        self.p += hdr;
        self.descend("stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)")?;
        let mut v = Vec::new();
        for _ in 0..len {
            let k = self.value()?;
            let val = self.value()?;
            v.push((k, val));
        }
        self.depth -= 1;
        Ok(Mp::Map(v))
    }

    fn value(&mut self) -> Result<Mp, DecErr> {
        stacker::maybe_grow(64 * 1024, 1024 * 1024, || self.value_inner())
    }

    fn value_inner(&mut self) -> Result<Mp, DecErr> {
        let t = self.need(1)?[0];
        let num = |c: &mut Cur, n: usize, v: f64| {
            c.p += n;
            Ok(Mp::Num(v))
        };
        match t {
            0xcc => num(self, 2, self.be(1, 1)? as f64),
            0xd0 => num(self, 2, self.be(1, 1)? as u8 as i8 as f64),
            0xcd => num(self, 3, self.be(1, 2)? as f64),
            0xd1 => num(self, 3, self.be(1, 2)? as u16 as i16 as f64),
            0xce => num(self, 5, self.be(1, 4)? as f64),
            0xd2 => num(self, 5, self.be(1, 4)? as u32 as i32 as f64),
            0xcf => num(self, 9, self.be(1, 8)? as f64),
            0xd3 => num(self, 9, self.be(1, 8)? as i64 as f64),
            0xc0 => {
                self.p += 1;
                Ok(Mp::Nil)
            }
            0xc3 | 0xc2 => {
                self.p += 1;
                Ok(Mp::Bool(t == 0xc3))
            }
            0xca => num(self, 5, f32::from_bits(self.be(1, 4)? as u32) as f64),
            0xcb => num(self, 9, f64::from_bits(self.be(1, 8)?)),
            0xd9 => {
                let n = self.be(1, 1)? as usize;
                self.bytes(2, n)
            }
            0xda => {
                let n = self.be(1, 2)? as usize;
                self.bytes(3, n)
            }
            0xdb => {
                let n = self.be(1, 4)? as usize;
                self.bytes(5, n)
            }
            0xdc => {
                let n = self.be(1, 2)? as usize;
                self.array(3, n)
            }
            0xdd => {
                let n = self.be(1, 4)? as usize;
                self.array(5, n)
            }
            0xde => {
                let n = self.be(1, 2)? as usize;
                self.map(3, n)
            }
            0xdf => {
                let n = self.be(1, 4)? as usize;
                self.map(5, n)
            }
            _ if t & 0x80 == 0 => num(self, 1, t as f64),
            _ if t & 0xe0 == 0xe0 => num(self, 1, t as i8 as f64),
            _ if t & 0xe0 == 0xa0 => self.bytes(1, (t & 0x1f) as usize),
            _ if t & 0xf0 == 0x90 => self.array(1, (t & 0xf) as usize),
            _ if t & 0xf0 == 0x80 => self.map(1, (t & 0xf) as usize),
            _ => Err(DecErr::BadFmt),
        }
    }
}

unsafe fn push_mp(l: *mut lua_State, v: &Mp) {
    stacker::maybe_grow(64 * 1024, 1024 * 1024, || push_mp_inner(l, v))
}

unsafe fn push_mp_inner(l: *mut lua_State, v: &Mp) {
    // Nesting stays under MAX_DECODE_DEPTH: this cannot fail.
    ffi::lua_checkstack(l, 3);
    match v {
        Mp::Nil => ffi::lua_pushnil(l),
        Mp::Bool(b) => ffi::lua_pushboolean(l, *b as c_int),
        Mp::Num(n) => ffi::lua_pushnumber(l, *n),
        Mp::Str(s) => push_bytes(l, s),
        Mp::Arr(items) => {
            ffi::lua_newtable(l);
            for (i, it) in items.iter().enumerate() {
                ffi::lua_pushnumber(l, (i + 1) as f64);
                push_mp(l, it);
                ffi::lua_rawset(l, -3);
            }
        }
        Mp::Map(items) => {
            ffi::lua_newtable(l);
            for (k, it) in items {
                // A nil or NaN key cannot index a table (Lua would raise).
                if matches!(k, Mp::Nil) || matches!(k, Mp::Num(n) if n.is_nan()) {
                    continue;
                }
                push_mp(l, k);
                push_mp(l, it);
                ffi::lua_rawset(l, -3);
            }
        }
    }
}

/// Decodes up to `limit` values from `offset` (lua-cmsgpack's
/// mp_unpack_full). Returns the values and the next offset.
fn unpack_values(s: &[u8], limit: i64, offset: i64) -> Result<(Vec<Mp>, usize), String> {
    let decode_all = limit == 0 && offset == 0;
    if offset < 0 || limit < 0 {
        return Err(format!(
            "Invalid request to unpack with offset of {offset} and limit of {}.",
            s.len()
        ));
    }
    if offset as usize > s.len() {
        return Err(format!(
            "Start offset {offset} greater than input length {}.",
            s.len()
        ));
    }
    let limit = if decode_all { i64::MAX } else { limit };
    let mut c = Cur {
        d: s,
        p: offset as usize,
        depth: 0,
    };
    let mut out = Vec::new();
    while c.left() > 0 && (out.len() as i64) < limit {
        match c.value() {
            Ok(v) => out.push(v),
            Err(DecErr::Eof) => return Err("Missing bytes in input.".into()),
            Err(DecErr::BadFmt) => return Err("Bad data format in input.".into()),
            Err(DecErr::Stack(what)) => return Err(what.into()),
        }
    }
    Ok((out, c.p))
}

unsafe fn unpack_full(l: *mut lua_State, limit: i64, offset: i64) -> c_int {
    let mut len = 0usize;
    let p = ffi::luaL_checklstring(l, 1, &mut len);
    let s = std::slice::from_raw_parts(p as *const u8, len);
    let decode_all = limit == 0 && offset == 0;
    let (values, next) = match unpack_values(s, limit, offset) {
        Ok(r) => r,
        Err(e) => raise(l, e),
    };
    if ffi::lua_checkstack(l, values.len() as c_int + 2) == 0 {
        drop(values);
        raise(l, "too many results to unpack".into());
    }
    let mut n = values.len() as c_int;
    for v in &values {
        push_mp(l, v);
    }
    drop(values);
    if !decode_all {
        let off = if next == len { -1 } else { next as i64 };
        ffi::lua_pushinteger(l, off as ffi::lua_Integer);
        ffi::lua_insert(l, 2);
        n += 1;
    }
    n
}

unsafe extern "C-unwind" fn unpack(l: *mut lua_State) -> c_int {
    unpack_full(l, 0, 0)
}

unsafe extern "C-unwind" fn unpack_one(l: *mut lua_State) -> c_int {
    let offset = ffi::luaL_optinteger(l, 2, 0) as c_int as i64;
    ffi::lua_settop(l, 1);
    unpack_full(l, 1, offset)
}

unsafe extern "C-unwind" fn unpack_limit(l: *mut lua_State) -> c_int {
    let limit = ffi::luaL_checkinteger(l, 2) as c_int as i64;
    let offset = ffi::luaL_optinteger(l, 3, 0) as c_int as i64;
    ffi::lua_settop(l, 1);
    unpack_full(l, limit, offset)
}

/// Registers the global `cmsgpack` table.
pub unsafe fn open(l: *mut lua_State) {
    let funcs: [(&CStr, ffi::lua_CFunction); 4] = [
        (c"pack", pack),
        (c"unpack", unpack),
        (c"unpack_one", unpack_one),
        (c"unpack_limit", unpack_limit),
    ];
    super::new_lib(l, &funcs);
    let fields: [(&CStr, &CStr); 4] = [
        (c"_NAME", c"cmsgpack"),
        (c"_VERSION", c"lua-cmsgpack 0.4.0"),
        (c"_COPYRIGHT", c"Copyright (C) 2012, Salvatore Sanfilippo"),
        (c"_DESCRIPTION", c"MessagePack C implementation for Lua"),
    ];
    for (k, v) in fields {
        ffi::lua_pushstring_(l, v.as_ptr());
        ffi::lua_setfield(l, -2, k.as_ptr());
    }
    ffi::lua_setfield(l, ffi::LUA_GLOBALSINDEX, c"cmsgpack".as_ptr());
}

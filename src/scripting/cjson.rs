//! The `cjson` library as Redis 7.0 bundles it (lua-cjson 2.1.0): encode
//! (`%.14g` numbers, `{}` for an empty table, sparse-array rules, `\/`
//! escaping), decode (`cjson.null` is a NULL lightuserdata), and the
//! configuration functions.
//!
//! Encoding and decoding run in plain Rust (no Lua error can jump over
//! them); the Lua-facing functions raise afterwards, with lua-cjson's texts.
//!
//! A Lua library only: must not touch the store, commands or the `redis.*`
//! API; it knows the Lua C API, `super`'s stack helpers and `util`'s numbers.

use std::ffi::{c_int, CStr};

use mlua::ffi;
use mlua::ffi::lua_State;

use super::{push_bytes, raise, to_bytes};

/// Per-interpreter settings, kept in a Lua userdata (plain data, no drop).
#[derive(Clone, Copy)]
#[repr(C)]
struct Config {
    sparse_convert: bool,
    sparse_ratio: i64,
    sparse_safe: i64,
    encode_max_depth: i64,
    decode_max_depth: i64,
    precision: i64,
    encode_invalid_numbers: i64, // 0 refuse, 1 allow, 2 as null
    decode_invalid_numbers: bool,
    keep_buffer: bool,
}

const DEFAULT: Config = Config {
    sparse_convert: false,
    sparse_ratio: 2,
    sparse_safe: 10,
    encode_max_depth: 1000,
    decode_max_depth: 1000,
    precision: 14,
    encode_invalid_numbers: 0,
    decode_invalid_numbers: true,
    keep_buffer: true,
};

const CONFIG_KEY: &CStr = c"latchkey_cjson_config";

unsafe fn config<'a>(l: *mut lua_State) -> &'a mut Config {
    ffi::lua_getfield_(l, ffi::LUA_REGISTRYINDEX, CONFIG_KEY.as_ptr());
    let p = ffi::lua_touserdata(l, -1) as *mut Config;
    ffi::lua_pop(l, 1);
    &mut *p
}

fn type_name(t: c_int) -> &'static str {
    match t {
        ffi::LUA_TNIL => "nil",
        ffi::LUA_TBOOLEAN => "boolean",
        ffi::LUA_TLIGHTUSERDATA | ffi::LUA_TUSERDATA => "userdata",
        ffi::LUA_TNUMBER => "number",
        ffi::LUA_TSTRING => "string",
        ffi::LUA_TTABLE => "table",
        ffi::LUA_TFUNCTION => "function",
        ffi::LUA_TTHREAD => "thread",
        _ => "no value",
    }
}

/// C's `%.{p}g`, with glibc's spellings of the non-finite values.
pub fn fmt_number(n: f64, precision: usize) -> String {
    if n.is_nan() {
        return if n.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if n.is_infinite() {
        return if n > 0.0 { "inf" } else { "-inf" }.into();
    }
    crate::util::fmt_g(n, precision)
}

fn escape_into(buf: &mut Vec<u8>, s: &[u8]) {
    buf.push(b'"');
    for &c in s {
        match c {
            b'"' => buf.extend_from_slice(b"\\\""),
            b'\\' => buf.extend_from_slice(b"\\\\"),
            b'/' => buf.extend_from_slice(b"\\/"),
            8 => buf.extend_from_slice(b"\\b"),
            9 => buf.extend_from_slice(b"\\t"),
            10 => buf.extend_from_slice(b"\\n"),
            12 => buf.extend_from_slice(b"\\f"),
            13 => buf.extend_from_slice(b"\\r"),
            0..=31 | 127 => buf.extend_from_slice(format!("\\u{:04x}", c).as_bytes()),
            _ => buf.push(c),
        }
    }
    buf.push(b'"');
}

struct Encoder {
    cfg: Config,
    buf: Vec<u8>,
    depth: i64,
}

impl Encoder {
    fn number(&mut self, n: f64) -> Result<(), String> {
        if n.is_nan() || n.is_infinite() {
            match self.cfg.encode_invalid_numbers {
                0 => return Err("Cannot serialise number: must not be NaN or Inf".into()),
                2 => {
                    self.buf.extend_from_slice(b"null");
                    return Ok(());
                }
                _ => {}
            }
        }
        self.buf
            .extend_from_slice(fmt_number(n, self.cfg.precision as usize).as_bytes());
        Ok(())
    }

    /// Array length of the table on top, or None for an object.
    unsafe fn array_length(&self, l: *mut lua_State) -> Result<Option<i64>, String> {
        let mut max = 0i64;
        let mut items = 0i64;
        ffi::lua_pushnil(l);
        while ffi::lua_next(l, -2) != 0 {
            if ffi::lua_type(l, -2) == ffi::LUA_TNUMBER {
                let k = ffi::lua_tonumber(l, -2);
                if k.floor() == k && k >= 1.0 {
                    if k as i64 > max {
                        max = k as i64;
                    }
                    items += 1;
                    ffi::lua_pop(l, 1);
                    continue;
                }
            }
            ffi::lua_pop(l, 2);
            return Ok(None);
        }
        if self.cfg.sparse_ratio > 0
            && max > items * self.cfg.sparse_ratio
            && max > self.cfg.sparse_safe
        {
            if !self.cfg.sparse_convert {
                return Err("Cannot serialise table: excessively sparse array".into());
            }
            return Ok(None);
        }
        Ok(Some(max))
    }

    fn descend(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > self.cfg.encode_max_depth {
            return Err(format!(
                "Cannot serialise, excessive nesting ({})",
                self.depth
            ));
        }
        Ok(())
    }

    /// Appends the value on top of the stack (left there).
    unsafe fn value(&mut self, l: *mut lua_State) -> Result<(), String> {
        // Nesting is bounded by the Lua stack (thousands of levels): grow
        // the thread's stack rather than overflow it. No Lua error is
        // raised in here, so nothing jumps across the switched stack.
        stacker::maybe_grow(64 * 1024, 1024 * 1024, || self.value_inner(l))
    }

    unsafe fn value_inner(&mut self, l: *mut lua_State) -> Result<(), String> {
        match ffi::lua_type(l, -1) {
            ffi::LUA_TSTRING => escape_into(&mut self.buf, to_bytes(l, -1).unwrap_or(b"")),
            ffi::LUA_TNUMBER => self.number(ffi::lua_tonumber(l, -1))?,
            ffi::LUA_TBOOLEAN => {
                let s: &[u8] = if ffi::lua_toboolean(l, -1) != 0 {
                    b"true"
                } else {
                    b"false"
                };
                self.buf.extend_from_slice(s);
            }
            ffi::LUA_TTABLE => {
                if ffi::lua_checkstack(l, 3) == 0 {
                    return Err(format!(
                        "Cannot serialise, excessive nesting ({})",
                        self.depth + 1
                    ));
                }
                match self.array_length(l)? {
                    Some(n) if n > 0 => {
                        self.descend()?;
                        self.buf.push(b'[');
                        for i in 1..=n {
                            if i > 1 {
                                self.buf.push(b',');
                            }
                            ffi::lua_rawgeti_(l, -1, i as c_int);
                            let r = self.value(l);
                            ffi::lua_pop(l, 1);
                            r?;
                        }
                        self.buf.push(b']');
                        self.depth -= 1;
                    }
                    _ => {
                        self.descend()?;
                        self.buf.push(b'{');
                        let mut first = true;
                        ffi::lua_pushnil(l);
                        while ffi::lua_next(l, -2) != 0 {
                            if !first {
                                self.buf.push(b',');
                            }
                            first = false;
                            match ffi::lua_type(l, -2) {
                                ffi::LUA_TNUMBER => {
                                    self.buf.push(b'"');
                                    self.number(ffi::lua_tonumber(l, -2))?;
                                    self.buf.extend_from_slice(b"\":");
                                }
                                ffi::LUA_TSTRING => {
                                    escape_into(&mut self.buf, to_bytes(l, -2).unwrap_or(b""));
                                    self.buf.push(b':');
                                }
                                t => {
                                    return Err(format!(
                                        "Cannot serialise {}: table key must be a number or string",
                                        type_name(t)
                                    ))
                                }
                            }
                            self.value(l)?;
                            ffi::lua_pop(l, 1);
                        }
                        self.buf.push(b'}');
                        self.depth -= 1;
                    }
                }
            }
            ffi::LUA_TNIL => self.buf.extend_from_slice(b"null"),
            ffi::LUA_TLIGHTUSERDATA if ffi::lua_touserdata(l, -1).is_null() => {
                self.buf.extend_from_slice(b"null")
            }
            t => {
                return Err(format!(
                    "Cannot serialise {}: type not supported",
                    type_name(t)
                ))
            }
        }
        Ok(())
    }
}

unsafe fn encode_value(l: *mut lua_State) -> Result<Vec<u8>, String> {
    let mut e = Encoder {
        cfg: *config(l),
        buf: Vec::new(),
        depth: 0,
    };
    e.value(l)?;
    Ok(e.buf)
}

unsafe extern "C-unwind" fn encode(l: *mut lua_State) -> c_int {
    if ffi::lua_gettop(l) != 1 {
        ffi::luaL_argerror(l, 1, c"expected 1 argument".as_ptr());
    }
    match encode_value(l) {
        Ok(buf) => {
            push_bytes(l, &buf);
            drop(buf);
            1
        }
        Err(e) => {
            // The walk may have filled the stack: room for the message.
            ffi::lua_settop(l, 1);
            raise(l, e)
        }
    }
}

// ---------------------------------------------------------------------------
// Decoding.

enum Json {
    Str(Vec<u8>),
    Num(f64),
    Bool(bool),
    Null,
    Arr(Vec<Json>),
    Obj(Vec<(Vec<u8>, Json)>),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tok {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    Str,
    Num,
    Bool,
    Null,
    Colon,
    Comma,
    End,
    Error(&'static str),
}

impl Tok {
    fn name(self) -> &'static str {
        match self {
            Tok::ObjBegin => "T_OBJ_BEGIN",
            Tok::ObjEnd => "T_OBJ_END",
            Tok::ArrBegin => "T_ARR_BEGIN",
            Tok::ArrEnd => "T_ARR_END",
            Tok::Str => "T_STRING",
            Tok::Num => "T_NUMBER",
            Tok::Bool => "T_BOOLEAN",
            Tok::Null => "T_NULL",
            Tok::Colon => "T_COLON",
            Tok::Comma => "T_COMMA",
            Tok::End => "T_END",
            Tok::Error(s) => s,
        }
    }
}

struct Parser<'a> {
    /// The text with a NUL after it (lua-cjson reads C strings).
    data: &'a [u8],
    pos: usize,
    depth: i64,
    /// Lua stack slots lua-cjson would hold at this point (its limit is
    /// Lua's 8000 per C call, the JSON text being one).
    slots: usize,
    cfg: Config,
    /// The value of the last string / number / boolean token.
    s: Vec<u8>,
    n: f64,
    b: bool,
}

fn hex4(d: &[u8]) -> Option<u32> {
    let mut v = 0;
    for i in 0..4 {
        let c = *d.get(i)?;
        v = (v << 4) | (c as char).to_digit(16)?;
    }
    Some(v)
}

fn utf8(cp: u32, out: &mut Vec<u8>) -> bool {
    if cp <= 0x7f {
        out.push(cp as u8);
    } else if cp <= 0x7ff {
        out.extend_from_slice(&[(cp >> 6) as u8 | 0xc0, (cp & 0x3f) as u8 | 0x80]);
    } else if cp <= 0xffff {
        out.extend_from_slice(&[
            (cp >> 12) as u8 | 0xe0,
            ((cp >> 6) & 0x3f) as u8 | 0x80,
            (cp & 0x3f) as u8 | 0x80,
        ]);
    } else if cp <= 0x1fffff {
        out.extend_from_slice(&[
            (cp >> 18) as u8 | 0xf0,
            ((cp >> 12) & 0x3f) as u8 | 0x80,
            ((cp >> 6) & 0x3f) as u8 | 0x80,
            (cp & 0x3f) as u8 | 0x80,
        ]);
    } else {
        return false;
    }
    true
}

impl Parser<'_> {
    fn at(&self, i: usize) -> u8 {
        self.data.get(i).copied().unwrap_or(0)
    }

    fn invalid_number_here(&self) -> bool {
        let mut i = self.pos;
        if self.at(i) == b'+' {
            return true;
        }
        if self.at(i) == b'-' {
            i += 1;
        }
        if self.at(i) == b'0' {
            let c2 = self.at(i + 1);
            return (c2 | 0x20) == b'x' || c2.is_ascii_digit();
        } else if self.at(i) <= b'9' {
            return false;
        }
        let rest = &self.data[i.min(self.data.len())..];
        let pre = |p: &[u8]| rest.len() >= 3 && rest[..3].eq_ignore_ascii_case(p);
        pre(b"inf") || pre(b"nan")
    }

    fn number(&mut self) -> Tok {
        let (v, n, _) = crate::util::strtod(&self.data[self.pos..self.data.len() - 1]);
        if n == 0 {
            return Tok::Error("invalid number");
        }
        self.n = v;
        self.pos += n;
        Tok::Num
    }

    fn string(&mut self) -> Tok {
        self.pos += 1;
        self.s.clear();
        loop {
            let c = self.at(self.pos);
            if c == b'"' {
                break;
            }
            if c == 0 {
                return Tok::Error("unexpected end of string");
            }
            if c == b'\\' {
                let e = self.at(self.pos + 1);
                let ch = match e {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'/' => b'/',
                    b'b' => 8,
                    b't' => 9,
                    b'n' => 10,
                    b'f' => 12,
                    b'r' => 13,
                    b'u' => {
                        if self.unicode_escape() {
                            continue;
                        }
                        return Tok::Error("invalid unicode escape code");
                    }
                    _ => return Tok::Error("invalid escape code"),
                };
                self.s.push(ch);
                self.pos += 2;
                continue;
            }
            self.s.push(c);
            self.pos += 1;
        }
        self.pos += 1;
        Tok::Str
    }

    fn unicode_escape(&mut self) -> bool {
        let Some(mut cp) = hex4(&self.data[self.pos + 2..]) else {
            return false;
        };
        let mut len = 6;
        if cp & 0xf800 == 0xd800 {
            if cp & 0x400 != 0 {
                return false;
            }
            if self.at(self.pos + 6) != b'\\' || self.at(self.pos + 7) != b'u' {
                return false;
            }
            let Some(low) = hex4(&self.data[self.pos + 8..]) else {
                return false;
            };
            if low & 0xfc00 != 0xdc00 {
                return false;
            }
            cp = (((cp & 0x3ff) << 10) | (low & 0x3ff)) + 0x10000;
            len = 12;
        }
        if !utf8(cp, &mut self.s) {
            return false;
        }
        self.pos += len;
        true
    }

    /// The next token and the index where it starts.
    fn next(&mut self) -> (Tok, usize) {
        while matches!(self.at(self.pos), b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
        let start = self.pos;
        let c = self.at(self.pos);
        if c == 0 {
            return (Tok::End, start);
        }
        let single = match c {
            b'{' => Some(Tok::ObjBegin),
            b'}' => Some(Tok::ObjEnd),
            b'[' => Some(Tok::ArrBegin),
            b']' => Some(Tok::ArrEnd),
            b',' => Some(Tok::Comma),
            b':' => Some(Tok::Colon),
            _ => None,
        };
        if let Some(t) = single {
            self.pos += 1;
            return (t, start);
        }
        let rest = &self.data[self.pos..];
        let t = if c == b'"' {
            self.string()
        } else if c == b'-' || c.is_ascii_digit() {
            if !self.cfg.decode_invalid_numbers && self.invalid_number_here() {
                Tok::Error("invalid number")
            } else {
                self.number()
            }
        } else if rest.starts_with(b"true") {
            self.pos += 4;
            self.b = true;
            Tok::Bool
        } else if rest.starts_with(b"false") {
            self.pos += 5;
            self.b = false;
            Tok::Bool
        } else if rest.starts_with(b"null") {
            self.pos += 4;
            Tok::Null
        } else if matches!(c, b'i' | b'I' | b'n' | b'N' | b'+')
            && self.cfg.decode_invalid_numbers
            && self.invalid_number_here()
        {
            self.number()
        } else {
            Tok::Error("invalid token")
        };
        // An error token is reported where the scan stopped.
        let at = if matches!(t, Tok::Error(_)) {
            self.pos
        } else {
            start
        };
        (t, at)
    }

    fn expected(&self, what: &str, tok: (Tok, usize)) -> String {
        format!(
            "Expected {what} but found {} at character {}",
            tok.0.name(),
            tok.1 + 1
        )
    }

    /// Entering an array (`slots` 2, one kept) or object (3, two kept).
    fn descend(&mut self, slots: usize) -> Result<(), String> {
        self.depth += 1;
        if self.depth > self.cfg.decode_max_depth || 1 + self.slots + slots > 8000 {
            return Err(format!(
                "Found too many nested data structures ({}) at character {}",
                self.depth, self.pos
            ));
        }
        Ok(())
    }

    fn value(&mut self, tok: (Tok, usize)) -> Result<Json, String> {
        stacker::maybe_grow(64 * 1024, 1024 * 1024, || self.value_inner(tok))
    }

    fn value_inner(&mut self, tok: (Tok, usize)) -> Result<Json, String> {
        Ok(match tok.0 {
            Tok::Str => Json::Str(std::mem::take(&mut self.s)),
            Tok::Num => Json::Num(self.n),
            Tok::Bool => Json::Bool(self.b),
            Tok::Null => Json::Null,
            Tok::ObjBegin => {
                self.descend(3)?;
                self.slots += 2;
                let mut items = Vec::new();
                let mut t = self.next();
                if t.0 != Tok::ObjEnd {
                    loop {
                        if t.0 != Tok::Str {
                            return Err(self.expected("object key string", t));
                        }
                        let key = std::mem::take(&mut self.s);
                        t = self.next();
                        if t.0 != Tok::Colon {
                            return Err(self.expected("colon", t));
                        }
                        t = self.next();
                        let v = self.value(t)?;
                        items.push((key, v));
                        t = self.next();
                        if t.0 == Tok::ObjEnd {
                            break;
                        }
                        if t.0 != Tok::Comma {
                            return Err(self.expected("comma or object end", t));
                        }
                        t = self.next();
                    }
                }
                self.depth -= 1;
                self.slots -= 2;
                Json::Obj(items)
            }
            Tok::ArrBegin => {
                self.descend(2)?;
                self.slots += 1;
                let mut items = Vec::new();
                let mut t = self.next();
                if t.0 != Tok::ArrEnd {
                    loop {
                        items.push(self.value(t)?);
                        t = self.next();
                        if t.0 == Tok::ArrEnd {
                            break;
                        }
                        if t.0 != Tok::Comma {
                            return Err(self.expected("comma or array end", t));
                        }
                        t = self.next();
                    }
                }
                self.depth -= 1;
                self.slots -= 1;
                Json::Arr(items)
            }
            _ => return Err(self.expected("value", tok)),
        })
    }
}

fn decode_text(text: &[u8], cfg: Config) -> Result<Json, String> {
    if text.len() >= 2 && (text[0] == 0 || text[1] == 0) {
        return Err("JSON parser does not support UTF-16 or UTF-32".into());
    }
    // lua-cjson reads a C string: a NUL ends the text.
    let mut data = crate::util::c_str(text).to_vec();
    data.push(0);
    let mut p = Parser {
        data: &data,
        pos: 0,
        depth: 0,
        slots: 0,
        cfg,
        s: Vec::new(),
        n: 0.0,
        b: false,
    };
    let t = p.next();
    let v = p.value(t)?;
    let t = p.next();
    if t.0 != Tok::End {
        return Err(p.expected("the end", t));
    }
    Ok(v)
}

unsafe fn push_json(l: *mut lua_State, v: &Json) {
    stacker::maybe_grow(64 * 1024, 1024 * 1024, || push_json_inner(l, v))
}

unsafe fn push_json_inner(l: *mut lua_State, v: &Json) {
    // The parser kept within lua-cjson's stack use: this cannot fail.
    ffi::lua_checkstack(l, 3);
    match v {
        Json::Str(s) => push_bytes(l, s),
        Json::Num(n) => ffi::lua_pushnumber(l, *n),
        Json::Bool(b) => ffi::lua_pushboolean(l, *b as c_int),
        Json::Null => ffi::lua_pushlightuserdata(l, std::ptr::null_mut()),
        Json::Arr(items) => {
            ffi::lua_newtable(l);
            for (i, it) in items.iter().enumerate() {
                push_json(l, it);
                ffi::lua_rawseti_(l, -2, i as c_int + 1);
            }
        }
        Json::Obj(items) => {
            ffi::lua_newtable(l);
            for (k, it) in items {
                push_bytes(l, k);
                push_json(l, it);
                ffi::lua_rawset(l, -3);
            }
        }
    }
}

unsafe extern "C-unwind" fn decode(l: *mut lua_State) -> c_int {
    if ffi::lua_gettop(l) != 1 {
        ffi::luaL_argerror(l, 1, c"expected 1 argument".as_ptr());
    }
    let mut len = 0usize;
    let p = ffi::luaL_checklstring(l, 1, &mut len);
    let text = std::slice::from_raw_parts(p as *const u8, len);
    match decode_text(text, *config(l)) {
        Ok(v) => {
            push_json(l, &v);
            drop(v);
            1
        }
        Err(e) => raise(l, e),
    }
}

// ---------------------------------------------------------------------------
// Configuration functions.

unsafe fn max_args(l: *mut lua_State, n: c_int) {
    if ffi::lua_gettop(l) > n {
        ffi::luaL_argerror(l, n + 1, c"found too many arguments".as_ptr());
    }
}

unsafe fn int_arg(l: *mut lua_State, i: c_int, lo: i64, hi: i64, msg: &CStr) -> i64 {
    let v = ffi::luaL_checkinteger(l, i) as i64;
    if v < lo || v > hi {
        ffi::luaL_argerror(l, i, msg.as_ptr());
    }
    v
}

unsafe extern "C-unwind" fn encode_sparse_array(l: *mut lua_State) -> c_int {
    max_args(l, 3);
    let cfg = config(l);
    let top = ffi::lua_gettop(l);
    if top >= 1 && ffi::lua_isnoneornil(l, 1) == 0 {
        if ffi::lua_isboolean(l, 1) == 0 {
            ffi::luaL_argerror(l, 1, c"invalid value".as_ptr());
        }
        cfg.sparse_convert = ffi::lua_toboolean(l, 1) != 0;
    }
    if top >= 2 && ffi::lua_isnoneornil(l, 2) == 0 {
        cfg.sparse_ratio = int_arg(
            l,
            2,
            0,
            i32::MAX as i64,
            c"expected integer between 0 and 2147483647",
        );
    }
    if top >= 3 && ffi::lua_isnoneornil(l, 3) == 0 {
        cfg.sparse_safe = int_arg(
            l,
            3,
            0,
            i32::MAX as i64,
            c"expected integer between 0 and 2147483647",
        );
    }
    ffi::lua_pushboolean(l, cfg.sparse_convert as c_int);
    ffi::lua_pushinteger(l, cfg.sparse_ratio as ffi::lua_Integer);
    ffi::lua_pushinteger(l, cfg.sparse_safe as ffi::lua_Integer);
    3
}

unsafe fn depth_fn(l: *mut lua_State, encode: bool) -> c_int {
    max_args(l, 1);
    let cfg = config(l);
    let field = if encode {
        &mut cfg.encode_max_depth
    } else {
        &mut cfg.decode_max_depth
    };
    if ffi::lua_gettop(l) >= 1 && ffi::lua_isnoneornil(l, 1) == 0 {
        *field = int_arg(
            l,
            1,
            1,
            i32::MAX as i64,
            c"expected integer between 1 and 2147483647",
        );
    }
    ffi::lua_pushinteger(l, *field as ffi::lua_Integer);
    1
}

unsafe extern "C-unwind" fn encode_max_depth(l: *mut lua_State) -> c_int {
    depth_fn(l, true)
}

unsafe extern "C-unwind" fn decode_max_depth(l: *mut lua_State) -> c_int {
    depth_fn(l, false)
}

unsafe extern "C-unwind" fn encode_number_precision(l: *mut lua_State) -> c_int {
    max_args(l, 1);
    let cfg = config(l);
    if ffi::lua_gettop(l) >= 1 && ffi::lua_isnoneornil(l, 1) == 0 {
        cfg.precision = int_arg(l, 1, 1, 14, c"expected integer between 1 and 14");
    }
    ffi::lua_pushinteger(l, cfg.precision as ffi::lua_Integer);
    1
}

unsafe fn bool_option(l: *mut lua_State, value: &mut bool) {
    if ffi::lua_gettop(l) >= 1 && ffi::lua_isnoneornil(l, 1) == 0 {
        if ffi::lua_isboolean(l, 1) != 0 {
            *value = ffi::lua_toboolean(l, 1) != 0;
        } else {
            let opts = [c"off".as_ptr(), c"on".as_ptr(), std::ptr::null()];
            *value = ffi::luaL_checkoption(l, 1, std::ptr::null(), opts.as_ptr()) == 1;
        }
    }
    ffi::lua_pushboolean(l, *value as c_int);
}

unsafe extern "C-unwind" fn encode_keep_buffer(l: *mut lua_State) -> c_int {
    max_args(l, 1);
    bool_option(l, &mut config(l).keep_buffer);
    1
}

unsafe extern "C-unwind" fn decode_invalid_numbers(l: *mut lua_State) -> c_int {
    max_args(l, 1);
    bool_option(l, &mut config(l).decode_invalid_numbers);
    1
}

unsafe extern "C-unwind" fn encode_invalid_numbers(l: *mut lua_State) -> c_int {
    max_args(l, 1);
    let cfg = config(l);
    if ffi::lua_gettop(l) >= 1 && ffi::lua_isnoneornil(l, 1) == 0 {
        if ffi::lua_isboolean(l, 1) != 0 {
            cfg.encode_invalid_numbers = ffi::lua_toboolean(l, 1) as i64;
        } else {
            let opts = [
                c"off".as_ptr(),
                c"on".as_ptr(),
                c"null".as_ptr(),
                std::ptr::null(),
            ];
            cfg.encode_invalid_numbers =
                ffi::luaL_checkoption(l, 1, std::ptr::null(), opts.as_ptr()) as i64;
        }
    }
    match cfg.encode_invalid_numbers {
        0 => ffi::lua_pushboolean(l, 0),
        1 => ffi::lua_pushboolean(l, 1),
        _ => {
            ffi::lua_pushstring_(l, c"null".as_ptr());
        }
    }
    1
}

/// `cjson.new()`: lua-cjson returns a module with its own settings;
/// here the module itself is returned (one settings block per server).
unsafe extern "C-unwind" fn new(l: *mut lua_State) -> c_int {
    ffi::lua_getfield_(l, ffi::LUA_GLOBALSINDEX, c"cjson".as_ptr());
    1
}

/// Registers the global `cjson` table.
pub unsafe fn open(l: *mut lua_State) {
    let p = ffi::lua_newuserdata(l, std::mem::size_of::<Config>()) as *mut Config;
    p.write(DEFAULT);
    ffi::lua_setfield(l, ffi::LUA_REGISTRYINDEX, CONFIG_KEY.as_ptr());
    let funcs: [(&CStr, ffi::lua_CFunction); 10] = [
        (c"encode", encode),
        (c"decode", decode),
        (c"encode_sparse_array", encode_sparse_array),
        (c"encode_max_depth", encode_max_depth),
        (c"decode_max_depth", decode_max_depth),
        (c"encode_number_precision", encode_number_precision),
        (c"encode_keep_buffer", encode_keep_buffer),
        (c"encode_invalid_numbers", encode_invalid_numbers),
        (c"decode_invalid_numbers", decode_invalid_numbers),
        (c"new", new),
    ];
    super::new_lib(l, &funcs);
    ffi::lua_pushlightuserdata(l, std::ptr::null_mut());
    ffi::lua_setfield(l, -2, c"null".as_ptr());
    ffi::lua_pushstring_(l, c"cjson".as_ptr());
    ffi::lua_setfield(l, -2, c"_NAME".as_ptr());
    ffi::lua_pushstring_(l, c"2.1.0".as_ptr());
    ffi::lua_setfield(l, -2, c"_VERSION".as_ptr());
    ffi::lua_setfield(l, ffi::LUA_GLOBALSINDEX, c"cjson".as_ptr());
}

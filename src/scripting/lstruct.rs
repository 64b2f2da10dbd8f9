//! The `struct` library as Redis bundles it (Roberto Ierusalimschy's
//! struct 0.2): `pack`, `unpack`, `size` with the format letters
//! `> < ! x b B h H l L T i[n] I[n] c[n] s f d` and spaces.
//!
//! Formats are parsed with the C layout of x86-64 Linux (int 4, long 8,
//! size_t 8, max alignment 8), as Redis's build has it.
//!
//! A Lua library only: must not touch the store, commands or the `redis.*`
//! API; it knows the Lua C API and `super`'s stack helpers.

use std::ffi::{c_char, c_int};

use mlua::ffi;
use mlua::ffi::lua_State;

use super::raise;

const MAXINTSIZE: usize = 32;
const MAXALIGN: usize = 8;

#[derive(Clone, Copy, PartialEq)]
enum Endian {
    Big,
    Little,
}

struct Header {
    endian: Endian,
    align: usize,
}

impl Default for Header {
    fn default() -> Self {
        Header {
            endian: Endian::Little,
            align: 1,
        }
    }
}

/// A format error, raised by the caller once nothing owned is alive.
enum FmtErr {
    /// luaL_error text.
    Error(String),
    /// luaL_argerror on argument 1 with this message.
    Arg1(String),
}

struct Fmt<'a> {
    f: &'a [u8],
    i: usize,
}

impl Fmt<'_> {
    fn next(&mut self) -> Option<u8> {
        let c = *self.f.get(self.i)?;
        self.i += 1;
        Some(c)
    }

    fn num(&mut self, default: usize) -> Result<usize, FmtErr> {
        if !self.f.get(self.i).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut a: i64 = 0;
        while let Some(&c) = self.f.get(self.i).filter(|c| c.is_ascii_digit()) {
            let d = (c - b'0') as i64;
            if a > i32::MAX as i64 / 10 || a * 10 > i32::MAX as i64 - d {
                return Err(FmtErr::Error("integral size overflow".into()));
            }
            a = a * 10 + d;
            self.i += 1;
        }
        Ok(a as usize)
    }

    fn optsize(&mut self, opt: u8) -> Result<usize, FmtErr> {
        Ok(match opt {
            b'B' | b'b' => 1,
            b'H' | b'h' => 2,
            b'L' | b'l' | b'T' | b'd' => 8,
            b'f' => 4,
            b'x' => 1,
            b'c' => self.num(1)?,
            b'i' | b'I' => {
                let sz = self.num(4)?;
                if sz > MAXINTSIZE {
                    return Err(FmtErr::Error(format!(
                        "integral size {sz} is larger than limit of {MAXINTSIZE}"
                    )));
                }
                sz
            }
            _ => 0,
        })
    }

    fn control(&mut self, opt: u8, h: &mut Header) -> Result<(), FmtErr> {
        match opt {
            b' ' => {}
            b'>' => h.endian = Endian::Big,
            b'<' => h.endian = Endian::Little,
            b'!' => {
                let a = self.num(MAXALIGN)?;
                if a == 0 || a & (a - 1) != 0 {
                    return Err(FmtErr::Error(format!("alignment {a} is not a power of 2")));
                }
                h.align = a;
            }
            _ => {
                return Err(FmtErr::Arg1(format!(
                    "invalid format option '{}'",
                    opt as char
                )))
            }
        }
        Ok(())
    }
}

fn toalign(len: usize, h: &Header, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(h.align);
    (size - (len & (size - 1))) & (size - 1)
}

unsafe fn raise_fmt(l: *mut lua_State, e: FmtErr) -> ! {
    match e {
        FmtErr::Error(m) => raise(l, m),
        FmtErr::Arg1(m) => {
            super::push_bytes(l, m.as_bytes());
            drop(m);
            let msg = ffi::lua_tolstring(l, -1, std::ptr::null_mut());
            ffi::luaL_argerror(l, 1, msg);
            unreachable!()
        }
    }
}

/// One step of the pack loop: what to do with the next format letter.
enum Step {
    Int { size: usize },
    Pad,
    Float,
    Double,
    Chars { size: usize, zero: bool },
}

unsafe fn format_arg<'a>(l: *mut lua_State) -> &'a [u8] {
    let mut len = 0usize;
    let p = ffi::luaL_checklstring(l, 1, &mut len);
    std::slice::from_raw_parts(p as *const u8, len)
}

/// The next letter of a pack/unpack format: (letter, size, padding
/// before it), control letters applied to the header.
fn step(f: &mut Fmt, h: &mut Header, at: usize) -> Result<Option<(u8, usize, usize)>, FmtErr> {
    loop {
        let Some(opt) = f.next() else { return Ok(None) };
        let size = f.optsize(opt)?;
        let pad = toalign(at, h, opt, size);
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' | b'x' | b'f' | b'd'
            | b'c' | b's' => return Ok(Some((opt, size, pad))),
            _ => f.control(opt, h)?,
        }
    }
}

unsafe extern "C-unwind" fn pack(l: *mut lua_State) -> c_int {
    let fmt = format_arg(l);
    let mut f = Fmt { f: fmt, i: 0 };
    let mut h = Header::default();
    let mut arg = 2;
    // The result is built in a Lua buffer: Lua errors may jump out.
    let mut b: ffi::luaL_Buffer = std::mem::zeroed();
    ffi::lua_pushnil(l);
    ffi::luaL_buffinit(l, &mut b);
    let mut total = 0usize;
    loop {
        let (opt, mut size, pad) = match step(&mut f, &mut h, total) {
            Ok(Some(s)) => s,
            Ok(None) => break,
            Err(e) => raise_fmt(l, e),
        };
        for _ in 0..pad {
            ffi::luaL_addchar(&mut b, 0);
        }
        total += pad;
        let what = match opt {
            b'x' => Step::Pad,
            b'f' => Step::Float,
            b'd' => Step::Double,
            b'c' => Step::Chars { size, zero: false },
            b's' => Step::Chars { size, zero: true },
            _ => Step::Int { size },
        };
        match what {
            Step::Int { size } => {
                let n = ffi::luaL_checknumber(l, arg);
                arg += 1;
                let mut v: u64 = if n < 0.0 { n as i64 as u64 } else { n as u64 };
                let mut buf = [0u8; MAXINTSIZE];
                if h.endian == Endian::Little {
                    for byte in buf.iter_mut().take(size) {
                        *byte = v as u8;
                        v = v.checked_shr(8).unwrap_or(0);
                    }
                } else {
                    for i in (0..size).rev() {
                        buf[i] = v as u8;
                        v = v.checked_shr(8).unwrap_or(0);
                    }
                }
                ffi::luaL_addlstring(&mut b, buf.as_ptr() as *const c_char, size);
            }
            Step::Pad => ffi::luaL_addchar(&mut b, 0),
            Step::Float => {
                let x = ffi::luaL_checknumber(l, arg) as f32;
                arg += 1;
                let bytes = if h.endian == Endian::Little {
                    x.to_le_bytes()
                } else {
                    x.to_be_bytes()
                };
                ffi::luaL_addlstring(&mut b, bytes.as_ptr() as *const c_char, 4);
            }
            Step::Double => {
                let x = ffi::luaL_checknumber(l, arg);
                arg += 1;
                let bytes = if h.endian == Endian::Little {
                    x.to_le_bytes()
                } else {
                    x.to_be_bytes()
                };
                ffi::luaL_addlstring(&mut b, bytes.as_ptr() as *const c_char, 8);
            }
            Step::Chars { size: sz, zero } => {
                let mut len = 0usize;
                let s = ffi::luaL_checklstring(l, arg, &mut len);
                arg += 1;
                let sz = if sz == 0 { len } else { sz };
                if len < sz {
                    ffi::luaL_argerror(l, arg, c"string too short".as_ptr());
                }
                ffi::luaL_addlstring(&mut b, s, sz);
                size = sz;
                if zero {
                    ffi::luaL_addchar(&mut b, 0);
                    size += 1;
                }
            }
        }
        total += size;
    }
    ffi::luaL_pushresult(&mut b);
    1
}

fn get_integer(d: &[u8], endian: Endian, signed: bool) -> f64 {
    let size = d.len();
    let mut v: u64 = 0;
    for i in 0..size.min(8) {
        let byte = if endian == Endian::Big {
            d[size - i - 1]
        } else {
            d[i]
        };
        v |= (byte as u64) << (i * 8);
    }
    if !signed || size == 0 {
        return v as f64;
    }
    if size * 8 - 1 < 64 {
        let mask = u64::MAX << (size * 8 - 1);
        if v & mask != 0 {
            v |= mask;
        }
    }
    v as i64 as f64
}

unsafe extern "C-unwind" fn unpack(l: *mut lua_State) -> c_int {
    let fmt = format_arg(l);
    let mut ld = 0usize;
    let data = ffi::luaL_checklstring(l, 2, &mut ld) as *const u8;
    let data = std::slice::from_raw_parts(data, ld);
    let pos0 = ffi::luaL_optinteger(l, 3, 1) as i64;
    if pos0 < 1 {
        ffi::luaL_argerror(l, 3, c"offset must be 1 or greater".as_ptr());
    }
    let mut pos = (pos0 - 1) as usize;
    ffi::lua_settop(l, 2);
    let mut n = 0;
    let mut f = Fmt { f: fmt, i: 0 };
    let mut h = Header::default();
    loop {
        let (opt, mut size, pad) = match step(&mut f, &mut h, pos) {
            Ok(Some(s)) => s,
            Ok(None) => break,
            Err(e) => raise_fmt(l, e),
        };
        pos += pad;
        if size > ld || pos > ld - size {
            ffi::luaL_argerror(l, 2, c"data string too short".as_ptr());
        }
        ffi::luaL_checkstack_(l, 2, c"too many results".as_ptr());
        match opt {
            b'x' => {}
            b'f' => {
                let mut a = [0u8; 4];
                a.copy_from_slice(&data[pos..pos + 4]);
                let x = if h.endian == Endian::Little {
                    f32::from_le_bytes(a)
                } else {
                    f32::from_be_bytes(a)
                };
                ffi::lua_pushnumber(l, x as f64);
                n += 1;
            }
            b'd' => {
                let mut a = [0u8; 8];
                a.copy_from_slice(&data[pos..pos + 8]);
                let x = if h.endian == Endian::Little {
                    f64::from_le_bytes(a)
                } else {
                    f64::from_be_bytes(a)
                };
                ffi::lua_pushnumber(l, x);
                n += 1;
            }
            b'c' => {
                if size == 0 {
                    if n == 0 || ffi::lua_isnumber(l, -1) == 0 {
                        raise(l, "format 'c0' needs a previous size".into());
                    }
                    size = ffi::lua_tonumber(l, -1) as usize;
                    ffi::lua_pop(l, 1);
                    n -= 1;
                    if size > ld || pos > ld - size {
                        ffi::luaL_argerror(l, 2, c"data string too short".as_ptr());
                    }
                }
                ffi::lua_pushlstring_(l, data[pos..].as_ptr() as *const c_char, size);
                n += 1;
            }
            b's' => {
                let Some(e) = memchr::memchr(0, &data[pos..]) else {
                    raise(l, "unfinished string in data".into())
                };
                size = e + 1;
                ffi::lua_pushlstring_(l, data[pos..].as_ptr() as *const c_char, e);
                n += 1;
            }
            _ => {
                let signed = opt.is_ascii_lowercase();
                ffi::lua_pushnumber(l, get_integer(&data[pos..pos + size], h.endian, signed));
                n += 1;
            }
        }
        pos += size;
    }
    ffi::lua_pushinteger(l, (pos + 1) as ffi::lua_Integer);
    n + 1
}

unsafe extern "C-unwind" fn size(l: *mut lua_State) -> c_int {
    let fmt = format_arg(l);
    let mut f = Fmt { f: fmt, i: 0 };
    let mut h = Header::default();
    let mut pos = 0usize;
    while let Some(opt) = f.next() {
        let size = match f.optsize(opt) {
            Ok(s) => s,
            Err(e) => raise_fmt(l, e),
        };
        pos += toalign(pos, &h, opt, size);
        if opt == b's' {
            ffi::luaL_argerror(l, 1, c"option 's' has no fixed size".as_ptr());
        } else if opt == b'c' && size == 0 {
            ffi::luaL_argerror(l, 1, c"option 'c0' has no fixed size".as_ptr());
        }
        if !opt.is_ascii_alphanumeric() {
            if let Err(e) = f.control(opt, &mut h) {
                raise_fmt(l, e);
            }
        }
        pos += size;
    }
    ffi::lua_pushinteger(l, pos as ffi::lua_Integer);
    1
}

/// Registers the global `struct` table.
pub unsafe fn open(l: *mut lua_State) {
    super::new_lib(
        l,
        &[
            (c"pack", pack as ffi::lua_CFunction),
            (c"unpack", unpack),
            (c"size", size),
        ],
    );
    ffi::lua_setfield(l, ffi::LUA_GLOBALSINDEX, c"struct".as_ptr());
}

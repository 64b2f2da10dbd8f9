//! The `bit` library (LuaBitOp 1.0 as bundled with Redis): 32-bit
//! operations on Lua numbers.
//!
//! A Lua library only: must not touch the store, commands or the `redis.*`
//! API; it knows the Lua C API and `super::new_lib`.

use std::ffi::{c_char, c_int};

use mlua::ffi;
use mlua::ffi::lua_State;

/// LuaBitOp's argument conversion: round to an integer (the 2^52+2^51
/// trick) and keep the low 32 bits.
unsafe fn barg(l: *mut lua_State, idx: c_int) -> u32 {
    let n = ffi::luaL_checknumber(l, idx) + 6_755_399_441_055_744.0;
    n.to_bits() as u32
}

unsafe fn bret(l: *mut lua_State, b: u32) -> c_int {
    ffi::lua_pushnumber(l, b as i32 as f64);
    1
}

unsafe extern "C-unwind" fn tobit(l: *mut lua_State) -> c_int {
    bret(l, barg(l, 1))
}

unsafe extern "C-unwind" fn bnot(l: *mut lua_State) -> c_int {
    bret(l, !barg(l, 1))
}

unsafe fn fold(l: *mut lua_State, f: fn(u32, u32) -> u32) -> c_int {
    let mut b = barg(l, 1);
    for i in 2..=ffi::lua_gettop(l) {
        b = f(b, barg(l, i));
    }
    bret(l, b)
}

unsafe extern "C-unwind" fn band(l: *mut lua_State) -> c_int {
    fold(l, |a, b| a & b)
}

unsafe extern "C-unwind" fn bor(l: *mut lua_State) -> c_int {
    fold(l, |a, b| a | b)
}

unsafe extern "C-unwind" fn bxor(l: *mut lua_State) -> c_int {
    fold(l, |a, b| a ^ b)
}

unsafe fn shift(l: *mut lua_State, f: fn(u32, u32) -> u32) -> c_int {
    let b = barg(l, 1);
    let n = barg(l, 2) & 31;
    bret(l, f(b, n))
}

unsafe extern "C-unwind" fn lshift(l: *mut lua_State) -> c_int {
    shift(l, |b, n| b << n)
}

unsafe extern "C-unwind" fn rshift(l: *mut lua_State) -> c_int {
    shift(l, |b, n| b >> n)
}

unsafe extern "C-unwind" fn arshift(l: *mut lua_State) -> c_int {
    shift(l, |b, n| ((b as i32) >> n) as u32)
}

unsafe extern "C-unwind" fn rol(l: *mut lua_State) -> c_int {
    shift(l, |b, n| b.rotate_left(n))
}

unsafe extern "C-unwind" fn ror(l: *mut lua_State) -> c_int {
    shift(l, |b, n| b.rotate_right(n))
}

unsafe extern "C-unwind" fn bswap(l: *mut lua_State) -> c_int {
    bret(l, barg(l, 1).swap_bytes())
}

unsafe extern "C-unwind" fn tohex(l: *mut lua_State) -> c_int {
    let mut b = barg(l, 1);
    let mut n: i32 = if ffi::lua_isnoneornil(l, 2) != 0 {
        8
    } else {
        barg(l, 2) as i32
    };
    let digits: &[u8; 16] = if n < 0 {
        n = n.wrapping_neg();
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    if n > 8 {
        n = 8;
    }
    let mut buf = [0u8; 8];
    let mut i = n;
    while i > 0 {
        i -= 1;
        buf[i as usize] = digits[(b & 15) as usize];
        b >>= 4;
    }
    let n = n.max(0) as usize;
    ffi::lua_pushlstring_(l, buf.as_ptr() as *const c_char, n);
    1
}

/// Registers the global `bit` table.
pub unsafe fn open(l: *mut lua_State) {
    let funcs: [(&std::ffi::CStr, ffi::lua_CFunction); 12] = [
        (c"tobit", tobit),
        (c"bnot", bnot),
        (c"band", band),
        (c"bor", bor),
        (c"bxor", bxor),
        (c"lshift", lshift),
        (c"rshift", rshift),
        (c"arshift", arshift),
        (c"rol", rol),
        (c"ror", ror),
        (c"bswap", bswap),
        (c"tohex", tohex),
    ];
    super::new_lib(l, &funcs);
    ffi::lua_setfield(l, ffi::LUA_GLOBALSINDEX, c"bit".as_ptr());
}

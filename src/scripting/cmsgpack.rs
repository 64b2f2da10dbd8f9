//! The `cmsgpack` library (to come).

use mlua::ffi::lua_State;

/// Registers the library's global table.
pub unsafe fn open(l: *mut lua_State) {
    let _ = l;
}

//! Redis 7.0 Functions (functions.c, function_lua.c): libraries of Lua
//! functions loaded with FUNCTION LOAD, run by FCALL/FCALL_RO.
//!
//! Functions live in their own Lua interpreter, built as the EVAL one
//! (same sandbox, same `redis.*` API at run time). While a library's code
//! runs at load time, the globals resolve to a small library API instead
//! (`redis.register_function`, `redis.log`, the log levels and versions):
//! Redis switches the `__index` of the globals' metatable, and so does
//! this engine, so the callbacks registered then see the full API later.
//!
//! Must not touch the store or commands: the FUNCTION commands
//! (`commands::functions`) drive it, and FCALL's redis.call goes through
//! the same `Host` as EVAL's.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_int, CStr};
use std::ptr;
use std::time::Instant;

use bytes::Bytes;
use mlua::ffi;
use mlua::ffi::lua_State;

use super::{
    nonexistent_global, protect_top, push_error, set_field_fn, to_bytes, Engine, Gate,
    REAL_GLOBALS, SHEBANG_FLAGS,
};
use crate::resp::Out;

/// Registry key of the load-time globals (Redis's `__LIBRARY_API__`).
const LIBRARY_API: &CStr = c"latchkey_library_api";
/// FUNCTION LOAD stops a library whose code runs longer than this.
const LOAD_TIMEOUT_MS: u128 = 500;

/// One registered function.
#[derive(Debug, Clone)]
pub struct Function {
    pub name: String,
    pub desc: Option<Bytes>,
    pub flags: u32,
    /// The callback, in the Lua registry.
    pub lua_ref: c_int,
}

#[derive(Debug, Clone)]
pub struct Library {
    pub name: String,
    pub code: Bytes,
    pub functions: Vec<Function>,
}

/// The libraries and their interpreter.
#[derive(Default)]
pub struct Functions {
    engine: Option<Engine>,
    libs: BTreeMap<String, Library>,
    /// Lower-cased function name -> library name (Redis compares function
    /// names case-insensitively, library names exactly).
    index: HashMap<String, String>,
    /// Bytes of library code and names, for INFO `used_memory_functions`.
    mem: usize,
}

impl std::fmt::Debug for Functions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Functions")
            .field("libs", &self.libs.len())
            .finish_non_exhaustive()
    }
}

/// What a library's load-time code registered so far.
struct LoadCtx {
    funcs: Vec<Function>,
    /// Callbacks of refused registrations, released after the load.
    dead: Vec<c_int>,
    start: Instant,
}

thread_local! {
    static LOAD: Cell<*mut LoadCtx> = const { Cell::new(ptr::null_mut()) };
}

/// Library and function names: letters, digits, underscores, not empty.
fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

const BAD_NAME: &str = "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long";

/// The `#!<engine> name=<lib>` header: (library name, code after the
/// header line, which starts at the header's newline, as Redis keeps it).
fn metadata(code: &[u8]) -> Result<(String, usize), String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    let Some(end) = memchr::memchr(b'\n', code) else {
        return Err("Invalid library metadata".into());
    };
    let Some(parts) = crate::resp::split_args(&code[2..end]) else {
        return Err("Invalid library metadata".into());
    };
    let mut name = None;
    for p in parts.iter().skip(1) {
        match p.strip_prefix(b"name=") {
            Some(n) => name = Some(n.to_vec()),
            None => {
                return Err(format!(
                    "Invalid metadata value given: {}",
                    String::from_utf8_lossy(p)
                ))
            }
        }
    }
    let Some(name) = name else {
        return Err("Library name was not given".into());
    };
    if !valid_name(&name) {
        return Err(BAD_NAME.into());
    }
    if !parts[0].eq_ignore_ascii_case(b"lua") {
        return Err(format!(
            "Engine '{}' not found",
            String::from_utf8_lossy(&parts[0])
        ));
    }
    Ok((String::from_utf8_lossy(&name).into_owned(), end))
}

impl Functions {
    fn engine(&mut self) -> &mut Engine {
        self.engine.get_or_insert_with(new_engine)
    }

    pub fn library_count(&self) -> usize {
        self.libs.len()
    }

    /// Functions of all libraries (FUNCTION STATS `functions_count`).
    pub fn function_count(&self) -> usize {
        self.libs.values().map(|l| l.functions.len()).sum()
    }

    /// Distinct callable names (INFO `number_of_functions`).
    pub fn callable_count(&self) -> usize {
        self.index.len()
    }

    pub fn libraries(&self) -> impl Iterator<Item = &Library> {
        self.libs.values()
    }

    pub fn get(&self, name: &[u8]) -> Option<&Function> {
        let key = String::from_utf8_lossy(name).to_lowercase();
        let lib = self.index.get(&key)?;
        self.libs[lib]
            .functions
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(&key))
    }

    /// INFO `used_memory_vm_functions`.
    pub fn vm_memory(&self) -> usize {
        match &self.engine {
            Some(e) => unsafe { ffi::lua_gc(e.l, ffi::LUA_GCCOUNT, 0) as usize * 1024 },
            None => 0,
        }
    }

    /// INFO `used_memory_functions`.
    pub fn memory(&self) -> usize {
        self.mem
    }

    /// Takes the interpreter out for a run; give it back with `restore`.
    pub fn take_engine(&mut self) -> Engine {
        self.engine.take().unwrap_or_else(new_engine)
    }

    pub fn restore_engine(&mut self, e: Engine) {
        self.engine = Some(e);
    }

    /// Compiles `code` and runs its registrations (nothing is installed).
    fn compile(&mut self, code: &Bytes) -> Result<Library, String> {
        let (name, start) = metadata(code)?;
        let functions = self.engine().load_library(&code[start..])?;
        Ok(Library {
            name,
            code: code.clone(),
            functions,
        })
    }

    /// FUNCTION LOAD: the library's name, or the error text (without ERR).
    pub fn load(&mut self, code: &Bytes, replace: bool, gate: &Gate) -> Result<String, String> {
        let (name, _) = metadata(code)?;
        if self.libs.contains_key(&name) && !replace {
            return Err(format!("Library '{name}' already exists"));
        }
        let lib = self.compile(code)?;
        self.install(vec![lib], replace)?;
        gate.set_counts(self.library_count(), self.function_count());
        Ok(name)
    }

    /// Adds `libs` (replacing same-named libraries when `replace`), or
    /// nothing: a library or function name collision fails the whole set.
    fn install(&mut self, libs: Vec<Library>, replace: bool) -> Result<(), String> {
        let mut err = None;
        'check: for (i, lib) in libs.iter().enumerate() {
            if !replace && self.libs.contains_key(&lib.name) {
                err = Some(format!("Library {} already exists", lib.name));
                break;
            }
            for f in &lib.functions {
                let key = f.name.to_lowercase();
                let taken_here = self.index.get(&key).is_some_and(|l| {
                    !(replace && libs.iter().any(|n| &n.name == l)) && l != &lib.name
                });
                let taken_new = libs[..i].iter().any(|o| {
                    o.functions
                        .iter()
                        .any(|g| g.name.eq_ignore_ascii_case(&key))
                });
                if taken_here || taken_new {
                    err = Some(format!("Function {} already exists", f.name));
                    break 'check;
                }
            }
        }
        if let Some(e) = err {
            for lib in &libs {
                self.free(lib);
            }
            return Err(e);
        }
        for lib in libs {
            if let Some(old) = self.remove(&lib.name) {
                self.free(&old);
            }
            for f in &lib.functions {
                // Two names differing in case: the first one is called.
                self.index
                    .entry(f.name.to_lowercase())
                    .or_insert_with(|| lib.name.clone());
            }
            self.mem += lib_mem(&lib);
            self.libs.insert(lib.name.clone(), lib);
        }
        Ok(())
    }

    fn remove(&mut self, name: &str) -> Option<Library> {
        let lib = self.libs.remove(name)?;
        for f in &lib.functions {
            let key = f.name.to_lowercase();
            if self.index.get(&key) == Some(&lib.name) {
                self.index.remove(&key);
            }
        }
        self.mem -= lib_mem(&lib);
        Some(lib)
    }

    fn free(&mut self, lib: &Library) {
        if let Some(e) = &self.engine {
            for f in &lib.functions {
                unsafe { ffi::luaL_unref(e.l, ffi::LUA_REGISTRYINDEX, f.lua_ref) };
            }
        }
    }

    /// FUNCTION DELETE: false when there is no such library.
    pub fn delete(&mut self, name: &[u8], gate: &Gate) -> bool {
        let name = String::from_utf8_lossy(name);
        let Some(lib) = self.remove(&name) else {
            return false;
        };
        self.free(&lib);
        gate.set_counts(self.library_count(), self.function_count());
        true
    }

    /// FUNCTION FLUSH: no libraries, a fresh interpreter.
    pub fn flush(&mut self, gate: &Gate) {
        *self = Functions::default();
        gate.set_counts(0, 0);
    }

    /// The libraries' code, as FUNCTION DUMP and the RDB file hold it.
    pub fn codes(&self) -> Vec<&[u8]> {
        self.libs.values().map(|l| &l.code[..]).collect()
    }

    /// FUNCTION DUMP's payload.
    pub fn dump(&self) -> Vec<u8> {
        super::dump::encode(&self.codes())
    }

    /// FUNCTION RESTORE of libraries' `codes` with `policy`.
    pub fn restore(
        &mut self,
        codes: Vec<Bytes>,
        policy: Policy,
        gate: &Gate,
    ) -> Result<(), String> {
        let mut libs: Vec<Library> = Vec::new();
        let mut fresh = Functions::default();
        let target: &mut Functions = if policy == Policy::Flush {
            &mut fresh
        } else {
            self
        };
        for code in &codes {
            let r = target.compile(code).and_then(|lib| {
                if libs.iter().any(|l| l.name == lib.name) {
                    target.free(&lib);
                    Err(format!("Library '{}' already exists", lib.name))
                } else {
                    Ok(lib)
                }
            });
            match r {
                Ok(lib) => libs.push(lib),
                Err(e) => {
                    for l in &libs {
                        target.free(l);
                    }
                    return Err(e);
                }
            }
        }
        target.install(libs, policy == Policy::Replace)?;
        if policy == Policy::Flush {
            *self = fresh;
        }
        gate.set_counts(self.library_count(), self.function_count());
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Flush,
    Append,
    Replace,
}

fn lib_mem(lib: &Library) -> usize {
    lib.code.len()
        + lib.name.len()
        + lib
            .functions
            .iter()
            .map(|f| f.name.len() + f.desc.as_ref().map_or(0, |d| d.len()) + 64)
            .sum::<usize>()
}

/// FUNCTION STATS (also answered while busy, from the gate alone).
pub fn stats_reply(out: &mut Out, gate: &Gate) {
    out.map(2);
    out.bulk(b"running_script");
    match gate.running_function() {
        None => out.null(),
        Some((name, command, ms)) => {
            out.map(3);
            out.bulk(b"name");
            out.bulk(name.as_bytes());
            out.bulk(b"command");
            out.array(command.len());
            for a in &command {
                out.bulk(a);
            }
            out.bulk(b"duration_ms");
            out.int(ms as i64);
        }
    }
    out.bulk(b"engines");
    out.map(1);
    out.bulk(b"LUA");
    out.map(2);
    let (libs, funcs) = gate.counts();
    out.bulk(b"libraries_count");
    out.int(libs as i64);
    out.bulk(b"functions_count");
    out.int(funcs as i64);
}

// ---------------------------------------------------------------------------
// The interpreter side.

fn new_engine() -> Engine {
    let e = Engine::new();
    unsafe {
        let rc = ffi::lua_cpcall(e.l, init_library_api, ptr::null_mut());
        assert_eq!(rc, 0, "Lua library API setup failed");
    }
    e
}

/// Pushes a metatable whose `__index` raises Redis's nonexistent-global error.
unsafe fn push_error_metatable(l: *mut lua_State) {
    ffi::lua_createtable(l, 0, 1);
    ffi::lua_pushcfunction(l, nonexistent_global);
    ffi::lua_setfield(l, -2, c"__index".as_ptr());
}

unsafe extern "C-unwind" fn init_library_api(l: *mut lua_State) -> c_int {
    ffi::lua_newtable(l); // the load-time globals
    ffi::lua_newtable(l); // their `redis`
    set_field_fn(l, c"register_function", register_function);
    super::set_log_and_version(l);
    push_error_metatable(l);
    ffi::lua_setmetatable(l, -2);
    protect_top(l);
    ffi::lua_setfield(l, -2, c"redis".as_ptr());
    push_error_metatable(l);
    ffi::lua_setmetatable(l, -2);
    protect_top(l);
    ffi::lua_setfield(l, ffi::LUA_REGISTRYINDEX, LIBRARY_API.as_ptr());
    0
}

/// Points the globals' lookups at the registry table `which`.
unsafe fn set_globals(l: *mut lua_State, which: &CStr) {
    ffi::lua_getmetatable(l, ffi::LUA_GLOBALSINDEX);
    ffi::lua_getfield_(l, ffi::LUA_REGISTRYINDEX, which.as_ptr());
    ffi::lua_setfield(l, -2, c"__index".as_ptr());
    ffi::lua_pop(l, 1);
}

unsafe extern "C-unwind" fn load_hook(l: *mut lua_State, _ar: *mut ffi::lua_Debug) {
    let p = LOAD.with(|c| c.get());
    if p.is_null() || (*p).start.elapsed().as_millis() <= LOAD_TIMEOUT_MS {
        return;
    }
    ffi::lua_sethook(l, Some(load_hook), ffi::LUA_MASKLINE, 0);
    push_error(l, b"FUNCTION LOAD timeout");
    ffi::lua_error(l);
}

impl Engine {
    /// Runs a library's code (after its header) so it registers its
    /// functions; Redis's luaEngineCreate and the checks around it.
    fn load_library(&mut self, code: &[u8]) -> Result<Vec<Function>, String> {
        let l = self.l;
        let mut ctx = LoadCtx {
            funcs: Vec::new(),
            dead: Vec::new(),
            start: Instant::now(),
        };
        let result = unsafe {
            set_globals(l, LIBRARY_API);
            let r = if ffi::luaL_loadbuffer(
                l,
                code.as_ptr() as *const c_char,
                code.len(),
                c"@user_function".as_ptr(),
            ) != 0
            {
                let msg = String::from_utf8_lossy(to_bytes(l, -1).unwrap_or(b"")).into_owned();
                Err(format!("Error compiling function: {msg}"))
            } else {
                let prev = LOAD.with(|c| c.replace(&mut ctx));
                ffi::lua_sethook(l, Some(load_hook), ffi::LUA_MASKCOUNT, 100_000);
                let rc = ffi::lua_pcall(l, 0, 0, 0);
                ffi::lua_sethook(l, None, 0, 0);
                LOAD.with(|c| c.set(prev));
                if rc != 0 {
                    Err(format!("Error registering functions: {}", error_text(l)))
                } else {
                    Ok(())
                }
            };
            ffi::lua_settop(l, 0);
            set_globals(l, REAL_GLOBALS);
            r
        };
        let unref = |fs: &[Function]| {
            for f in fs {
                unsafe { ffi::luaL_unref(l, ffi::LUA_REGISTRYINDEX, f.lua_ref) };
            }
        };
        for r in &ctx.dead {
            unsafe { ffi::luaL_unref(l, ffi::LUA_REGISTRYINDEX, *r) };
        }
        match result {
            Err(e) => {
                unref(&ctx.funcs);
                Err(e)
            }
            Ok(()) if ctx.funcs.is_empty() => Err("No functions registered".into()),
            Ok(()) => Ok(ctx.funcs),
        }
    }
}

/// The message of the error on top of the stack (luaExtractErrorInformation).
unsafe fn error_text(l: *mut lua_State) -> String {
    if ffi::lua_isstring(l, -1) != 0 {
        return format!(
            "ERR {}",
            String::from_utf8_lossy(to_bytes(l, -1).unwrap_or(b""))
        );
    }
    if ffi::lua_istable(l, -1) != 0 {
        ffi::lua_getfield_(l, -1, c"err".as_ptr());
        let s = if ffi::lua_isstring(l, -1) != 0 {
            String::from_utf8_lossy(to_bytes(l, -1).unwrap_or(b"")).into_owned()
        } else {
            "(null)".into()
        };
        ffi::lua_pop(l, 1);
        return s;
    }
    "(null)".into()
}

/// The string at `idx` (numbers too, as lua_isstring/lua_tostring).
unsafe fn string_at(l: *mut lua_State, idx: c_int) -> Option<Vec<u8>> {
    if ffi::lua_isstring(l, idx) == 0 {
        return None;
    }
    to_bytes(l, idx).map(|b| b.to_vec())
}

/// `redis.register_function(name, callback)` or the table form.
unsafe extern "C-unwind" fn register_function(l: *mut lua_State) -> c_int {
    let p = LOAD.with(|c| c.get());
    if p.is_null() {
        push_error(
            l,
            b"redis.register_function can only be called on FUNCTION LOAD command",
        );
        ffi::lua_error(l);
    }
    let err = match read_args(l) {
        Ok(f) => add_function(&mut *p, f),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = err {
        push_error(l, e.as_bytes());
        drop(e);
        ffi::lua_error(l);
    }
    0
}

fn add_function(ctx: &mut LoadCtx, f: Function) -> Result<(), String> {
    let err = if !valid_name(f.name.as_bytes()) {
        BAD_NAME
    } else if ctx.funcs.iter().any(|g| g.name == f.name) {
        "Function already exists in the library"
    } else {
        ctx.funcs.push(f);
        return Ok(());
    };
    ctx.dead.push(f.lua_ref);
    Err(err.into())
}

unsafe fn read_args(l: *mut lua_State) -> Result<Function, &'static str> {
    match ffi::lua_gettop(l) {
        1 => read_named(l),
        2 => {
            let Some(name) = string_at(l, 1) else {
                return Err("first argument to redis.register_function must be a string");
            };
            if ffi::lua_type(l, 2) != ffi::LUA_TFUNCTION {
                return Err("second argument to redis.register_function must be a function");
            }
            let lua_ref = ffi::luaL_ref(l, ffi::LUA_REGISTRYINDEX);
            Ok(Function {
                name: String::from_utf8_lossy(&name).into_owned(),
                desc: None,
                flags: 0,
                lua_ref,
            })
        }
        _ => Err("wrong number of arguments to redis.register_function"),
    }
}

unsafe fn read_named(l: *mut lua_State) -> Result<Function, &'static str> {
    if ffi::lua_istable(l, 1) == 0 {
        return Err("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).");
    }
    let mut name = None;
    let mut desc = None;
    let mut flags = 0;
    let mut lua_ref = None;
    let r = (|| {
        ffi::lua_pushnil(l);
        while ffi::lua_next(l, 1) != 0 {
            // A number key must not be converted in place (lua_next).
            let key = match ffi::lua_type(l, -2) {
                ffi::LUA_TSTRING => to_bytes(l, -2).unwrap_or(b"").to_ascii_lowercase(),
                ffi::LUA_TNUMBER => Vec::new(),
                _ => {
                    return Err(
                        "named argument key given to redis.register_function is not a string",
                    )
                }
            };
            match &key[..] {
                b"function_name" => match string_at(l, -1) {
                    Some(n) => name = Some(n),
                    None => return Err(
                        "function_name argument given to redis.register_function must be a string",
                    ),
                },
                b"description" => match string_at(l, -1) {
                    Some(d) => desc = Some(d),
                    None => return Err(
                        "description argument given to redis.register_function must be a string",
                    ),
                },
                b"callback" => {
                    if ffi::lua_type(l, -1) != ffi::LUA_TFUNCTION {
                        return Err(
                            "callback argument given to redis.register_function must be a function",
                        );
                    }
                    if let Some(old) = lua_ref.replace(ffi::luaL_ref(l, ffi::LUA_REGISTRYINDEX)) {
                        ffi::luaL_unref(l, ffi::LUA_REGISTRYINDEX, old);
                    }
                    continue;
                }
                b"flags" => {
                    if ffi::lua_istable(l, -1) == 0 {
                        return Err("flags argument to redis.register_function must be a table representing function flags");
                    }
                    flags = read_flags(l).ok_or("unknown flag given")?;
                }
                _ => return Err("unknown argument given to redis.register_function"),
            }
            ffi::lua_pop(l, 1);
        }
        if name.is_none() {
            return Err("redis.register_function must get a function name argument");
        }
        if lua_ref.is_none() {
            return Err("redis.register_function must get a callback argument");
        }
        Ok(())
    })();
    match (r, name, lua_ref) {
        (Ok(()), Some(name), Some(lua_ref)) => Ok(Function {
            name: String::from_utf8_lossy(&name).into_owned(),
            desc: desc.map(Bytes::from),
            flags,
            lua_ref,
        }),
        (r, _, lua_ref) => {
            if let Some(r) = lua_ref {
                ffi::luaL_unref(l, ffi::LUA_REGISTRYINDEX, r);
            }
            Err(r
                .err()
                .unwrap_or("redis.register_function must get a callback argument"))
        }
    }
}

/// The flags table on top of the stack: 1, 2, ... until nil.
unsafe fn read_flags(l: *mut lua_State) -> Option<u32> {
    let mut flags = 0;
    let mut j = 1;
    loop {
        ffi::lua_pushnumber(l, j as f64);
        j += 1;
        ffi::lua_gettable(l, -2);
        if ffi::lua_type(l, -1) == ffi::LUA_TNIL {
            ffi::lua_pop(l, 1);
            return Some(flags);
        }
        let f = string_at(l, -1);
        ffi::lua_pop(l, 1);
        let bit = f.and_then(|f| {
            SHEBANG_FLAGS
                .iter()
                .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(&f))
                .map(|(_, b)| *b)
        })?;
        flags |= bit;
    }
}

/// Flag names in Redis's order (FUNCTION LIST).
pub fn flag_names(flags: u32) -> impl Iterator<Item = &'static str> {
    SHEBANG_FLAGS
        .iter()
        .filter(move |(_, b)| flags & b != 0)
        .map(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_errors() {
        assert_eq!(
            metadata(b"return 1").unwrap_err(),
            "Missing library metadata"
        );
        assert_eq!(metadata(b"#!lua").unwrap_err(), "Invalid library metadata");
        assert_eq!(
            metadata(b"#!lua\n").unwrap_err(),
            "Library name was not given"
        );
        assert_eq!(
            metadata(b"#!lua x=1\n").unwrap_err(),
            "Invalid metadata value given: x=1"
        );
        assert_eq!(metadata(b"#!lua name=a-b\n").unwrap_err(), BAD_NAME);
        assert_eq!(
            metadata(b"#!js name=a\n").unwrap_err(),
            "Engine 'js' not found"
        );
        assert_eq!(metadata(b"#!LUA name=ab\nx").unwrap(), ("ab".into(), 13));
    }
}

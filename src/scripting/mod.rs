//! Lua scripting as Redis 7.0 has it: one Lua 5.1 interpreter (mlua's
//! vendored Lua, driven through its raw C API so errors, the sandbox and
//! the libraries behave exactly as Redis's C code makes them behave), the
//! script cache, the `redis.*` API, and the conversions between Lua values
//! and RESP.
//!
//! Why the raw C API: Redis's semantics are defined in terms of it (error
//! objects are Lua tables raised with `lua_error`, `luaL_error` positions,
//! `luaL_checkint` argument errors...). mlua's safe callbacks wrap errors
//! in userdata, which scripts would see through `pcall`.
//!
//! Rules for the `extern "C-unwind"` functions here: a Lua error unwinds
//! with `longjmp`, so no Rust value with a destructor may be alive in a
//! frame when `lua_error`/`luaL_*` may raise. They compute into owned
//! values in a separate function, drop them, then raise.
//!
//! The engine is reusable for FUNCTION/FCALL: `Engine` compiles and runs
//! chunks, `Run` is the per-invocation context the Lua callbacks work
//! through. The engine knows no command: redis.call reaches the server
//! through a [`Host`] (the dispatcher's side, `commands::script_host`),
//! which admits and runs the command. Nothing here imports `commands`.
//!
//! Safety: every `unsafe fn` of this module and its children takes a
//! `lua_State` of an `Engine`, used under the store lock by one thread.
#![allow(clippy::missing_safety_doc)]

pub mod bit;
pub mod cjson;
pub mod cmsgpack;
pub mod dump;
pub mod functions;
pub mod gate;
pub mod lstruct;
pub mod reply;

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::ptr;
use std::sync::Arc;

use bytes::Bytes;
use mlua::ffi;
use mlua::ffi::lua_State;

use crate::resp::Out;
pub use gate::Gate;

/// Script flags from a `#!lua flags=...` shebang (Redis's SCRIPT_FLAG_*).
pub const FLAG_NO_WRITES: u32 = 1;
pub const FLAG_ALLOW_OOM: u32 = 1 << 1;
pub const FLAG_ALLOW_STALE: u32 = 1 << 2;
pub const FLAG_NO_CLUSTER: u32 = 1 << 3;
pub const FLAG_ALLOW_CROSS_SLOT: u32 = 1 << 4;
/// No shebang: EVAL's historical behaviour.
pub const FLAG_EVAL_COMPAT: u32 = 1 << 5;

pub(crate) const SHEBANG_FLAGS: &[(&str, u32)] = &[
    ("no-writes", FLAG_NO_WRITES),
    ("allow-oom", FLAG_ALLOW_OOM),
    ("allow-stale", FLAG_ALLOW_STALE),
    ("no-cluster", FLAG_NO_CLUSTER),
    ("allow-cross-slot-keys", FLAG_ALLOW_CROSS_SLOT),
];

pub struct Script {
    pub body: Bytes,
    pub flags: u32,
    /// The compiled function in the registry (also named `f_<sha>` there,
    /// as in Redis): a run fetches it by this reference, without hashing
    /// the name.
    lua_ref: c_int,
}

/// Per-server scripting state, in the `Store`.
pub struct Scripting {
    engine: Option<Engine>,
    /// Shared with the connection tasks (see `gate`).
    pub gate: Arc<Gate>,
    /// redisLrand48's state: not reset between scripts (Redis 7.0).
    rand48: u64,
    /// FUNCTION libraries, in their own interpreter (SCRIPT FLUSH keeps them).
    pub functions: functions::Functions,
    /// Scripts and functions whose last run was short (see `run_placed`).
    fast: std::collections::HashSet<String, foldhash::fast::RandomState>,
}

impl Default for Scripting {
    fn default() -> Self {
        Scripting {
            engine: None,
            gate: Arc::default(),
            rand48: RAND48_INIT,
            functions: functions::Functions::default(),
            fast: Default::default(),
        }
    }
}

impl std::fmt::Debug for Scripting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripting").finish_non_exhaustive()
    }
}

impl Scripting {
    /// Takes the interpreter out for a run (created on first use); give it
    /// back with `restore`. Taken so redis.call can borrow the store.
    pub fn take(&mut self) -> Engine {
        self.engine.take().unwrap_or_default()
    }

    pub fn restore(&mut self, e: Engine) {
        self.engine = Some(e);
    }

    /// SCRIPT FLUSH: a fresh interpreter, an empty cache.
    pub fn flush(&mut self) {
        self.engine = None;
    }

    pub fn exists(&self, sha: &[u8]) -> bool {
        self.engine
            .as_ref()
            .is_some_and(|e| e.scripts.contains_key(sha))
    }

    pub fn count(&self) -> usize {
        self.engine.as_ref().map_or(0, |e| e.scripts.len())
    }

    /// INFO `used_memory_scripts`-style figure: the cached bodies.
    pub fn scripts_memory(&self) -> usize {
        self.engine.as_ref().map_or(0, |e| e.scripts_mem)
    }

    /// INFO `used_memory_lua`.
    pub fn lua_memory(&self) -> usize {
        match &self.engine {
            Some(e) => unsafe { ffi::lua_gc(e.l, ffi::LUA_GCCOUNT, 0) as usize * 1024 },
            None => 0,
        }
    }
}

/// One Lua interpreter and the scripts compiled into it.
pub struct Engine {
    pub(crate) l: *mut lua_State,
    scripts: HashMap<Vec<u8>, Script, foldhash::fast::RandomState>,
    scripts_mem: usize,
    gc_count: u32,
    /// Registry references of the error handler and the real globals
    /// table, fetched by number on every run.
    err_handler_ref: c_int,
    globals_ref: c_int,
    /// The host's state kept with this interpreter between runs (the
    /// dispatcher keeps its script client here, so its caches stay warm);
    /// the engine never looks inside.
    host_state: Option<Box<dyn std::any::Any + Send>>,
}

// The interpreter is only used under the store lock, by one thread at a time.
unsafe impl Send for Engine {}

impl Drop for Engine {
    fn drop(&mut self) {
        unsafe { ffi::lua_close(self.l) }
    }
}

/// Lower-case hex SHA-1 of `data`.
pub fn sha1hex(data: &[u8]) -> String {
    sha1_smol::Sha1::from(data).digest().to_string()
}

/// Parses a `#!lua` shebang: (flags, bytes of the shebang line without its
/// newline) or Redis's error text (without the `ERR ` code).
pub fn shebang(body: &[u8]) -> Result<(u32, usize), String> {
    if !body.starts_with(b"#!") {
        return Ok((FLAG_EVAL_COMPAT, 0));
    }
    let Some(end) = memchr::memchr(b'\n', body) else {
        return Err("Invalid script shebang".into());
    };
    let parts = match crate::resp::split_args(&body[..end]) {
        Some(p) if !p.is_empty() => p,
        _ => return Err("Invalid engine in script shebang".into()),
    };
    if parts[0] != b"#!lua" {
        return Err(format!(
            "Unexpected engine in script shebang: {}",
            String::from_utf8_lossy(&parts[0])
        ));
    }
    let mut flags = 0;
    for p in &parts[1..] {
        let Some(list) = p.strip_prefix(b"flags=") else {
            return Err(format!(
                "Unknown lua shebang option: {}",
                String::from_utf8_lossy(p)
            ));
        };
        if list.is_empty() {
            continue;
        }
        for f in list.split(|&c| c == b',') {
            match SHEBANG_FLAGS.iter().find(|(n, _)| n.as_bytes() == f) {
                Some((_, bit)) => flags |= bit,
                None => {
                    return Err(format!(
                        "Unexpected flag in script shebang: {}",
                        String::from_utf8_lossy(f)
                    ))
                }
            }
        }
    }
    Ok((flags, end))
}

// ---------------------------------------------------------------------------
// Small helpers over the C API.

unsafe fn push_bytes(l: *mut lua_State, b: &[u8]) {
    ffi::lua_pushlstring_(l, b.as_ptr() as *const c_char, b.len());
}

pub(crate) unsafe fn set_field_fn(l: *mut lua_State, name: &CStr, f: ffi::lua_CFunction) {
    ffi::lua_pushcfunction(l, f);
    ffi::lua_setfield(l, -2, name.as_ptr());
}

unsafe fn set_global_fn(l: *mut lua_State, name: &CStr, f: ffi::lua_CFunction) {
    ffi::lua_pushcfunction(l, f);
    ffi::lua_setfield(l, ffi::LUA_GLOBALSINDEX, name.as_ptr());
}

/// Pushes a new table holding `funcs` (a library's functions).
pub(crate) unsafe fn new_lib(l: *mut lua_State, funcs: &[(&CStr, ffi::lua_CFunction)]) {
    ffi::lua_createtable(l, 0, funcs.len() as c_int + 4);
    for (name, f) in funcs {
        set_field_fn(l, name, *f);
    }
}

unsafe fn set_field_num(l: *mut lua_State, name: &CStr, n: f64) {
    ffi::lua_pushnumber(l, n);
    ffi::lua_setfield(l, -2, name.as_ptr());
}

/// The bytes of the string (or number, converted in place) at `idx`.
pub(crate) unsafe fn to_bytes<'a>(l: *mut lua_State, idx: c_int) -> Option<&'a [u8]> {
    let mut len = 0usize;
    let p = ffi::lua_tolstring(l, idx, &mut len);
    if p.is_null() {
        None
    } else {
        Some(std::slice::from_raw_parts(p as *const u8, len))
    }
}

/// Raises `msg` as `luaL_error` would (position of the caller prepended).
/// `msg` is consumed before the jump.
pub(crate) unsafe fn raise(l: *mut lua_State, msg: String) -> ! {
    ffi::luaL_where(l, 1);
    push_bytes(l, msg.as_bytes());
    drop(msg);
    ffi::lua_concat(l, 2);
    ffi::lua_error(l)
}

/// Redis's luaPushErrorBuff: `-CODE msg` or `msg` (code ERR) becomes a
/// table `{err="CODE msg"}` on the stack.
pub(crate) unsafe fn push_error(l: *mut lua_State, err: &[u8]) {
    let (code, msg): (&[u8], &[u8]) = match err.strip_prefix(b"-") {
        Some(rest) => match memchr::memchr(b' ', rest) {
            Some(sp) => (&rest[..sp], &rest[sp + 1..]),
            None => (b"ERR", rest),
        },
        None => (b"ERR", err),
    };
    let trim = |c: &u8| *c == b'\r' || *c == b'\n';
    let start = msg.iter().position(|c| !trim(c)).unwrap_or(msg.len());
    let end = msg.iter().rposition(|c| !trim(c)).map_or(start, |e| e + 1);
    let msg = &msg[start..end.max(start)];
    ffi::lua_createtable(l, 0, 2);
    // lua_pushstring: the C string stops at a NUL.
    ffi::lua_pushlstring_(l, code.as_ptr() as *const c_char, code.len());
    ffi::lua_pushlstring_(l, b" ".as_ptr() as *const c_char, 1);
    let msg = crate::util::c_str(msg);
    ffi::lua_pushlstring_(l, msg.as_ptr() as *const c_char, msg.len());
    ffi::lua_concat(l, 3);
    ffi::lua_setfield(l, -2, c"err".as_ptr());
}

unsafe fn push_error_ignore_stats(l: *mut lua_State, err: &[u8]) {
    push_error(l, err);
    ffi::lua_pushboolean(l, 1);
    ffi::lua_setfield(l, -2, c"ignore_error_stats_update".as_ptr());
}

// ---------------------------------------------------------------------------
// The run context: what redis.call works with while a script runs.

/// The server's side of a running script, which the engine calls for
/// redis.call and its relatives (implemented by `commands::script_host`).
pub trait Host {
    /// Runs one redis.call / redis.pcall: Ok(the command's reply), or
    /// Err(the error reply) when it may not run at all. `buf` is a spare
    /// buffer for the reply.
    fn call(&mut self, args: Vec<Bytes>, resp3: bool, buf: Vec<u8>) -> Result<Vec<u8>, Vec<u8>>;
    /// redis.acl_check_cmd: whether `args` name a command.
    fn is_command(&self, args: &[Bytes]) -> bool;
    /// The calling command's reply, where the script's result goes.
    fn out(&mut self) -> &mut Out;
}

/// One script invocation. Reached from the Lua callbacks through a
/// thread-local pointer (the script runs on one thread, start to end).
pub struct Run<'a> {
    /// The server's side (its lifetime erased: it outlives the run).
    host: *mut (dyn Host + 'static),
    resp3: bool,
    gate: Arc<Gate>,
    rand48: u64,
    scratch: Vec<u8>,
    /// A panic in a command run by redis.call: kept while Lua unwinds
    /// (a Rust panic must not cross Lua's C frames), resumed after.
    panic: Option<Box<dyn std::any::Any + Send>>,
    /// The script's sha (Redis's funcname in error texts).
    pub name: &'a str,
    /// Runs directly on a runtime worker (`Scripting::is_fast`): if it runs
    /// long after all, the count hook hands the worker's other tasks to
    /// another thread (`hand_off_worker`).
    on_worker: bool,
}

thread_local! {
    static RUN: Cell<*mut Run<'static>> = const { Cell::new(ptr::null_mut()) };
}

fn current_run<'a>() -> Option<&'a mut Run<'static>> {
    let p = RUN.with(|r| r.get());
    if p.is_null() {
        None
    } else {
        Some(unsafe { &mut *p })
    }
}

/// Arguments of a redis.call as Redis's luaArgsToRedisArgv takes them.
unsafe fn lua_args(l: *mut lua_State) -> Result<Vec<Bytes>, &'static str> {
    let argc = ffi::lua_gettop(l);
    if argc == 0 {
        return Err("Please specify at least one argument for this redis lib call");
    }
    let mut v = Vec::with_capacity(argc as usize);
    for j in 1..=argc {
        if ffi::lua_type(l, j) == ffi::LUA_TNUMBER {
            // Not lua_tolstring: Lua's %.14g loses precision.
            let n = ffi::lua_tonumber(l, j);
            v.push(Bytes::from(crate::util::fmt_double(n)));
        } else {
            match to_bytes(l, j) {
                Some(b) => v.push(Bytes::copy_from_slice(b)),
                None => return Err("Lua redis lib command arguments must be strings or integers"),
            }
        }
    }
    Ok(v)
}

/// redis.call / redis.pcall (Redis's luaRedisGenericCommand).
unsafe fn generic_call(l: *mut lua_State, raise: bool) -> c_int {
    let Some(run) = current_run() else {
        push_error(
            l,
            b"redis.call/pcall can only be called inside a script invocation",
        );
        ffi::lua_error(l);
    };
    let args = lua_args(l);
    ffi::lua_settop(l, 0);
    let args = match args {
        Ok(a) => a,
        Err(e) => {
            push_error(l, e.as_bytes());
            return if raise { ffi::lua_error(l) } else { 1 };
        }
    };
    let buf = std::mem::take(&mut run.scratch);
    let (resp3, host) = (run.resp3, run.host);
    let call = || unsafe { (*host).call(args, resp3, buf) };
    let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)) {
        Ok(r) => r,
        Err(p) => {
            run.panic = Some(p);
            push_error(l, b"ERR a command panicked");
            ffi::lua_error(l);
        }
    };
    let mut raise = raise;
    match result {
        Ok(buf) => {
            raise = raise && buf.first() == Some(&b'-');
            reply::push_reply(l, &buf);
            run.scratch = buf;
        }
        Err(e) => {
            // Without the reply's CRLF.
            let e_len = e.len().saturating_sub(2);
            push_error_ignore_stats(l, &e[..e_len]);
            drop(e);
        }
    }
    if raise {
        ffi::lua_error(l);
    }
    1
}

unsafe extern "C-unwind" fn redis_call(l: *mut lua_State) -> c_int {
    generic_call(l, true)
}

unsafe extern "C-unwind" fn redis_pcall(l: *mut lua_State) -> c_int {
    generic_call(l, false)
}

/// Redis's replacement of Lua's pcall: an error table raised by
/// redis.call comes back as its message (Redis < 7 compatibility).
unsafe extern "C-unwind" fn lua_pcall_compat(l: *mut lua_State) -> c_int {
    let argc = ffi::lua_gettop(l);
    if argc == 0 {
        // Redis calls lua_pcall with -1 arguments: it calls its own
        // placeholder `true`.
        ffi::lua_pushboolean(l, 0);
        ffi::lua_pushstring_(l, c"attempt to call a boolean value".as_ptr());
        return 2;
    }
    ffi::lua_pushboolean(l, 1);
    ffi::lua_insert(l, 1);
    if ffi::lua_pcall(l, argc - 1, ffi::LUA_MULTRET, 0) != 0 {
        ffi::lua_remove(l, 1);
        if ffi::lua_istable(l, -1) != 0 {
            ffi::lua_getfield_(l, -1, c"err".as_ptr());
            if ffi::lua_isstring(l, -1) != 0 {
                ffi::lua_replace(l, -2);
            }
        }
        ffi::lua_pushboolean(l, 0);
        ffi::lua_insert(l, 1);
    }
    ffi::lua_gettop(l)
}

unsafe extern "C-unwind" fn redis_sha1hex(l: *mut lua_State) -> c_int {
    if ffi::lua_gettop(l) != 1 {
        push_error(l, b"wrong number of arguments");
        ffi::lua_error(l);
    }
    let mut digest = [0u8; 40];
    {
        let s = to_bytes(l, 1).unwrap_or(b"");
        digest.copy_from_slice(sha1hex(s).as_bytes());
    }
    push_bytes(l, &digest);
    1
}

unsafe extern "C-unwind" fn redis_error_reply(l: *mut lua_State) -> c_int {
    if ffi::lua_gettop(l) != 1 || ffi::lua_type(l, -1) != ffi::LUA_TSTRING {
        push_error(l, b"wrong number or type of arguments");
        return 1;
    }
    let s = crate::util::c_str(to_bytes(l, -1).unwrap_or(b"")).to_vec();
    let mut e = Vec::with_capacity(s.len() + 1);
    if s.first() != Some(&b'-') {
        e.push(b'-');
    }
    e.extend_from_slice(&s);
    drop(s);
    push_error(l, &e);
    drop(e);
    1
}

unsafe extern "C-unwind" fn redis_status_reply(l: *mut lua_State) -> c_int {
    if ffi::lua_gettop(l) != 1 || ffi::lua_type(l, -1) != ffi::LUA_TSTRING {
        push_error(l, b"wrong number or type of arguments");
        return 1;
    }
    ffi::lua_createtable(l, 0, 1);
    ffi::lua_pushvalue(l, -2);
    ffi::lua_setfield(l, -2, c"ok".as_ptr());
    1
}

unsafe fn require_run(l: *mut lua_State, what: &CStr) -> &'static mut Run<'static> {
    match current_run() {
        Some(r) => r,
        None => {
            let mut m = what.to_bytes().to_vec();
            m.extend_from_slice(b" can only be called inside a script invocation");
            push_error(l, &m);
            drop(m);
            ffi::lua_error(l)
        }
    }
}

unsafe extern "C-unwind" fn redis_set_repl(l: *mut lua_State) -> c_int {
    require_run(l, c"redis.set_repl");
    if ffi::lua_gettop(l) != 1 {
        push_error(l, b"redis.set_repl() requires two arguments.");
        ffi::lua_error(l);
    }
    let flags = ffi::lua_tonumber(l, -1) as i64 as i32;
    if flags & !3 != 0 {
        push_error(
            l,
            b"Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.",
        );
        ffi::lua_error(l);
    }
    0
}

unsafe extern "C-unwind" fn redis_acl_check_cmd(l: *mut lua_State) -> c_int {
    let run = require_run(l, c"redis.acl_check_cmd");
    let known = match lua_args(l) {
        Err(e) => {
            push_error(l, e.as_bytes());
            ffi::lua_error(l)
        }
        Ok(args) => (*run.host).is_command(&args),
    };
    if !known {
        push_error(l, b"Invalid command passed to redis.acl_check_cmd()");
        ffi::lua_error(l);
    }
    // No ACL users besides the default one, which may run everything.
    ffi::lua_pushboolean(l, 1);
    1
}

unsafe extern "C-unwind" fn redis_log(l: *mut lua_State) -> c_int {
    let argc = ffi::lua_gettop(l);
    if argc < 2 {
        push_error(l, b"redis.log() requires two arguments or more.");
        ffi::lua_error(l);
    }
    if ffi::lua_isnumber(l, -argc) == 0 {
        push_error(l, b"First argument must be a number (log level).");
        ffi::lua_error(l);
    }
    let level = ffi::lua_tonumber(l, -argc) as i64;
    if !(0..=3).contains(&level) {
        push_error(l, b"Invalid debug level.");
        ffi::lua_error(l);
    }
    let mut msg = Vec::new();
    for j in 1..argc {
        if let Some(s) = to_bytes(l, -argc + j) {
            if j != 1 {
                msg.push(b' ');
            }
            msg.extend_from_slice(s);
        }
    }
    let msg = String::from_utf8_lossy(&msg).into_owned();
    match level {
        // LOG_DEBUG is TRACE and LOG_VERBOSE is DEBUG (`crate::logging`).
        0 => tracing::trace!(target: "lua", "{msg}"),
        1 => tracing::debug!(target: "lua", "{msg}"),
        2 => tracing::info!(target: "lua", "{msg}"),
        _ => tracing::warn!(target: "lua", "{msg}"),
    }
    0
}

unsafe extern "C-unwind" fn redis_setresp(l: *mut lua_State) -> c_int {
    let run = require_run(l, c"redis.setresp");
    if ffi::lua_gettop(l) != 1 {
        push_error(l, b"redis.setresp() requires one argument.");
        ffi::lua_error(l);
    }
    let resp = ffi::lua_tonumber(l, -1) as i64;
    if resp != 2 && resp != 3 {
        push_error(l, b"RESP version must be 2 or 3.");
        ffi::lua_error(l);
    }
    run.resp3 = resp == 3;
    0
}

unsafe extern "C-unwind" fn redis_breakpoint(l: *mut lua_State) -> c_int {
    // No debugging session is ever active.
    ffi::lua_pushboolean(l, 0);
    1
}

unsafe extern "C-unwind" fn redis_debug(_l: *mut lua_State) -> c_int {
    0
}

unsafe extern "C-unwind" fn redis_replicate_commands(l: *mut lua_State) -> c_int {
    ffi::lua_pushboolean(l, 1);
    1
}

// ---------------------------------------------------------------------------
// math.random with Redis's PRNG (redisLrand48, a 48-bit LCG as lrand48).

const RAND48_INIT: u64 = 0x1234_ABCD_330E;
const RAND48_MAX: i64 = i32::MAX as i64;

fn lrand48(state: &mut u64) -> i64 {
    *state = (state.wrapping_mul(0x5_DEEC_E66D).wrapping_add(0xB)) & ((1 << 48) - 1);
    (*state >> 17) as i64
}

fn srand48(state: &mut u64, seed: i32) {
    *state = ((seed as u32 as u64) << 16) | 0x330E;
}

unsafe extern "C-unwind" fn math_random(l: *mut lua_State) -> c_int {
    let Some(run) = current_run() else {
        raise(
            l,
            "math.random can only be called inside a script invocation".into(),
        )
    };
    let r = (lrand48(&mut run.rand48) % RAND48_MAX) as f64 / RAND48_MAX as f64;
    match ffi::lua_gettop(l) {
        0 => ffi::lua_pushnumber(l, r),
        1 => {
            let u = ffi::luaL_checkinteger(l, 1) as c_int;
            if u < 1 {
                ffi::luaL_argerror(l, 1, c"interval is empty".as_ptr());
            }
            ffi::lua_pushnumber(l, (r * u as f64).floor() + 1.0);
        }
        2 => {
            let lo = ffi::luaL_checkinteger(l, 1) as c_int;
            let u = ffi::luaL_checkinteger(l, 2) as c_int;
            if lo > u {
                ffi::luaL_argerror(l, 2, c"interval is empty".as_ptr());
            }
            ffi::lua_pushnumber(l, (r * (u as f64 - lo as f64 + 1.0)).floor() + lo as f64);
        }
        _ => raise(l, "wrong number of arguments".into()),
    }
    1
}

unsafe extern "C-unwind" fn math_randomseed(l: *mut lua_State) -> c_int {
    let Some(run) = current_run() else {
        raise(
            l,
            "math.randomseed can only be called inside a script invocation".into(),
        )
    };
    let seed = ffi::luaL_checkinteger(l, 1) as c_int;
    srand48(&mut run.rand48, seed);
    0
}

// ---------------------------------------------------------------------------
// The sandbox.

/// `__index` of the real globals table: reading an undefined global.
pub(crate) unsafe extern "C-unwind" fn nonexistent_global(l: *mut lua_State) -> c_int {
    let name = to_bytes(l, 2).map(|b| String::from_utf8_lossy(b).into_owned());
    let name = name.unwrap_or_default();
    raise(
        l,
        format!("Script attempted to access nonexistent global variable '{name}'"),
    )
}

/// `__newindex` of every protected table (Redis 7 makes them read-only).
unsafe extern "C-unwind" fn readonly_table(l: *mut lua_State) -> c_int {
    raise(l, "Attempt to modify a readonly table".into())
}

/// Registry key of the table mapping each read-only proxy to its table.
const PROXIES: &CStr = c"latchkey_proxies";

/// Replaces the table on top of the stack with a read-only proxy of it:
/// an empty table whose reads go to the original and whose writes fail.
/// (Redis's Lua has read-only tables; Lua 5.1 does not.) `next`, `pairs`,
/// `rawget`, `rawset` and `setmetatable` see through proxies.
pub(crate) unsafe fn protect_top(l: *mut lua_State) {
    ffi::lua_newtable(l); // proxy
    ffi::lua_createtable(l, 0, 3); // its metatable
    ffi::lua_pushvalue(l, -3);
    ffi::lua_setfield(l, -2, c"__index".as_ptr());
    ffi::lua_pushcfunction(l, readonly_table);
    ffi::lua_setfield(l, -2, c"__newindex".as_ptr());
    ffi::lua_pushboolean(l, 0);
    ffi::lua_setfield(l, -2, c"__metatable".as_ptr());
    ffi::lua_setmetatable(l, -2);
    // proxies[proxy] = table
    ffi::lua_getfield_(l, ffi::LUA_REGISTRYINDEX, PROXIES.as_ptr());
    ffi::lua_pushvalue(l, -2);
    ffi::lua_pushvalue(l, -4);
    ffi::lua_rawset(l, -3);
    ffi::lua_pop(l, 1);
    ffi::lua_remove(l, -2);
}

/// Replaces argument `idx` by the table it is a proxy of; true if it was.
unsafe fn unproxy(l: *mut lua_State, idx: c_int) -> bool {
    if ffi::lua_type(l, idx) != ffi::LUA_TTABLE {
        return false;
    }
    ffi::lua_getfield_(l, ffi::LUA_REGISTRYINDEX, PROXIES.as_ptr());
    ffi::lua_pushvalue(l, idx);
    ffi::lua_rawget_(l, -2);
    if ffi::lua_type(l, -1) == ffi::LUA_TTABLE {
        ffi::lua_replace(l, idx);
        ffi::lua_pop(l, 1);
        true
    } else {
        ffi::lua_pop(l, 2);
        false
    }
}

/// Redis's read-only table error, raised by the VM (no position).
unsafe fn readonly_error(l: *mut lua_State) -> ! {
    ffi::lua_pushstring_(l, c"Attempt to modify a readonly table".as_ptr());
    ffi::lua_error(l)
}

unsafe extern "C-unwind" fn base_next(l: *mut lua_State) -> c_int {
    ffi::luaL_checktype(l, 1, ffi::LUA_TTABLE);
    unproxy(l, 1);
    ffi::lua_settop(l, 2);
    if ffi::lua_next(l, 1) != 0 {
        2
    } else {
        ffi::lua_pushnil(l);
        1
    }
}

unsafe extern "C-unwind" fn base_pairs(l: *mut lua_State) -> c_int {
    ffi::luaL_checktype(l, 1, ffi::LUA_TTABLE);
    ffi::lua_pushvalue(l, ffi::lua_upvalueindex(1));
    ffi::lua_pushvalue(l, 1);
    ffi::lua_pushnil(l);
    3
}

unsafe extern "C-unwind" fn base_rawget(l: *mut lua_State) -> c_int {
    ffi::luaL_checktype(l, 1, ffi::LUA_TTABLE);
    ffi::luaL_checkany(l, 2);
    unproxy(l, 1);
    ffi::lua_settop(l, 2);
    ffi::lua_rawget_(l, 1);
    1
}

unsafe extern "C-unwind" fn base_rawset(l: *mut lua_State) -> c_int {
    ffi::luaL_checktype(l, 1, ffi::LUA_TTABLE);
    ffi::luaL_checkany(l, 2);
    ffi::luaL_checkany(l, 3);
    if unproxy(l, 1) {
        readonly_error(l);
    }
    ffi::lua_settop(l, 3);
    ffi::lua_rawset(l, 1);
    1
}

unsafe extern "C-unwind" fn base_setmetatable(l: *mut lua_State) -> c_int {
    if unproxy(l, 1) {
        readonly_error(l);
    }
    // The original, kept as upvalue 1.
    ffi::lua_pushvalue(l, ffi::lua_upvalueindex(1));
    ffi::lua_insert(l, 1);
    let n = ffi::lua_gettop(l) - 1;
    ffi::lua_call(l, n, 1);
    1
}

/// `loadstring` as Redis 7.0's Lua has it: a chunk is always source text
/// (Redis removed binary chunk loading, so bytecode gets the parser's
/// error instead of being run). Upvalue 1: Lua's own loadstring.
unsafe extern "C-unwind" fn safe_loadstring(l: *mut lua_State) -> c_int {
    let mut len = 0usize;
    let p = ffi::luaL_checklstring(l, 1, &mut len);
    // Argument errors raised here name 'loadstring', as Lua's own would.
    let name = ffi::luaL_optlstring(l, 2, p, ptr::null_mut());
    if len > 0 && *p as u8 == 0x1b {
        // A leading space makes Lua parse it as text: same error, line 1.
        ffi::lua_pushstring_(l, c" ".as_ptr());
        ffi::lua_pushvalue(l, 1);
        ffi::lua_concat(l, 2);
        let mut blen = 0usize;
        let b = ffi::lua_tolstring(l, -1, &mut blen);
        if ffi::luaL_loadbuffer(l, b, blen, name) == 0 {
            return 1;
        }
        ffi::lua_pushnil(l);
        ffi::lua_insert(l, -2);
        return 2;
    }
    ffi::lua_pushvalue(l, ffi::lua_upvalueindex(1));
    ffi::lua_insert(l, 1);
    ffi::lua_call(l, ffi::lua_gettop(l) - 1, ffi::LUA_MULTRET);
    ffi::lua_gettop(l)
}

/// A `load` reader wrapper: the first piece, if it starts a binary chunk,
/// gets a leading space (see `safe_loadstring`). Upvalues: the reader,
/// whether the first piece is still to come.
unsafe extern "C-unwind" fn text_only_reader(l: *mut lua_State) -> c_int {
    ffi::lua_settop(l, 0);
    ffi::lua_pushvalue(l, ffi::lua_upvalueindex(1));
    ffi::lua_call(l, 0, 1);
    if ffi::lua_toboolean(l, ffi::lua_upvalueindex(2)) != 0 {
        let mut len = 0usize;
        let p = if ffi::lua_type(l, 1) == ffi::LUA_TSTRING {
            ffi::lua_tolstring(l, 1, &mut len)
        } else {
            ptr::null()
        };
        if len > 0 {
            ffi::lua_pushboolean(l, 0);
            ffi::lua_replace(l, ffi::lua_upvalueindex(2));
            if *p as u8 == 0x1b {
                ffi::lua_pushstring_(l, c" ".as_ptr());
                ffi::lua_insert(l, 1);
                ffi::lua_concat(l, 2);
            }
        }
    }
    1
}

/// `load(func [, chunkname])` reading text only. Upvalue 1: Lua's load.
unsafe extern "C-unwind" fn safe_load(l: *mut lua_State) -> c_int {
    ffi::luaL_optlstring(l, 2, c"=(load)".as_ptr(), ptr::null_mut());
    ffi::luaL_checktype(l, 1, ffi::LUA_TFUNCTION);
    {
        ffi::lua_pushvalue(l, 1);
        ffi::lua_pushboolean(l, 1);
        ffi::lua_pushcclosure(l, text_only_reader, 2);
        ffi::lua_replace(l, 1);
    }
    ffi::lua_pushvalue(l, ffi::lua_upvalueindex(1));
    ffi::lua_insert(l, 1);
    ffi::lua_call(l, ffi::lua_gettop(l) - 1, ffi::LUA_MULTRET);
    ffi::lua_gettop(l)
}

/// Registry key of the real globals table (KEYS and ARGV are set there).
pub(crate) const REAL_GLOBALS: &CStr = c"latchkey_globals";
const ERR_HANDLER: &CStr = c"latchkey_err_handler";

/// The error handler every script runs under (Redis's
/// `__redis__err__handler`): turns the error into a table and records
/// where it happened, skipping a C function that raised it.
unsafe extern "C-unwind" fn err_handler(l: *mut lua_State) -> c_int {
    let mut ar: ffi::lua_Debug = std::mem::zeroed();
    let mut found =
        ffi::lua_getstack(l, 1, &mut ar) != 0 && ffi::lua_getinfo(l, c"nSl".as_ptr(), &mut ar) != 0;
    if found && CStr::from_ptr(ar.what).to_bytes() == b"C" {
        ar = std::mem::zeroed();
        found = ffi::lua_getstack(l, 2, &mut ar) != 0
            && ffi::lua_getinfo(l, c"nSl".as_ptr(), &mut ar) != 0;
    }
    if ffi::lua_type(l, 1) != ffi::LUA_TTABLE {
        ffi::lua_getfield_(l, ffi::LUA_REGISTRYINDEX, REAL_GLOBALS.as_ptr());
        ffi::lua_getfield_(l, -1, c"tostring".as_ptr());
        ffi::lua_remove(l, -2);
        ffi::lua_pushvalue(l, 1);
        ffi::lua_call(l, 1, 1);
        ffi::lua_pushstring_(l, c"ERR ".as_ptr());
        ffi::lua_insert(l, -2);
        ffi::lua_concat(l, 2);
        ffi::lua_createtable(l, 0, 3);
        ffi::lua_insert(l, -2);
        ffi::lua_setfield(l, -2, c"err".as_ptr());
        ffi::lua_replace(l, 1);
    }
    ffi::lua_settop(l, 1);
    if found {
        ffi::lua_pushstring_(l, ar.source);
        ffi::lua_setfield(l, 1, c"source".as_ptr());
        ffi::lua_pushnumber(l, ar.currentline as f64);
        ffi::lua_setfield(l, 1, c"line".as_ptr());
    }
    1
}

/// The count hook: BUSY after the threshold, SCRIPT KILL.
unsafe extern "C-unwind" fn count_hook(l: *mut lua_State, _ar: *mut ffi::lua_Debug) {
    let Some(run) = current_run() else { return };
    if run.on_worker && run.gate.elapsed_ms() >= HAND_OFF_AFTER_MS {
        run.on_worker = !hand_off_worker();
    }
    let (turned, killed) = run.gate.tick();
    if turned {
        tracing::warn!(
            "Slow script detected: still in execution after {} milliseconds. You can try killing the script using the SCRIPT KILL command. Script name is: {}.",
            run.gate.elapsed_ms(),
            run.name
        );
    }
    if killed {
        tracing::warn!("Lua script killed by user with SCRIPT KILL.");
        // Every line from now on raises again, so pcall cannot swallow it.
        ffi::lua_sethook(l, Some(count_hook), ffi::LUA_MASKLINE, 0);
        push_error(l, b"Script killed by user with SCRIPT KILL...");
        ffi::lua_error(l);
    }
}

unsafe fn open_lib(l: *mut lua_State, name: &CStr, f: ffi::lua_CFunction) {
    ffi::lua_pushcfunction(l, f);
    ffi::lua_pushstring_(l, name.as_ptr());
    ffi::lua_call(l, 1, 0);
}

/// `redis.log`, the log levels and the versions into the table on top
/// (shared by the EVAL API and the FUNCTION LOAD library API).
pub(crate) unsafe fn set_log_and_version(l: *mut lua_State) {
    set_field_fn(l, c"log", redis_log);
    set_field_num(l, c"LOG_DEBUG", 0.0);
    set_field_num(l, c"LOG_VERBOSE", 1.0);
    set_field_num(l, c"LOG_NOTICE", 2.0);
    set_field_num(l, c"LOG_WARNING", 3.0);
    set_field_num(
        l,
        c"REDIS_VERSION_NUM",
        crate::version::REDIS_VERSION_NUM as f64,
    );
    push_bytes(l, crate::version::REDIS_VERSION.as_bytes());
    ffi::lua_setfield(l, -2, c"REDIS_VERSION".as_ptr());
}

unsafe extern "C-unwind" fn init_state(l: *mut lua_State) -> c_int {
    open_lib(l, c"", ffi::luaopen_base);
    open_lib(l, c"table", ffi::luaopen_table);
    open_lib(l, c"string", ffi::luaopen_string);
    open_lib(l, c"math", ffi::luaopen_math);
    bit::open(l);
    cjson::open(l);
    cmsgpack::open(l);
    lstruct::open(l);
    // Not on Redis 7.0's globals allow list.
    for name in [
        c"dofile",
        c"loadfile",
        c"print",
        c"getfenv",
        c"setfenv",
        c"newproxy",
    ] {
        ffi::lua_pushnil(l);
        ffi::lua_setfield(l, ffi::LUA_GLOBALSINDEX, name.as_ptr());
    }
    set_global_fn(l, c"pcall", lua_pcall_compat);

    ffi::lua_newtable(l);
    set_field_fn(l, c"call", redis_call);
    set_field_fn(l, c"pcall", redis_pcall);
    set_log_and_version(l);
    set_field_fn(l, c"setresp", redis_setresp);
    set_field_fn(l, c"sha1hex", redis_sha1hex);
    set_field_fn(l, c"error_reply", redis_error_reply);
    set_field_fn(l, c"status_reply", redis_status_reply);
    set_field_fn(l, c"set_repl", redis_set_repl);
    set_field_num(l, c"REPL_NONE", 0.0);
    set_field_num(l, c"REPL_AOF", 1.0);
    set_field_num(l, c"REPL_SLAVE", 2.0);
    set_field_num(l, c"REPL_REPLICA", 2.0);
    set_field_num(l, c"REPL_ALL", 3.0);
    set_field_fn(l, c"acl_check_cmd", redis_acl_check_cmd);
    set_field_fn(l, c"breakpoint", redis_breakpoint);
    set_field_fn(l, c"debug", redis_debug);
    set_field_fn(l, c"replicate_commands", redis_replicate_commands);
    ffi::lua_setfield(l, ffi::LUA_GLOBALSINDEX, c"redis".as_ptr());

    ffi::lua_getfield_(l, ffi::LUA_GLOBALSINDEX, c"math".as_ptr());
    set_field_fn(l, c"random", math_random);
    set_field_fn(l, c"randomseed", math_randomseed);
    ffi::lua_pop(l, 1);

    ffi::lua_pushcfunction(l, err_handler);
    ffi::lua_pushvalue(l, -1);
    ffi::lua_setfield(l, ffi::LUA_GLOBALSINDEX, c"__redis__err__handler".as_ptr());
    ffi::lua_setfield(l, ffi::LUA_REGISTRYINDEX, ERR_HANDLER.as_ptr());

    // Base functions that see through the read-only proxies.
    ffi::lua_newtable(l);
    ffi::lua_setfield(l, ffi::LUA_REGISTRYINDEX, PROXIES.as_ptr());
    ffi::lua_pushcfunction(l, base_next);
    ffi::lua_pushvalue(l, -1);
    ffi::lua_setfield(l, ffi::LUA_GLOBALSINDEX, c"next".as_ptr());
    ffi::lua_pushcclosure(l, base_pairs, 1);
    ffi::lua_setfield(l, ffi::LUA_GLOBALSINDEX, c"pairs".as_ptr());
    set_global_fn(l, c"rawget", base_rawget);
    set_global_fn(l, c"rawset", base_rawset);
    for (name, f) in [
        (c"loadstring", safe_loadstring as ffi::lua_CFunction),
        (c"load", safe_load),
    ] {
        ffi::lua_getfield_(l, ffi::LUA_GLOBALSINDEX, name.as_ptr());
        ffi::lua_pushcclosure(l, f, 1);
        ffi::lua_setfield(l, ffi::LUA_GLOBALSINDEX, name.as_ptr());
    }
    ffi::lua_getfield_(l, ffi::LUA_GLOBALSINDEX, c"setmetatable".as_ptr());
    ffi::lua_pushcclosure(l, base_setmetatable, 1);
    ffi::lua_setfield(l, ffi::LUA_GLOBALSINDEX, c"setmetatable".as_ptr());

    // Lock it all: every library table becomes a read-only proxy, the
    // globals table too, and reading an undefined global is an error.
    for name in [
        c"string",
        c"math",
        c"table",
        c"coroutine",
        c"redis",
        c"bit",
        c"cjson",
        c"cmsgpack",
        c"struct",
    ] {
        ffi::lua_getfield_(l, ffi::LUA_GLOBALSINDEX, name.as_ptr());
        protect_top(l);
        ffi::lua_setfield(l, ffi::LUA_GLOBALSINDEX, name.as_ptr());
    }
    // The strings' metatable is reachable too (getmetatable('')): its
    // __index becomes the read-only string library, and getmetatable
    // returns a read-only view of it.
    ffi::lua_pushstring_(l, c"".as_ptr());
    ffi::lua_getmetatable(l, -1);
    ffi::lua_getfield_(l, ffi::LUA_GLOBALSINDEX, c"string".as_ptr());
    ffi::lua_setfield(l, -2, c"__index".as_ptr());
    ffi::lua_pushvalue(l, -1);
    protect_top(l);
    ffi::lua_setfield(l, -2, c"__metatable".as_ptr());
    ffi::lua_pop(l, 2);

    ffi::lua_pushvalue(l, ffi::LUA_GLOBALSINDEX);
    ffi::lua_pushvalue(l, -1);
    ffi::lua_setfield(l, ffi::LUA_REGISTRYINDEX, REAL_GLOBALS.as_ptr());
    ffi::lua_createtable(l, 0, 1);
    ffi::lua_pushcfunction(l, nonexistent_global);
    ffi::lua_setfield(l, -2, c"__index".as_ptr());
    ffi::lua_setmetatable(l, -2);
    protect_top(l);
    // _G names the proxy, the one scripts see.
    ffi::lua_pushvalue(l, -1);
    ffi::lua_setfield(l, ffi::LUA_GLOBALSINDEX, c"_G".as_ptr());
    ffi::lua_replace(l, ffi::LUA_GLOBALSINDEX);
    0
}

impl Default for Engine {
    fn default() -> Self {
        Engine::new()
    }
}

/// Lua's allocator: the process's own (jemalloc in the server) instead of
/// libc's `realloc`, which a short script's many small strings and tables
/// made a visible share of its run. Lua 5.1 passes every block's size back
/// (`osize`), which is what a sized deallocation needs.
unsafe extern "C" fn lua_alloc(
    _ud: *mut std::ffi::c_void,
    ptr: *mut std::ffi::c_void,
    osize: usize,
    nsize: usize,
) -> *mut std::ffi::c_void {
    use std::alloc::{alloc, dealloc, realloc, Layout};
    // Lua needs blocks aligned for any of its values (doubles, pointers).
    const ALIGN: usize = 16;
    // SAFETY: every block was allocated here with this alignment and the
    // size Lua reports for it; sizes are non-zero where a layout is made.
    unsafe {
        if nsize == 0 {
            if !ptr.is_null() && osize > 0 {
                dealloc(ptr.cast(), Layout::from_size_align_unchecked(osize, ALIGN));
            }
            return ptr::null_mut();
        }
        if ptr.is_null() || osize == 0 {
            return alloc(Layout::from_size_align_unchecked(nsize, ALIGN)).cast();
        }
        realloc(
            ptr.cast(),
            Layout::from_size_align_unchecked(osize, ALIGN),
            nsize,
        )
        .cast()
    }
}

/// What luaL_newstate installs: an error outside any protected call is
/// reported (Lua then ends the process, as it would under luaL_newstate).
unsafe extern "C-unwind" fn lua_panic(l: *mut ffi::lua_State) -> std::ffi::c_int {
    // SAFETY: Lua calls this with the error message on the top of `l`.
    let msg = unsafe {
        let p = ffi::lua_tolstring(l, -1, ptr::null_mut());
        if p.is_null() {
            String::from("?")
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    eprintln!("PANIC: unprotected error in call to Lua API ({msg})");
    0
}

impl Script {
    pub fn lua_ref(&self) -> c_int {
        self.lua_ref
    }
}

impl Engine {
    pub fn new() -> Engine {
        unsafe {
            let l = ffi::lua_newstate(lua_alloc, ptr::null_mut());
            assert!(!l.is_null(), "cannot create a Lua state");
            ffi::lua_atpanic(l, lua_panic);
            let rc = ffi::lua_cpcall(l, init_state, ptr::null_mut());
            assert_eq!(rc, 0, "Lua sandbox setup failed");
            ffi::lua_getfield_(l, ffi::LUA_REGISTRYINDEX, ERR_HANDLER.as_ptr());
            let err_handler_ref = ffi::luaL_ref(l, ffi::LUA_REGISTRYINDEX);
            ffi::lua_getfield_(l, ffi::LUA_REGISTRYINDEX, REAL_GLOBALS.as_ptr());
            let globals_ref = ffi::luaL_ref(l, ffi::LUA_REGISTRYINDEX);
            Engine {
                l,
                scripts: HashMap::default(),
                scripts_mem: 0,
                gc_count: 0,
                err_handler_ref,
                globals_ref,
                host_state: None,
            }
        }
    }

    pub fn script(&self, sha: &[u8]) -> Option<&Script> {
        self.scripts.get(sha)
    }

    /// Compiles `body` as `f_<sha>` (Redis's luaCreateFunction). Returns
    /// the sha, or the error reply text.
    pub fn create(&mut self, body: &Bytes) -> Result<String, String> {
        let sha = sha1hex(body);
        if self.scripts.contains_key(sha.as_bytes()) {
            return Ok(sha);
        }
        let (flags, skip) = shebang(body).map_err(|e| format!("ERR {e}"))?;
        let l = self.l;
        unsafe {
            let code = &body[skip..];
            if ffi::luaL_loadbuffer(
                l,
                code.as_ptr() as *const c_char,
                code.len(),
                c"@user_script".as_ptr(),
            ) != 0
            {
                let msg = String::from_utf8_lossy(to_bytes(l, -1).unwrap_or(b"")).into_owned();
                ffi::lua_pop(l, 1);
                return Err(format!("ERR Error compiling script (new function): {msg}"));
            }
            ffi::lua_pushvalue(l, -1);
            let key = std::ffi::CString::new(format!("f_{sha}")).expect("hex");
            ffi::lua_setfield(l, ffi::LUA_REGISTRYINDEX, key.as_ptr());
            let lua_ref = ffi::luaL_ref(l, ffi::LUA_REGISTRYINDEX);
            self.scripts_mem += 40 + body.len();
            self.scripts.insert(
                sha.clone().into_bytes(),
                Script {
                    body: body.clone(),
                    flags,
                    lua_ref,
                },
            );
        }
        Ok(sha)
    }

    /// The host's state kept with this interpreter (see `host_state`).
    pub fn host_state(&mut self) -> &mut Option<Box<dyn std::any::Any + Send>> {
        &mut self.host_state
    }

    /// Runs `target` with KEYS and ARGV, its redis.calls going to `host`,
    /// writing its reply (or error) to `host.out()`. Returns the random
    /// state to keep.
    pub fn run(
        &mut self,
        host: &mut dyn Host,
        scripting: RunSetup,
        target: Target,
        keys: &[Bytes],
        argv: &[Bytes],
    ) -> u64 {
        let sha = match target {
            Target::Script { sha, .. } => sha,
            Target::Function { name, .. } => name,
        };
        let l = self.l;
        // SAFETY: the run (and with it the pointer) ends before `host`'s
        // borrow does; only the lifetime is erased.
        let host: *mut (dyn Host + 'static) =
            unsafe { std::mem::transmute::<*mut (dyn Host + '_), *mut (dyn Host + 'static)>(host) };
        let mut run = Run {
            host,
            resp3: false,
            gate: scripting.gate.clone(),
            rand48: scripting.rand48,
            scratch: Vec::new(),
            panic: None,
            name: sha,
            on_worker: scripting.on_worker,
        };
        let threshold = scripting.threshold_ms;
        let prev = RUN.with(|r| r.replace((&mut run as *mut Run).cast()));
        unsafe {
            ffi::lua_rawgeti_(l, ffi::LUA_REGISTRYINDEX, self.err_handler_ref as _);
            let nargs = match target {
                Target::Script { lua_ref, .. } => {
                    ffi::lua_rawgeti_(l, ffi::LUA_REGISTRYINDEX, lua_ref as _);
                    ffi::lua_rawgeti_(l, ffi::LUA_REGISTRYINDEX, self.globals_ref as _);
                    push_array(l, keys);
                    ffi::lua_setfield(l, -2, c"KEYS".as_ptr());
                    push_array(l, argv);
                    ffi::lua_setfield(l, -2, c"ARGV".as_ptr());
                    ffi::lua_pop(l, 1);
                    0
                }
                // A function gets its keys and arguments as parameters.
                Target::Function { lua_ref, .. } => {
                    ffi::lua_rawgeti_(l, ffi::LUA_REGISTRYINDEX, lua_ref as _);
                    push_array(l, keys);
                    push_array(l, argv);
                    2
                }
            };
            scripting
                .gate
                .begin(threshold, scripting.users, scripting.dirty);
            if let Target::Function { name, .. } = target {
                scripting.gate.set_function(name, scripting.command);
            }
            if threshold > 0 {
                ffi::lua_sethook(l, Some(count_hook), ffi::LUA_MASKCOUNT, 100_000);
            }
            let err = ffi::lua_pcall(l, nargs, 1, -(nargs + 2));
            self.gc_count += 1;
            if self.gc_count == 50 {
                ffi::lua_gc(l, ffi::LUA_GCSTEP, 50);
                self.gc_count = 0;
            }
            // No callback runs any more: the caller's reply is free.
            let out = (*host).out();
            if err != 0 {
                reply::error_reply(l, out, sha);
            } else {
                reply::lua_to_resp(l, out, run.resp3);
            }
            ffi::lua_settop(l, 0);
            ffi::lua_sethook(l, None, 0, 0);
            scripting.gate.end();
        }
        RUN.with(|r| r.set(prev));
        if let Some(p) = run.panic.take() {
            std::panic::resume_unwind(p);
        }
        run.rand48
    }
}

/// A script placed on the worker (expected short) that has run this long
/// hands the worker's other tasks to another thread.
const HAND_OFF_AFTER_MS: u64 = 2;

/// A run this short lets the next run of the same script or function stay
/// on its worker thread.
const FAST_RUN_US: u64 = 200;
/// Bound on the remembered fast scripts (the set restarts when full).
const FAST_MAX: usize = 10_000;

impl Scripting {
    /// Whether the script or function `key` (its sha or name) ran briefly
    /// last time. Handing the worker's other tasks to another thread
    /// (`in_place`) costs several microseconds, more than a short script's
    /// whole run: such a script runs on the worker directly (if this run
    /// turns out long, the other worker still serves the connections and
    /// their BUSY replies); any other (a first run, a slow one) is placed
    /// off the worker first.
    pub fn is_fast(&self, key: &str) -> bool {
        self.fast.contains(key)
    }

    /// Records how long a run took, for `is_fast`.
    pub fn note_run(&mut self, key: &str, was_fast: bool, micros: u64) {
        if micros < FAST_RUN_US {
            if !was_fast {
                if self.fast.len() >= FAST_MAX {
                    self.fast.clear();
                }
                self.fast.insert(key.to_string());
            }
        } else if was_fast {
            self.fast.remove(key);
        }
    }
}

/// Runs `f` where blocking the thread is fine: a script holds the store
/// lock for its whole run, so on the server's runtime the worker hands its
/// other tasks to another thread (`block_in_place`) and the connections
/// keep being served (BUSY replies) while it runs.
pub fn in_place<R>(f: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Called by a script that runs on a runtime worker directly and turned
/// out long: like `in_place` from the start, the worker's other tasks move
/// to another thread (so connections get their BUSY replies, and with one
/// worker are served at all) while this thread goes on with the script.
/// `block_in_place` takes the worker back when its closure ends before the
/// new thread took it over, so the closure waits until a task spawned here
/// has run elsewhere. True when the runtime is served by another thread
/// (or this is no runtime worker); false to try again later.
fn hand_off_worker() -> bool {
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::runtime::{Handle, RuntimeFlavor};
    let h = match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => h,
        _ => return true,
    };
    let served = Arc::new(AtomicBool::new(false));
    let flag = served.clone();
    h.spawn(async move { flag.store(true, Ordering::Release) });
    tokio::task::block_in_place(|| {
        for _ in 0..200 {
            if served.load(Ordering::Acquire) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    });
    served.load(Ordering::Acquire)
}

/// What a run executes: a cached EVAL script or a library function.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    Script { sha: &'a str, lua_ref: c_int },
    Function { name: &'a str, lua_ref: c_int },
}

/// What a run needs besides the engine.
pub struct RunSetup {
    /// The calling command (FUNCTION STATS shows it for a function).
    pub command: Vec<Bytes>,
    pub gate: Arc<Gate>,
    /// The ACL users (AUTH and HELLO check them while busy).
    pub users: crate::acl::Users,
    /// The keyspace's change count (a WATCH answered while busy).
    pub dirty: u64,
    pub threshold_ms: u64,
    pub rand48: u64,
    /// Runs on a runtime worker directly (`commands::run_placed`).
    pub on_worker: bool,
}

impl Scripting {
    pub fn rand48(&self) -> u64 {
        self.rand48
    }

    pub fn set_rand48(&mut self, s: u64) {
        self.rand48 = s;
    }
}

pub(crate) unsafe fn push_array(l: *mut lua_State, items: &[Bytes]) {
    ffi::lua_createtable(l, items.len() as c_int, 0);
    for (i, it) in items.iter().enumerate() {
        push_bytes(l, it);
        ffi::lua_rawseti_(l, -2, i as c_int + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rand48_matches_redis_sequence() {
        // Redis 7.0: math.randomseed(7); math.random(1000) twice -> 267, 683.
        let mut s = RAND48_INIT;
        srand48(&mut s, 7);
        let mut pick = |u: f64| {
            let r = (lrand48(&mut s) % RAND48_MAX) as f64 / RAND48_MAX as f64;
            (r * u).floor() + 1.0
        };
        assert_eq!(pick(1000.0), 267.0);
        assert_eq!(pick(1000.0), 683.0);
    }

    #[test]
    fn shebang_flags() {
        assert_eq!(shebang(b"return 1").unwrap(), (FLAG_EVAL_COMPAT, 0));
        assert_eq!(
            shebang(b"#!lua flags=no-writes,allow-oom\nreturn 1").unwrap(),
            (FLAG_NO_WRITES | FLAG_ALLOW_OOM, 31)
        );
        assert_eq!(shebang(b"#!lua").unwrap_err(), "Invalid script shebang");
        assert_eq!(
            shebang(b"#!lua flags=bad\n").unwrap_err(),
            "Unexpected flag in script shebang: bad"
        );
        assert_eq!(
            shebang(b"#!py\n").unwrap_err(),
            "Unexpected engine in script shebang: #!py"
        );
    }
}

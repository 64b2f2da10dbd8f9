//! MEMORY STATS, DOCTOR, MALLOC-STATS and PURGE (Redis's object.c memory
//! commands), from jemalloc's counters and the keyspace's own overheads.
//!
//! Reads state only through `Ctx` and `info`'s memory figures, and changes
//! none: PURGE asks jemalloc, not the keyspace.

use bytes::Bytes;

use super::info::{mem_stats, MemStats};
use super::*;

const MEM_FLAGS: u32 = 0;

pub static SUBS: &[Spec] = &[
    spec(
        "stats",
        2,
        MEM_FLAGS,
        (0, 0, 0),
        "server",
        "4.0.0",
        "Show memory usage details",
        SLOW,
        stats,
    ),
    spec(
        "doctor",
        2,
        MEM_FLAGS,
        (0, 0, 0),
        "server",
        "4.0.0",
        "Outputs memory problems report",
        SLOW,
        doctor,
    ),
    spec(
        "malloc-stats",
        2,
        MEM_FLAGS,
        (0, 0, 0),
        "server",
        "4.0.0",
        "Show allocator internal stats",
        SLOW,
        malloc_stats,
    ),
    spec(
        "purge",
        2,
        MEM_FLAGS,
        (0, 0, 0),
        "server",
        "4.0.0",
        "Ask the allocator to release memory",
        SLOW,
        purge,
    ),
    spec(
        "usage",
        -3,
        READONLY,
        (2, 2, 1),
        "server",
        "4.0.0",
        "Estimate the memory usage of a key",
        &["read", "slow"],
        super::debug::memory_usage,
    ),
    spec(
        "help",
        2,
        LOADING | STALE,
        (0, 0, 0),
        "server",
        "4.0.0",
        "Show helpful text about the different subcommands",
        SLOW,
        super::debug::memory_help,
    ),
];

/// What MEMORY STATS and DOCTOR report (Redis's getMemoryOverheadData).
struct Overhead {
    m: MemStats,
    peak: u64,
    startup: u64,
    clients: u64,
    dbs: Vec<(usize, u64, u64)>,
    total: u64,
    keys: u64,
    dataset: u64,
}

/// What the connected clients but replicas use (INFO's
/// mem_clients_normal, MEMORY STATS' clients.normal): each as CLIENT
/// LIST's tot-mem counts it.
pub fn clients_memory(store: &Store) -> u64 {
    use crate::commands::client_eviction::{client_memory, Figures};
    store
        .clients
        .values()
        .filter(|c| !store.repl.is_replica(c.id))
        .map(|c| client_memory(store, c, &Figures::of(c)) as u64)
        .sum()
}

fn overhead(store: &Store) -> Overhead {
    let m = mem_stats();
    let peak = store.peak_memory().max(m.used);
    let startup = store.startup_allocated;
    let clients = clients_memory(store);
    let dbs: Vec<(usize, u64, u64)> = store
        .ks
        .dbs()
        .iter()
        .filter(|d| !d.is_empty())
        .map(|d| {
            let (main, expires) = d.overhead();
            (d.id, main as u64, expires as u64)
        })
        .collect();
    // As getMemoryOverheadData: the replication buffers and the AOF
    // buffer are overhead too.
    let buffers = store.repl.backlog_memory() as u64 + store.not_counted_for_evict();
    let total = startup + clients + buffers + dbs.iter().map(|d| d.1 + d.2).sum::<u64>();
    let keys = store.ks.total_keys() as u64;
    let dataset = m.used.saturating_sub(total);
    Overhead {
        m,
        peak,
        startup,
        clients,
        dbs,
        total,
        keys,
        dataset,
    }
}

/// Redis computes these ratios in single precision and prints them with
/// `%.17g`.
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        (a as f32 / b as f32) as f64
    }
}

fn stats(ctx: &mut Ctx, _args: &[Bytes]) {
    let o = overhead(ctx.store);
    let out = &mut *ctx.out;
    out.map(27 + o.dbs.len());
    let int = |out: &mut Out, k: &str, v: i64| {
        out.bulk(k.as_bytes());
        out.int(v);
    };
    int(out, "peak.allocated", o.peak as i64);
    int(out, "total.allocated", o.m.used as i64);
    int(out, "startup.allocated", o.startup as i64);
    int(
        out,
        "replication.backlog",
        ctx.store.repl.backlog_memory() as i64,
    );
    int(out, "clients.slaves", ctx.store.repl.buffered() as i64);
    int(out, "clients.normal", o.clients as i64);
    int(out, "cluster.links", 0);
    int(
        out,
        "aof.buffer",
        ctx.store.persist.aof().map_or(0, |a| a.buffered()) as i64,
    );
    int(out, "lua.caches", 0);
    int(out, "functions.caches", 0);
    for (id, main, expires) in &o.dbs {
        out.bulk(format!("db.{id}").as_bytes());
        out.map(3);
        int(out, "overhead.hashtable.main", *main as i64);
        int(out, "overhead.hashtable.expires", *expires as i64);
        int(out, "overhead.hashtable.slot-to-keys", 0);
    }
    int(out, "overhead.total", o.total as i64);
    int(out, "keys.count", o.keys as i64);
    let per_key = (o.m.used.saturating_sub(o.startup))
        .checked_div(o.keys)
        .unwrap_or(0);
    int(out, "keys.bytes-per-key", per_key as i64);
    int(out, "dataset.bytes", o.dataset as i64);
    let dbl = |out: &mut Out, k: &str, v: f64| {
        out.bulk(k.as_bytes());
        out.double(v);
    };
    let net = o.m.used.saturating_sub(o.startup);
    dbl(out, "dataset.percentage", ratio(o.dataset, net) * 100.0);
    dbl(out, "peak.percentage", ratio(o.m.used, o.peak) * 100.0);
    int(out, "allocator.allocated", o.m.allocated as i64);
    int(out, "allocator.active", o.m.active as i64);
    int(out, "allocator.resident", o.m.resident as i64);
    // Each ratio with the difference it stands for.
    let m = &o.m;
    for (r, b, x, y) in [
        (
            "allocator-fragmentation.ratio",
            "allocator-fragmentation.bytes",
            m.active,
            m.allocated,
        ),
        (
            "allocator-rss.ratio",
            "allocator-rss.bytes",
            m.resident,
            m.active,
        ),
        (
            "rss-overhead.ratio",
            "rss-overhead.bytes",
            m.rss,
            m.resident,
        ),
        ("fragmentation", "fragmentation.bytes", m.rss, m.used),
    ] {
        dbl(out, r, ratio(x, y));
        int(out, b, x as i64 - y as i64);
    }
}

/// Redis's getMemoryDoctorReport, over the figures latchkey has (no
/// replicas, no Lua cache yet).
fn doctor(ctx: &mut Ctx, _args: &[Bytes]) {
    let o = overhead(ctx.store);
    let mut report = String::new();
    if o.m.used < 1024 * 1024 * 5 {
        report.push_str("Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting.\n");
        return ctx.out.verbatim(report.as_bytes());
    }
    let big_peak = o.peak as f64 / o.m.used as f64 > 1.5;
    let frag = ratio(o.m.rss, o.m.used);
    let alloc_frag = ratio(o.m.active, o.m.allocated);
    let alloc_rss = ratio(o.m.resident, o.m.active);
    let rss_overhead = ratio(o.m.rss, o.m.resident);
    let high_frag = frag > 1.4 && (o.m.rss as i64 - o.m.used as i64) > 10 << 20;
    let high_alloc_frag = alloc_frag > 1.1 && (o.m.active as i64 - o.m.allocated as i64) > 10 << 20;
    let high_alloc_rss = alloc_rss > 1.1 && (o.m.resident as i64 - o.m.active as i64) > 10 << 20;
    let high_proc_rss = rss_overhead > 1.1 && (o.m.rss as i64 - o.m.resident as i64) > 10 << 20;
    let clients = ctx.store.clients.len().max(1) as u64;
    let big_client_buf = o.clients / clients > 1 << 20;
    if !(big_peak
        || high_frag
        || high_alloc_frag
        || high_alloc_rss
        || high_proc_rss
        || big_client_buf)
    {
        report.push_str("Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.\n");
        return ctx.out.verbatim(report.as_bytes());
    }
    report.push_str("Sam, I detected a few issues in this Redis instance memory implants:\n\n");
    if big_peak {
        report.push_str(" * Peak memory: In the past this instance used more than 150% the memory that is currently using. The allocator is normally not able to release memory after a peak, so you can expect to see a big fragmentation ratio, however this is actually harmless and is only due to the memory peak, and if the Redis instance Resident Set Size (RSS) is currently bigger than expected, the memory will be used as soon as you fill the Redis instance with more data. If the memory peak was only occasional and you want to try to reclaim memory, please try the MEMORY PURGE command, otherwise the only other option is to shutdown and restart the instance.\n\n");
    }
    if high_frag {
        report.push_str(&format!(" * High total RSS: This instance has a memory fragmentation and RSS overhead greater than 1.4 (this means that the Resident Set Size of the Redis process is much larger than the sum of the logical allocations Redis performed). This problem is usually due either to a large peak memory (check if there is a peak memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. If the problem is a large peak memory, then there is no issue. Otherwise, make sure you are using the Jemalloc allocator and not the default libc malloc. Note: The currently used allocator is \"{}\".\n\n", super::info::jemalloc_version()));
    }
    if high_alloc_frag {
        report.push_str(" * High allocator fragmentation: This instance has an allocator external fragmentation greater than 1.1. This problem is usually due either to a large peak memory (check if there is a peak memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. You can try enabling 'activedefrag' config option.\n\n");
    }
    if high_alloc_rss {
        report.push_str(" * High allocator RSS overhead: This instance has an RSS memory overhead is greater than 1.1 (this means that the Resident Set Size of the allocator is much larger than the sum what the allocator actually holds). This problem is usually due to a large peak memory (check if there is a peak memory entry above in the report), you can try the MEMORY PURGE command to reclaim it.\n\n");
    }
    if high_proc_rss {
        report.push_str(" * High process RSS overhead: This instance has non-allocator RSS memory overhead is greater than 1.1 (this means that the Resident Set Size of the Redis process is much larger than the RSS the allocator holds). This problem may be due to Lua scripts or Modules.\n\n");
    }
    if big_client_buf {
        report.push_str(" * Big client buffers: The clients output buffers in this instance are greater than 200K per client (on average). This may result from different causes, like Pub/Sub clients subscribed to channels bot not receiving data fast enough, so that data piles on the Redis instance output buffer, or clients sending commands with large replies or very large sequences of commands in the same pipeline. Please use the CLIENT LIST command in order to investigate the issue if it causes problems in your instance, or to understand better why certain clients are using a big amount of memory.\n\n");
    }
    report.push_str("I'm here to keep you safe, Sam. I want to help you.\n");
    ctx.out.verbatim(report.as_bytes());
}

/// jemalloc's own statistics report (malloc_stats_print).
fn malloc_stats(ctx: &mut Ctx, _args: &[Bytes]) {
    let mut text: Vec<u8> = Vec::new();
    extern "C" fn write_cb(opaque: *mut std::ffi::c_void, s: *const std::ffi::c_char) {
        // SAFETY: `opaque` is the Vec passed below, alive for the call;
        // jemalloc passes a NUL-terminated string.
        let (buf, s) = unsafe { (&mut *(opaque as *mut Vec<u8>), std::ffi::CStr::from_ptr(s)) };
        buf.extend_from_slice(s.to_bytes());
    }
    // SAFETY: the callback only appends to `text`, which outlives the call;
    // a null options string asks for the default report.
    unsafe {
        tikv_jemalloc_sys::malloc_stats_print(
            Some(write_cb),
            &mut text as *mut Vec<u8> as *mut std::ffi::c_void,
            std::ptr::null(),
        );
    }
    if text.is_empty() {
        text.extend_from_slice(b"Stats not supported for the current allocator");
    }
    ctx.out.verbatim(&text);
}

/// Returns dirty pages of every arena to the system (Redis's
/// jemalloc_purge).
fn purge(ctx: &mut Ctx, _args: &[Bytes]) {
    // MALLCTL_ARENAS_ALL is 4096 in jemalloc 5.
    let name = b"arena.4096.purge\0";
    // SAFETY: a void mallctl with no old or new value.
    let r = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr() as *const std::ffi::c_char,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if r != 0 {
        return ctx.error("ERR Error purging dirty pages");
    }
    ctx.out.ok();
}

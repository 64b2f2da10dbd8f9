//! INFO [section ...] in Redis 7.0's text format.
//!
//! Only fields latchkey can state truthfully are printed: real measurements
//! (memory from jemalloc and /proc, CPU from getrusage) and the constant
//! answers of a server without AOF, replication or cluster support
//! (`aof_enabled:0`, `role:master`, ...). Fields Redis derives from its cron
//! sampling (instantaneous_*) are left out.

use std::fmt::Write;

use bytes::Bytes;

use super::*;
use crate::server::Store;

/// Sections in Redis's output order, and whether "default" includes them.
const SECTIONS: &[(&str, bool)] = &[
    ("server", true),
    ("clients", true),
    ("memory", true),
    ("persistence", true),
    ("stats", true),
    ("replication", true),
    ("cpu", true),
    ("modules", false),
    ("commandstats", false),
    ("errorstats", true),
    ("latencystats", false),
    ("cluster", true),
    ("keyspace", true),
    // Latchkey's own, shown when asked by name or with all/everything.
    ("locks", false),
];

pub fn info(ctx: &mut Ctx, args: &[Bytes]) {
    let mut want = [false; SECTIONS.len()];
    if args.len() == 1 {
        for (w, (_, d)) in want.iter_mut().zip(SECTIONS) {
            *w = *d;
        }
    }
    for a in &args[1..] {
        let a = a.to_ascii_lowercase();
        for (i, (name, default)) in SECTIONS.iter().enumerate() {
            want[i] |= match &a[..] {
                b"all" => *name != "modules",
                b"everything" => true,
                b"default" => *default,
                s => s == name.as_bytes(),
            };
        }
    }
    let mut s = String::new();
    for (i, (name, _)) in SECTIONS.iter().enumerate() {
        if !want[i] {
            continue;
        }
        if !s.is_empty() {
            s.push_str("\r\n");
        }
        section(ctx.store, name, &mut s);
    }
    ctx.out.verbatim(s.as_bytes());
}

/// INFO replication, a primary's fields as Redis 7.0's.
/// INFO locks (Latchkey's own section): the lock service's state, and
/// what a promoted replica or a primary with `tp-min-acks` holds of it.
fn locks(store: &Store, f: &mut dyn FnMut(&str, &dyn std::fmt::Display)) {
    let ks = &store.ks;
    f("bound_keys", &ks.bindings().len());
    f("shared_keys", &ks.shares().len());
    f("lock_waiters", &ks.blocking.lock_waiters_all().len());
    f("watched_keys", &ks.watches.keys_len());
    f("last_fencing_token", &ks.bindings().last_token());
    let s = ks.sessions();
    f("sessions_named", &s.named());
    f("sessions_replicated", &s.replicated_ids().len());
    f("sessions_detached", &s.detached());
    f("grants_awaiting_acks", &ks.pending_grant_count());
    let (seq, log) = store.repl.lock_log_info();
    f("lock_records_seq", &seq);
    f("lock_log_bytes", &log);
}

fn replication(store: &Store, f: &mut dyn FnMut(&str, &dyn std::fmt::Display)) {
    let info = store.repl.info();
    match store.repl.master() {
        None => f("role", &"master"),
        Some(m) => {
            use crate::replication::MasterLink;
            let r = &store.config().repl;
            let up = m.status == MasterLink::Connected;
            f("role", &"slave");
            f("master_host", &m.host);
            f("master_port", &m.port);
            f("master_link_status", &if up { "up" } else { "down" });
            let io = if up || m.transfer.is_some() {
                m.last_io.elapsed().as_secs() as i64
            } else {
                -1
            };
            f("master_last_io_seconds_ago", &io);
            f(
                "master_sync_in_progress",
                &((m.status == MasterLink::Sync) as u8),
            );
            f("slave_read_repl_offset", &m.read_offset.max(info.offset));
            f("slave_repl_offset", &info.offset);
            if let Some((size, read, started)) = m.transfer {
                let _ = started;
                f("master_sync_total_bytes", &size);
                f("master_sync_read_bytes", &read);
                f("master_sync_left_bytes", &(size - read));
                let perc = if size > 0 {
                    read as f64 * 100.0 / size as f64
                } else {
                    0.0
                };
                f("master_sync_perc", &format_args!("{perc:.2}"));
                f(
                    "master_sync_last_io_seconds_ago",
                    &m.last_io.elapsed().as_secs(),
                );
            }
            if !up {
                let since = m.down_since.map_or(-1, |d| d.elapsed().as_secs() as i64);
                f("master_link_down_since_seconds", &since);
            }
            f("slave_priority", &r.replica_priority);
            f("slave_read_only", &(r.replica_read_only as u8));
            f("replica_announced", &(r.replica_announced as u8));
        }
    }
    f("connected_slaves", &info.replicas.len());
    // Shown while `min-replicas-to-write` is in force, as Redis.
    let r = &store.config().repl;
    if r.min_replicas_to_write != 0 && r.min_replicas_max_lag != 0 {
        f(
            "min_slaves_good_slaves",
            &store.repl.good_replicas(r.min_replicas_max_lag),
        );
    }
    for (i, s) in info.replicas.iter().enumerate() {
        f(
            &format!("slave{i}"),
            &format_args!(
                "ip={},port={},state={},offset={},lag={}",
                s.ip, s.port, s.state, s.offset, s.lag
            ),
        );
    }
    f("master_failover_state", &store.repl.failover_state());
    f("master_replid", &info.replid);
    f("master_replid2", &info.replid2);
    f("master_repl_offset", &info.offset);
    f("second_repl_offset", &info.second_offset);
    match info.backlog {
        Some((size, first, histlen)) => {
            f("repl_backlog_active", &1);
            f("repl_backlog_size", &size);
            f("repl_backlog_first_byte_offset", &first);
            f("repl_backlog_histlen", &histlen);
        }
        None => {
            f("repl_backlog_active", &0);
            // What the backlog will be (`repl-backlog-size`), as Redis
            // shows it before any replica creates one.
            f("repl_backlog_size", &store.config().repl.backlog_size);
            f("repl_backlog_first_byte_offset", &0);
            f("repl_backlog_histlen", &0);
        }
    }
}

/// Appends `# Title` and the section's `field:value` lines.
fn section(store: &Store, name: &str, s: &mut String) {
    let mut title = name.to_string();
    title[..1].make_ascii_uppercase();
    match name {
        "cpu" => title = "CPU".into(),
        "commandstats" => title = "Commandstats".into(),
        "errorstats" => title = "Errorstats".into(),
        "latencystats" => title = "Latencystats".into(),
        "locks" => title = "Locks".into(),
        _ => {}
    }
    let _ = write!(s, "# {title}\r\n");
    let mut f = |k: &str, v: &dyn std::fmt::Display| {
        let _ = write!(s, "{k}:{v}\r\n");
    };
    match name {
        "server" => server(store, &mut f),
        "clients" => {
            f("connected_clients", &store.clients.len());
            f("cluster_connections", &0);
            f("maxclients", &store.config().maxclients);
            // Postponed by CLIENT PAUSE counts too (BLOCKED_POSTPONE).
            let blocked = store.ks.blocking.blocked_clients() + store.postponed_clients();
            f("blocked_clients", &blocked);
        }
        "memory" => memory(store, &mut f),
        "persistence" => persistence(store, &mut f),
        "stats" => stats(store, &mut f),
        "replication" => replication(store, &mut f),
        "locks" => locks(store, &mut f),
        "cpu" => cpu(&mut f),
        "cluster" => f("cluster_enabled", &0),
        "commandstats" => {
            let cs = &store.stats.commands;
            for (i, (spec, parent)) in all_specs().iter().enumerate() {
                let c = cs.cmd(i);
                if c.calls == 0 && c.rejected == 0 && c.failed == 0 {
                    continue;
                }
                let name = match parent {
                    Some(p) => format!("cmdstat_{}|{}", p.name, spec.name),
                    None => format!("cmdstat_{}", spec.name),
                };
                let per_call = if c.calls == 0 {
                    0.0
                } else {
                    c.usec as f64 / c.calls as f64
                };
                let v = format!(
                    "calls={},usec={},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}",
                    c.calls, c.usec, c.rejected, c.failed
                );
                f(&name, &v);
            }
        }
        "latencystats" if store.latency_tracking() => {
            // Redis's fillPercentileDistributionLatencies: p<percentile as
            // %f trimmed>=<value in µs, %.3f>, in the table's order.
            let cs = &store.stats.commands;
            let percentiles = store.latency_percentiles();
            for (i, (spec, parent)) in all_specs().iter().enumerate() {
                let Some(h) = cs.latency(i) else {
                    continue;
                };
                let name = match parent {
                    Some(p) => format!("latency_percentiles_usec_{}|{}", p.name, spec.name),
                    None => format!("latency_percentiles_usec_{}", spec.name),
                };
                let v: Vec<String> = percentiles
                    .iter()
                    .map(|p| {
                        let at = h.value_at_percentile(*p) as f64 / 1000.0;
                        format!("p{}={at:.3}", crate::util::f_trimmed(*p))
                    })
                    .collect();
                f(&name, &v.join(","));
            }
        }
        "errorstats" => {
            for (code, n) in store.stats.commands.errors() {
                let name = format!("errorstat_{}", String::from_utf8_lossy(code));
                f(&name, &format!("count={n}"));
            }
        }
        "keyspace" => {
            let now = crate::util::now_ms();
            for db in store.ks.dbs() {
                if db.is_empty() {
                    continue;
                }
                let v = format!(
                    "keys={},expires={},avg_ttl={}",
                    db.len(),
                    db.expires_len(),
                    db.avg_ttl(now)
                );
                f(&format!("db{}", db.id), &v);
            }
        }
        _ => {}
    }
}

type Field<'a> = dyn FnMut(&str, &dyn std::fmt::Display) + 'a;

fn uname() -> String {
    // SAFETY: uname fills the zeroed struct; fields are NUL-terminated.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return String::new();
        }
        let c = |f: &[libc::c_char]| {
            std::ffi::CStr::from_ptr(f.as_ptr())
                .to_string_lossy()
                .into_owned()
        };
        format!("{} {} {}", c(&u.sysname), c(&u.release), c(&u.machine))
    }
}

fn server(store: &Store, f: &mut Field) {
    let now_us = crate::util::now_us();
    let uptime = (now_us / 1000 - store.start_ms).max(0) / 1000;
    f("redis_version", &crate::version::REDIS_VERSION);
    f("latchkey_version", &env!("CARGO_PKG_VERSION"));
    f("redis_mode", &"standalone");
    f("os", &uname());
    f("arch_bits", &(std::mem::size_of::<usize>() * 8));
    f(
        "multiplexing_api",
        &if cfg!(target_os = "linux") {
            "epoll"
        } else {
            "kqueue"
        },
    );
    f("process_id", &std::process::id());
    // `supervised` holds the mode in effect once start-up applied it.
    let supervised = match store.config().supervised.as_str() {
        m @ ("upstart" | "systemd") => m,
        _ => "no",
    };
    f("process_supervised", &supervised);
    f("run_id", &store.run_id);
    f("tcp_port", &store.config().port);
    f("server_time_usec", &now_us);
    f("uptime_in_seconds", &uptime);
    f("uptime_in_days", &(uptime / 86400));
    f("lru_clock", &crate::util::lru_clock());
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    f("executable", &exe);
    let cf = store
        .config()
        .config_file
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    f("config_file", &cf);
    if let Some(ms) = super::shutdown::shutdown_in_ms(store) {
        f("shutdown_in_milliseconds", &ms);
    }
}

/// One reading of the allocator and the process.
pub struct MemStats {
    /// What the program holds: `allocated` less jemalloc's thread caches
    /// (`crate::stats::held`), INFO's used_memory.
    pub used: u64,
    /// Bytes the program has allocated (jemalloc `stats.allocated`).
    pub allocated: u64,
    pub active: u64,
    pub resident: u64,
    /// Process resident set size from /proc/self/statm.
    pub rss: u64,
    /// Whether jemalloc is the allocator in use (the binary's global one).
    pub jemalloc: bool,
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

pub fn process_rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|pages| pages * page_size())
        .unwrap_or(0)
}

pub fn mem_stats() -> MemStats {
    use tikv_jemalloc_ctl::{epoch, stats};
    let _ = epoch::advance();
    let allocated = stats::allocated::read().unwrap_or(0) as u64;
    let used = crate::stats::held(allocated);
    let active = stats::active::read().unwrap_or(0) as u64;
    let resident = stats::resident::read().unwrap_or(0) as u64;
    let rss = process_rss();
    MemStats {
        allocated,
        used,
        active,
        resident,
        rss,
        // Linked but not the global allocator (library tests), jemalloc has
        // served next to nothing.
        jemalloc: allocated >= 64 * 1024,
    }
}

pub(super) fn jemalloc_version() -> String {
    let v = tikv_jemalloc_ctl::version::read().unwrap_or("unknown");
    format!("jemalloc-{}", v.split('-').next().unwrap_or(v))
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "0.00".into()
    } else {
        format!("{:.2}", a as f64 / b as f64)
    }
}

fn memory(store: &Store, f: &mut Field) {
    let m = mem_stats();
    // Without jemalloc as the allocator there is no allocation counter, so
    // the resident size is the only real measurement of what is used.
    let used = if m.jemalloc { m.used } else { m.rss };
    f("used_memory", &used);
    f("used_memory_human", &bytes_to_human(used));
    f("used_memory_rss", &m.rss);
    f("used_memory_rss_human", &bytes_to_human(m.rss));
    let peak = store.peak_memory().max(used);
    f("used_memory_peak", &peak);
    f("used_memory_peak_human", &bytes_to_human(peak));
    f(
        "used_memory_peak_perc",
        &format!("{:.2}%", used as f64 * 100.0 / peak.max(1) as f64),
    );
    f("used_memory_startup", &store.startup_allocated);
    if m.jemalloc {
        f("allocator_allocated", &m.allocated);
        f("allocator_active", &m.active);
        f("allocator_resident", &m.resident);
    }
    // SAFETY: sysconf has no preconditions.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) }.max(0) as u64;
    let total = pages * page_size();
    f("total_system_memory", &total);
    f("total_system_memory_human", &bytes_to_human(total));
    scripts_memory(store, f);
    let cfg = store.config();
    f("maxmemory", &cfg.maxmemory);
    f("maxmemory_human", &bytes_to_human(cfg.maxmemory));
    f("maxmemory_policy", &cfg.maxmemory_policy.name());
    if m.jemalloc {
        f("allocator_frag_ratio", &ratio(m.active, m.allocated));
        f(
            "allocator_frag_bytes",
            &(m.active as i64 - m.allocated as i64),
        );
        f("allocator_rss_ratio", &ratio(m.resident, m.active));
        f(
            "allocator_rss_bytes",
            &(m.resident as i64 - m.active as i64),
        );
        f("rss_overhead_ratio", &ratio(m.rss, m.resident));
        f("rss_overhead_bytes", &(m.rss as i64 - m.resident as i64));
    }
    f("mem_fragmentation_ratio", &ratio(m.rss, used));
    f("mem_fragmentation_bytes", &(m.rss as i64 - used as i64));
    f("mem_not_counted_for_evict", &store.not_counted_for_evict());
    // The backlog and the replicas' buffers are apart here (one shared
    // buffer in Redis 7.0): the total is their sum.
    let backlog = store.repl.backlog_memory();
    let replicas = store.repl.buffered();
    f("mem_replication_backlog", &backlog);
    f("mem_total_replication_buffers", &(backlog + replicas));
    f("mem_clients_slaves", &replicas);
    f("mem_clients_normal", &super::memory::clients_memory(store));
    f("mem_cluster_links", &0);
    f(
        "mem_aof_buffer",
        &store.persist.aof().map_or(0, |a| a.buffered()),
    );
    f(
        "mem_allocator",
        &if m.jemalloc {
            jemalloc_version()
        } else {
            "libc".into()
        },
    );
    let lazy = store.ks.lazyfree();
    f("lazyfree_pending_objects", &lazy.pending());
    f("lazyfreed_objects", &lazy.freed());
}

/// The Lua interpreters, the script cache and the FUNCTION libraries.
fn scripts_memory(store: &Store, f: &mut Field) {
    let vm = store.scripting.lua_memory();
    let fns = &store.scripting.functions;
    let (fvm, fmem) = (fns.vm_memory(), fns.memory());
    let scripts = store.scripting.scripts_memory() + fmem;
    f("used_memory_lua", &vm);
    f("used_memory_vm_eval", &vm);
    f("used_memory_lua_human", &bytes_to_human(vm as u64));
    f(
        "used_memory_scripts_eval",
        &store.scripting.scripts_memory(),
    );
    f("number_of_cached_scripts", &store.scripting.count());
    f("number_of_functions", &fns.callable_count());
    f("number_of_libraries", &fns.library_count());
    f("used_memory_vm_functions", &fvm);
    f("used_memory_vm_total", &(vm + fvm));
    f(
        "used_memory_vm_total_human",
        &bytes_to_human((vm + fvm) as u64),
    );
    f("used_memory_functions", &fmem);
    f("used_memory_scripts", &scripts);
    f("used_memory_scripts_human", &bytes_to_human(scripts as u64));
}

fn persistence(store: &Store, f: &mut Field) {
    // No load runs while commands do, and no save forks.
    for k in [
        "loading",
        "async_loading",
        "current_cow_peak",
        "current_cow_size",
        "current_cow_size_age",
    ] {
        f(k, &0);
    }
    // A background save has no fork: its progress shows as Redis shows a
    // child's (keys written of the keys in the image).
    let job = store.persist.status().job.as_ref();
    let (processed, total) = job.map_or((0, 0), |j| {
        (
            j.keys_written(store.ks.dbs()).min(j.keys_total),
            j.keys_total,
        )
    });
    let perc = if total > 0 {
        processed as f64 * 100.0 / total as f64
    } else {
        0.0
    };
    f("current_fork_perc", &format!("{perc:.2}"));
    f("current_save_keys_processed", &processed);
    f("current_save_keys_total", &total);
    f(
        "rdb_changes_since_last_save",
        &store.persist.changes_since_save(store.ks.dirty()),
    );
    f(
        "rdb_bgsave_in_progress",
        &(store.persist.rdb_job_running() as u8),
    );
    f("rdb_last_save_time", &store.persist.lastsave());
    let sv = store.persist.status();
    f(
        "rdb_last_bgsave_status",
        &if sv.last_bgsave_ok { "ok" } else { "err" },
    );
    f("rdb_last_bgsave_time_sec", &sv.last_bgsave_secs);
    f(
        "rdb_current_bgsave_time_sec",
        &job.map_or(-1, |j| j.started.elapsed().as_secs() as i64),
    );
    f("rdb_saves", &sv.saves);
    f("rdb_last_cow_size", &0);
    f(
        "rdb_last_load_keys_expired",
        &store.persist.status().load_keys_expired,
    );
    f(
        "rdb_last_load_keys_loaded",
        &store.persist.status().load_keys_loaded,
    );
    f("aof_enabled", &(store.config().appendonly as u8));
    f(
        "aof_rewrite_in_progress",
        &(store.persist.rewrite_running() as u8),
    );
    f(
        "aof_rewrite_scheduled",
        &(store.persist.status().rewrite_scheduled as u8),
    );
    f("aof_last_rewrite_time_sec", &-1);
    f("aof_current_rewrite_time_sec", &-1);
    f(
        "aof_last_bgrewrite_status",
        &if store.persist.status().last_rewrite_ok {
            "ok"
        } else {
            "err"
        },
    );
    f("aof_rewrites", &store.persist.status().aof_rewrites);
    f("aof_rewrites_consecutive_failures", &0);
    f(
        "aof_last_write_status",
        &if store.persist.status().aof_write_error.is_none() {
            "ok"
        } else {
            "err"
        },
    );
    f("aof_last_cow_size", &0);
    f("module_fork_in_progress", &0);
    f("module_fork_last_cow_size", &0);
    if let (true, Some(aof)) = (store.config().appendonly, store.persist.aof()) {
        f("aof_current_size", &aof.total());
        f("aof_base_size", &aof.base_total);
        f(
            "aof_pending_rewrite",
            &(store.persist.status().rewrite_scheduled as u8),
        );
        f("aof_buffer_length", &aof.buffered());
        f("aof_pending_bio_fsync", &0);
        f("aof_delayed_fsync", &0);
    }
}

fn stats(store: &Store, f: &mut Field) {
    let st = &store.stats;
    let hits: u64 = st.keyspace_hits + store.ks.dbs().iter().map(|d| d.hits).sum::<u64>();
    let misses: u64 = st.keyspace_misses + store.ks.dbs().iter().map(|d| d.misses).sum::<u64>();
    f("total_connections_received", &st.total_connections);
    f("total_commands_processed", &st.total_commands);
    f("total_net_input_bytes", &st.net_input_bytes);
    let unreported: u64 = store
        .clients
        .values()
        .map(|c| {
            c.signal
                .unreported_out
                .load(std::sync::atomic::Ordering::Relaxed)
        })
        .sum();
    f(
        "total_net_output_bytes",
        &(st.net_output_bytes + unreported),
    );
    f("total_net_repl_input_bytes", &0);
    f("total_net_repl_output_bytes", &0);
    f("rejected_connections", &st.rejected_connections);
    let sync = store.repl.info().stats;
    f("sync_full", &sync.full);
    f("sync_partial_ok", &sync.partial_ok);
    f("sync_partial_err", &sync.partial_err);
    f("expired_keys", &store.ks.expired_keys());
    f("evicted_keys", &store.ks.evicted_keys());
    f("evicted_clients", &store.stats.evicted_clients);
    f("keyspace_hits", &hits);
    f("keyspace_misses", &misses);
    f("pubsub_channels", &store.pubsub.numchannels(false));
    f("pubsub_patterns", &store.pubsub.numpat());
    f("pubsubshard_channels", &store.pubsub.numchannels(true));
    f("latest_fork_usec", &0);
    f("total_forks", &0);
    let (tk, ti, tp) = store.tracking.totals();
    f("tracking_total_keys", &tk);
    f("tracking_total_items", &ti);
    f("tracking_total_prefixes", &tp);
    f("unexpected_error_replies", &0);
    f("total_error_replies", &st.commands.total_errors);
}

fn cpu(f: &mut Field) {
    let usage = |who| {
        // SAFETY: getrusage fills the zeroed struct.
        let mut r: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(who, &mut r) };
        let t = |tv: libc::timeval| format!("{}.{:06}", tv.tv_sec, tv.tv_usec);
        (t(r.ru_stime), t(r.ru_utime))
    };
    let (sys, user) = usage(libc::RUSAGE_SELF);
    let (csys, cuser) = usage(libc::RUSAGE_CHILDREN);
    f("used_cpu_sys", &sys);
    f("used_cpu_user", &user);
    f("used_cpu_sys_children", &csys);
    f("used_cpu_user_children", &cuser);
}

/// Redis's `bytesToHuman`: B below 1K, else two decimals and K/M/G/T/P.
pub fn bytes_to_human(n: u64) -> String {
    const K: u64 = 1024;
    let units = [
        (K, 'K'),
        (K.pow(2), 'M'),
        (K.pow(3), 'G'),
        (K.pow(4), 'T'),
        (K.pow(5), 'P'),
    ];
    if n < K {
        return format!("{n}B");
    }
    for (div, u) in units {
        if n < div * K {
            return format!("{:.2}{u}", n as f64 / div as f64);
        }
    }
    format!("{n}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes_like_redis() {
        assert_eq!(bytes_to_human(1023), "1023B");
        assert_eq!(bytes_to_human(1039984), "1015.61K");
        assert_eq!(bytes_to_human(7168000), "6.84M");
        assert_eq!(bytes_to_human(25276502016), "23.54G");
        assert_eq!(bytes_to_human(1152), "1.12K");
    }
}

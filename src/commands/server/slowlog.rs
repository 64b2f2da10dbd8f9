//! SLOWLOG and LATENCY (Redis's slowlog.c and latency.c): read the slow
//! log and the latency monitor that `call` feeds (`crate::stats`).
//!
//! Reaches the slow log and the latency monitor only through `Ctx`
//! (`store.slowlog`, `store.latency`). Must not feed them: `call` does.

use bytes::Bytes;

use super::*;

const ADMIN_SUB: u32 = ADMIN | LOADING | STALE;
const ADMIN_NOSCRIPT: u32 = ADMIN | NOSCRIPT | LOADING | STALE;

pub static SLOWLOG_SUBS: &[Spec] = &[
    spec(
        "get",
        -2,
        ADMIN_SUB,
        (0, 0, 0),
        "server",
        "2.2.12",
        "Get the slow log's entries",
        ADMIN_ACL,
        slowlog_get,
    ),
    spec(
        "len",
        2,
        ADMIN_SUB,
        (0, 0, 0),
        "server",
        "2.2.12",
        "Get the slow log's length",
        ADMIN_ACL,
        slowlog_len,
    ),
    spec(
        "reset",
        2,
        ADMIN_SUB,
        (0, 0, 0),
        "server",
        "2.2.12",
        "Clear all entries from the slow log",
        ADMIN_ACL,
        slowlog_reset,
    ),
    spec(
        "help",
        2,
        LOADING | STALE,
        (0, 0, 0),
        "server",
        "6.2.0",
        "Show helpful text about the different subcommands",
        SLOW,
        slowlog_help,
    ),
];

pub static LATENCY_SUBS: &[Spec] = &[
    spec(
        "doctor",
        2,
        ADMIN_NOSCRIPT,
        (0, 0, 0),
        "server",
        "2.8.13",
        "Return a human readable latency analysis report.",
        ADMIN_ACL,
        latency_doctor,
    ),
    spec(
        "graph",
        3,
        ADMIN_NOSCRIPT,
        (0, 0, 0),
        "server",
        "2.8.13",
        "Return a latency graph for the event.",
        ADMIN_ACL,
        latency_graph,
    ),
    spec(
        "history",
        3,
        ADMIN_NOSCRIPT,
        (0, 0, 0),
        "server",
        "2.8.13",
        "Return timestamp-latency samples for the event.",
        ADMIN_ACL,
        latency_history,
    ),
    spec(
        "histogram",
        -2,
        ADMIN_NOSCRIPT,
        (0, 0, 0),
        "server",
        "7.0.0",
        "Return the cumulative distribution of latencies of a subset of commands or all.",
        ADMIN_ACL,
        latency_histogram,
    ),
    spec(
        "latest",
        2,
        ADMIN_NOSCRIPT,
        (0, 0, 0),
        "server",
        "2.8.13",
        "Return the latest latency samples for all events.",
        ADMIN_ACL,
        latency_latest,
    ),
    spec(
        "reset",
        -2,
        ADMIN_NOSCRIPT,
        (0, 0, 0),
        "server",
        "2.8.13",
        "Reset latency data for one or more events.",
        ADMIN_ACL,
        latency_reset,
    ),
    spec(
        "help",
        2,
        LOADING | STALE,
        (0, 0, 0),
        "server",
        "2.8.13",
        "Show helpful text about the different subcommands.",
        SLOW,
        latency_help,
    ),
];

/// SLOWLOG GET [count]: the newest `count` entries (10 by default, -1 all).
fn slowlog_get(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() > 3 {
        return subcommand_syntax_error(ctx.out, args);
    }
    let count = match args.get(2) {
        None => 10,
        Some(a) => match crate::util::parse_i64(a) {
            Some(n) if n >= -1 => n,
            _ => return ctx.error("ERR count should be greater than or equal to -1"),
        },
    };
    let n = if count == -1 {
        ctx.store.slowlog.len()
    } else {
        (count as usize).min(ctx.store.slowlog.len())
    };
    ctx.out.array(n);
    for e in ctx.store.slowlog.entries().take(n) {
        ctx.out.array(6);
        ctx.out.int(e.id as i64);
        ctx.out.int(e.time);
        ctx.out.int(e.usec as i64);
        ctx.out.array(e.args.len());
        for a in &e.args {
            ctx.out.bulk(a);
        }
        ctx.out.bulk(e.addr.as_bytes());
        ctx.out.bulk(&e.name);
    }
}

fn slowlog_len(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.out.int(ctx.store.slowlog.len() as i64);
}

fn slowlog_reset(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.store.slowlog.reset();
    ctx.out.ok();
}

fn slowlog_help(ctx: &mut Ctx, _args: &[Bytes]) {
    reply_help(
        ctx,
        "SLOWLOG",
        &[
            "GET [<count>]",
            "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
            "    Entries are made of:",
            "    id, timestamp, time in microseconds, arguments array, client IP and port,",
            "    client name",
            "LEN",
            "    Return the length of the slowlog.",
            "RESET",
            "    Reset the slowlog.",
        ],
    );
}

fn latency_latest(ctx: &mut Ctx, _args: &[Bytes]) {
    let events: Vec<_> = ctx.store.latency.events().collect();
    ctx.out.array(events.len());
    for (name, s) in events {
        let (time, ms) = s.samples.back().copied().unwrap_or((0, 0));
        ctx.out.array(4);
        ctx.out.bulk(name.as_bytes());
        ctx.out.int(time);
        ctx.out.int(ms as i64);
        ctx.out.int(s.max as i64);
    }
}

fn latency_history(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(s) = ctx.store.latency.get(&args[2]) else {
        return ctx.out.array(0);
    };
    ctx.out.array(s.samples.len());
    for (time, ms) in &s.samples {
        ctx.out.array(2);
        ctx.out.int(*time);
        ctx.out.int(*ms as i64);
    }
}

fn latency_reset(ctx: &mut Ctx, args: &[Bytes]) {
    let n = ctx.store.latency.reset(&args[2..]);
    ctx.out.int(n as i64);
}

/// Columns of LATENCY GRAPH, and rows of its sparkline.
const GRAPH_COLS: usize = 80;
const GRAPH_ROWS: usize = 4;

/// LATENCY GRAPH event: the event's samples as an ASCII sparkline, each
/// labelled (vertically) with how long ago it happened.
fn latency_graph(ctx: &mut Ctx, args: &[Bytes]) {
    let Some((name, s)) = ctx
        .store
        .latency
        .events()
        .find(|(n, _)| n.as_bytes() == &args[2][..])
    else {
        let mut msg = b"ERR No samples available for event '".to_vec();
        msg.extend_from_slice(crate::util::c_str(&args[2]));
        msg.push(b'\'');
        return ctx.out.error_bytes(&msg);
    };
    let now = crate::util::now_ms() / 1000;
    let samples: Vec<(f64, String)> = s
        .samples
        .iter()
        .map(|(t, ms)| {
            let ago = now - t;
            let label = match ago {
                a if a < 60 => format!("{a}s"),
                a if a < 3600 => format!("{}m", a / 60),
                a if a < 86400 => format!("{}h", a / 3600),
                a => format!("{}d", a / 86400),
            };
            (*ms as f64, label)
        })
        .collect();
    let hi = s.samples.iter().map(|x| x.1).max().unwrap_or(0);
    let lo = s.samples.iter().map(|x| x.1).min().unwrap_or(0);
    let mut g = format!(
        "{name} - high {hi} ms, low {lo} ms (all time high {} ms)\n",
        s.max
    );
    g.push_str(&"-".repeat(GRAPH_COLS));
    g.push('\n');
    sparkline(&mut g, &samples);
    ctx.out.verbatim(g.as_bytes());
}

/// Redis's sparklineRender with SPARKLINE_FILL: each row of `GRAPH_ROWS`
/// shows three steps of height (`_o#`, `|` below the top), then the labels
/// run downwards one character per row, in chunks of `GRAPH_COLS`.
fn sparkline(g: &mut String, samples: &[(f64, String)]) {
    const FILL: &[u8] = b"_o#";
    let min = samples.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
    let max = samples
        .iter()
        .map(|s| s.0)
        .fold(f64::NEG_INFINITY, f64::max);
    let mut relmax = max - min;
    if relmax == 0.0 {
        relmax = 1.0;
    }
    let steps = (FILL.len() * GRAPH_ROWS) as i64;
    let has_labels = samples.iter().any(|s| !s.1.is_empty());
    for (ci, chunk) in samples.chunks(GRAPH_COLS).enumerate() {
        if ci != 0 {
            g.push('\n');
        }
        let mut row = 0;
        loop {
            let mut line = vec![b' '; chunk.len()];
            let mut more = false;
            for (j, (v, label)) in chunk.iter().enumerate() {
                let step = (((v - min) * steps as f64) as i64 as f64 / relmax) as i64;
                let step = step.clamp(0, steps - 1);
                if row < GRAPH_ROWS {
                    more = true;
                    let idx = step - ((GRAPH_ROWS - row - 1) * FILL.len()) as i64;
                    if (0..FILL.len() as i64).contains(&idx) {
                        line[j] = FILL[idx as usize];
                    } else if idx >= FILL.len() as i64 {
                        line[j] = b'|';
                    }
                } else {
                    // One blank row between the graph and the labels.
                    if has_labels && row - GRAPH_ROWS < 1 {
                        more = true;
                        break;
                    }
                    let Some(at) = (row - GRAPH_ROWS).checked_sub(1) else {
                        continue;
                    };
                    if let Some(&c) = label.as_bytes().get(at) {
                        more = true;
                        line[j] = c;
                    }
                }
            }
            if !more {
                break;
            }
            row += 1;
            g.push_str(&String::from_utf8_lossy(&line));
            g.push('\n');
        }
    }
}

/// LATENCY DOCTOR: Redis's report for the events latchkey records
/// (`command`, `fast-command`).
fn latency_doctor(ctx: &mut Ctx, _args: &[Bytes]) {
    let cfg = ctx.store.config();
    let threshold = cfg.latency_monitor_threshold;
    let (slower_than, slowlog_len) = (cfg.slowlog_log_slower_than, cfg.slowlog_max_len);
    let lat = &ctx.store.latency;
    let mut r = String::new();
    if lat.is_empty() && threshold == 0 {
        r.push_str("I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n");
        return ctx.out.verbatim(r.as_bytes());
    }
    let now = crate::util::now_ms() / 1000;
    let mut advices = 0;
    let (mut slowlog_enable, mut slowlog_tune, mut inspect, mut scheduler, mut large) =
        (false, false, false, false, false);
    let mut n = 0;
    for (name, s) in lat.events() {
        n += 1;
        if n == 1 {
            r.push_str("Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n");
        }
        let count = s.samples.len() as u64;
        let sum: u64 = s.samples.iter().map(|x| x.1).sum();
        let avg = sum.checked_div(count).unwrap_or(0);
        let oldest = s.samples.iter().map(|x| x.0).min().unwrap_or(now);
        let period = (now - oldest).max(1);
        let mad = s
            .samples
            .iter()
            .map(|x| (avg as i64 - x.1 as i64).unsigned_abs())
            .sum::<u64>()
            .checked_div(count)
            .unwrap_or(0);
        r.push_str(&format!(
            "{n}. {name}: {count} latency spikes (average {avg}ms, mean deviation {mad}ms, period {:.2} sec). Worst all time event {}ms.",
            period as f64 / count.max(1) as f64,
            s.max
        ));
        if name == "command" {
            if slower_than < 0 || slowlog_len == 0 {
                slowlog_enable = true;
                advices += 1;
            } else if (slower_than / 1000) as u64 > threshold {
                slowlog_tune = true;
                advices += 1;
            }
            inspect = true;
            large = true;
            advices += 2;
        }
        if name == "fast-command" {
            scheduler = true;
            advices += 1;
        }
        r.push('\n');
    }
    let thp = anon_huge_pages() > 0;
    if thp {
        advices += 1;
    }
    if n == 0 && advices == 0 {
        r.push_str("Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n");
    } else if n > 0 && advices == 0 {
        r.push_str("\nWhile there are latency events logged, I'm not able to suggest any easy fix. Please use the Redis community to get some help, providing this report in your help request.\n");
    } else {
        r.push_str("\nI have a few advices for you:\n\n");
        if slowlog_enable {
            r.push_str(&format!("- There are latency issues with potentially slow commands you are using. Try to enable the Slow Log Redis feature using the command 'CONFIG SET slowlog-log-slower-than {}'. If the Slow log is disabled Redis is not able to log slow commands execution for you.\n", threshold * 1000));
        }
        if slowlog_tune {
            r.push_str(&format!("- Your current Slow Log configuration only logs events that are slower than your configured latency monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than {}'.\n", threshold * 1000));
        }
        if inspect {
            r.push_str("- Check your Slow Log to understand what are the commands you are running which are too slow to execute. Please check https://redis.io/commands/slowlog for more information.\n");
        }
        if scheduler {
            r.push_str("- The system is slow to execute Redis code paths not containing system calls. This usually means the system does not provide Redis CPU time to run for long periods. You should try to:\n  1) Lower the system load.\n  2) Use a computer / VM just for Redis if you are running other software in the same system.\n  3) Check if you have a \"noisy neighbour\" problem.\n  4) Check with 'redis-cli --intrinsic-latency 100' what is the intrinsic latency in your system.\n  5) Check if the problem is allocator-related by recompiling Redis with MALLOC=libc, if you are using Jemalloc. However this may create fragmentation problems.\n");
        }
        if large {
            r.push_str("- Deleting, expiring or evicting (because of maxmemory policy) large objects is a blocking operation. If you have very large objects that are often deleted, expired, or evicted, try to fragment those objects into multiple smaller objects.\n");
        }
        if thp {
            r.push_str("- I detected a non zero amount of anonymous huge pages used by your process. This creates very serious latency events in different conditions, especially when Redis is persisting on disk. To disable THP support use the command 'echo never > /sys/kernel/mm/transparent_hugepage/enabled', make sure to also add it into /etc/rc.local so that the command will be executed again after a reboot. Note that even if you have already disabled THP, you still need to restart the Redis process to get rid of the huge pages already created.\n");
        }
    }
    ctx.out.verbatim(r.as_bytes());
}

/// AnonHugePages of this process in kB (Redis's THPGetAnonHugePagesSize).
fn anon_huge_pages() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/smaps_rollup") else {
        return 0;
    };
    s.lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn latency_help(ctx: &mut Ctx, _args: &[Bytes]) {
    reply_help(
        ctx,
        "LATENCY",
        &[
            "DOCTOR",
            "    Return a human readable latency analysis report.",
            "GRAPH <event>",
            "    Return an ASCII latency graph for the <event> class.",
            "HISTORY <event>",
            "    Return time-latency samples for the <event> class.",
            "LATEST",
            "    Return the latest latency samples for all events.",
            "RESET [<event> ...]",
            "    Reset latency data of one or more <event> classes.",
            "    (default: reset all data for all event classes)",
            "HISTOGRAM [COMMAND ...]",
            "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
            "    If no commands are specified then all histograms are replied.",
        ],
    );
}

/// LATENCY HISTOGRAM [command ...] (Redis 7.0's latencyCommand): for every
/// command (or those named, a container standing for its subcommands;
/// unknown names skipped) that has a histogram, its calls and cumulative
/// distribution in µs, as fillCommandCDF writes them.
fn latency_histogram(ctx: &mut Ctx, args: &[Bytes]) {
    let specs = all_specs();
    let named = |i: usize| -> String {
        match specs[i].1 {
            Some(p) => format!("{}|{}", p.name, specs[i].0.name),
            None => specs[i].0.name.to_string(),
        }
    };
    let mut picked: Vec<usize> = Vec::new();
    if args.len() == 2 {
        picked.extend(0..specs.len());
    } else {
        for a in &args[2..] {
            let a = String::from_utf8_lossy(a).to_ascii_lowercase();
            let (top, sub) = match a.split_once('|') {
                Some((t, s)) => (t, Some(s)),
                None => (a.as_str(), None),
            };
            let Some(at) = specs.iter().position(|(s, p)| p.is_none() && s.name == top) else {
                continue;
            };
            match sub {
                // The command itself, then its subcommands.
                None => {
                    picked.push(at);
                    let subs = specs[at].0.subs.len();
                    picked.extend(at + 1..=at + subs);
                }
                Some(sub) => {
                    if let Some(j) =
                        (at + 1..=at + specs[at].0.subs.len()).find(|&j| specs[j].0.name == sub)
                    {
                        picked.push(j);
                    }
                }
            }
        }
    }
    let stats = &ctx.store.stats.commands;
    let with: Vec<(String, crate::stats::LatencyHistogram)> = picked
        .into_iter()
        .filter_map(|i| stats.latency(i).map(|h| (named(i), h)))
        .collect();
    let out = &mut *ctx.out;
    out.map(with.len());
    for (name, h) in with {
        out.bulk(name.as_bytes());
        out.map(2);
        out.bulk(b"calls");
        out.int(h.calls() as i64);
        out.bulk(b"histogram_usec");
        let cdf = h.cdf_usec();
        out.map(cdf.len());
        for (usec, count) in cdf {
            out.int(usec as i64);
            out.int(count as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sample_graph_is_a_low_bar_with_its_label() {
        let mut g = String::new();
        sparkline(&mut g, &[(50.0, "0s".into())]);
        assert_eq!(g, " \n \n \n_\n \n0\ns\n");
    }

    #[test]
    fn graph_rises_with_the_samples() {
        let mut g = String::new();
        sparkline(&mut g, &[(1.0, String::new()), (12.0, String::new())]);
        let rows: Vec<&str> = g.lines().collect();
        assert_eq!(rows.len(), GRAPH_ROWS);
        assert_eq!(rows[0], " #");
        assert_eq!(rows[3], "_|");
    }
}

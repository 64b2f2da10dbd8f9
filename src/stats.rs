//! What the server measures about the commands it runs: per-command call
//! counts and times (INFO commandstats), error replies by code (INFO
//! errorstats), the slow log (SLOWLOG) and the latency monitor (LATENCY).
//! Plain data kept in the store; the dispatcher feeds it, the INFO, SLOWLOG
//! and LATENCY commands read it.
//!
//! Must not touch the store's other parts, commands or connections: it
//! knows `util`'s clock and jemalloc's counters (`used_memory`) only.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

/// One command's INFO commandstats line.
#[derive(Debug, Default, Clone, Copy)]
pub struct CmdStat {
    pub calls: u64,
    pub usec: u64,
    /// Refused before running (arity, NOAUTH, OOM, ...).
    pub rejected: u64,
    /// Ran and replied an error.
    pub failed: u64,
    /// Calls of 0..FAST_USEC µs not yet in the latency histogram: counted
    /// here, a store beside the ones above, and merged when read.
    fast_usec: [u64; FAST_USEC],
}

/// Durations below this many µs (most commands' at any pipeline) are
/// counted in `CmdStat` rather than recorded in the histogram one by one.
const FAST_USEC: usize = 8;

/// Redis stops tracking new error codes past this many (and says so in
/// the log), so a client cannot grow the table without bound.
pub const MAX_ERROR_CODES: usize = 128;

#[derive(Debug, Default, Clone)]
pub struct CommandStats {
    /// Indexed by the command table's dense spec index.
    cmds: Vec<CmdStat>,
    /// Per-command latency histograms (`latency-tracking`), created on a
    /// command's first call, by the same index.
    latency: Vec<Option<Box<LatencyHistogram>>>,
    errors: BTreeMap<Vec<u8>, u64>,
    /// Error replies of every kind (INFO stats `total_error_replies`).
    pub total_errors: u64,
}

impl CommandStats {
    pub fn cmd_mut(&mut self, index: usize) -> &mut CmdStat {
        if index >= self.cmds.len() {
            self.cmds.resize(index + 1, CmdStat::default());
        }
        &mut self.cmds[index]
    }

    pub fn cmd(&self, index: usize) -> CmdStat {
        self.cmds.get(index).copied().unwrap_or_default()
    }

    /// Records one call's duration in the command's latency histogram
    /// (`cmd_mut(index)` was called for this call).
    pub fn record_latency(&mut self, index: usize, usec: u64) {
        if let Some(n) = self.cmds[index].fast_usec.get_mut(usec as usize) {
            *n += 1;
            return;
        }
        if index >= self.latency.len() {
            self.latency.resize_with(index + 1, || None);
        }
        self.latency[index]
            .get_or_insert_with(|| Box::new(LatencyHistogram::new()))
            .record_usec(usec);
    }

    /// The command's latency histogram, once it was called with tracking
    /// on (the recorded durations and the counted short ones together).
    pub fn latency(&self, index: usize) -> Option<LatencyHistogram> {
        let fast = self
            .cmds
            .get(index)
            .map(|c| c.fast_usec)
            .unwrap_or_default();
        let recorded = self.latency.get(index).and_then(|h| h.as_deref());
        if recorded.is_none() && fast.iter().all(|n| *n == 0) {
            return None;
        }
        let mut h = recorded.cloned().unwrap_or_else(LatencyHistogram::new);
        for (usec, n) in fast.into_iter().enumerate() {
            h.record_usec_n(usec as u64, n);
        }
        Some(h)
    }

    /// Counts one error reply under its code: the first word of the reply
    /// (without the `-`), as Redis's afterErrorReply.
    pub fn error(&mut self, reply: &[u8]) {
        self.total_errors += 1;
        let text = reply.strip_prefix(b"-").unwrap_or(reply);
        let end = text
            .iter()
            .position(|&c| c == b' ' || c == b'\r')
            .unwrap_or(text.len());
        let code = &text[..end];
        if let Some(n) = self.errors.get_mut(code) {
            *n += 1;
        } else if self.errors.len() < MAX_ERROR_CODES {
            self.errors.insert(code.to_vec(), 1);
        }
    }

    /// Error codes in byte order, as Redis's radix tree lists them.
    pub fn errors(&self) -> impl Iterator<Item = (&[u8], u64)> {
        self.errors.iter().map(|(k, v)| (&k[..], *v))
    }
}

/// One command's latencies as Redis 7.0 keeps them (server.h's
/// LATENCY_HISTOGRAM_*): an HDR histogram of nanoseconds from 1 to 10^9 with
/// 2 significant digits; a call's microseconds are recorded times 1000,
/// clamped to that range (updateCommandLatencyHistogram).
#[derive(Debug, Clone)]
pub struct LatencyHistogram(hdrhistogram::Histogram<u64>);

const LATENCY_MIN_NS: u64 = 1;
const LATENCY_MAX_NS: u64 = 1_000_000_000;

impl LatencyHistogram {
    fn new() -> LatencyHistogram {
        LatencyHistogram(
            hdrhistogram::Histogram::new_with_bounds(LATENCY_MIN_NS, LATENCY_MAX_NS, 2)
                .expect("valid histogram bounds"),
        )
    }

    fn record_usec(&mut self, usec: u64) {
        self.record_usec_n(usec, 1);
    }

    fn record_usec_n(&mut self, usec: u64, n: u64) {
        if n > 0 {
            let ns = usec
                .saturating_mul(1000)
                .clamp(LATENCY_MIN_NS, LATENCY_MAX_NS);
            self.0.saturating_record_n(ns, n);
        }
    }

    /// Calls recorded.
    pub fn calls(&self) -> u64 {
        self.0.len()
    }

    /// hdr_value_at_percentile, in ns: the value `percentile` of the calls
    /// are at or below (the count rounded half up, as the C library does).
    pub fn value_at_percentile(&self, percentile: f64) -> u64 {
        let p = percentile.min(100.0);
        let target = (((p / 100.0) * self.0.len() as f64) + 0.5) as u64;
        let target = target.max(1);
        let mut seen = 0;
        for v in self.0.iter_recorded() {
            seen += v.count_at_value();
            if seen >= target {
                let at = v.value_iterated_to();
                return if p == 0.0 {
                    self.0.lowest_equivalent(at)
                } else {
                    self.0.highest_equivalent(at)
                };
            }
        }
        0
    }

    /// LATENCY HISTOGRAM's cumulative distribution (Redis's fillCommandCDF
    /// over hdr_iter_log_init(1024, 2)): for each power-of-two level from
    /// 1024 ns, the level's highest equivalent value in µs and the calls at
    /// or below it, where that count grew.
    pub fn cdf_usec(&self) -> Vec<(u64, u64)> {
        let total = self.0.len();
        let mut out = Vec::new();
        let mut level: u64 = 1024;
        let mut previous = 0;
        while previous < total {
            let cumulative = self.0.count_between(0, level);
            if cumulative > previous {
                out.push((self.0.highest_equivalent(level) / 1000, cumulative));
            }
            previous = cumulative;
            if level > LATENCY_MAX_NS {
                break;
            }
            level *= 2;
        }
        out
    }
}

/// One SLOWLOG entry.
#[derive(Debug, Clone)]
pub struct SlowEntry {
    pub id: u64,
    pub time: i64,
    pub usec: u64,
    pub args: Vec<Bytes>,
    pub addr: String,
    pub name: Bytes,
}

/// Redis keeps at most this many arguments of a slow command, the last
/// one replaced by "... (N more arguments)".
pub const SLOWLOG_MAX_ARGC: usize = 32;
/// And at most this many bytes of each, then "... (N more bytes)".
pub const SLOWLOG_MAX_ARGLEN: usize = 128;

#[derive(Debug, Default, Clone)]
pub struct SlowLog {
    entries: VecDeque<SlowEntry>,
    next_id: u64,
}

impl SlowLog {
    /// Records a command that ran for `usec`, newest first, keeping at most
    /// `max_len` entries. Arguments are copied and trimmed as Redis does.
    pub fn push(&mut self, args: &[Bytes], usec: u64, addr: String, name: Bytes, max_len: usize) {
        let argc = args.len().min(SLOWLOG_MAX_ARGC);
        let mut kept = Vec::with_capacity(argc);
        for (i, a) in args.iter().take(argc).enumerate() {
            if argc != args.len() && i == argc - 1 {
                kept.push(Bytes::from(format!(
                    "... ({} more arguments)",
                    args.len() - argc + 1
                )));
            } else if a.len() > SLOWLOG_MAX_ARGLEN {
                let mut v = a[..SLOWLOG_MAX_ARGLEN].to_vec();
                v.extend_from_slice(
                    format!("... ({} more bytes)", a.len() - SLOWLOG_MAX_ARGLEN).as_bytes(),
                );
                kept.push(Bytes::from(v));
            } else {
                kept.push(Bytes::copy_from_slice(a));
            }
        }
        self.entries.push_front(SlowEntry {
            id: self.next_id,
            time: crate::util::now_ms() / 1000,
            usec,
            args: kept,
            addr,
            name,
        });
        self.next_id += 1;
        self.trim(max_len);
    }

    /// Drops the oldest entries beyond `max_len` (also after CONFIG SET).
    pub fn trim(&mut self, max_len: usize) {
        self.entries.truncate(max_len);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Newest first.
    pub fn entries(&self) -> impl Iterator<Item = &SlowEntry> {
        self.entries.iter()
    }

    /// SLOWLOG RESET: the ids keep counting, as in Redis.
    pub fn reset(&mut self) {
        self.entries.clear();
    }
}

/// Samples kept per latency event (Redis's LATENCY_TS_LEN).
pub const LATENCY_TS_LEN: usize = 160;

/// One latency event's history (Redis's latencyTimeSeries).
#[derive(Debug, Default, Clone)]
pub struct LatencySeries {
    /// (unix seconds, ms), oldest first; one sample per second at most
    /// (a second spike in the same second keeps the larger).
    pub samples: VecDeque<(i64, u64)>,
    /// The largest latency ever recorded for the event.
    pub max: u64,
}

/// The latency monitor: events whose latency reached
/// `latency-monitor-threshold` ms (0 disables it), by event name.
#[derive(Debug, Default, Clone)]
pub struct Latency {
    events: BTreeMap<&'static str, LatencySeries>,
}

impl Latency {
    pub fn add(&mut self, event: &'static str, ms: u64) {
        let now = crate::util::now_ms() / 1000;
        let s = self.events.entry(event).or_default();
        s.max = s.max.max(ms);
        match s.samples.back_mut() {
            Some(last) if last.0 == now => last.1 = last.1.max(ms),
            _ => {
                s.samples.push_back((now, ms));
                if s.samples.len() > LATENCY_TS_LEN {
                    s.samples.pop_front();
                }
            }
        }
    }

    pub fn events(&self) -> impl Iterator<Item = (&'static str, &LatencySeries)> {
        self.events.iter().map(|(k, v)| (*k, v))
    }

    pub fn get(&self, event: &[u8]) -> Option<&LatencySeries> {
        let name = std::str::from_utf8(event).ok()?;
        self.events.get(name)
    }

    /// LATENCY RESET [event ...]: how many events were cleared.
    pub fn reset(&mut self, events: &[Bytes]) -> usize {
        if events.is_empty() {
            let n = self.events.len();
            self.events.clear();
            return n;
        }
        let mut n = 0;
        for e in events {
            if let Ok(name) = std::str::from_utf8(e) {
                n += usize::from(self.events.remove(name).is_some());
            }
        }
        n
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

/// Bytes the process holds (refreshed): the `used_memory` that
/// `maxmemory` is compared with. Process-wide: servers sharing a process
/// (tests) see each other's allocations in it.
pub fn used_memory() -> u64 {
    use tikv_jemalloc_ctl::{epoch, stats};
    let _ = epoch::advance();
    held(stats::allocated::read().unwrap_or(0) as u64)
}

/// Of jemalloc's `stats.allocated` (read after an epoch advance), what the
/// program holds, as Redis's zmalloc counter counts it: jemalloc counts
/// the regions its per-thread caches keep ready for reuse as allocated
/// too, which made an empty server show 1.5 MB where it holds 0.9 MB.
pub fn held(allocated: u64) -> u64 {
    // SAFETY: a size_t statistic of all arenas (MALLCTL_ARENAS_ALL),
    // read as usize.
    let cached =
        unsafe { tikv_jemalloc_ctl::raw::read::<usize>(b"stats.arenas.4096.tcache_bytes\0") }
            .unwrap_or(0) as u64;
    allocated.saturating_sub(cached)
}

/// `jemalloc-bg-thread`: jemalloc's background purging threads on or off
/// (Redis's set_jemalloc_bg_thread), at start-up and on CONFIG SET.
pub fn jemalloc_bg_thread(on: bool) {
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(on) {
        tracing::debug!("jemalloc background_thread: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_are_the_first_word() {
        let mut s = CommandStats::default();
        s.error(b"-ERR wrong number\r\n");
        s.error(b"-WRONGTYPE Operation\r\n");
        s.error(b"-ERR x\r\n");
        s.error(b"-NOSCRIPT\r\n");
        let v: Vec<_> = s.errors().map(|(k, n)| (k.to_vec(), n)).collect();
        assert_eq!(
            v,
            vec![
                (b"ERR".to_vec(), 2),
                (b"NOSCRIPT".to_vec(), 1),
                (b"WRONGTYPE".to_vec(), 1)
            ]
        );
        assert_eq!(s.total_errors, 4);
    }

    #[test]
    fn error_codes_are_capped() {
        let mut s = CommandStats::default();
        for i in 0..MAX_ERROR_CODES + 10 {
            s.error(format!("-E{i} x\r\n").as_bytes());
        }
        assert_eq!(s.errors().count(), MAX_ERROR_CODES);
        assert_eq!(s.total_errors, (MAX_ERROR_CODES + 10) as u64);
    }

    #[test]
    fn slowlog_trims_arguments_and_length() {
        let mut l = SlowLog::default();
        let args: Vec<Bytes> = (0..40).map(|i| Bytes::from(format!("a{i}"))).collect();
        l.push(&args, 5, "addr".into(), Bytes::new(), 2);
        let e = l.entries().next().unwrap();
        assert_eq!(e.args.len(), SLOWLOG_MAX_ARGC);
        assert_eq!(&e.args[31][..], b"... (9 more arguments)");
        let big = vec![Bytes::from(vec![b'x'; 200])];
        l.push(&big, 5, "addr".into(), Bytes::new(), 2);
        l.push(&big, 5, "addr".into(), Bytes::new(), 2);
        assert_eq!(l.len(), 2);
        let e = l.entries().next().unwrap();
        assert_eq!(e.id, 2);
        assert!(e.args[0].ends_with(b"... (72 more bytes)"));
        assert_eq!(e.args[0].len(), 128 + b"... (72 more bytes)".len());
    }
}

//! `maxmemory` eviction: the policy, the access stamps it reads (Redis's
//! 24-bit LRU clock, or LFU's 16-bit minute stamp with an 8-bit
//! logarithmic counter, in the same entry field), and picking a victim.
//!
//! The policy and LFU parameters are a server's: every key access reads
//! them, so each database holds a copy ([`Access`], in `Db::settings`) that
//! the store refreshes from its config, and the hot path reads a field
//! rather than a global. Switching between an LRU and an LFU policy
//! reinterprets the stamps, which then take a while to become meaningful
//! again (Redis says the same in OBJECT FREQ's error). `Access::frozen`
//! suspends the stamps while a CLIENT NO-TOUCH client's command runs.
//!
//! A key bound by SETTP is never evicted: evicting a lock would break
//! mutual exclusion. Victims are chosen by sampling, as Redis does:
//! `maxmemory-samples` keys per database, the best by the policy's measure.

use super::entry::{Entry, FLAG_BOUND};
use crate::util::{cmd_time_ms, idle_seconds, lru_clock};

/// `maxmemory-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    #[default]
    NoEviction,
    AllKeysLru,
    VolatileLru,
    AllKeysLfu,
    VolatileLfu,
    AllKeysRandom,
    VolatileRandom,
    VolatileTtl,
}

/// Names in the order Redis 7.0 lists them in its CONFIG SET error.
pub const POLICY_NAMES: &[(&str, Policy)] = &[
    ("volatile-lru", Policy::VolatileLru),
    ("volatile-lfu", Policy::VolatileLfu),
    ("volatile-random", Policy::VolatileRandom),
    ("volatile-ttl", Policy::VolatileTtl),
    ("allkeys-lru", Policy::AllKeysLru),
    ("allkeys-lfu", Policy::AllKeysLfu),
    ("allkeys-random", Policy::AllKeysRandom),
    ("noeviction", Policy::NoEviction),
];

impl Policy {
    pub fn parse(s: &str) -> Option<Policy> {
        POLICY_NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(s))
            .map(|(_, p)| *p)
    }

    pub fn name(self) -> &'static str {
        POLICY_NAMES
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("noeviction", |(n, _)| n)
    }

    pub fn is_lfu(self) -> bool {
        matches!(self, Policy::AllKeysLfu | Policy::VolatileLfu)
    }

    /// Only keys with a TTL are candidates.
    pub fn volatile(self) -> bool {
        matches!(
            self,
            Policy::VolatileLru
                | Policy::VolatileLfu
                | Policy::VolatileRandom
                | Policy::VolatileTtl
        )
    }
}

/// A server's eviction settings as key accesses read them:
/// `maxmemory-policy`, `lfu-log-factor` and `lfu-decay-time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub policy: Policy,
    pub lfu_log_factor: u32,
    pub lfu_decay_time: u32,
    /// Lookups leave access stamps as they are: a command of a client in
    /// CLIENT NO-TOUCH mode is running (Redis 7.2's LOOKUP_NOTOUCH).
    pub frozen: bool,
}

impl Default for Access {
    /// Redis's defaults: noeviction, factor 10, one minute.
    fn default() -> Self {
        Access {
            policy: Policy::NoEviction,
            lfu_log_factor: 10,
            lfu_decay_time: 1,
            frozen: false,
        }
    }
}

/// Redis's LFU_INIT_VAL: a new key's counter, so it is not evicted at once.
const LFU_INIT: u32 = 5;

/// Minutes, 16 bits (Redis's LFUGetTimeInMinutes).
fn minutes() -> u32 {
    ((cmd_time_ms() / 60_000) as u32) & 0xffff
}

/// The stamp of a new key: the LRU clock, or the LFU initial counter.
pub fn new_stamp(a: &Access) -> u32 {
    if a.policy.is_lfu() {
        (minutes() << 8) | LFU_INIT
    } else {
        lru_clock()
    }
}

/// The LFU counter after its decay for the minutes elapsed since `stamp`
/// (Redis's LFUDecrAndReturn).
fn lfu_decayed(stamp: u32, decay: u32) -> u32 {
    let last = stamp >> 8;
    let counter = stamp & 0xff;
    let now = minutes();
    let elapsed = if now >= last {
        now - last
    } else {
        65535 - last + now
    };
    let periods = elapsed.checked_div(decay).unwrap_or(0);
    counter.saturating_sub(periods)
}

/// OBJECT FREQ's answer for a key's stamp.
pub fn frequency(a: &Access, stamp: u32) -> u32 {
    lfu_decayed(stamp, a.lfu_decay_time)
}

/// The stamp a restored key gets from RESTORE's FREQ (under an LFU
/// policy) or IDLETIME in seconds (under any other), as Redis's
/// objectSetLRUOrLFU; None when the option does not apply to the policy.
pub fn restored_stamp(a: &Access, freq: Option<u8>, idle: Option<i64>) -> Option<u32> {
    if a.policy.is_lfu() {
        freq.map(|f| (minutes() << 8) | f as u32)
    } else {
        // The 24-bit clock wraps; so does an access time before its start.
        idle.map(|s| (lru_clock() as i64 - s).rem_euclid(1 << 24) as u32)
    }
}

/// Records an access to `e` (Redis's updateLFU / LRU clock update).
pub fn touch(e: &mut Entry, a: &Access) {
    if a.frozen {
        return;
    }
    if !a.policy.is_lfu() {
        e.set_lru(lru_clock());
        return;
    }
    let mut counter = lfu_decayed(e.lru(), a.lfu_decay_time);
    // LFULogIncr: the more hits, the less likely another increment.
    if counter < 255 {
        let base = counter.saturating_sub(LFU_INIT) as f64;
        let p = 1.0 / (base * a.lfu_log_factor as f64 + 1.0);
        if rand::random::<f64>() < p {
            counter += 1;
        }
    }
    e.set_lru((minutes() << 8) | counter);
}

/// How good a victim `e` is under `policy` (higher goes first); None if it
/// may not be evicted (bound by SETTP, or without a TTL under a volatile
/// policy). `lfu_decay_time` ages LFU counters.
pub fn victim_score(policy: Policy, lfu_decay_time: u32, e: &Entry) -> Option<u64> {
    if e.flags() & FLAG_BOUND != 0 {
        return None;
    }
    if policy.volatile() && e.expire().is_none() {
        return None;
    }
    Some(match policy {
        Policy::NoEviction => return None,
        Policy::AllKeysLru | Policy::VolatileLru => idle_seconds(e.lru()),
        Policy::AllKeysLfu | Policy::VolatileLfu => {
            255 - lfu_decayed(e.lru(), lfu_decay_time) as u64
        }
        Policy::AllKeysRandom | Policy::VolatileRandom => rand::random::<u32>() as u64,
        // Sooner expiry first.
        Policy::VolatileTtl => u64::MAX - e.expire().unwrap_or(i64::MAX).max(0) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_round_trip() {
        for (n, p) in POLICY_NAMES {
            assert_eq!(Policy::parse(n), Some(*p));
            assert_eq!(p.name(), *n);
        }
        assert_eq!(Policy::parse("ALLKEYS-LRU"), Some(Policy::AllKeysLru));
        assert_eq!(Policy::parse("lru"), None);
    }

    #[test]
    fn bound_and_persistent_keys_are_spared() {
        let e = Entry::inline(b"k", b"v", FLAG_BOUND, 0, None);
        assert_eq!(victim_score(Policy::AllKeysRandom, 1, &e), None);
        let e = Entry::inline(b"k", b"v", 0, 0, None);
        assert!(victim_score(Policy::AllKeysRandom, 1, &e).is_some());
        assert_eq!(victim_score(Policy::VolatileLru, 1, &e), None);
        assert_eq!(victim_score(Policy::NoEviction, 1, &e), None);
        let soon = Entry::inline(b"a", b"v", 0, 0, Some(1_000));
        let late = Entry::inline(b"b", b"v", 0, 0, Some(2_000));
        assert!(
            victim_score(Policy::VolatileTtl, 1, &soon)
                > victim_score(Policy::VolatileTtl, 1, &late)
        );
    }

    #[test]
    fn lfu_counter_decays_by_minutes() {
        let now = minutes();
        assert_eq!(lfu_decayed((now << 8) | 7, 1), 7);
        let ten_ago = (now + 65536 - 10) & 0xffff;
        assert_eq!(lfu_decayed((ten_ago << 8) | 7, 1), 0);
        let three_ago = (now + 65536 - 3) & 0xffff;
        assert_eq!(lfu_decayed((three_ago << 8) | 7, 1), 4);
    }
}

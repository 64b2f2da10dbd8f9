//! The ACL log: recent denials, similar ones grouped (Redis's ACLLog).
//!
//! Plain data: must not touch users, connections or the clock; the caller
//! (`commands::acl`) builds each entry, its time and client line included.

use std::collections::VecDeque;

/// Why an entry was logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogReason {
    Command,
    Key,
    Channel,
    Auth,
}

impl LogReason {
    pub fn name(self) -> &'static str {
        match self {
            LogReason::Command => "command",
            LogReason::Key => "key",
            LogReason::Channel => "channel",
            LogReason::Auth => "auth",
        }
    }
}

#[derive(Debug, Clone)]
pub struct LogEntry {
    pub count: u64,
    pub reason: LogReason,
    /// "toplevel", "multi" or "lua".
    pub context: &'static str,
    /// The command, key, channel or (auth) user name.
    pub object: Vec<u8>,
    pub username: Vec<u8>,
    /// When it last happened (ms).
    pub ctime: i64,
    /// CLIENT LIST's line of the client it last happened to.
    pub client_info: Vec<u8>,
}

/// Entries closer than this are grouped (ms).
const GROUPING_MAX_DELTA: i64 = 60_000;

#[derive(Debug, Default)]
pub struct AclLog {
    /// Newest first.
    entries: VecDeque<LogEntry>,
}

impl AclLog {
    /// Adds an entry, or bumps a similar one among the 10 newest (moved to
    /// the front); keeps at most `max_len` entries.
    pub fn add(&mut self, e: LogEntry, max_len: usize) {
        let similar = self.entries.iter().take(10).position(|c| {
            c.reason == e.reason
                && c.context == e.context
                && (c.ctime - e.ctime).abs() <= GROUPING_MAX_DELTA
                && c.object == e.object
                && c.username == e.username
        });
        match similar {
            Some(i) => {
                if let Some(mut c) = self.entries.remove(i) {
                    c.count += 1;
                    c.ctime = e.ctime;
                    c.client_info = e.client_info;
                    self.entries.push_front(c);
                }
            }
            None => {
                self.entries.push_front(e);
                self.entries.truncate(max_len);
            }
        }
    }

    pub fn reset(&mut self) {
        self.entries.clear();
    }

    pub fn iter(&self) -> impl Iterator<Item = &LogEntry> {
        self.entries.iter()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

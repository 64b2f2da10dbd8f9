//! Access control lists with Redis 7.0's model: users with passwords (kept
//! only as SHA-256 hex), flags, a root selector and further selectors;
//! each selector allows commands (a bitmap over the command table, plus
//! allowed first arguments), key patterns with read/write permissions and
//! channel patterns. Also the ACL log.
//!
//! This module knows nothing of the command table or connections: the
//! dispatcher hands it a [`Catalog`] of command names and categories once,
//! and, for each check, the keys and channels a command touches.

mod describe;
pub mod log;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use sha2::{Digest, Sha256};

pub use log::{AclLog, LogEntry, LogReason};

/// Redis 7.0's categories in ACL CAT's order, then latchkey's own.
pub const CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
    "latchkey",
];

/// The bit of a category name (case-insensitive), 0 if unknown.
pub fn category_bit(name: &[u8]) -> u32 {
    CATEGORIES
        .iter()
        .position(|c| c.as_bytes().eq_ignore_ascii_case(name))
        .map_or(0, |i| 1 << i)
}

/// A key pattern may be read from.
pub const KEY_READ: u8 = 1;
/// A key pattern may be written to.
pub const KEY_WRITE: u8 = 2;
const KEY_ALL: u8 = KEY_READ | KEY_WRITE;

/// One command or subcommand of the table, as the ACL sees it.
#[derive(Debug, Clone)]
pub struct CatalogEntry {
    /// Full lower-case name: "get", "config|get".
    pub name: String,
    pub parent: Option<usize>,
    pub subs: Vec<usize>,
    /// Category bits (see [`category_bit`]).
    pub cats: u32,
}

/// Every command and subcommand, each container followed by its
/// subcommands (the order rules are described in).
#[derive(Debug, Default)]
pub struct Catalog {
    entries: Vec<CatalogEntry>,
    by_name: std::collections::HashMap<String, usize>,
}

impl Catalog {
    pub fn new(entries: Vec<CatalogEntry>) -> Catalog {
        let by_name = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.name.clone(), i))
            .collect();
        Catalog { entries, by_name }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn entry(&self, i: usize) -> &CatalogEntry {
        &self.entries[i]
    }

    /// Redis's lookupCommandBySds: "cmd" or "container|sub", any case.
    pub fn lookup(&self, name: &[u8]) -> Option<usize> {
        let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
        let mut parts = lower.split('|');
        let base = parts.next()?;
        match (parts.next(), parts.next()) {
            (None, _) => self.by_name.get(base).copied(),
            (Some(sub), None) => {
                let b = *self.by_name.get(base)?;
                if self.entries[b].subs.is_empty() {
                    return None;
                }
                self.by_name.get(&format!("{base}|{sub}")).copied()
            }
            _ => None,
        }
    }

    /// Top-level commands with their subcommands after each.
    fn tops(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.entries.len()).filter(|i| self.entries[*i].parent.is_none())
    }

    /// The number of bitmap words: one bit per entry, plus the reserved
    /// "future commands" bit that only +@all sets.
    fn words(&self) -> usize {
        (self.entries.len() + 1).div_ceil(64)
    }

    fn future_bit(&self) -> usize {
        self.entries.len()
    }
}

/// Why a rule was refused (Redis's errno values in ACLSetUser).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleError {
    /// Unknown command or category.
    NoEnt,
    Syntax,
    /// A key pattern after allkeys.
    KeysAll,
    /// A channel pattern after allchannels.
    ChannelsAll,
    /// Removing a password the user does not have.
    NoPassword,
    BadHash,
    Duplicate,
    /// A first argument of a subcommand.
    SubFirstArg,
}

impl RuleError {
    /// Redis's ACLSetUserStringError text.
    pub fn message(self) -> &'static str {
        match self {
            RuleError::NoEnt => "Unknown command or category name in ACL",
            RuleError::Syntax => "Syntax error",
            RuleError::KeysAll => "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns",
            RuleError::ChannelsAll => "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels",
            RuleError::NoPassword => "The password you are trying to remove from the user does not exist",
            RuleError::BadHash => "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
            RuleError::Duplicate => "Duplicate user found. A user can only be defined once in config files",
            RuleError::SubFirstArg => "Allowing first-arg of a subcommand is not supported",
        }
    }
}

/// A set of permissions: commands, keys, channels. A user passes a check
/// when any of its selectors allows all of the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    root: bool,
    allcommands: bool,
    allkeys: bool,
    allchannels: bool,
    bits: Vec<u64>,
    /// Allowed first arguments of otherwise denied commands.
    firstargs: BTreeMap<usize, Vec<Vec<u8>>>,
    keys: Vec<(u8, Vec<u8>)>,
    channels: Vec<Vec<u8>>,
}

/// Whether a byte string has whitespace or NUL (refused in user names and
/// patterns, as Redis's ACLStringHasSpaces).
pub fn has_spaces(s: &[u8]) -> bool {
    s.iter()
        .any(|&c| c == 0 || matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c))
}

impl Selector {
    fn new(cat: &Catalog, root: bool, allchannels: bool) -> Selector {
        Selector {
            root,
            allcommands: false,
            allkeys: false,
            allchannels,
            bits: vec![0; cat.words()],
            firstargs: BTreeMap::new(),
            keys: Vec::new(),
            channels: Vec::new(),
        }
    }

    fn bit(&self, i: usize) -> bool {
        self.bits
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    fn set_bit(&mut self, i: usize, on: bool) {
        let Some(w) = self.bits.get_mut(i / 64) else {
            return;
        };
        if on {
            *w |= 1 << (i % 64);
        } else {
            *w &= !(1 << (i % 64));
            self.allcommands = false;
        }
    }

    /// Allows or denies a command, and all its subcommands.
    fn change(&mut self, cat: &Catalog, i: usize, on: bool) {
        self.set_bit(i, on);
        self.firstargs.remove(&i);
        for &s in &cat.entry(i).subs {
            self.set_bit(s, on);
        }
    }

    fn set_all(&mut self, on: bool) {
        let fill = if on { u64::MAX } else { 0 };
        self.bits.iter_mut().for_each(|w| *w = fill);
        self.allcommands = on;
        self.firstargs.clear();
    }

    fn category(&mut self, cat: &Catalog, flag: u32, on: bool) {
        for i in 0..cat.len() {
            if cat.entry(i).cats & flag != 0 {
                self.change(cat, i, on);
            }
        }
    }

    /// Counts the commands of a category this selector allows / denies.
    fn count(&self, cat: &Catalog, flag: u32) -> (usize, usize) {
        let (mut on, mut off) = (0, 0);
        for i in 0..cat.len() {
            if cat.entry(i).cats & flag != 0 {
                if self.bit(i) {
                    on += 1;
                } else {
                    off += 1;
                }
            }
        }
        (on, off)
    }

    /// Redis's ACLSetSelector: one key, channel or command rule.
    fn apply(&mut self, cat: &Catalog, op: &[u8]) -> Result<(), RuleError> {
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if is("allkeys") || is("~*") {
            self.allkeys = true;
            self.keys.clear();
        } else if is("resetkeys") {
            self.allkeys = false;
            self.keys.clear();
        } else if is("allchannels") || is("&*") {
            self.allchannels = true;
            self.channels.clear();
        } else if is("resetchannels") {
            self.allchannels = false;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.set_all(true);
        } else if is("nocommands") || is("-@all") {
            self.set_all(false);
        } else if op[0] == b'~' || op[0] == b'%' {
            if self.allkeys {
                return Err(RuleError::KeysAll);
            }
            let mut flags = 0;
            let mut offset = 1;
            if op[0] == b'%' {
                while offset < op.len() {
                    match op[offset].to_ascii_uppercase() {
                        b'R' if flags & KEY_READ == 0 => flags |= KEY_READ,
                        b'W' if flags & KEY_WRITE == 0 => flags |= KEY_WRITE,
                        b'~' => {
                            offset += 1;
                            break;
                        }
                        _ => return Err(RuleError::Syntax),
                    }
                    offset += 1;
                }
                if flags == 0 {
                    return Err(RuleError::Syntax);
                }
            } else {
                flags = KEY_ALL;
            }
            let pat = &op[offset.min(op.len())..];
            if has_spaces(pat) {
                return Err(RuleError::Syntax);
            }
            match self.keys.iter_mut().find(|(_, p)| p == pat) {
                Some((f, _)) => *f |= flags,
                None => self.keys.push((flags, pat.to_vec())),
            }
            self.allkeys = false;
        } else if op[0] == b'&' {
            if self.allchannels {
                return Err(RuleError::ChannelsAll);
            }
            let pat = &op[1..];
            if has_spaces(pat) {
                return Err(RuleError::Syntax);
            }
            if !self.channels.iter().any(|p| p == pat) {
                self.channels.push(pat.to_vec());
            }
            self.allchannels = false;
        } else if op[0] == b'+' && op.get(1) != Some(&b'@') {
            let name = &op[1..];
            match name.iter().rposition(|&c| c == b'|') {
                None => {
                    let i = cat.lookup(name).ok_or(RuleError::NoEnt)?;
                    self.change(cat, i, true);
                }
                Some(bar) => {
                    let (base, sub) = (&name[..bar], &name[bar + 1..]);
                    let i = cat.lookup(base).ok_or(RuleError::NoEnt)?;
                    if cat.entry(i).parent.is_some() {
                        return Err(RuleError::SubFirstArg);
                    }
                    if sub.is_empty() {
                        return Err(RuleError::Syntax);
                    }
                    if !cat.entry(i).subs.is_empty() {
                        let s = cat.lookup(name).ok_or(RuleError::NoEnt)?;
                        self.change(cat, s, true);
                    } else {
                        let args = self.firstargs.entry(i).or_default();
                        if !args.iter().any(|a| a.eq_ignore_ascii_case(sub)) {
                            args.push(sub.to_vec());
                        }
                    }
                }
            }
        } else if op[0] == b'-' && op.get(1) != Some(&b'@') {
            let i = cat.lookup(&op[1..]).ok_or(RuleError::NoEnt)?;
            self.change(cat, i, false);
        } else if (op[0] == b'+' || op[0] == b'-') && op.get(1) == Some(&b'@') {
            let flag = category_bit(&op[2..]);
            if flag == 0 {
                return Err(RuleError::NoEnt);
            }
            self.category(cat, flag, op[0] == b'+');
        } else {
            return Err(RuleError::Syntax);
        }
        Ok(())
    }

    /// Whether this selector lets the command run, or why not: Redis's
    /// ACLSelectorCheckCmd. `keys` gives each key's argument position and
    /// the permissions it needs; `channels` each channel's position and
    /// whether it is a pattern (PSUBSCRIBE).
    fn check(&self, q: &mut Query) -> Result<(), (Denial, usize)> {
        if !self.allcommands && !q.no_auth && !self.bit(q.cmd) {
            let idx = if q.sub { 2 } else { 1 };
            let allowed = q.args.len() > 1
                && self.firstargs.get(&q.cmd).is_some_and(|list| {
                    q.args
                        .get(idx)
                        .is_some_and(|a| list.iter().any(|f| f.eq_ignore_ascii_case(a)))
                });
            if !allowed {
                return Err((Denial::Command, 0));
            }
        }
        if !self.allkeys {
            let args = q.args;
            for &(pos, need) in q.keys() {
                let key = &args[pos];
                let ok = self.keys.iter().any(|(flags, pat)| {
                    flags & need == need && crate::glob::matches(pat, key, false)
                });
                if !ok {
                    return Err((Denial::Key, pos));
                }
            }
        }
        if !self.allchannels {
            for &(pos, pattern) in q.channels {
                let ch = &q.args[pos];
                let ok = self.channels.iter().any(|p| {
                    if pattern {
                        p == ch
                    } else {
                        crate::glob::matches(p, ch, false)
                    }
                });
                if !ok {
                    return Err((Denial::Channel, pos));
                }
            }
        }
        Ok(())
    }

    fn may_read_key(&self, key: &[u8]) -> bool {
        self.allkeys
            || self
                .keys
                .iter()
                .any(|(flags, pat)| flags & KEY_READ != 0 && crate::glob::matches(pat, key, false))
    }

    fn may_use_channel(&self, ch: &[u8], pattern: bool) -> bool {
        self.allchannels
            || self.channels.iter().any(|p| {
                if pattern {
                    p == ch
                } else {
                    crate::glob::matches(p, ch, false)
                }
            })
    }
}

/// Why a command was denied, in Redis's order of relevance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Denial {
    Command = 1,
    Key = 2,
    Channel = 4,
}

/// A command about to run, for a permission check.
pub struct Query<'a> {
    /// The command's (or subcommand's) catalog index.
    pub cmd: usize,
    /// It is a subcommand (its first argument is args[2]).
    pub sub: bool,
    /// It needs no authentication (AUTH, HELLO, ...): always allowed.
    pub no_auth: bool,
    pub args: &'a [bytes::Bytes],
    /// Finds the keys (position, KEY_READ | KEY_WRITE needed), once.
    pub find_keys: &'a dyn Fn() -> Vec<(usize, u8)>,
    pub found: Option<Vec<(usize, u8)>>,
    pub channels: &'a [(usize, bool)],
}

impl Query<'_> {
    fn keys(&mut self) -> &[(usize, u8)] {
        if self.found.is_none() {
            self.found = Some((self.find_keys)());
        }
        self.found.as_deref().unwrap_or(&[])
    }
}

/// The user flag for payload sanitizing (RESTORE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sanitize {
    Unset,
    Yes,
    Skip,
}

/// One ACL user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    name: Vec<u8>,
    enabled: bool,
    nopass: bool,
    sanitize: Sanitize,
    /// SHA-256 hex digests, in the order added.
    passwords: Vec<String>,
    /// The root selector first.
    selectors: Vec<Selector>,
}

/// SHA-256 of a password, as lower-case hex.
pub fn hash_password(pass: &[u8]) -> String {
    let digest = Sha256::digest(pass);
    let mut s = String::with_capacity(64);
    for b in digest {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The hash a password rule names: `clear` + a clear-text password (hashed
/// here), or the other prefix + a hash.
fn op_hash(op: &[u8], clear: u8) -> Result<String, RuleError> {
    if op[0] == clear {
        return Ok(hash_password(&op[1..]));
    }
    if !valid_hash(&op[1..]) {
        return Err(RuleError::BadHash);
    }
    Ok(String::from_utf8_lossy(&op[1..]).into_owned())
}

fn valid_hash(h: &[u8]) -> bool {
    h.len() == 64 && h.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Compares without an early exit on the first differing byte.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= (x ^ y) as usize;
    }
    diff == 0
}

impl User {
    /// A new user as ACL SETUSER creates it: off, no passwords, no
    /// permissions (channels per acl-pubsub-default).
    pub fn new(cat: &Catalog, name: &[u8], allchannels: bool) -> User {
        User {
            name: name.to_vec(),
            enabled: false,
            nopass: false,
            sanitize: Sanitize::Unset,
            passwords: Vec::new(),
            selectors: vec![Selector::new(cat, true, allchannels)],
        }
    }

    /// The default user: on, nopass, ~* &* +@all.
    pub fn default_user(cat: &Catalog) -> User {
        let mut u = User::new(cat, b"default", false);
        for op in ["+@all", "~*", "&*", "on", "nopass"] {
            let _ = u.apply(cat, op.as_bytes(), false);
        }
        u
    }

    pub fn name(&self) -> &[u8] {
        &self.name
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn nopass(&self) -> bool {
        self.nopass
    }

    pub fn passwords(&self) -> &[String] {
        &self.passwords
    }

    /// The flags as ACL GETUSER lists them.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut f = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            f.push("nopass");
        }
        match self.sanitize {
            Sanitize::Skip => f.push("skip-sanitize-payload"),
            Sanitize::Yes => f.push("sanitize-payload"),
            Sanitize::Unset => {}
        }
        f
    }

    /// The selectors after the root one.
    pub fn selectors(&self) -> &[Selector] {
        &self.selectors[1..]
    }

    pub fn root(&self) -> &Selector {
        &self.selectors[0]
    }

    /// Redis's ACLSetUser: one rule. `allchannels` is acl-pubsub-default.
    pub fn apply(&mut self, cat: &Catalog, op: &[u8], allchannels: bool) -> Result<(), RuleError> {
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if op.is_empty() {
            return Ok(());
        }
        if is("on") {
            self.enabled = true;
        } else if is("off") {
            self.enabled = false;
        } else if is("skip-sanitize-payload") {
            self.sanitize = Sanitize::Skip;
        } else if is("sanitize-payload") {
            self.sanitize = Sanitize::Yes;
        } else if is("nopass") {
            self.nopass = true;
            self.passwords.clear();
        } else if is("resetpass") {
            self.nopass = false;
            self.passwords.clear();
        } else if op[0] == b'>' || op[0] == b'#' {
            let hash = op_hash(op, b'>')?;
            if !self.passwords.contains(&hash) {
                self.passwords.push(hash);
            }
            self.nopass = false;
        } else if op[0] == b'<' || op[0] == b'!' {
            let hash = op_hash(op, b'<')?;
            let at = self
                .passwords
                .iter()
                .position(|p| *p == hash)
                .ok_or(RuleError::NoPassword)?;
            self.passwords.remove(at);
        } else if op[0] == b'(' && op[op.len() - 1] == b')' {
            let inner = &op[1..op.len() - 1];
            let mut s = Selector::new(cat, false, allchannels);
            // Unbalanced quotes give an empty selector, as sdssplitargs's
            // NULL does in Redis.
            for r in crate::resp::parse::split_args(inner).unwrap_or_default() {
                if !r.is_empty() {
                    s.apply(cat, &r)?;
                }
            }
            self.selectors.push(s);
        } else if is("clearselectors") {
            self.selectors.truncate(1);
        } else if is("reset") {
            for op in ["resetpass", "resetkeys", "resetchannels"] {
                let _ = self.apply(cat, op.as_bytes(), allchannels);
            }
            if allchannels {
                let _ = self.apply(cat, b"allchannels", allchannels);
            }
            for op in ["off", "sanitize-payload", "clearselectors", "-@all"] {
                let _ = self.apply(cat, op.as_bytes(), allchannels);
            }
        } else {
            self.selectors[0].apply(cat, op)?;
        }
        Ok(())
    }

    /// Whether `pass` is one of this user's passwords (any, with nopass).
    pub fn password_ok(&self, pass: &[u8]) -> bool {
        if self.nopass {
            return true;
        }
        let h = hash_password(pass);
        // Every one is compared, so the time does not tell which matched.
        self.passwords
            .iter()
            .fold(false, |ok, p| same_secret(p.as_bytes(), h.as_bytes()) | ok)
    }

    /// Redis's ACLCheckAllUserCommandPerm: Ok, or the most relevant denial
    /// with the argument position of the key or channel.
    pub fn check(&self, q: &mut Query) -> Result<(), (Denial, usize)> {
        let mut worst = (Denial::Command, 0);
        for s in &self.selectors {
            match s.check(q) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    if e.0 > worst.0 || (e.0 == worst.0 && e.1 > worst.1) {
                        worst = e;
                    }
                }
            }
        }
        Err(worst)
    }

    /// Whether every command, key and channel is allowed (no check needed).
    pub fn unrestricted(&self) -> bool {
        let r = &self.selectors[0];
        r.allcommands && r.allkeys && r.allchannels
    }

    /// Whether any selector may read `key` (WATCHEX pushes).
    pub fn may_read_key(&self, key: &[u8]) -> bool {
        self.selectors.iter().any(|s| s.may_read_key(key))
    }

    /// Whether any selector allows a channel (or, literally, a pattern).
    pub fn may_use_channel(&self, ch: &[u8], pattern: bool) -> bool {
        self.selectors
            .iter()
            .any(|s| s.may_use_channel(ch, pattern))
    }

    /// The channel patterns of every selector (None: all channels).
    pub fn channel_patterns(&self) -> Option<Vec<&[u8]>> {
        if self.selectors.iter().any(|s| s.allchannels) {
            return None;
        }
        Some(
            self.selectors
                .iter()
                .flat_map(|s| s.channels.iter().map(|c| c.as_slice()))
                .collect(),
        )
    }

    /// The user as ACL LIST and the ACL file show it, after "user NAME ".
    pub fn describe(&self, cat: &Catalog) -> Vec<u8> {
        let mut out = Vec::new();
        for f in self.flags() {
            out.extend_from_slice(f.as_bytes());
            out.push(b' ');
        }
        for p in &self.passwords {
            out.push(b'#');
            out.extend_from_slice(p.as_bytes());
            out.push(b' ');
        }
        for s in &self.selectors {
            let d = describe::selector(cat, s);
            if s.root {
                out.extend_from_slice(&d);
            } else {
                out.extend_from_slice(b" (");
                out.extend_from_slice(&d);
                out.push(b')');
            }
        }
        out
    }
}

/// What ACL GETUSER shows of one selector.
pub struct SelectorView {
    pub commands: Vec<u8>,
    pub keys: Vec<u8>,
    pub channels: Vec<u8>,
}

impl Selector {
    pub fn view(&self, cat: &Catalog) -> SelectorView {
        SelectorView {
            commands: describe::commands(cat, self),
            keys: if self.allkeys {
                b"~*".to_vec()
            } else {
                let mut v = Vec::new();
                for (i, (flags, pat)) in self.keys.iter().enumerate() {
                    if i > 0 {
                        v.push(b' ');
                    }
                    describe::key_pattern(&mut v, *flags, pat);
                }
                v
            },
            channels: if self.allchannels {
                b"&*".to_vec()
            } else {
                let mut v = Vec::new();
                for (i, c) in self.channels.iter().enumerate() {
                    if i > 0 {
                        v.push(b' ');
                    }
                    v.push(b'&');
                    v.extend_from_slice(c);
                }
                v
            },
        }
    }
}

/// Redis's ACLMergeSelectorArguments: a selector may be spread over
/// several arguments ("(~a" "+get)"). Err(index of the unmatched opening
/// argument).
pub fn merge_selector_args(args: &[&[u8]]) -> Result<Vec<Vec<u8>>, usize> {
    let mut out = Vec::new();
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (j, a) in args.iter().enumerate() {
        if let Some((_, sel)) = open.as_mut() {
            sel.push(b' ');
            sel.extend_from_slice(a);
            if a.last() == Some(&b')') {
                out.push(open.take().map(|o| o.1).unwrap_or_default());
            }
            continue;
        }
        if a.first() == Some(&b'(') && a.last() != Some(&b')') {
            open = Some((j, a.to_vec()));
            continue;
        }
        out.push(a.to_vec());
    }
    match open {
        Some((j, _)) => Err(j),
        None => Ok(out),
    }
}

/// Every user, by name (byte order, as Redis's radix tree lists them).
/// Copy-on-write: a clone is two reference counts, and stays as it was
/// while the original changes (the script gate keeps one, so AUTH and
/// HELLO can run while a script holds the store).
#[derive(Debug, Clone)]
pub struct Users {
    cat: std::sync::Arc<Catalog>,
    users: std::sync::Arc<BTreeMap<Vec<u8>, User>>,
}

impl Users {
    pub fn new(cat: std::sync::Arc<Catalog>) -> Users {
        let mut users = BTreeMap::new();
        users.insert(b"default".to_vec(), User::default_user(&cat));
        Users {
            cat,
            users: std::sync::Arc::new(users),
        }
    }

    pub fn catalog(&self) -> &Catalog {
        &self.cat
    }

    pub fn get(&self, name: &[u8]) -> Option<&User> {
        self.users.get(name)
    }

    /// Whether new connections must authenticate: the default user has a
    /// password or is off (Redis's authRequired).
    pub fn auth_required(&self) -> bool {
        let d = self.default_user();
        !d.nopass() || !d.enabled()
    }

    /// Redis's ACLCheckUserCredentials: the user exists, is on, and the
    /// password is one of its own (or it has nopass).
    pub fn credentials_ok(&self, user: &[u8], pass: &[u8]) -> bool {
        self.get(user)
            .is_some_and(|u| u.enabled() && u.password_ok(pass))
    }

    pub fn default_user(&self) -> &User {
        // Never removed.
        &self.users[b"default".as_slice()]
    }

    pub fn iter(&self) -> impl Iterator<Item = &User> {
        self.users.values()
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// ACL SETUSER: applies every rule to a copy of the user (or a new
    /// one), and only if all are valid replaces it. Err(the rule, why).
    pub fn set_user(
        &mut self,
        name: &[u8],
        rules: &[Vec<u8>],
        allchannels: bool,
    ) -> Result<(), (Vec<u8>, RuleError)> {
        let mut u = match self.users.get(name) {
            Some(u) => u.clone(),
            None => User::new(&self.cat, name, allchannels),
        };
        for r in rules {
            u.apply(&self.cat, r, allchannels)
                .map_err(|e| (r.clone(), e))?;
        }
        std::sync::Arc::make_mut(&mut self.users).insert(name.to_vec(), u);
        Ok(())
    }

    /// Removes a user (never the default one); true if it existed.
    pub fn remove(&mut self, name: &[u8]) -> bool {
        name != b"default"
            && std::sync::Arc::make_mut(&mut self.users)
                .remove(name)
                .is_some()
    }

    /// The default user's password becomes `pass` (requirepass), or none
    /// with nopass.
    pub fn set_default_password(&mut self, pass: Option<&[u8]>) {
        let cat = self.cat.clone();
        let users = std::sync::Arc::make_mut(&mut self.users);
        let Some(u) = users.get_mut(b"default".as_slice()) else {
            return;
        };
        let _ = u.apply(&cat, b"resetpass", false);
        match pass {
            Some(p) => {
                let mut op = b">".to_vec();
                op.extend_from_slice(p);
                let _ = u.apply(&cat, &op, false);
            }
            None => {
                let _ = u.apply(&cat, b"nopass", false);
            }
        }
    }

    /// Replaces every user (ACL LOAD); the default user is kept when the
    /// new set lacks one.
    pub fn replace(&mut self, mut users: BTreeMap<Vec<u8>, User>) {
        users
            .entry(b"default".to_vec())
            .or_insert_with(|| User::default_user(&self.cat));
        self.users = std::sync::Arc::new(users);
    }

    /// Parses an ACL file's text (Redis's ACLLoadFromFile): the new users,
    /// or every error found, as one line.
    pub fn parse_file(
        &self,
        text: &[u8],
        filename: &str,
        allchannels: bool,
    ) -> Result<BTreeMap<Vec<u8>, User>, String> {
        let mut users: BTreeMap<Vec<u8>, User> = BTreeMap::new();
        let mut errors = String::new();
        for (i, raw) in text.split(|&c| c == b'\n').enumerate() {
            let line = trim(raw, b" \t\r\n");
            let linenum = i + 1;
            if line.is_empty() {
                continue;
            }
            let argv: Vec<&[u8]> = line.split(|&c| c == b' ').collect();
            if argv[0] != b"user" || argv.len() < 2 {
                let _ = write!(
                    errors,
                    "{filename}:{linenum} should start with user keyword followed by the username. "
                );
                continue;
            }
            let name = argv[1];
            if has_spaces(name) {
                let _ = write!(
                    errors,
                    "'{filename}:{linenum}: username '{}' contains invalid characters. ",
                    String::from_utf8_lossy(name)
                );
                continue;
            }
            if users.contains_key(name) {
                let _ = write!(
                    errors,
                    "WARNING: Duplicate user '{}' found on line {linenum}. ",
                    String::from_utf8_lossy(name)
                );
                continue;
            }
            let mut u = User::new(&self.cat, name, allchannels);
            match merge_selector_args(&argv[2..]) {
                Err(_) => {
                    let _ = write!(
                        errors,
                        "{filename}:{linenum}: Unmatched parenthesis in selector definition."
                    );
                }
                Ok(rules) => {
                    for r in rules {
                        let r = trim(&r, b"\t\r\n");
                        if let Err(e) = u.apply(&self.cat, r, allchannels) {
                            let _ = write!(
                                errors,
                                "{filename}:{linenum}: Error in applying operation '{}': {}. ",
                                String::from_utf8_lossy(r),
                                e.message()
                            );
                        }
                    }
                }
            }
            users.insert(name.to_vec(), u);
        }
        if errors.is_empty() {
            Ok(users)
        } else {
            errors.push_str(
                "WARNING: ACL errors detected, no change to the previously active ACL rules was performed",
            );
            Err(errors)
        }
    }

    /// The ACL file's text for these users (ACL SAVE).
    pub fn file_text(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for u in self.users.values() {
            out.extend_from_slice(b"user ");
            out.extend_from_slice(&u.name);
            out.push(b' ');
            out.extend_from_slice(&u.describe(&self.cat));
            out.push(b'\n');
        }
        out
    }
}

fn trim<'a>(s: &'a [u8], set: &[u8]) -> &'a [u8] {
    let start = s.iter().position(|c| !set.contains(c)).unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|c| !set.contains(c))
        .map_or(start, |e| e + 1);
    &s[start..end.max(start)]
}

#[cfg(test)]
mod tests;

/// The server's ACL state: users and the log.
#[derive(Debug)]
pub struct Acl {
    pub users: Users,
    pub log: AclLog,
    /// Bumped on every change to users, so connections can cache what
    /// they found about theirs.
    generation: u64,
}

impl Acl {
    pub fn new(cat: std::sync::Arc<Catalog>) -> Acl {
        Acl {
            users: Users::new(cat),
            log: AclLog::default(),
            generation: 1,
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Marks a change to users (a SETUSER, DELUSER, LOAD, requirepass).
    pub fn changed(&mut self) {
        self.generation += 1;
    }

    /// Whether new connections must authenticate.
    pub fn auth_required(&self) -> bool {
        self.users.auth_required()
    }

    /// Redis's ACLCheckUserCredentials.
    pub fn credentials_ok(&self, user: &[u8], pass: &[u8]) -> bool {
        self.users.credentials_ok(user, pass)
    }
}

/// ACL LOAD: replaces every user with the file's, or changes nothing and
/// returns every error found. Ok(the users that were replaced: their
/// connections must close, as Redis frees every old user but the default).
pub fn load_file(acl: &mut Acl, path: &str, allchannels: bool) -> Result<Vec<Vec<u8>>, String> {
    let text = std::fs::read(path)
        .map_err(|e| format!("Error loading ACLs, opening file '{path}': {}", io_text(&e)))?;
    let users = acl.users.parse_file(&text, path, allchannels)?;
    let gone: Vec<Vec<u8>> = acl
        .users
        .iter()
        .map(|u| u.name().to_vec())
        .filter(|n| n != b"default")
        .collect();
    acl.users.replace(users);
    acl.changed();
    Ok(gone)
}

/// strerror's text for an I/O error ("No such file or directory").
fn io_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// ACL SAVE: writes the users to a temporary file and renames it over
/// `path`.
pub fn save_file(users: &Users, path: &str) -> std::io::Result<()> {
    let tmp = format!(
        "{path}.tmp-{}-{}",
        std::process::id(),
        crate::util::now_ms()
    );
    let r = std::fs::write(&tmp, users.file_text()).and_then(|_| std::fs::rename(&tmp, path));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// Start-up (Redis's ACLLoadUsersAtStartup): the `user` directives of the
/// config file, or the `aclfile`, never both.
pub fn load_at_start(
    acl: &mut Acl,
    configured: &[Vec<String>],
    aclfile: &str,
    allchannels: bool,
) -> Result<(), String> {
    if !aclfile.is_empty() && !configured.is_empty() {
        return Err("Configuring Redis with users defined in redis.conf and at the same setting an ACL file path is invalid. This setup is very likely to lead to configuration errors and security holes, please define either an ACL file or declare users directly in your redis.conf, but not both.".into());
    }
    let mut seen: Vec<&str> = Vec::new();
    for def in configured {
        let name = def[0].as_str();
        if seen.contains(&name) {
            return Err(format!(
                "Error in user declaration '{name}': {}",
                RuleError::Duplicate.message()
            ));
        }
        seen.push(name);
        if has_spaces(name.as_bytes()) {
            return Err("Spaces not allowed in ACL usernames".into());
        }
        let raw: Vec<&[u8]> = def[1..].iter().map(|s| s.as_bytes()).collect();
        let rules = merge_selector_args(&raw)
            .map_err(|_| format!("Error in user declaration '{name}': Unmatched parenthesis"))?;
        let mut all = rules.clone();
        if name == "default" {
            all.insert(0, b"reset".to_vec());
        }
        acl.users
            .set_user(name.as_bytes(), &all, allchannels)
            .map_err(|(rule, e)| {
                format!(
                    "Error loading ACL rule '{}' for the user named '{name}': {}",
                    String::from_utf8_lossy(&rule),
                    e.message()
                )
            })?;
    }
    if !aclfile.is_empty() {
        load_file(acl, aclfile, allchannels)
            .map_err(|e| format!("Aborting Redis startup because of ACL errors: {e}"))?;
    }
    acl.changed();
    Ok(())
}

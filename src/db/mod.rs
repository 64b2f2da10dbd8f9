//! One logical database: keys, values, expiry.
//!
//! # The keyspace-change hook
//! Every change to a key's existence or value is recorded here as a
//! [`KeyEvent`] by the method that made it (`set_str`, `remove`, `take`, `put`,
//! `touch_modified`, lazy and active expiry). The keyspace drains these events
//! after each command, expiry cycle or disconnect and passes each one to
//! its `keyspace_changed` (`crate::keyspace`), the single hook that WATCH,
//! WATCHEX, keyspace notifications and client tracking hang from. Command code
//! never notifies anyone itself: if it changed a key through this API, the
//! hook hears about it, in order, before the next command runs.

pub mod digest;
pub mod entry;
pub mod evict;
mod guard;
mod objects;
pub mod snapshot;

pub use guard::Guard;

use crate::types::table::Table;
use bytes::Bytes;
use entry::*;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::types::{Kind, Value};
use crate::util::cmd_time_ms;

/// Why a key changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// A command run by the connection being served.
    Command,
    /// The key's TTL passed (lazy or active expiry).
    Expired,
    /// The connection that owned a bound key ended.
    Disconnect,
    /// `maxmemory` eviction.
    Evicted,
    /// Hash fields' TTLs passed (Redis 7.4 field expiration, lazy or
    /// active): the event lists the fields, which propagate as HDEL.
    FieldsExpired,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `key` was written or deleted. `existed`/`exists` tell the transition;
    /// both true means an overwrite or in-place modification.
    Key {
        key: Bytes,
        existed: bool,
        exists: bool,
    },
    /// Every key of the database was removed (FLUSHDB/FLUSHALL).
    Flushed,
    /// The database's contents were exchanged with database `with` (SWAPDB).
    Swapped { with: usize },
    /// Keys were loaded from a file (start-up, DEBUG RELOAD): no per-key
    /// notifications and no change to count, as Redis's load; existence
    /// watchers re-check their keys.
    Loaded,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyEvent {
    pub db: usize,
    pub change: Change,
    pub cause: Cause,
    /// Redis's keyspace-notification event ("set", "lpush", "del", ...).
    pub event: Event,
    /// The hash fields a `Cause::FieldsExpired` event removed.
    pub fields: Vec<Bytes>,
}

/// The notification class of an event: Redis's `notify-keyspace-events`
/// flag letter (`g` generic, `$` string, `l` list, `s` set, `h` hash,
/// `z` zset, `x` expired, `e` evicted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Generic,
    String,
    List,
    Set,
    Hash,
    ZSet,
    /// `t`: stream commands.
    Stream,
    Expired,
    Evicted,
    /// `m`: a read lookup found no key (`keymiss`).
    KeyMiss,
    /// `n`: a key was created (`new`).
    New,
}

impl Class {
    /// The flag letter in `notify-keyspace-events`.
    pub fn letter(self) -> u8 {
        match self {
            Class::Generic => b'g',
            Class::String => b'$',
            Class::List => b'l',
            Class::Set => b's',
            Class::Hash => b'h',
            Class::ZSet => b'z',
            Class::Stream => b't',
            Class::Expired => b'x',
            Class::Evicted => b'e',
            Class::KeyMiss => b'm',
            Class::New => b'n',
        }
    }
}

/// A keyspace event: its Redis name and class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub name: &'static str,
    pub class: Class,
    /// Whether the change counts as a modification of the key for WATCH
    /// and client tracking (Redis's signalModifiedKey). Most do; a stream
    /// group's bookkeeping (XREADGROUP, XACK, XGROUP SETID ...) does not.
    pub modifies: bool,
}

impl Event {
    pub const fn new(class: Class, name: &'static str) -> Event {
        Event {
            name,
            class,
            modifies: true,
        }
    }
    pub const fn generic(name: &'static str) -> Event {
        Event::new(Class::Generic, name)
    }
    pub const fn string(name: &'static str) -> Event {
        Event::new(Class::String, name)
    }
    pub const fn list(name: &'static str) -> Event {
        Event::new(Class::List, name)
    }
    pub const fn set(name: &'static str) -> Event {
        Event::new(Class::Set, name)
    }
    pub const fn hash(name: &'static str) -> Event {
        Event::new(Class::Hash, name)
    }
    pub const fn zset(name: &'static str) -> Event {
        Event::new(Class::ZSet, name)
    }
    pub const fn stream(name: &'static str) -> Event {
        Event::new(Class::Stream, name)
    }
    /// The same event, not signalling the key as modified.
    pub const fn unsignaled(mut self) -> Event {
        self.modifies = false;
        self
    }
}

pub const EV_DEL: Event = Event::generic("del");
pub const EV_EXPIRED: Event = Event::new(Class::Expired, "expired");
pub const EV_EVICTED: Event = Event::new(Class::Evicted, "evicted");
pub const EV_EXPIRE: Event = Event::generic("expire");
pub const EV_PERSIST: Event = Event::generic("persist");
pub const EV_SET: Event = Event::string("set");
/// Hash fields removed because their TTL passed (Redis 7.4).
pub const EV_HEXPIRED: Event = Event::hash("hexpired");
/// Flushes and swaps carry no per-key event in Redis; their records use this.
pub const EV_NONE: Event = Event::generic("");
/// Not recorded as changes: the keyspace hook derives `new` from a key's
/// creation, and reports `keymiss` from `Db::missed`.
pub const EV_NEW: Event = Event::new(Class::New, "new");
pub const EV_KEYMISS: Event = Event::new(Class::KeyMiss, "keymiss");

/// What a server's configuration tells its databases' hot paths, copied
/// into every `Db` of the server by the store when its config changes (a
/// field read per access, no global shared by servers in one process).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settings {
    /// The eviction policy and LFU parameters key accesses stamp by.
    pub access: evict::Access,
    /// Whether read lookups that miss are recorded for `keymiss`
    /// notifications (`m` in `notify-keyspace-events`); otherwise a miss
    /// costs nothing more than its counter.
    pub keymiss: bool,
    /// While CLIENT PAUSE holds (until this ms; 0: no pause), reads treat
    /// expired keys as gone without deleting them (Redis's expireIfNeeded
    /// keeps the dataset still during a pause); writes still delete them.
    pub paused_until: i64,
    /// `lazyfree-lazy-expire`, `-eviction`, `-server-del`: values deleted
    /// by expiry, by eviction, or overwritten or deleted as a side effect
    /// (a SETTP owner gone) are freed in the background when large.
    pub lazy_expire: bool,
    pub lazy_evict: bool,
    pub lazy_server_del: bool,
}

/// A borrowed view of a value.
#[derive(Debug, Clone, Copy)]
pub enum ValueRef<'a> {
    Str(&'a [u8]),
    /// Every type but strings.
    Obj(&'a Value),
}

/// An owned value with its expire, for RENAME, MOVE, COPY.
#[derive(Debug, Clone)]
pub struct Owned {
    pub value: OwnedValue,
    pub expire: Option<i64>,
    pub flags: u8,
}

impl Owned {
    /// A loaded value (RDB, RESTORE): a string goes inline, as one a
    /// command wrote, so it takes Redis's int/embstr/raw encoding by size.
    pub fn loaded(value: Value, expire: Option<i64>) -> Owned {
        let value = match value {
            Value::Str(s) if s.len() <= INLINE_MAX => OwnedValue::Inline(s),
            v => OwnedValue::Obj(v),
        };
        Owned {
            value,
            expire,
            flags: 0,
        }
    }
}

#[derive(Debug, Clone)]
pub enum OwnedValue {
    Inline(Vec<u8>),
    Obj(Value),
}

/// The value at a key was not of the type the command works on: the one
/// source of `WRONGTYPE Operation against a key holding the wrong kind of
/// value` (see `commands::WRONGTYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrongType;

impl<'a> ValueRef<'a> {
    pub fn type_name(&self) -> &'static str {
        match self {
            ValueRef::Str(_) => "string",
            ValueRef::Obj(v) => v.type_name(),
        }
    }

    /// The string, or WrongType.
    pub fn as_str(&self) -> Result<&'a [u8], WrongType> {
        match *self {
            ValueRef::Str(s) => Ok(s),
            ValueRef::Obj(_) => Err(WrongType),
        }
    }
}

/// The active-expiry task's alarm clock: the deadline it sleeps towards, and
/// a `Notify` to wake it earlier. Without it a TTL set while the task sleeps
/// would wait out the whole sleep (up to 1/hz s) before its key is deleted
/// and its watchers get DEL.
#[derive(Debug)]
pub struct ExpiryTimer {
    pub wake_at: AtomicI64,
    pub notify: tokio::sync::Notify,
}

impl Default for ExpiryTimer {
    fn default() -> Self {
        ExpiryTimer {
            wake_at: AtomicI64::new(i64::MAX),
            notify: tokio::sync::Notify::new(),
        }
    }
}

impl ExpiryTimer {
    /// A key now expires at `when`: wake the task if it would sleep past it.
    pub fn schedule(&self, when: i64) {
        if when < self.wake_at.load(Ordering::Relaxed) {
            self.wake_at.store(when, Ordering::Relaxed);
            self.notify.notify_one();
        }
    }
}

/// Takes the first entry of a deadline index if its deadline is before `now`.
fn pop_due(index: &mut BTreeSet<(i64, Box<[u8]>)>, now: i64) -> Option<Box<[u8]>> {
    if index.first()?.0 >= now {
        return None;
    }
    index.pop_first().map(|(_, k)| k)
}

pub struct Db {
    pub id: usize,
    table: Table<Entry>,
    objs: objects::Objects,
    /// Keys with a TTL ordered by deadline: active expiry pops from the front,
    /// so an expired key is deleted promptly even if nobody reads it.
    expires: BTreeSet<(i64, Box<[u8]>)>,
    /// Hashes with field TTLs by their earliest field deadline, for the
    /// active expiry of fields. Entries may be stale (the key renamed,
    /// deleted, its deadlines changed): the cycle checks the key and puts
    /// it back under its real deadline.
    hexpires: BTreeSet<(i64, Box<[u8]>)>,
    /// Wakes the active-expiry task when a deadline earlier than the one it
    /// sleeps towards is set (shared by every database of a store).
    pub timer: Arc<ExpiryTimer>,
    /// Changes not yet passed to the store's hook.
    pub events: Vec<KeyEvent>,
    /// Read lookups that found / did not find the key (INFO keyspace_hits/misses).
    pub hits: u64,
    pub misses: u64,
    /// Keys read lookups missed since the hook last ran, while `keymiss`
    /// notifications are on.
    pub missed: Vec<Bytes>,
    /// This database's part of a background save in progress.
    snap: Option<snapshot::DbSnap>,
    /// The server's settings its accesses read (see [`Settings`]).
    pub settings: Settings,
    /// Frees large deleted values in the background (shared by every
    /// database of a store).
    pub lazy: Arc<crate::lazyfree::LazyFree>,
}

impl Db {
    pub fn new(id: usize) -> Db {
        Db {
            id,
            table: Table::new(),
            objs: objects::Objects::new(),
            expires: BTreeSet::new(),
            hexpires: BTreeSet::new(),
            timer: Arc::default(),
            events: Vec::new(),
            hits: 0,
            misses: 0,
            missed: Vec::new(),
            snap: None,
            settings: Settings::default(),
            lazy: Arc::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Approximate bytes of the key table and of the expiry index (MEMORY
    /// STATS's overhead.hashtable.main and .expires).
    pub fn overhead(&self) -> (usize, usize) {
        let expires = self
            .expires
            .iter()
            .map(|(_, k)| k.len() + 3 * std::mem::size_of::<usize>())
            .sum();
        (self.table.overhead(), expires)
    }

    pub fn expires_len(&self) -> usize {
        self.expires.len()
    }

    /// Mean remaining TTL in ms over keys with a TTL (INFO keyspace avg_ttl),
    /// 0 when there are none.
    pub fn avg_ttl(&self, now: i64) -> i64 {
        if self.expires.is_empty() {
            return 0;
        }
        let sum: i128 = self
            .expires
            .iter()
            .map(|(w, _)| (*w - now).max(0) as i128)
            .sum();
        (sum / self.expires.len() as i128) as i64
    }

    /// A new key's access stamp under this server's eviction settings.
    fn new_stamp(&self) -> u32 {
        evict::new_stamp(&self.settings.access)
    }

    /// Counts a read lookup's miss (and records it for `keymiss`).
    fn miss(&mut self, key: &[u8]) {
        self.misses += 1;
        if self.settings.keymiss {
            self.missed.push(Bytes::copy_from_slice(key));
        }
    }

    fn emit(&mut self, key: Bytes, existed: bool, exists: bool, cause: Cause, event: Event) {
        self.events.push(KeyEvent {
            db: self.id,
            change: Change::Key {
                key,
                existed,
                exists,
            },
            cause,
            event,
            fields: Vec::new(),
        });
    }

    /// Slot of a live key; an expired key is deleted on the way (lazy
    /// expiry), but during a CLIENT PAUSE (only reported gone).
    fn live(&mut self, key: &[u8]) -> Option<usize> {
        self.live_at(key, false)
    }

    /// `live`; `write`: the caller may store the key next, so an expired
    /// one is deleted even during a pause.
    fn live_at(&mut self, key: &[u8], write: bool) -> Option<usize> {
        let i = self.table.find(key)?;
        let e = self.table.slot(i).unwrap();
        if let Some(when) = e.expire() {
            // As Redis keyIsExpired: alive through the expire millisecond itself.
            let now = cmd_time_ms();
            if when < now {
                if !write && now < self.settings.paused_until {
                    return None;
                }
                self.snap_before_change(i);
                let e = self.table.remove_at(i);
                self.drop_entry(e, Cause::Expired, None, false);
                return None;
            }
        }
        if !self.hexpires.is_empty() && (write || cmd_time_ms() >= self.settings.paused_until) {
            let now = cmd_time_ms();
            if self.reap_fields(i, now, usize::MAX).1 {
                return None;
            }
        }
        Some(i)
    }

    /// Deletes up to `limit` fields of the hash at slot `i` whose TTL is
    /// before `now`, recording `hexpired` with the fields (and `del` when
    /// the hash is left empty, which deletes the key). Returns how many
    /// fields went and whether the key went.
    fn reap_fields(&mut self, i: usize, now: i64, limit: usize) -> (usize, bool) {
        let e = self.table.slot(i).expect("live slot");
        if e.kind() != KIND_OBJ {
            return (0, false);
        }
        let idx = e.obj_idx() as usize;
        let due = match &self.objs[idx] {
            Value::Hash(h) if h.min_field_ttl().is_some_and(|w| w < now) => {
                h.due_fields(now, limit)
            }
            _ => return (0, false),
        };
        self.snap_before_change(i);
        let key = Bytes::copy_from_slice(self.table.slot(i).expect("live slot").key());
        let (empty, min) = match &mut self.objs[idx] {
            Value::Hash(h) => {
                for f in &due {
                    h.remove(f);
                }
                (h.is_empty(), h.min_field_ttl())
            }
            _ => unreachable!("checked above"),
        };
        let n = due.len();
        self.events.push(KeyEvent {
            db: self.id,
            change: Change::Key {
                key: key.clone(),
                existed: true,
                exists: !empty,
            },
            cause: Cause::FieldsExpired,
            event: EV_HEXPIRED,
            fields: due.into_iter().map(Bytes::from).collect(),
        });
        if empty {
            let e = self.table.remove_at(i);
            if let Some(when) = e.expire() {
                self.expires.remove(&(when, Box::from(e.key())));
            }
            self.objs.remove(idx);
            self.emit(key, true, false, Cause::FieldsExpired, EV_DEL);
        } else if let Some(m) = min {
            self.index_fields(m, &key);
        }
        (n, empty)
    }

    /// Indexes a hash under its earliest field deadline.
    fn index_fields(&mut self, when: i64, key: &[u8]) {
        self.hexpires.insert((when, Box::from(key)));
        self.timer.schedule(when);
    }

    /// Indexes the hash at object `idx` (stored at `key`) if it has field
    /// deadlines: after a write, a load, a RENAME/MOVE/COPY/RESTORE.
    /// Whether the object at `idx` is a hash holding a field TTL.
    fn obj_has_field_ttl(&self, idx: usize) -> bool {
        matches!(&self.objs[idx], Value::Hash(h) if h.min_field_ttl().is_some())
    }

    fn index_obj(&mut self, idx: usize, key: &[u8]) {
        if let Value::Hash(h) = &self.objs[idx] {
            if let Some(m) = h.min_field_ttl() {
                self.index_fields(m, key);
            }
        }
    }

    /// `live` for a lookup that is about to change the key: a background
    /// save gets its value first (see `snapshot`).
    fn live_w(&mut self, key: &[u8]) -> Option<usize> {
        let i = self.live_at(key, true)?;
        self.snap_before_change(i);
        Some(i)
    }

    /// Frees an entry's object and expire index and records the deletion.
    /// Deletes an entry's value and index, recording the change. `unlink`:
    /// a lazy delete asked for (UNLINK); otherwise the cause's
    /// `lazyfree-lazy-*` setting decides.
    fn drop_entry(&mut self, e: Entry, cause: Cause, key: Option<&Bytes>, unlink: bool) {
        if let Some(when) = e.expire() {
            self.expires.remove(&(when, Box::from(e.key())));
        }
        if e.kind() == KIND_OBJ {
            let lazy = unlink
                || match cause {
                    Cause::Command => false,
                    Cause::Expired | Cause::FieldsExpired => self.settings.lazy_expire,
                    Cause::Evicted => self.settings.lazy_evict,
                    Cause::Disconnect => self.settings.lazy_server_del,
                };
            self.release(e.obj_idx() as usize, lazy);
        }
        let key = match key {
            Some(k) => k.clone(),
            None => Bytes::copy_from_slice(e.key()),
        };
        let event = match cause {
            Cause::Expired => EV_EXPIRED,
            Cause::Evicted => EV_EVICTED,
            _ => EV_DEL,
        };
        self.emit(key, true, false, cause, event);
    }

    /// Frees a value: in the background when `lazy` and it takes more than
    /// `lazyfree::THRESHOLD` allocations (Redis's freeObjAsync).
    fn release(&mut self, idx: usize, lazy: bool) {
        let v = self.objs.remove(idx);
        if lazy && v.free_effort() > crate::lazyfree::THRESHOLD {
            self.lazy.free(v, 1);
        }
    }

    fn view<'a>(&'a self, e: &'a Entry) -> ValueRef<'a> {
        match e.kind() {
            KIND_INLINE => ValueRef::Str(e.payload()),
            _ => match &self.objs[e.obj_idx() as usize] {
                Value::Str(v) => ValueRef::Str(v),
                v => ValueRef::Obj(v),
            },
        }
    }

    pub fn exists(&mut self, key: &[u8]) -> bool {
        self.live(key).is_some()
    }

    /// Looks a key up for reading and updates its access time.
    pub fn get(&mut self, key: &[u8]) -> Option<ValueRef<'_>> {
        let Some(i) = self.live(key) else {
            self.miss(key);
            return None;
        };
        self.hits += 1;
        evict::touch(self.table.slot_mut(i).unwrap(), &self.settings.access);
        let e = self.table.slot(i).unwrap();
        Some(self.view(e))
    }

    /// Looks a key up without touching its access time (OBJECT, TYPE-like peeks).
    pub fn peek(&mut self, key: &[u8]) -> Option<ValueRef<'_>> {
        let i = self.live(key)?;
        let e = self.table.slot(i).unwrap();
        Some(self.view(e))
    }

    /// A read lookup that counts a hit or miss but keeps the access time
    /// (Redis's LOOKUP_NOTOUCH: EXISTS, TYPE, TTL).
    pub fn get_notouch(&mut self, key: &[u8]) -> Option<ValueRef<'_>> {
        let Some(i) = self.live(key) else {
            self.miss(key);
            return None;
        };
        self.hits += 1;
        let e = self.table.slot(i).unwrap();
        Some(self.view(e))
    }

    /// A write command's lookup (Redis's lookupKeyWrite: EXPIRE, PERSIST):
    /// updates the access time, counts no hit or miss. Whether the key is live.
    pub fn lookup_write(&mut self, key: &[u8]) -> bool {
        let Some(i) = self.live(key) else {
            return false;
        };
        evict::touch(self.table.slot_mut(i).unwrap(), &self.settings.access);
        true
    }

    pub fn get_str(&mut self, key: &[u8]) -> Result<Option<&[u8]>, WrongType> {
        self.get(key).map(|v| v.as_str()).transpose()
    }

    /// A lookup for a write command (Redis's lookupKeyWrite): updates the
    /// access time but does not count a keyspace hit or miss.
    pub fn get_str_write(&mut self, key: &[u8]) -> Result<Option<&[u8]>, WrongType> {
        let Some(i) = self.live(key) else {
            return Ok(None);
        };
        evict::touch(self.table.slot_mut(i).unwrap(), &self.settings.access);
        let e = self.table.slot(i).unwrap();
        self.view(e).as_str().map(Some)
    }

    /// Entry metadata of a live key: (flags, lru, expire).
    pub fn meta(&mut self, key: &[u8]) -> Option<(u8, u32, Option<i64>)> {
        let i = self.live(key)?;
        let e = self.table.slot(i).unwrap();
        Some((e.flags(), e.lru(), e.expire()))
    }

    /// Flags of a present, unexpired key without side effects (no lazy
    /// delete, no LRU touch): for the keyspace hook, which must not record
    /// new changes while it handles one.
    pub fn peek_flags(&self, key: &[u8]) -> Option<u8> {
        let e = self.table.get(key)?;
        if e.expire().is_some_and(|w| w < cmd_time_ms()) {
            return None;
        }
        Some(e.flags())
    }

    /// Whether `key` is stored, expired or not (Redis's dictFind), and then
    /// whether its TTL has passed (keyIsExpired): None when absent. No lazy
    /// delete, no event: for WATCH, which must not change anything.
    pub fn stored_expired(&self, key: &[u8]) -> Option<bool> {
        let e = self.table.get(key)?;
        Some(e.expire().is_some_and(|w| w < cmd_time_ms()))
    }

    /// Sets or clears flag bits without lazy expiry or events.
    pub fn set_flag_quiet(&mut self, key: &[u8], flag: u8, on: bool) {
        if let Some(i) = self.table.find(key) {
            self.snap_before_change(i);
            self.table.slot_mut(i).unwrap().set_flag(flag, on);
        }
    }

    /// Sets a live key's access stamp (RESTORE's IDLETIME and FREQ).
    pub fn set_stamp(&mut self, key: &[u8], stamp: u32) {
        if let Some(i) = self.live(key) {
            self.table.slot_mut(i).unwrap().set_lru(stamp);
        }
    }

    /// Sets entry flag bits (FLAG_BOUND) on a live key.
    pub fn set_flag(&mut self, key: &[u8], flag: u8, on: bool) -> bool {
        match self.live_w(key) {
            Some(i) => {
                self.table.slot_mut(i).unwrap().set_flag(flag, on);
                true
            }
            None => false,
        }
    }

    /// OBJECT ENCODING of a live key.
    pub fn encoding(&mut self, key: &[u8]) -> Option<&'static str> {
        let i = self.live(key)?;
        let e = self.table.slot(i).unwrap();
        Some(match e.kind() {
            KIND_INLINE => {
                if e.flags() & FLAG_RAW == 0 && crate::util::is_int_encodable(e.payload()) {
                    "int"
                } else {
                    "embstr"
                }
            }
            _ => self.objs[e.obj_idx() as usize].encoding(),
        })
    }

    /// Stores a string, replacing any value of any type. The TTL is cleared
    /// unless `keep_ttl`. `embstr` marks a value that must never report the
    /// "int" encoding (INCRBYFLOAT's result). Records `set`; see
    /// `set_str_ev` for commands with another event name. Returns whether
    /// the key existed.
    pub fn set_str(&mut self, key: &Bytes, val: &[u8], keep_ttl: bool, embstr: bool) -> bool {
        self.set_str_ev(key, val, keep_ttl, embstr, EV_SET)
    }

    /// `set_str` recording `event` (INCRBY's "incrby", ...).
    pub fn set_str_ev(
        &mut self,
        key: &Bytes,
        val: &[u8],
        keep_ttl: bool,
        embstr: bool,
        event: Event,
    ) -> bool {
        // An existing key is overwritten in its slot (as Redis's
        // dbOverwrite), without taking it out of the table and hashing it
        // back in.
        let slot = self.live_w(key);
        if slot.is_none() {
            self.snap_before_create(key);
        }
        let mut expire = None;
        let mut bound_flag = 0;
        let existed = slot.is_some();
        if let Some(i) = slot {
            let e = self.table.slot(i).unwrap();
            bound_flag = e.flags() & FLAG_BOUND;
            let old_expire = e.expire();
            if keep_ttl {
                expire = old_expire;
            }
            // A string of the same length whose expire stays as it is (kept,
            // or none before and after) is rewritten in its allocation.
            if e.kind() == KIND_INLINE
                && val.len() <= INLINE_MAX
                && e.payload().len() == val.len()
                && (keep_ttl || old_expire.is_none())
            {
                let mut flags = if embstr { FLAG_RAW } else { 0 };
                if keep_ttl {
                    flags |= bound_flag;
                }
                let stamp = self.new_stamp();
                self.table
                    .slot_mut(i)
                    .unwrap()
                    .overwrite_inline(flags, stamp, val);
                self.emit(key.clone(), true, true, Cause::Command, event);
                return true;
            }
            if !keep_ttl {
                if let Some(when) = old_expire {
                    self.expires.remove(&(when, Box::from(e.key())));
                }
            }
            if e.kind() == KIND_OBJ {
                self.release(e.obj_idx() as usize, self.settings.lazy_server_del);
            }
        }
        let mut flags = if embstr { FLAG_RAW } else { 0 };
        if keep_ttl {
            flags |= bound_flag;
        }
        let entry = if val.len() <= INLINE_MAX {
            Entry::inline(key, val, flags, self.new_stamp(), expire)
        } else {
            let idx = self.objs.insert(Value::Str(val.to_vec()));
            Entry::obj(
                key,
                idx as u32,
                flags & FLAG_BOUND,
                self.new_stamp(),
                expire,
            )
        };
        match slot {
            Some(i) => drop(self.table.replace_at(i, entry)),
            None => {
                self.table.insert(entry);
            }
        }
        self.emit(key.clone(), existed, true, Cause::Command, event);
        existed
    }

    /// Gives mutable access to a string for in-place growth (APPEND, SETRANGE),
    /// converting it to the raw encoding. The caller must call
    /// `touch_modified` after changing it.
    pub fn str_mut(&mut self, key: &[u8]) -> Result<Option<&mut Vec<u8>>, WrongType> {
        let Some(i) = self.live(key) else {
            return Ok(None);
        };
        let e = self.table.slot(i).unwrap();
        if e.kind() == KIND_OBJ && !matches!(self.objs[e.obj_idx() as usize], Value::Str(_)) {
            return Err(WrongType);
        }
        let inline = e.kind() == KIND_INLINE;
        self.snap_before_change(i);
        if inline {
            let e = self.table.slot(i).unwrap();
            let val = e.payload().to_vec();
            let idx = self.objs.insert(Value::Str(val));
            let e = self.table.slot(i).unwrap();
            let ne = Entry::obj(
                e.key(),
                idx as u32,
                e.flags() & FLAG_BOUND,
                self.new_stamp(),
                e.expire(),
            );
            self.table.replace_at(i, ne);
        }
        let idx = self.table.slot(i).unwrap().obj_idx() as usize;
        match &mut self.objs[idx] {
            Value::Str(v) => Ok(Some(v)),
            _ => Err(WrongType),
        }
    }

    /// Records that an existing key's value was modified in place.
    pub fn touch_modified(&mut self, key: &Bytes, event: Event) {
        self.emit(key.clone(), true, true, Cause::Command, event);
    }

    /// Deletes a key; returns whether it existed.
    pub fn remove(&mut self, key: &Bytes) -> bool {
        match self.live_w(key) {
            Some(i) => {
                let e = self.table.remove_at(i);
                self.drop_entry(e, Cause::Command, Some(key), false);
                true
            }
            None => false,
        }
    }

    /// UNLINK: `remove`, freeing a large value in the background.
    pub fn unlink(&mut self, key: &Bytes) -> bool {
        match self.live_w(key) {
            Some(i) => {
                let e = self.table.remove_at(i);
                self.drop_entry(e, Cause::Command, Some(key), true);
                true
            }
            None => false,
        }
    }

    /// Deletes a key for a reason other than a command (a bound key's owner left).
    pub fn remove_for(&mut self, key: &Bytes, cause: Cause) -> bool {
        match self.live_w(key) {
            Some(i) => {
                let e = self.table.remove_at(i);
                self.drop_entry(e, cause, Some(key), false);
                true
            }
            None => false,
        }
    }

    /// The key's expire: None if the key is missing, Some(None) if it has no TTL.
    pub fn expire_of(&mut self, key: &[u8]) -> Option<Option<i64>> {
        let i = self.live(key)?;
        Some(self.table.slot(i).unwrap().expire())
    }

    /// Sets an absolute expire in ms. A time already passed deletes the key,
    /// as Redis does. Returns false if the key does not exist.
    pub fn set_expire(&mut self, key: &Bytes, when: i64) -> bool {
        let Some(i) = self.live_w(key) else {
            return false;
        };
        if when <= cmd_time_ms() {
            let e = self.table.remove_at(i);
            self.drop_entry(e, Cause::Command, Some(key), false);
            return true;
        }
        let e = self.table.slot(i).unwrap();
        if let Some(old) = e.expire() {
            self.expires.remove(&(old, Box::from(e.key())));
        }
        let ne = e.with_expire(Some(when));
        self.table.replace_at(i, ne);
        self.index_expire(when, key);
        self.emit(key.clone(), true, true, Cause::Command, EV_EXPIRE);
        true
    }

    /// Like `set_expire` but keeps the key even if `when` has passed; it then
    /// expires lazily (Redis's `SET ... EXAT/PXAT <past>`: the key still counts
    /// in DBSIZE until something touches it or active expiry runs).
    pub fn set_expire_lazy(&mut self, key: &Bytes, when: i64) -> bool {
        if when > cmd_time_ms() {
            return self.set_expire(key, when);
        }
        let Some(i) = self.live_w(key) else {
            return false;
        };
        let e = self.table.slot(i).unwrap();
        if let Some(old) = e.expire() {
            self.expires.remove(&(old, Box::from(e.key())));
        }
        let ne = e.with_expire(Some(when));
        self.table.replace_at(i, ne);
        // Past deadline: left to the regular active-expiry pass (as in Redis,
        // DBSIZE still counts it until then), so no early wake-up.
        self.expires.insert((when, Box::from(&key[..])));
        self.emit(key.clone(), true, true, Cause::Command, EV_EXPIRE);
        true
    }

    /// Removes the TTL; returns true if there was one.
    pub fn persist(&mut self, key: &Bytes) -> bool {
        let Some(i) = self.live_w(key) else {
            return false;
        };
        let e = self.table.slot(i).unwrap();
        let Some(old) = e.expire() else {
            return false;
        };
        self.expires.remove(&(old, Box::from(e.key())));
        let ne = e.with_expire(None);
        self.table.replace_at(i, ne);
        self.emit(key.clone(), true, true, Cause::Command, EV_PERSIST);
        true
    }

    /// Removes a key and returns its value with expire (RENAME, MOVE),
    /// recording `event` ("rename_from", "move_from").
    pub fn take(&mut self, key: &Bytes, event: Event) -> Option<Owned> {
        let i = self.live_w(key)?;
        let e = self.table.remove_at(i);
        if let Some(when) = e.expire() {
            self.expires.remove(&(when, Box::from(e.key())));
        }
        // Moved, not copied: RENAME and MOVE of a large value are O(1).
        let value = match e.kind() {
            KIND_INLINE => OwnedValue::Inline(e.payload().to_vec()),
            _ => OwnedValue::Obj(self.objs.remove(e.obj_idx() as usize)),
        };
        let owned = Owned {
            value,
            expire: e.expire(),
            flags: e.flags() & (FLAG_RAW | FLAG_BOUND),
        };
        self.emit(key.clone(), true, false, Cause::Command, event);
        Some(owned)
    }

    /// A copy of a key's value with expire (COPY).
    pub fn dup(&mut self, key: &[u8]) -> Option<Owned> {
        let i = self.live(key)?;
        let e = self.table.slot(i).unwrap();
        Some(self.to_owned(e))
    }

    fn to_owned(&self, e: &Entry) -> Owned {
        let value = match e.kind() {
            KIND_INLINE => OwnedValue::Inline(e.payload().to_vec()),
            _ => OwnedValue::Obj(self.objs[e.obj_idx() as usize].clone()),
        };
        Owned {
            value,
            expire: e.expire(),
            flags: e.flags() & (FLAG_RAW | FLAG_BOUND),
        }
    }

    /// Stores an owned value, replacing whatever is at `key` (and ending a
    /// binding there), recording `event` ("rename_to", "copy_to", ...).
    /// Returns whether the key existed before.
    pub fn put(&mut self, key: &Bytes, v: Owned, event: Event) -> bool {
        let existed = match self.live_w(key) {
            Some(i) => {
                let e = self.table.remove_at(i);
                if let Some(when) = e.expire() {
                    self.expires.remove(&(when, Box::from(e.key())));
                }
                if e.kind() == KIND_OBJ {
                    self.release(e.obj_idx() as usize, self.settings.lazy_server_del);
                }
                true
            }
            None => {
                self.snap_before_create(key);
                false
            }
        };
        let flags = v.flags & !FLAG_BOUND;
        let entry = match v.value {
            OwnedValue::Inline(b) => Entry::inline(key, &b, flags, self.new_stamp(), v.expire),
            OwnedValue::Obj(o) => {
                let idx = self.objs.insert(o);
                self.index_obj(idx, key);
                Entry::obj(key, idx as u32, flags, self.new_stamp(), v.expire)
            }
        };
        if let Some(when) = v.expire {
            self.index_expire(when, key);
        }
        self.table.insert(entry);
        self.emit(key.clone(), existed, true, Cause::Command, event);
        existed
    }

    /// Stores a new collection value (the destination of SUNIONSTORE,
    /// ZRANGESTORE, SORT ... STORE), replacing whatever is at `key` and
    /// its TTL, recording `event`; an empty collection deletes the key
    /// instead (recording `del` if it existed). Returns whether it existed.
    pub fn replace<T: Kind>(&mut self, key: &Bytes, v: T, event: Event) -> bool {
        if v.is_empty() {
            return self.remove(key);
        }
        let owned = Owned {
            value: OwnedValue::Obj(v.into_value()),
            expire: None,
            flags: 0,
        };
        self.put(key, owned, event)
    }

    /// Adds a loaded key, replacing one of the same name (whose value is
    /// returned as existing: true). No per-key event: the loader records
    /// one `Loaded` for the database (`loaded`).
    pub fn load_insert(&mut self, key: &[u8], v: Owned) -> bool {
        let entry = match v.value {
            OwnedValue::Inline(b) => Entry::inline(key, &b, 0, self.new_stamp(), v.expire),
            OwnedValue::Obj(o) => {
                let idx = self.objs.insert(o);
                self.index_obj(idx, key);
                Entry::obj(key, idx as u32, 0, self.new_stamp(), v.expire)
            }
        };
        self.load_entry(entry, key, v.expire)
    }

    /// `load_insert` of a string, straight from the file's bytes.
    pub fn load_insert_str(&mut self, key: &[u8], val: &[u8], expire: Option<i64>) -> bool {
        if val.len() > INLINE_MAX {
            return self.load_insert(key, Owned::loaded(Value::Str(val.to_vec()), expire));
        }
        let entry = Entry::inline(key, val, 0, self.new_stamp(), expire);
        self.load_entry(entry, key, expire)
    }

    fn load_entry(&mut self, entry: Entry, key: &[u8], expire: Option<i64>) -> bool {
        let existed = match self.table.insert(entry) {
            Some(old) => {
                if let Some(when) = old.expire() {
                    self.expires.remove(&(when, Box::from(old.key())));
                }
                if old.kind() == KIND_OBJ {
                    self.objs.remove(old.obj_idx() as usize);
                }
                true
            }
            None => false,
        };
        if let Some(when) = expire {
            self.index_expire(when, key);
        }
        existed
    }

    /// Room for `n` more keys without growing step by step (a load).
    pub fn reserve(&mut self, n: usize) {
        self.table.reserve(n);
    }

    /// Records that keys were loaded (see `Change::Loaded`).
    pub fn loaded(&mut self) {
        self.events.push(KeyEvent {
            db: self.id,
            change: Change::Loaded,
            cause: Cause::Command,
            event: EV_NONE,
            fields: Vec::new(),
        });
    }

    /// Removes every key. Records one `Flushed` event, not one per key.
    pub fn flush(&mut self) {
        self.snap_finish();
        self.table.clear();
        self.objs = objects::Objects::new();
        self.expires.clear();
        self.hexpires.clear();
        self.events.push(KeyEvent {
            db: self.id,
            change: Change::Flushed,
            cause: Cause::Command,
            event: EV_NONE,
            fields: Vec::new(),
        });
    }

    /// SWAPDB: the two databases trade contents; each keeps its id, and
    /// each records a `Swapped` event so that watchers of either re-check.
    pub fn swap_with(&mut self, other: &mut Db) {
        self.swap_contents(other);
        let (a, b) = (self.id, other.id);
        for (d, with) in [(&mut *self, b), (&mut *other, a)] {
            d.events.push(KeyEvent {
                db: d.id,
                change: Change::Swapped { with },
                event: EV_NONE,
                cause: Cause::Command,
                fields: Vec::new(),
            });
        }
    }

    /// Moves the contents out (FLUSHALL ASYNC frees them off the lock).
    pub fn swap_contents(&mut self, other: &mut Db) {
        self.snap_finish();
        other.snap_finish();
        std::mem::swap(&mut self.table, &mut other.table);
        std::mem::swap(&mut self.objs, &mut other.objs);
        std::mem::swap(&mut self.expires, &mut other.expires);
        std::mem::swap(&mut self.hexpires, &mut other.hexpires);
    }

    fn index_expire(&mut self, when: i64, key: &[u8]) {
        self.expires.insert((when, Box::from(key)));
        self.timer.schedule(when);
    }

    /// Deletes up to `budget` keys whose TTL has passed; returns how many.
    pub fn expire_cycle(&mut self, now: i64, budget: usize) -> usize {
        let mut n = 0;
        while n < budget {
            let Some(key) = pop_due(&mut self.expires, now) else {
                break;
            };
            if let Some(i) = self.table.find(&key) {
                self.snap_before_change(i);
                let e = self.table.remove_at(i);
                if e.kind() == KIND_OBJ {
                    self.release(e.obj_idx() as usize, self.settings.lazy_expire);
                }
                self.emit(Bytes::from(key), true, false, Cause::Expired, EV_EXPIRED);
            }
            n += 1;
        }
        while n < budget {
            let Some(key) = pop_due(&mut self.hexpires, now) else {
                break;
            };
            let Some(i) = self.table.find(&key) else {
                continue;
            };
            if self
                .table
                .slot(i)
                .and_then(|e| e.expire())
                .is_some_and(|w| w < now)
            {
                continue; // the key itself goes through `expires`
            }
            let (k, gone) = self.reap_fields(i, now, budget - n);
            if !gone && k == 0 {
                // Stale entry: put the hash back under its real deadline.
                if let Some(idx) = self
                    .table
                    .slot(i)
                    .filter(|e| e.kind() == KIND_OBJ)
                    .map(|e| e.obj_idx() as usize)
                {
                    self.index_obj(idx, &key);
                }
            }
            n += k.max(1);
        }
        n
    }

    /// The best eviction candidate among `samples` sampled keys (keys with
    /// a TTL under a volatile policy), by `evict::victim_score`; bound keys
    /// are never candidates. For volatile-ttl the soonest-expiring keys are
    /// looked at directly.
    pub fn evict_sample(&self, policy: evict::Policy, samples: usize) -> Option<(u64, Bytes)> {
        use rand::Rng;
        let mut best: Option<(u64, &Entry)> = None;
        let decay = self.settings.access.lfu_decay_time;
        let pick = |e: &Entry| -> Option<u64> { evict::victim_score(policy, decay, e) };
        if policy.volatile() {
            if self.expires.is_empty() {
                return None;
            }
            let keys: Vec<&[u8]> = if policy == evict::Policy::VolatileTtl {
                self.expires
                    .iter()
                    .take(samples.max(1) * 4)
                    .map(|(_, k)| &k[..])
                    .collect()
            } else {
                // Random deadlines between the first and the last: the
                // keys at or after them are a spread-out sample.
                let lo = self.expires.first().map_or(0, |(w, _)| *w);
                let hi = self.expires.last().map_or(0, |(w, _)| *w);
                (0..samples.max(1))
                    .filter_map(|_| {
                        let at = if hi > lo {
                            rand::thread_rng().gen_range(lo..=hi)
                        } else {
                            lo
                        };
                        self.expires
                            .range((at, Box::<[u8]>::from(&b""[..]))..)
                            .next()
                            .map(|(_, k)| &k[..])
                    })
                    .collect()
            };
            for k in keys {
                if let Some(e) = self.table.get(k) {
                    if let Some(s) = pick(e) {
                        if best.is_none_or(|(b, _)| s > b) {
                            best = Some((s, e));
                        }
                    }
                }
            }
        } else {
            for _ in 0..samples.max(1) {
                let i = self.table.random_slot(rand::random::<usize>())?;
                if let Some(e) = self.table.slot(i) {
                    if let Some(s) = pick(e) {
                        if best.is_none_or(|(b, _)| s > b) {
                            best = Some((s, e));
                        }
                    }
                }
            }
        }
        best.map(|(s, e)| (s, Bytes::copy_from_slice(e.key())))
    }

    /// Gives back the object slab's memory after mass deletions (eviction,
    /// a big DEL, expiry waves): a slab never shrinks by itself, so when it
    /// is less than a quarter full it is rebuilt at its live size and every
    /// entry is pointed at its object's new slot. O(keys), at most once per
    /// halving, so amortised O(1) per deletion.
    pub fn compact_objects(&mut self) {
        let (len, cap) = (self.objs.len(), self.objs.capacity());
        // A few chunks are never worth rebuilding.
        if cap <= 1024 || len * 4 >= cap {
            return;
        }
        let mut old = std::mem::take(&mut self.objs);
        for e in self.table.iter_mut() {
            if e.kind() == KIND_OBJ {
                if let Some(v) = old.try_remove(e.obj_idx() as usize) {
                    let idx = self.objs.insert(v);
                    e.set_obj_idx(idx as u32);
                }
            }
        }
    }

    /// Earliest pending expire time.
    pub fn next_expire(&self) -> Option<i64> {
        let keys = self.expires.first().map(|(w, _)| *w);
        let fields = self.hexpires.first().map(|(w, _)| *w);
        match (keys, fields) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// One SCAN step over home bucket `cursor`; see `Table::scan_step`.
    /// Expired keys are skipped (deleted afterwards by the caller's lookups).
    pub fn scan_step(&self, cursor: u64, mut f: impl FnMut(&[u8], ValueRef<'_>)) -> u64 {
        let now = cmd_time_ms();
        self.table.scan_step(cursor, |e| {
            if e.expire().is_some_and(|w| w < now) {
                return;
            }
            f(e.key(), self.view(e))
        })
    }

    /// Calls `f` for every stored key, with its expire, including keys
    /// whose TTL passed but that are not deleted yet (Redis's dict
    /// iterators: DEBUG DIGEST, and what a snapshot writes).
    /// The last argument says whether the key is bound to a connection.
    pub fn for_each_stored(&self, mut f: impl FnMut(&[u8], ValueRef<'_>, Option<i64>, bool)) {
        for e in self.table.iter() {
            f(
                e.key(),
                self.view(e),
                e.expire(),
                e.flags() & entry::FLAG_BOUND != 0,
            );
        }
    }

    /// A stored key's value and expire, expired or not (Redis's dictFind).
    pub fn find_stored(&self, key: &[u8]) -> Option<(ValueRef<'_>, Option<i64>)> {
        let e = self.table.get(key)?;
        Some((self.view(e), e.expire()))
    }

    /// Calls `f` for every live key.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], ValueRef<'_>)) {
        let now = cmd_time_ms();
        for e in self.table.iter() {
            if e.expire().is_some_and(|w| w < now) {
                continue;
            }
            f(e.key(), self.view(e));
        }
    }

    /// A random live key.
    pub fn random_key(&mut self) -> Option<Bytes> {
        // Expired keys found on the way are deleted; bounded so a database of
        // only expired keys cannot spin (Redis gives up after 100 tries too).
        for _ in 0..100 {
            let i = self.table.random_slot(rand::random::<usize>())?;
            let key = Bytes::copy_from_slice(self.table.slot(i).unwrap().key());
            if self.live(&key).is_some() {
                return Some(key);
            }
        }
        None
    }

    /// Approximate bytes a key uses (MEMORY USAGE).
    pub fn memory_usage(&mut self, key: &[u8]) -> Option<usize> {
        let i = self.live(key)?;
        let e = self.table.slot(i).unwrap();
        let mut n = e.alloc_size() + std::mem::size_of::<Option<Entry>>() + 4;
        if e.kind() == KIND_OBJ {
            n += self.objs[e.obj_idx() as usize].mem_usage();
        }
        Some(n)
    }
}

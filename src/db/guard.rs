//! Typed lookups of collection values, and the write guard.
//!
//! Every command that reads or changes a list, hash, set or sorted set goes
//! through `Db::read`, `Db::check_type`, `Db::write` or `Db::write_or_create`:
//! the WRONGTYPE decision is made here and nowhere else. A write lookup
//! returns a [`Guard`]; when the guard is dropped it records the command's
//! keyspace event (if the value was changed) and deletes a collection that
//! the command emptied (recording `del`, so watchers see DEL). A write
//! cannot forget the keyspace hook: the only way to a `&mut` of a stored
//! collection is through a guard.
//!
//! Must not touch anything above the database: events go into the `Db`'s
//! list, and the keyspace hook (`keyspace_changed`, `crate::keyspace`) hears
//! them when the keyspace drains it. It knows no command or connection.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use bytes::Bytes;

use super::entry::{Entry, KIND_OBJ};
use super::evict;
use super::{Cause, Db, Event, WrongType, EV_DEL};
use crate::types::Kind;

impl Db {
    /// Slot and object index of a live key holding a `T`; `Ok(None)` when
    /// the key is missing, `Err(WrongType)` when it holds another type.
    fn typed_slot<T: Kind>(&mut self, key: &[u8]) -> Result<Option<(usize, usize)>, WrongType> {
        let Some(i) = self.live(key) else {
            return Ok(None);
        };
        let e = self.table.slot(i).expect("live slot");
        if e.kind() != KIND_OBJ {
            return Err(WrongType);
        }
        let idx = e.obj_idx() as usize;
        match T::of(&self.objs[idx]) {
            Some(_) => Ok(Some((i, idx))),
            None => Err(WrongType),
        }
    }

    /// A read lookup (Redis's lookupKeyRead + checkType): counts a keyspace
    /// hit or miss and updates the access time.
    pub fn read<T: Kind>(&mut self, key: &[u8]) -> Result<Option<&T>, WrongType> {
        match self.typed_slot::<T>(key)? {
            None => {
                self.miss(key);
                Ok(None)
            }
            Some((i, idx)) => {
                self.hits += 1;
                evict::touch(
                    self.table.slot_mut(i).expect("live slot"),
                    &self.settings.access,
                );
                Ok(T::of(&self.objs[idx]))
            }
        }
    }

    /// Whether `key` exists as a `T` (false when missing), or WrongType:
    /// for commands that must check every key before changing any (SMOVE,
    /// LMOVE, the *STORE commands). Counts no hit or miss.
    pub fn check_type<T: Kind>(&mut self, key: &[u8]) -> Result<bool, WrongType> {
        Ok(self.typed_slot::<T>(key)?.is_some())
    }

    /// A write lookup (Redis's lookupKeyWrite + checkType) of an existing
    /// `T`: None when the key is missing. The guard records `event` when
    /// dropped if the value was borrowed mutably (see `Guard::no_change`).
    pub fn write<T: Kind>(
        &mut self,
        key: &Bytes,
        event: Event,
    ) -> Result<Option<Guard<'_, T>>, WrongType> {
        let Some((slot, obj)) = self.typed_slot::<T>(key)? else {
            return Ok(None);
        };
        evict::touch(
            self.table.slot_mut(slot).expect("live slot"),
            &self.settings.access,
        );
        Ok(Some(Guard::new(self, key, slot, obj, true, event)))
    }

    /// `write`, creating an empty `T` when the key is missing. A created
    /// value left empty when the guard drops is removed again without any
    /// event (nothing was ever visible).
    pub fn write_or_create<T: Kind + Default>(
        &mut self,
        key: &Bytes,
        event: Event,
    ) -> Result<Guard<'_, T>, WrongType> {
        if let Some((slot, obj)) = self.typed_slot::<T>(key)? {
            evict::touch(
                self.table.slot_mut(slot).expect("live slot"),
                &self.settings.access,
            );
            return Ok(Guard::new(self, key, slot, obj, true, event));
        }
        self.snap_before_create(key);
        let obj = self.objs.insert(T::default().into_value());
        let stamp = evict::new_stamp(&self.settings.access);
        self.table
            .insert(Entry::obj(key, obj as u32, 0, stamp, None));
        let slot = self.table.find(key).expect("just inserted");
        Ok(Guard::new(self, key, slot, obj, false, event))
    }
}

/// Mutable access to one stored collection; see the module doc.
pub struct Guard<'a, T: Kind> {
    db: &'a mut Db,
    key: Bytes,
    slot: usize,
    obj: usize,
    existed: bool,
    event: Event,
    changed: bool,
    /// A second event recorded after the first (XADD that trimmed: xtrim).
    then: Option<Event>,
    _kind: PhantomData<T>,
}

impl<'a, T: Kind> Guard<'a, T> {
    fn new(db: &'a mut Db, key: &Bytes, slot: usize, obj: usize, existed: bool, ev: Event) -> Self {
        Guard {
            db,
            key: key.clone(),
            slot,
            obj,
            existed,
            event: ev,
            changed: false,
            then: None,
            _kind: PhantomData,
        }
    }

    /// The command changed nothing after all (HDEL of absent fields, ZADD
    /// XX of a new member): record no event.
    pub fn no_change(&mut self) {
        self.changed = false;
    }

    /// Records another event name instead of the one given at lookup
    /// (ZADD that turned out to be an INCR records "zincr").
    pub fn set_event(&mut self, event: Event) {
        self.event = event;
    }

    /// Records `event` too, after the lookup's (when the value changed).
    pub fn then(&mut self, event: Event) {
        self.then = Some(event);
    }

    /// Whether the key existed before this lookup.
    pub fn existed(&self) -> bool {
        self.existed
    }

    pub fn key(&self) -> &Bytes {
        &self.key
    }
}

impl<T: Kind> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        T::of(&self.db.objs[self.obj]).expect("guard type checked at lookup")
    }
}

impl<T: Kind> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        if !self.changed {
            self.db.snap_before_change(self.slot);
        }
        self.changed = true;
        T::of_mut(&mut self.db.objs[self.obj]).expect("guard type checked at lookup")
    }
}

impl<T: Kind> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        let empty = T::of(&self.db.objs[self.obj]).is_none_or(|v| v.is_empty());
        let visible = self.existed || !empty;
        if self.changed && visible {
            // The guard's own reference goes to the event unless the
            // deletion below needs it too.
            let key = if empty {
                self.key.clone()
            } else {
                std::mem::take(&mut self.key)
            };
            if let Some(then) = self.then {
                self.db
                    .emit(key.clone(), self.existed, true, Cause::Command, self.event);
                self.db.emit(key, true, true, Cause::Command, then);
            } else {
                self.db
                    .emit(key, self.existed, true, Cause::Command, self.event);
            }
        }
        // A hash that now holds field TTLs joins the field-expiry index
        // (the key is copied only then: the common write pays one check).
        if self.changed && !empty && self.db.obj_has_field_ttl(self.obj) {
            let key = self
                .db
                .table
                .slot(self.slot)
                .map(|e| Bytes::copy_from_slice(e.key()));
            if let Some(key) = key {
                self.db.index_obj(self.obj, &key);
            }
        }
        if empty {
            // Nothing has touched the table since the lookup (the guard
            // holds the database), so the slot is still this key's.
            let e = self.db.table.remove_at(self.slot);
            if let Some(when) = e.expire() {
                self.db.expires.remove(&(when, Box::from(e.key())));
            }
            self.db.objs.remove(self.obj);
            if visible {
                let key = std::mem::take(&mut self.key);
                self.db.emit(key, true, false, Cause::Command, EV_DEL);
            }
        }
    }
}

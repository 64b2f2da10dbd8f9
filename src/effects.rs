//! The one ordered stream of effects: every change the server makes leaves
//! the store as a record here, in the order the changes were made, for
//! whoever consumes them (the AOF; attached [`Sink`]s: a test, later
//! Latchkey replicas). Two kinds of record travel in it:
//!
//! - [`Effect::Command`]: a change record as Redis propagates it (what
//!   `commands::propagate` makes of a command, EXEC and scripts by their
//!   effects, a served blocking command as its non-blocking form, and the
//!   DEL of a key removed by no command: expired, evicted, or a lock
//!   whose session ended). The AOF logs exactly these.
//! - [`Effect::Replicated`]: a command replicas run but the AOF does not
//!   log (Redis's PROPAGATE_REPL: PUBLISH and SPUBLISH, so subscribers of
//!   a replica get what is published on its primary).
//! - [`Effect::Lock`]: lock state, tagged ([`LockRecord`]): bindings,
//!   shared holds, lines' grants, sessions, the fencing counter. Bound
//!   keys never appear in Command records (a replay must never bring a
//!   lock back), so the AOF and Redis replicas drop these; a Latchkey
//!   replica can rebuild lock state from them.
//!
//! Records are kept only while someone consumes them ([`Stream::on`]), so
//! a server with neither the AOF nor a sink records nothing.
//!
//! A leaf of types only (it names nothing of the crate but ids), so that
//! persistence, scripting, the keyspace and the dispatcher can all name a
//! record without depending on each other.

use bytes::Bytes;

use crate::ids::Sid;

/// A logged command and the database it ran in.
pub type Logged = (usize, Vec<Bytes>);

/// One record of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// A change record for the AOF and Redis replicas.
    Command(Logged),
    /// Lock state, which only Latchkey consumers take.
    Lock(LockRecord),
    /// For replicas only, never the AOF (PUBLISH, SPUBLISH).
    Replicated(Logged),
}

/// A change of lock state. Sessions are named by their identity (`Sid`:
/// the same on every server that holds them, unlike a connection's id);
/// a session opens with its first hold, so only its end is a record. Each acquisition's fencing token (in `Bound` and
/// `ShareAdded`) raises the fencing counter to it.
///
/// Lock state follows its keys through Command records that move data
/// wholesale, as the data does: SWAPDB swaps the holds of the two
/// databases too; FLUSHDB/FLUSHALL end them (each with an `Unbound`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockRecord {
    /// `key` in `db` was created bound to session `sid` (SETTP, or a
    /// line's grant after its `Granted`) with `value`, expiring at
    /// `expire_at` (unix ms; None: no TTL), with fencing token `token`.
    /// The key's data is in no Command record: this is it.
    Bound {
        db: usize,
        key: Bytes,
        sid: Sid,
        value: Bytes,
        expire_at: Option<i64>,
        token: u64,
    },
    /// Session `sid` took a share of `key` (SETTP ... SHARED when
    /// `permits` is None: a reader of a read-write lock; PERMITS n: one of
    /// n permits) with `value` and fencing token `token`. While anyone
    /// holds it the key exists with the kind's marker value.
    ShareAdded {
        db: usize,
        key: Bytes,
        sid: Sid,
        permits: Option<u32>,
        value: Bytes,
        token: u64,
    },
    /// Session `sid` let go of its shares of `key` held with `value`
    /// (all of its shares of it when None). The last holder's release
    /// deletes the key.
    ShareReleased {
        db: usize,
        key: Bytes,
        sid: Sid,
        value: Option<Bytes>,
    },
    /// Every hold of `key` ended, with the key: deleted or replaced by a
    /// command, expired, evicted, flushed, or its session ended.
    Unbound { db: usize, key: Bytes },
    /// The holds of a key went with it to a new name (RENAME, MOVE).
    Moved {
        from: (usize, Bytes),
        to: (usize, Bytes),
    },
    /// The first waiter in `key`'s line (SETTP ... QUEUE), session
    /// `sid`, was granted the key: the `Bound` or `ShareAdded` record
    /// that follows is its hold.
    Granted { db: usize, key: Bytes, sid: Sid },
    /// Session `sid` took a place in `key`'s line (SETTP ... QUEUE), at
    /// its end, or at its head when `first` (a grant undone for want of
    /// replicas keeps its place), waiting to be given `value` with a TTL
    /// of `ttl_ms` from the hand-over, as a share when `share` says so.
    Queued {
        db: usize,
        key: Bytes,
        sid: Sid,
        value: Bytes,
        ttl_ms: Option<i64>,
        share: Option<crate::ids::ShareKind>,
        first: bool,
    },
    /// Session `sid` left `key`'s line (TPDEQUEUE, RESET): its place
    /// waiting for `value`, or every place of it there when None. A
    /// hand-over (`Granted`) and the session's end take places without
    /// this record.
    Dequeued {
        db: usize,
        key: Bytes,
        sid: Sid,
        value: Option<Bytes>,
    },
    /// Session `sid` ended (its connection closed or was killed, or a
    /// detached session was not resumed in time), having held something
    /// or waited in a line (a session is named in the stream only then).
    /// Its holds ended before this record, each with its own record, and
    /// its places in lines go with it.
    SessionClosed { sid: Sid },
    /// The fencing counter was raised to at least `token` without an
    /// acquisition (a load restores the saved counter).
    Fenced { token: u64 },
    /// Session `sid`'s timeout is `ms` (0: none; TPSESSION, or the
    /// server's `tp-session-timeout`): a detached one lives that long
    /// after a promotion.
    SessionTimeout { sid: Sid, ms: u64 },
    /// Session `sid`'s identity was given to its client (TPSESSION ID),
    /// which bound it to ACL user `user`: only that user may resume it.
    Owner { sid: Sid, user: Bytes },
}

/// A consumer of every record of the stream, Command and Lock alike,
/// attached in-process (`Store::attach_sink`).
pub trait Sink: Send {
    fn accept(&mut self, e: &Effect);
}

/// A sink that keeps every record it is given, seen by every clone of it
/// (a test's; a consumer that polls).
#[derive(Clone, Default)]
pub struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<Effect>>>);

impl Sink for Recorder {
    fn accept(&mut self, e: &Effect) {
        self.0.lock().expect("recorder lock").push(e.clone());
    }
}

impl Recorder {
    /// What it was given so far, in order.
    pub fn records(&self) -> Vec<Effect> {
        self.0.lock().expect("recorder lock").clone()
    }
}

/// The ordered stream: records appended by every source in the order the
/// changes happen under the store lock, until [`Stream::publish`] hands
/// them to the consumers.
#[derive(Default)]
pub struct Stream {
    /// Whether anyone consumes records: the AOF is on or a sink is
    /// attached. Sources check it first and record nothing otherwise.
    on: bool,
    /// The AOF is on: it takes the Command records.
    aof: bool,
    /// Attached consumers of every record, by the id `attach` gave.
    sinks: Vec<(u64, Box<dyn Sink>)>,
    /// The id the next attached sink gets.
    next_sink: u64,
    /// Appended, not yet published, in order.
    records: Vec<Effect>,
}

impl Stream {
    /// Whether records are kept (someone consumes them).
    #[inline]
    pub fn on(&self) -> bool {
        self.on
    }

    /// The AOF starts or stops consuming Command records. The caller
    /// publishes what is pending first, so each record reaches the file
    /// that was logging when it was made.
    pub fn set_aof(&mut self, on: bool) {
        self.aof = on;
        self.on = self.aof || !self.sinks.is_empty();
    }

    /// Attaches a consumer of every record made from now on; the id
    /// detaches it.
    pub fn attach(&mut self, sink: Box<dyn Sink>) -> u64 {
        self.next_sink += 1;
        self.sinks.push((self.next_sink, sink));
        self.on = true;
        self.next_sink
    }

    /// Detaches the sink `attach` gave `id` (replication, once no
    /// replica nor backlog takes the stream). The caller publishes what
    /// is pending first if the sink must see it. With no consumer left
    /// nothing more is recorded.
    pub fn detach(&mut self, id: u64) {
        self.sinks.retain(|(k, _)| *k != id);
        self.on = self.aof || !self.sinks.is_empty();
    }

    /// Appends change records (a command's, in order), when kept.
    pub fn commands(&mut self, v: impl IntoIterator<Item = Logged>) {
        if self.on {
            self.records.extend(v.into_iter().map(Effect::Command));
        }
    }

    /// Appends one change record, when kept.
    pub fn command(&mut self, db: usize, args: Vec<Bytes>) {
        if self.on {
            self.records.push(Effect::Command((db, args)));
        }
    }

    /// Appends a record for replicas only (PUBLISH), when kept. It goes
    /// in the order of its run: inside EXEC or a script, before the
    /// block of that run's change records.
    pub fn replicated(&mut self, db: usize, args: &[Bytes]) {
        if self.on {
            self.records.push(Effect::Replicated((db, args.to_vec())));
        }
    }

    /// Appends a lock record, built only when kept.
    #[inline]
    pub fn lock(&mut self, r: impl FnOnce() -> LockRecord) {
        if self.on {
            self.records.push(Effect::Lock(r()));
        }
    }

    /// Whether records wait to be published.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// THE point where records leave, called from one place
    /// (`persist::aof_write_out`). Each record goes to every consumer in
    /// the order it was appended: Command records to `aof` (while the AOF
    /// is on), every record to each sink.
    ///
    /// The order guarantee: records leave in the order the changes were
    /// made under the store lock, each source appending as it changes
    /// something, with these rules where one change causes another:
    /// - a command's own change records (the dispatcher's, after `call`;
    ///   a served blocked command's) come after every other record its
    ///   run made: the lock records of the lock state it changed, and what
    ///   the keyspace hook recorded for its changes (the DEL of a key it
    ///   expired lazily or that was evicted to make room for it, the
    ///   `Unbound` of a lock it deleted). EXEC and a script leave as one
    ///   block (MULTI ... EXEC when several). A blocked command it served
    ///   comes after it.
    /// - A key removed by no command (expiry, eviction): its DEL comes
    ///   before the `Unbound` of the holds it ended. A hold's end that
    ///   deletes the key (a release, a session's end) comes before the
    ///   key's DEL; a `SessionClosed` after its holds' ends and DELs.
    /// - A line's `Granted` comes right before the grant's hold record.
    ///
    /// Changes made between batches (active expiry, a disconnect, the
    /// hand-overs they cause) wait, in order, for the next call.
    pub fn publish(&mut self, aof: &mut dyn FnMut(usize, &[Bytes])) {
        if self.records.is_empty() {
            return;
        }
        for e in self.records.drain(..) {
            if let (true, Effect::Command((db, args))) = (self.aof, &e) {
                aof(*db, args);
            }
            for (_, s) in &mut self.sinks {
                s.accept(&e);
            }
        }
        // Keep a small allocation; drop a huge one (a million-key DEL).
        if self.records.capacity() > 4096 {
            self.records = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn del(key: &'static str) -> Vec<Bytes> {
        vec![
            Bytes::from_static(b"DEL"),
            Bytes::from_static(key.as_bytes()),
        ]
    }

    #[test]
    fn a_detached_sink_gets_nothing_more() {
        let mut s = Stream::default();
        let kept = Recorder::default();
        let gone = Recorder::default();
        s.attach(Box::new(kept.clone()));
        let id = s.attach(Box::new(gone.clone()));
        s.detach(id);
        s.command(0, del("a"));
        s.publish(&mut |_, _| {});
        assert_eq!(kept.records().len(), 1);
        assert!(gone.records().is_empty());
        // The last consumer gone, nothing is kept.
        s.detach(1);
        assert!(!s.on());
    }

    #[test]
    fn nothing_is_kept_without_a_consumer() {
        let mut s = Stream::default();
        s.command(0, del("k"));
        s.lock(|| unreachable!("built only when kept"));
        assert!(!s.on() && s.is_empty());
    }

    #[test]
    fn records_leave_in_order_the_aof_taking_commands_only() {
        let mut s = Stream::default();
        s.set_aof(true);
        s.command(0, del("a"));
        s.lock(|| LockRecord::Fenced { token: 7 });
        s.commands([(1, del("b"))]);
        let mut aof = Vec::new();
        s.publish(&mut |db, args| aof.push((db, args.to_vec())));
        assert_eq!(aof, vec![(0, del("a")), (1, del("b"))]);
        assert!(s.is_empty());
        // A sink takes every record, in order; the AOF off takes none.
        let seen = Recorder::default();
        s.attach(Box::new(seen.clone()));
        s.set_aof(false);
        assert!(s.on());
        s.command(2, del("c"));
        s.lock(|| LockRecord::SessionClosed { sid: 9 });
        s.publish(&mut |_, _| panic!("the AOF is off"));
        assert_eq!(
            seen.records(),
            vec![
                Effect::Command((2, del("c"))),
                Effect::Lock(LockRecord::SessionClosed { sid: 9 }),
            ]
        );
    }
}

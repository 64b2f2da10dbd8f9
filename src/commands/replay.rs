//! The AOF's fake client: how persistence runs the commands it reads back
//! at load. Persistence reads the files and calls the runner it is given
//! ([`aof_client`]), so it never depends on the dispatcher.

use bytes::Bytes;

use super::{call, resolve, ConnState, Ctx};
use crate::server::Store;

/// A runner for `persist::load_aof_at_start`: each call runs one logged
/// command against the store, as one connection (a SELECT holds for what
/// follows), unchecked (the log holds what ran), and never blocking.
pub fn aof_client() -> impl FnMut(&mut Store, &[Bytes]) -> Result<(), String> {
    let mut conn = ConnState::new(0, true);
    conn.obey = true;
    move |store, args| {
        let mut out = crate::resp::Out::new(false);
        let spec = resolve(&mut out, args)
            .ok_or_else(|| String::from_utf8_lossy(&out.buf).trim_end().to_string())?;
        let mut ctx = Ctx {
            store,
            conn: &mut conn,
            out: &mut out,
        };
        crate::util::refresh_cmd_time();
        call(&mut ctx, spec, args);
        // Nothing waits while loading: a blocking command found nothing.
        ctx.conn.block = None;
        Ok(())
    }
}

/// The master client of a replica (Redis's CLIENT_MASTER): runs each
/// command of the master's stream as one connection (a SELECT or a MULTI
/// holds for what follows), through the one dispatcher, its replies
/// dropped. Writes are always allowed to it (`obey`), and what it changes
/// goes to the AOF through the effects stream as any command's.
pub struct MasterClient {
    conn: ConnState,
}

impl MasterClient {
    /// The master client, its stream at database `db`.
    pub fn new(id: crate::ids::ClientId, db: usize) -> MasterClient {
        let mut conn = ConnState::new(id, true);
        conn.obey = true;
        conn.db = db;
        MasterClient { conn }
    }

    /// The database the stream has selected.
    pub fn db(&self) -> usize {
        self.conn.db
    }

    /// Runs one command of the master's stream; false when clients are
    /// paused and the command must wait for the end (Redis postpones its
    /// master client as any other): it did not run.
    pub fn run(&mut self, store: &mut Store, args: &[Bytes]) -> bool {
        let mut out = crate::resp::Out::new(false);
        let mut ctx = Ctx {
            store,
            conn: &mut self.conn,
            out: &mut out,
        };
        super::execute_unnoted(&mut ctx, args);
        // Nothing the master sends may wait.
        ctx.conn.block = None;
        if ctx.conn.postponed.take().is_some() {
            // The link holds it and runs it again after the pause.
            let id = ctx.conn.id;
            ctx.store.note_postponed(id, false);
            return false;
        }
        true
    }
}

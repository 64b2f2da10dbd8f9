//! What a client's connection costs in memory (CLIENT LIST's `tot-mem`,
//! INFO's `mem_clients_normal`) and client eviction: with
//! `maxmemory-clients` set, when the clients together use that much, the
//! largest evictable ones are disconnected until they use less (Redis
//! 7.0's evictClients, networking.c). Evictable: not `CLIENT NO-EVICT
//! on`, not a replica.
//!
//! Checked where Redis checks: before each command runs (so a command
//! whose arguments put its own client over the limit does not run) and
//! after each batch (replies, pushes queued to others, a CONFIG SET). The
//! clients' total is kept incrementally (`Clients::account`); when it says
//! the limit is reached, every client is measured again before anyone is
//! evicted, since pushes a client took and replies it read leave the
//! store's figures high until its next batch.

use super::{ConnState, Ctx};
use crate::server::{ClientHandle, ClientId, Store};

/// One watched key: Redis's listNode + watchedKey.
const WATCHED_KEY: usize = 56;
/// One subscription or tracking prefix: Redis counts a dict entry and a
/// pointer, not the names, which are shared.
const SUBSCRIPTION: usize = 32;

/// A connection's own buffers, as its task sees them.
#[derive(Debug, Default, Clone, Copy)]
pub struct Figures {
    /// Query buffer: bytes waiting to be parsed, and the free space after.
    pub qbuf: usize,
    pub qbuf_free: usize,
    /// Arguments parsed and not yet run.
    pub argv: usize,
    /// Reply bytes not yet written.
    pub unsent: usize,
    /// The reply buffer's capacity.
    pub rbs: usize,
}

impl Figures {
    /// Another connection's, as its task last published them.
    pub fn of(c: &ClientHandle) -> Figures {
        let b = c.signal.buffers();
        Figures {
            qbuf: b.qbuf,
            qbuf_free: b.qbuf_cap.saturating_sub(b.qbuf),
            argv: 0,
            unsent: b.unsent,
            rbs: c.info.rbs,
        }
    }
}

/// Redis's getClientMemoryUsage for latchkey's connection: its buffers,
/// its handle and state, out-of-band output waiting, its transaction,
/// watched keys, subscriptions and tracking prefixes.
pub fn client_memory(store: &Store, c: &ClientHandle, f: &Figures) -> usize {
    let named = [&c.name, &c.lib_name, &c.lib_ver]
        .iter()
        .map(|n| n.as_ref().map_or(0, |n| n.len()))
        .sum::<usize>();
    let multi =
        c.info.multi_mem + c.info.multi.unwrap_or(0) * std::mem::size_of::<Vec<bytes::Bytes>>();
    let watched = store.ks.tx.count_for(c.id) * WATCHED_KEY;
    let subs = (c.info.sub + c.info.psub + c.info.ssub) * SUBSCRIPTION;
    let prefixes = if store.tracking.is_empty() {
        0
    } else {
        store
            .tracking
            .mode(c.id)
            .map_or(0, |m| m.prefixes.len() * SUBSCRIPTION)
    };
    std::mem::size_of::<ClientHandle>()
        + std::mem::size_of::<ConnState>()
        + f.qbuf
        + f.qbuf_free
        + f.argv
        + f.unsent
        + f.rbs
        + c.signal.pending_len()
        + named
        + multi
        + watched
        + subs
        + prefixes
}

/// Measures every client again (`me` with its live figures).
fn recount(store: &mut Store, me: ClientId, mine: &Figures) {
    let sizes: Vec<(ClientId, usize)> = store
        .clients
        .values()
        .map(|c| {
            // Replicas are a class of their own (their output is the
            // replication buffer), outside the clients' total.
            if store.repl.is_replica(c.id) {
                return (c.id, 0);
            }
            let f = if c.id == me { *mine } else { Figures::of(c) };
            (c.id, client_memory(store, c, &f))
        })
        .collect();
    for (id, mem) in sizes {
        store.clients.account(id, mem);
    }
    store.clients.mark_fresh();
}

/// Evicts clients while the clients use `maxmemory-clients` or more,
/// largest first; `mine` are the calling connection's live figures.
/// Returns whether the calling connection was evicted itself: it runs
/// nothing more and closes without writing.
pub fn evict_clients(ctx: &mut Ctx, mine: Figures) -> bool {
    let limit = ctx.store.clients.eviction_limit();
    if limit == 0 {
        return false;
    }
    let me = ctx.conn.id;
    if !ctx.store.clients.is_fresh() {
        recount(ctx.store, me, &mine);
    } else if let Some(c) = ctx.store.clients.get(&me) {
        let mem = client_memory(ctx.store, c, &mine);
        ctx.store.clients.account(me, mem);
    }
    if ctx.store.clients.mem_total() < limit {
        return false;
    }
    recount(ctx.store, me, &mine);
    if ctx.store.clients.mem_total() < limit {
        return false;
    }
    let mut victims: Vec<(usize, ClientId)> = ctx
        .store
        .clients
        .values()
        .filter(|c| !c.no_evict && !c.signal.is_killed() && !ctx.store.repl.is_replica(c.id))
        .map(|c| (c.accounted(), c.id))
        .collect();
    victims.sort_unstable_by(|a, b| b.cmp(a));
    let mut evicted_me = false;
    for (_, id) in victims {
        if ctx.store.clients.mem_total() < limit {
            break;
        }
        let info = super::connection::client_info_string(ctx.store, id);
        tracing::info!("Evicting client: {info}");
        ctx.store.kill_client(id);
        ctx.store.stats.evicted_clients += 1;
        evicted_me |= id == me;
    }
    if ctx.store.clients.mem_total() >= limit {
        tracing::warn!("Over client maxmemory after evicting all evictable clients");
    }
    // Lines the evicted held are handed on.
    super::settle(ctx.store, (!evicted_me).then_some(me));
    evicted_me
}

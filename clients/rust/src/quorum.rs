//! A lock over N independent Latchkey servers: held once a majority of
//! them granted it (`SETTP`, bound to this client's connection to each)
//! within a validity window, released on all of them. Waiters queue in
//! the server-side line of the first server, in one order for all, so a
//! release wakes one waiter, not all.
//!
//! Each server's binding ends when this client's connection to it ends
//! (or its session times out), so a client that dies releases everywhere
//! without a TTL. What it does and does not guarantee is in the README
//! ("Quorum locks").

use std::time::Duration;

use futures::future::{join_all, select_all};
use futures::FutureExt;
use tokio::time::Instant;

use super::error::{Error, Result};
use super::{Client, LockGuard, Options};

/// Clients of the servers a quorum lock spans.
#[derive(Clone)]
pub struct Quorum {
    servers: Vec<Server>,
}

#[derive(Clone)]
struct Server {
    url: String,
    client: Option<Client>,
}

impl Quorum {
    /// Connects to every server (one that cannot be reached now simply
    /// never grants: a majority of the others is still a majority of N).
    pub async fn connect(urls: &[&str], opts: Options) -> Result<Quorum> {
        if urls.is_empty() {
            return Err(Error::Protocol("a quorum needs at least one server".into()));
        }
        let clients = join_all(urls.iter().map(|u| Client::connect_with(u, opts.clone()))).await;
        Ok(Quorum {
            servers: urls
                .iter()
                .zip(clients)
                .map(|(u, c)| Server {
                    url: u.to_string(),
                    client: c.ok(),
                })
                .collect(),
        })
    }

    /// How many servers make a majority.
    pub fn majority(&self) -> usize {
        self.servers.len() / 2 + 1
    }

    /// The servers' URLs, in order.
    pub fn urls(&self) -> Vec<&str> {
        self.servers.iter().map(|s| s.url.as_str()).collect()
    }

    /// Starts acquiring `name` on the servers; await [`QuorumBuilder::acquire`].
    pub fn lock(&self, name: impl AsRef<[u8]>) -> QuorumBuilder {
        QuorumBuilder {
            quorum: self.clone(),
            name: name.as_ref().to_vec(),
            validity: Duration::from_secs(2),
            timeout: None,
        }
    }
}

/// A quorum lock acquisition.
#[must_use = "a QuorumBuilder does nothing until acquire() is awaited"]
pub struct QuorumBuilder {
    quorum: Quorum,
    name: Vec<u8>,
    validity: Duration,
    timeout: Option<Duration>,
}

impl QuorumBuilder {
    /// The grants must all arrive within this window from the start of an
    /// attempt (default 2 s); a majority that took longer is given back
    /// and the attempt counts as failed (an early grant may have been lost
    /// meanwhile, with its connection or session).
    pub fn validity(mut self, d: Duration) -> Self {
        self.validity = d;
        self
    }

    /// Give up with [`Error::LockTimeout`] after waiting this long.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    /// Takes the lock on the servers one after another, always in the
    /// quorum's order, waiting in each server's line (`SETTP ... QUEUE`)
    /// rather than retrying: the first server that answers is the gate
    /// where waiters queue, and each release there wakes only the next in
    /// line, so there is no herd. The servers after it are normally free
    /// (whoever holds them got past the gate first), and are waited for
    /// only for what is left of the validity window from the first grant.
    /// Because every client takes the servers in the same order, no two
    /// can each hold part of a majority while waiting for the other's.
    ///
    /// With a majority within the window the lock is held, and the
    /// remaining servers are tried without waiting; otherwise every grant
    /// is given back and the attempt starts again at the end of the line,
    /// after a short random pause. A server that cannot be reached, or
    /// drops the connection while this client waits, is passed over.
    pub async fn acquire(self) -> Result<QuorumGuard> {
        let start = Instant::now();
        let deadline = self.timeout.and_then(|t| start.checked_add(t));
        let timed_out = || Error::LockTimeout {
            name: String::from_utf8_lossy(&self.name).into_owned(),
            waited: start.elapsed(),
        };
        let need = self.quorum.majority();
        let n = self.quorum.servers.len();
        // Bounded: every round waits in a line (up to the deadline) or for
        // the validity window, then pauses.
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(timed_out());
            }
            let mut got: Vec<Option<LockGuard>> = (0..n).map(|_| None).collect();
            // When the first grant arrived.
            let mut first: Option<Instant> = None;
            let mut held = 0;
            for (i, s) in self.quorum.servers.iter().enumerate() {
                // Done, or too few servers left to make a majority.
                if held >= need || held + (n - i) < need {
                    break;
                }
                let Some(c) = s.client.as_ref() else {
                    continue;
                };
                let now = Instant::now();
                let wait = match first {
                    // At the gate: as long as the caller allows.
                    None => deadline.map(|d| d.saturating_duration_since(now)),
                    Some(t0) => Some(self.validity.saturating_sub(t0.elapsed())),
                };
                let mut b = c.lock(&self.name);
                if let Some(w) = wait {
                    b = b.timeout(w);
                }
                match b.await {
                    Ok(g) => {
                        first.get_or_insert_with(Instant::now);
                        got[i] = Some(g);
                        held += 1;
                    }
                    Err(Error::LockTimeout { .. }) if first.is_none() => {
                        return Err(timed_out());
                    }
                    // Unreachable, gone while waiting, or the window ran
                    // out: passed over.
                    Err(_) => {}
                }
            }
            if held >= need && first.is_some_and(|t| t.elapsed() < self.validity) {
                let rest = self
                    .quorum
                    .servers
                    .iter()
                    .zip(got.iter())
                    .enumerate()
                    .filter(|(_, (_, g))| g.is_none())
                    .filter_map(|(i, (s, _))| s.client.as_ref().map(|c| (i, c)))
                    .map(|(i, c)| {
                        let name = self.name.clone();
                        async move { (i, c.try_lock(&name).await.ok().flatten()) }
                    });
                for (i, g) in join_all(rest).await {
                    got[i] = g;
                }
                return Ok(QuorumGuard { guards: got, need });
            }
            drop(got);
            let pause = Duration::from_millis(5 + rand::random::<u64>() % 20);
            tokio::time::sleep(pause).await;
        }
    }
}

/// A lock held on a majority of the servers. Dropping it releases every
/// grant; [`QuorumGuard::unlock`] does the same and waits for the replies.
pub struct QuorumGuard {
    /// One slot per server, in the quorum's order.
    guards: Vec<Option<LockGuard>>,
    need: usize,
}

impl QuorumGuard {
    /// How many servers granted the lock and still hold it.
    pub fn held_on(&self) -> usize {
        self.guards.iter().flatten().filter(|g| g.is_held()).count()
    }

    /// True while a majority of the servers still hold it for this client.
    pub fn is_held(&self) -> bool {
        self.held_on() >= self.need
    }

    /// Each server's fencing token (None where it was not granted). They
    /// come from independent counters: compare tokens of one server only.
    pub fn tokens(&self) -> Vec<Option<u64>> {
        self.guards
            .iter()
            .map(|g| g.as_ref().map(|g| g.token()))
            .collect()
    }

    /// Resolves once fewer than a majority still hold it.
    pub async fn lost(&self) {
        let mut pending: Vec<_> = self
            .guards
            .iter()
            .flatten()
            .map(|g| g.lost().boxed())
            .collect();
        let mut alive = self.held_on();
        while alive >= self.need && !pending.is_empty() {
            let (_, _, rest) = select_all(pending).await;
            pending = rest;
            alive = self.held_on();
        }
    }

    /// Releases every grant; how many servers still had it.
    pub async fn unlock(self) -> Result<usize> {
        let releases = self.guards.into_iter().flatten().map(|g| g.unlock());
        let mut n = 0;
        for r in join_all(releases).await {
            if r? {
                n += 1;
            }
        }
        Ok(n)
    }
}

//! A lock over N independent Latchkey servers: held once a majority of
//! them granted it (`SETTP`, bound to this client's connection to each)
//! within a validity window, released on all of them, retried when a watch
//! on a server where it was taken reports the key gone.
//!
//! Each server's binding ends when this client's connection to it ends
//! (or its session times out), so a client that dies releases everywhere
//! without a TTL. What it does and does not guarantee is in the README
//! ("Quorum locks").

use std::time::Duration;

use futures::future::{join_all, select_all};
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;

use super::error::{Error, Result};
use super::watch::WatchEvent;
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

    /// Tries every server at once; with a majority within the validity
    /// window the lock is held, otherwise every grant is released and the
    /// next attempt waits until a server where the key was taken reports
    /// it gone (or a short random pause, so that competing clients rarely
    /// collide again).
    pub async fn acquire(self) -> Result<QuorumGuard> {
        let start = Instant::now();
        let deadline = self.timeout.and_then(|t| start.checked_add(t));
        let timed_out = || Error::LockTimeout {
            name: String::from_utf8_lossy(&self.name).into_owned(),
            waited: start.elapsed(),
        };
        let need = self.quorum.majority();
        // Bounded: every round waits for a change, a pause or the deadline.
        loop {
            let t0 = Instant::now();
            let tries = self.quorum.servers.iter().map(|s| {
                let name = self.name.clone();
                let validity = self.validity;
                async move {
                    let c = s.client.as_ref()?;
                    tokio::time::timeout(validity, c.try_lock(&name))
                        .await
                        .ok()?
                        .ok()?
                }
            });
            let got: Vec<Option<LockGuard>> = join_all(tries).await;
            let held = got.iter().filter(|g| g.is_some()).count();
            if held >= need && t0.elapsed() < self.validity {
                return Ok(QuorumGuard { guards: got, need });
            }
            // Not ours: where it was taken, wait for the key to go.
            let taken: Vec<&Client> = self
                .quorum
                .servers
                .iter()
                .zip(&got)
                .filter(|(_, g)| g.is_none())
                .filter_map(|(s, _)| s.client.as_ref())
                .collect();
            drop(got);
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(timed_out());
            }
            let pause = Duration::from_millis(5 + rand::random::<u64>() % 20);
            let mut streams = Vec::new();
            for c in taken {
                if let Ok(s) = c.watch_stream(&self.name).await {
                    streams.push(s);
                }
            }
            let gone = async {
                if streams.is_empty() {
                    return std::future::pending::<()>().await;
                }
                // Each stream first reports the state now: Exists, or gone.
                loop {
                    let nexts = streams.iter_mut().map(|s| s.next().boxed());
                    match select_all(nexts).await.0 {
                        Some(WatchEvent::Exists | WatchEvent::Added) => {}
                        _ => return,
                    }
                }
            };
            let limit = deadline.map_or(Duration::from_secs(3600), |d| {
                d.saturating_duration_since(Instant::now())
            });
            let _ = tokio::time::timeout(limit, gone).await;
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

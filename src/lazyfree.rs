//! Freeing in the background, as Redis's lazyfree.c with its bio thread:
//! UNLINK, FLUSHALL/FLUSHDB ASYNC and the `lazyfree-lazy-*` settings hand
//! what they delete here when freeing it would take long (a value whose
//! free effort, `Value::free_effort`, is above `THRESHOLD`, or a whole
//! database), and one thread drops it. INFO counts what waits
//! (`lazyfree_pending_objects`) and what was freed (`lazyfreed_objects`).
//!
//! Must not know the store, values or commands: it drops whatever it is
//! given (imports nothing of the crate).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;

/// Redis's LAZYFREE_THRESHOLD: a value that takes more allocations than
/// this to free goes to the background thread.
pub const THRESHOLD: usize = 64;

type Job = (Box<dyn Send>, u64);

/// One server's background freeing (shared by its databases).
#[derive(Default)]
pub struct LazyFree {
    pending: std::sync::Arc<AtomicU64>,
    freed: std::sync::Arc<AtomicU64>,
    /// The thread's queue, started on first use.
    tx: Mutex<Option<Sender<Job>>>,
}

impl std::fmt::Debug for LazyFree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyFree")
            .field("pending", &self.pending())
            .field("freed", &self.freed())
            .finish()
    }
}

impl LazyFree {
    /// Drops `obj` on the background thread, counting it as `count`
    /// objects (1 for a value, the number of keys for a database).
    pub fn free<T: Send + 'static>(&self, obj: T, count: u64) {
        self.pending.fetch_add(count, Ordering::AcqRel);
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let mut job: Job = (Box::new(obj), count);
        if let Some(t) = tx.as_ref() {
            match t.send(job) {
                Ok(()) => return,
                // The thread is gone: a new one takes over.
                Err(e) => job = e.0,
            }
        }
        let (t, rx) = channel::<Job>();
        let (pending, freed) = (self.pending.clone(), self.freed.clone());
        let spawned = std::thread::Builder::new()
            .name("lazyfree".into())
            .spawn(move || {
                while let Ok((obj, count)) = rx.recv() {
                    drop(obj);
                    pending.fetch_sub(count, Ordering::AcqRel);
                    freed.fetch_add(count, Ordering::AcqRel);
                }
            });
        match spawned {
            Ok(_) => {
                let _ = t.send(job);
                *tx = Some(t);
            }
            // No thread to be had: freed here, counted all the same.
            Err(_) => {
                drop(job);
                self.pending.fetch_sub(count, Ordering::AcqRel);
                self.freed.fetch_add(count, Ordering::AcqRel);
            }
        }
    }

    /// Objects handed over and not freed yet.
    pub fn pending(&self) -> u64 {
        self.pending.load(Ordering::Acquire)
    }

    /// Objects freed in the background since start-up or CONFIG RESETSTAT.
    pub fn freed(&self) -> u64 {
        self.freed.load(Ordering::Acquire)
    }

    /// CONFIG RESETSTAT (Redis's lazyfreeResetStats).
    pub fn reset_freed(&self) {
        self.freed.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frees_in_the_background_and_counts() {
        let lf = LazyFree::default();
        for _ in 0..10 {
            lf.free(vec![0u8; 1000], 1);
        }
        lf.free(vec![vec![1u8; 10]; 100], 100);
        let start = std::time::Instant::now();
        while lf.pending() > 0 && start.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(lf.pending(), 0);
        assert_eq!(lf.freed(), 110);
        lf.reset_freed();
        assert_eq!(lf.freed(), 0);
    }
}

//! The memory all of a listener's connections' queued frames hold together
//! ([`ServerConfig::total_write_budget`](crate::ServerConfig::total_write_budget)): each
//! queued frame takes a share, and past the limit the connection likeliest not to be
//! reading is ended rather than every connection waiting on it.

use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// What a queued frame costs in memory beyond its bytes, counted against the write
/// budget with them: its descriptor, its payload's handle and the allocation behind a
/// small payload (rounded up from what a 28-byte reply was measured to hold). Without
/// it, a peer that never reads could queue a million small replies inside a budget of
/// 32 MiB of wire bytes.
pub const FRAME_COST: usize = 512;

/// A connection as the listener's memory sees it: its part of the total and how to end it.
pub(crate) trait Holder: Send + Sync {
    /// Its part of the total.
    fn part(&self) -> &Arc<Mutex<Part>>;
    /// Microseconds since its writer last finished a write.
    fn stalled_us(&self) -> u64;
    /// Ends it for holding `held` bytes when the total ran out.
    fn evict(&self, held: u64);
}

/// One connection's part of the total.
#[derive(Debug, Default)]
pub(crate) struct Part {
    /// Bytes its queued frames hold.
    held: u64,
    /// Whether it was ended for it (then the total has been given its part back already,
    /// and it takes no more).
    evicted: bool,
}

/// The total for all of a listener's connections, and the connections.
pub(crate) struct WriteMemory {
    held: AtomicU64,
    limit: u64,
    connections: Mutex<Vec<Weak<dyn Holder>>>,
}

impl core::fmt::Debug for WriteMemory {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WriteMemory")
            .field("held", &self.held())
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl WriteMemory {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            held: AtomicU64::new(0),
            limit: limit as u64,
            connections: Mutex::new(Vec::new()),
        }
    }

    /// Bytes held now.
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Counts a new connection's frames from now on.
    pub(crate) fn register(&self, connection: Weak<dyn Holder>) {
        let mut connections = lock(&self.connections);
        connections.retain(|c| c.strong_count() > 0);
        connections.push(connection);
    }

    /// Takes `cost` for a frame of the connection whose part is `part`; past the limit
    /// ends the connection holding the most first. `None` if that connection is this
    /// one (now, or before).
    pub(crate) fn take(
        self: &Arc<Self>,
        part: &Arc<Mutex<Part>>,
        cost: u64,
    ) -> Option<MemoryShare> {
        {
            let mut part = lock(part);
            if part.evicted {
                return None;
            }
            part.held += cost;
        }
        let share = MemoryShare {
            memory: self.clone(),
            part: part.clone(),
            bytes: cost,
        };
        if self.held.fetch_add(cost, Ordering::Relaxed) + cost > self.limit {
            self.evict_largest();
            if lock(part).evicted {
                return None;
            }
        }
        Some(share)
    }

    /// Ends the connection whose peer is likeliest not reading: the most queued, weighed
    /// by how long its writer has gone without finishing a write (a burst to a peer that
    /// reads is written as it goes). Its part of the total is given back at once; the
    /// frames themselves go within its linger, when its writer stops.
    fn evict_largest(&self) {
        let largest = lock(&self.connections)
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|c| !lock(c.part()).evicted)
            .max_by_key(|c| u128::from(lock(c.part()).held) * u128::from(c.stalled_us() + 1000));
        let Some(connection) = largest else {
            return;
        };
        let held = {
            let mut part = lock(connection.part());
            if part.evicted {
                return;
            }
            part.evicted = true;
            self.held.fetch_sub(part.held, Ordering::Relaxed);
            part.held
        };
        connection.evict(held);
    }
}

/// A queued frame's part of a [`WriteMemory`], given back when the frame is dropped
/// (written, or thrown away with its connection).
pub(crate) struct MemoryShare {
    memory: Arc<WriteMemory>,
    part: Arc<Mutex<Part>>,
    bytes: u64,
}

impl Drop for MemoryShare {
    fn drop(&mut self) {
        let mut part = lock(&self.part);
        part.held -= self.bytes;
        if !part.evicted {
            self.memory.held.fetch_sub(self.bytes, Ordering::Relaxed);
        }
    }
}

/// Locks a mutex, carrying on with the data if a panicking thread poisoned it (every
/// critical section in this crate leaves the data consistent).
pub(crate) fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

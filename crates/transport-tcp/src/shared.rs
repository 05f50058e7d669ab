//! What the handles, the reader task and the writer task share: the settings, the
//! counters, the writer's queue and its byte budget, the table of outstanding requests
//! with their waiters, and how the connection ended.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use core::task::Waker;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError, mpsc, watch};
use volley_proto::wire::frame::{self, Header};

use crate::config::{Config, Signal};
use crate::error::Error;
use crate::frames::{Frame, Head, Outgoing, Payload};
use crate::stats::Counters;
use crate::write_memory::{FRAME_COST, Holder, MemoryShare, Part, WriteMemory, lock};

pub(crate) struct Shared {
    pub(crate) config: Config,
    /// The largest frame either way: `config.max_frame_len` until the owner changes it
    /// ([`Framed::set_max_frame_len`](crate::Framed::set_max_frame_len)).
    pub(crate) max_frame: AtomicUsize,
    state: Mutex<State>,
    /// Request slots: one per outstanding request.
    pub(crate) slots: Arc<Semaphore>,
    /// The writer's byte budget: a permit per byte queued and not yet written.
    budget: Arc<Semaphore>,
    /// The listener's, shared by all its connections (none on a client's).
    memory: Option<Arc<WriteMemory>>,
    /// This connection's part of `memory`, and whether it was evicted for it.
    in_total: Arc<Mutex<Part>>,
    tx: Mutex<Option<mpsc::UnboundedSender<Outgoing>>>,
    pub(crate) counters: Counters,
    /// True while the owner has asked the reader to stop reading.
    pub(crate) paused: watch::Sender<bool>,
    /// True once the connection is to end both ways ([`Shared::close_both`]).
    pub(crate) ending: watch::Sender<bool>,
    /// When the writer last finished a write, in microseconds since `epoch`: the reader's
    /// spin ([`Config::spin`]) counts from the later of this and its last read, since a
    /// request just sent is when a reply is coming.
    pub(crate) last_write: AtomicU64,
    pub(crate) epoch: Instant,
}

struct State {
    pending: HashMap<u32, Entry>,
    next_id: u32,
    failed: Option<Error>,
}

struct Entry {
    waiter: Arc<Waiter>,
    _slot: OwnedSemaphorePermit,
}

/// Where the replies to one pipeline's requests collect until it takes them.
pub(crate) struct Waiter {
    state: Mutex<WaiterState>,
}

#[derive(Default)]
struct WaiterState {
    replies: VecDeque<Frame>,
    waker: Option<Waker>,
}

impl Shared {
    pub(crate) fn new(
        config: Config,
        tx: mpsc::UnboundedSender<Outgoing>,
        memory: Option<Arc<WriteMemory>>,
    ) -> Self {
        Self {
            config,
            max_frame: AtomicUsize::new(config.max_frame_len),
            state: Mutex::new(State {
                pending: HashMap::new(),
                next_id: config.role.first_id(),
                failed: None,
            }),
            slots: Arc::new(Semaphore::new(config.max_in_flight)),
            budget: Arc::new(Semaphore::new(config.write_budget)),
            memory,
            in_total: Arc::default(),
            tx: Mutex::new(Some(tx)),
            counters: Counters::default(),
            paused: watch::Sender::new(false),
            ending: watch::Sender::new(false),
            last_write: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// The largest frame either way now.
    pub(crate) fn max_frame_len(&self) -> usize {
        self.max_frame.load(Ordering::Relaxed)
    }

    /// Microseconds since this connection started.
    pub(crate) fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// The error that ended the connection, if it has ended.
    pub(crate) fn failure(&self) -> Option<Error> {
        self.lock().failed.clone()
    }

    /// Requests outstanding now.
    pub(crate) fn in_flight(&self) -> usize {
        self.lock().pending.len()
    }

    /// Stops sending: once the queue is written, the writer shuts its half down.
    pub(crate) fn close(&self) {
        lock(&self.tx).take();
    }

    /// Ends the connection both ways: the writer writes what is queued and shuts its
    /// half down, the reader discards what still comes until the peer's end of stream,
    /// each for at most [`Config::linger`]; then the socket closes.
    pub(crate) fn close_both(&self) {
        self.close();
        self.ending.send_replace(true);
    }

    /// Bytes of memory queued frames hold, as counted against the write budget.
    pub(crate) fn queued(&self) -> u64 {
        (self.config.write_budget
            - self
                .budget
                .available_permits()
                .min(self.config.write_budget)) as u64
    }

    /// Queues a frame for the writer once the write budget has room for it. Checks the
    /// frame against the size limit first, and fails if the connection has ended.
    pub(crate) async fn enqueue(
        &self,
        ty: u8,
        id: u32,
        head: &[u8],
        payload: Payload,
    ) -> Result<(), Error> {
        let outgoing = self.outgoing(ty, id, head, payload).await?;
        self.queue(outgoing)
    }

    /// Builds a frame for the writer: checks its size and takes its share of the budget.
    pub(crate) async fn outgoing(
        &self,
        ty: u8,
        id: u32,
        head: &[u8],
        payload: Payload,
    ) -> Result<Outgoing, Error> {
        let cost = self.cost(head, &payload)?;
        let budget = self
            .budget
            .clone()
            .acquire_many_owned(cost)
            .await
            .map_err(|_| self.failure().unwrap_or(Error::Shutdown))?;
        self.build(ty, id, head, payload, budget, cost)
    }

    /// Queues a frame now if the write budget has room for it; if not, gives the payload
    /// back (`Err`) without waiting.
    pub(crate) fn try_enqueue(
        &self,
        ty: u8,
        id: u32,
        head: &[u8],
        payload: Payload,
    ) -> Result<Result<(), Error>, Payload> {
        let cost = match self.cost(head, &payload) {
            Ok(cost) => cost,
            Err(e) => return Ok(Err(e)),
        };
        let budget = match self.budget.clone().try_acquire_many_owned(cost) {
            Ok(budget) => budget,
            Err(TryAcquireError::NoPermits) => return Err(payload),
            Err(TryAcquireError::Closed) => {
                return Ok(Err(self.failure().unwrap_or(Error::Shutdown)));
            }
        };
        Ok(self
            .build(ty, id, head, payload, budget, cost)
            .and_then(|outgoing| self.queue(outgoing)))
    }

    /// Checks a frame against the size limit and the connection's state; gives what it
    /// costs of the write budget.
    fn cost(&self, head: &[u8], payload: &Payload) -> Result<u32, Error> {
        let body_len = head.len() + payload.len();
        let frame_len = body_len as u64 + frame::HEADER_LEN as u64;
        let max = self.max_frame_len() as u64;
        if frame_len > max {
            return Err(Error::TooLarge {
                len: frame_len,
                max,
            });
        }
        if let Some(e) = self.failure() {
            return Err(e);
        }
        Ok((FRAME_COST + head.len() + payload.in_memory()).min(self.config.write_budget) as u32)
    }

    fn build(
        &self,
        ty: u8,
        id: u32,
        head: &[u8],
        payload: Payload,
        budget: OwnedSemaphorePermit,
        cost: u32,
    ) -> Result<Outgoing, Error> {
        let share = self.share(u64::from(cost))?;
        let header = Header::new(ty, id, head.len() + payload.len()).map_err(Error::Protocol)?;
        Ok(Outgoing {
            header: header.emit(),
            head: Head::new(head),
            payload,
            budget,
            share,
        })
    }

    /// Takes `cost` from the listener's memory for all connections. Past its limit, the
    /// connection holding the most ends with the reason (its peer is not reading), rather
    /// than every connection waiting on it.
    fn share(&self, cost: u64) -> Result<Option<MemoryShare>, Error> {
        let Some(memory) = &self.memory else {
            return Ok(None);
        };
        match memory.take(&self.in_total, cost) {
            Some(share) => Ok(Some(share)),
            None => Err(self.failure().unwrap_or(Error::Shutdown)),
        }
    }

    /// Hands a frame to the writer; fails if the connection is closed.
    pub(crate) fn queue(&self, outgoing: Outgoing) -> Result<(), Error> {
        let sent = lock(&self.tx)
            .as_ref()
            .is_some_and(|tx| tx.send(outgoing).is_ok());
        if sent {
            Ok(())
        } else {
            Err(self.failure().unwrap_or(Error::Shutdown))
        }
    }

    /// Records an outstanding request with `id` (or the next free id of this end's role)
    /// whose reply goes to `waiter`. `slot` is held until the reply comes or the request
    /// is forgotten.
    pub(crate) fn register(
        &self,
        fixed_id: Option<u32>,
        waiter: &Arc<Waiter>,
        slot: OwnedSemaphorePermit,
    ) -> Result<u32, Error> {
        let mut state = self.lock();
        if let Some(e) = state.failed.clone() {
            return Err(e);
        }
        let id = match fixed_id {
            Some(id) if state.pending.contains_key(&id) => return Err(Error::IdInUse(id)),
            Some(id) => id,
            None => state.allocate_id(),
        };
        state.pending.insert(
            id,
            Entry {
                waiter: waiter.clone(),
                _slot: slot,
            },
        );
        Ok(id)
    }

    /// Forgets outstanding requests (their slots free now; late replies count as
    /// unmatched).
    pub(crate) fn forget(&self, ids: impl IntoIterator<Item = u32>) {
        let mut state = self.lock();
        for id in ids {
            state.pending.remove(&id);
        }
    }

    /// Hands a frame to whoever waits for its id; gives it back if nobody does.
    pub(crate) fn deliver(&self, frame: Frame) -> Option<Frame> {
        let entry = self.lock().pending.remove(&frame.id);
        match entry {
            Some(entry) => {
                entry.waiter.push(frame, self);
                None
            }
            None => Some(frame),
        }
    }

    /// Ends the connection: every waiter and sender, now and later, gets `error`.
    pub(crate) fn fail(&self, error: Error) {
        let entries: Vec<Entry> = {
            let mut state = self.lock();
            if state.failed.is_none() {
                state.failed = Some(error);
            }
            state.pending.drain().map(|(_, e)| e).collect()
        };
        self.slots.close();
        self.budget.close();
        for entry in entries {
            entry.waiter.wake();
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

impl Holder for Shared {
    fn part(&self) -> &Arc<Mutex<Part>> {
        &self.in_total
    }

    fn stalled_us(&self) -> u64 {
        self.now_us()
            .saturating_sub(self.last_write.load(Ordering::Relaxed))
    }

    fn evict(&self, held: u64) {
        self.fail(Error::MemoryExhausted { held });
        self.close_both();
    }
}

impl State {
    /// The next id of this end's parity that no outstanding request holds.
    fn allocate_id(&mut self) -> u32 {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(2);
            if !self.pending.contains_key(&id) {
                return id;
            }
        }
    }
}

impl Waiter {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(WaiterState::default()),
        })
    }

    fn push(&self, frame: Frame, shared: &Shared) {
        let mut state = lock(&self.state);
        let was_empty = state.replies.is_empty();
        state.replies.push_back(frame);
        let waker = match shared.config.signal {
            Signal::Batched if was_empty => state.waker.take(),
            Signal::Batched => None,
            Signal::PerFrame => state.waker.clone(),
        };
        drop(state);
        if let Some(waker) = waker {
            Counters::add(&shared.counters.wakeups, 1);
            waker.wake();
        }
    }

    fn wake(&self) {
        if let Some(waker) = lock(&self.state).waker.take() {
            waker.wake();
        }
    }

    /// The next reply if one is here; else registers `waker` to hear of the next one.
    pub(crate) fn take_or_register(&self, waker: &Waker) -> Option<Frame> {
        let mut state = lock(&self.state);
        let reply = state.replies.pop_front();
        if reply.is_none() {
            state.waker = Some(waker.clone());
        }
        reply
    }
}

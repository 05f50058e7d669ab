//! The in-process link: two tasks in one process exchange messages by value. Nothing is
//! encoded into frames and nothing is copied: the arguments and segments are the same
//! `Bytes` (shared by `Arc`) on both sides, as ARTIQ's two cores share one buffer.
//!
//! Each direction is one queue under a lock. The receiver takes everything queued at
//! once, so a burst of calls from many tasks crosses between threads in one step: the
//! queue's memory moves between the two cores once per burst, not once per message (a
//! channel that hands over one message at a time pays that for every message).

use core::future::poll_fn;
use core::sync::atomic::{AtomicBool, Ordering};
use core::task::{Poll, Waker};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

use super::{LinkError, LinkReceiver, LinkSender, Message, MessageLink, TrySendError};

/// One end of an in-process link; see [`pair`].
#[derive(Debug)]
pub struct LocalLink {
    tx: Arc<Closer>,
    rx: LocalReceiver,
    max_message: usize,
}

/// The sending half of a [`LocalLink`].
#[derive(Clone, Debug)]
pub struct LocalSender {
    /// Shared by all clones: the last one dropped (or [`close`](LinkSender::close)) ends
    /// the direction, so the peer sees the end.
    tx: Arc<Closer>,
    max_message: usize,
}

/// The receiving half of a [`LocalLink`].
#[derive(Debug)]
pub struct LocalReceiver {
    queue: Arc<Queue>,
    /// Messages taken from the queue in one go, handed out one by one.
    batch: VecDeque<Message>,
    /// Whether to spin before sleeping: on a current-thread runtime only.
    spin: bool,
}

/// One direction of a link.
#[derive(Debug)]
struct Queue {
    state: Mutex<State>,
    /// Whether anything is queued: read without the lock by a spinning receiver. On a
    /// cache line of its own, and written only when the queue turns non-empty or empty,
    /// so a sender's burst does not pull the line from the spinning receiver each time.
    queued: Padded<AtomicBool>,
    /// Wakes senders waiting for room.
    room: Notify,
    capacity: usize,
}

#[derive(Debug, Default)]
struct State {
    items: VecDeque<Message>,
    /// The receiver, asleep until a message comes or the senders go.
    waker: Option<Waker>,
    senders_gone: bool,
    receiver_gone: bool,
}

/// A value alone on its cache line (128 bytes covers the adjacent-line prefetch).
#[derive(Debug)]
#[repr(align(128))]
struct Padded<T>(T);

/// The sending side of one queue: ends it when dropped.
#[derive(Debug)]
struct Closer(Arc<Queue>);

/// Two connected ends; each holds at most `capacity` messages sent and not yet taken
/// (1..=1_048_576; senders wait beyond it). Messages are as large as the endpoints'
/// `Config::max_message` allows.
pub fn pair(capacity: usize) -> (LocalLink, LocalLink) {
    assert!(
        (1..=1 << 20).contains(&capacity),
        "local link capacity must be 1..=1048576, not {capacity}"
    );
    let queue = || {
        Arc::new(Queue {
            state: Mutex::new(State::default()),
            queued: Padded(AtomicBool::new(false)),
            room: Notify::new(),
            capacity,
        })
    };
    let (a_to_b, b_to_a) = (queue(), queue());
    (
        LocalLink {
            tx: Arc::new(Closer(a_to_b.clone())),
            rx: LocalReceiver::new(b_to_a.clone()),
            max_message: usize::MAX,
        },
        LocalLink {
            tx: Arc::new(Closer(b_to_a)),
            rx: LocalReceiver::new(a_to_b),
            max_message: usize::MAX,
        },
    )
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `message` unless the queue is full or the receiver has gone.
    fn try_push(&self, message: Message) -> Result<(), TrySendError> {
        let mut state = self.lock();
        if state.receiver_gone || state.senders_gone {
            return Err(TrySendError::Failed(LinkError::Closed));
        }
        if state.items.len() >= self.capacity {
            return Err(TrySendError::Full(message));
        }
        state.items.push_back(message);
        if state.items.len() == 1 {
            self.queued.0.store(true, Ordering::Release);
        }
        let waker = state.waker.take();
        drop(state);
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// Ends the direction from the sending side: the receiver gets what is queued, then
    /// the end.
    fn close_sending(&self) {
        let waker = {
            let mut state = self.lock();
            state.senders_gone = true;
            // A spinning receiver looks only when this is set: the end is news too.
            self.queued.0.store(true, Ordering::Release);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        self.room.notify_waiters();
    }
}

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.close_sending();
    }
}

impl LocalReceiver {
    fn new(queue: Arc<Queue>) -> Self {
        Self {
            queue,
            batch: VecDeque::new(),
            spin: false,
        }
    }

    /// Takes everything queued into `batch`; `Some(Err)` once the senders have gone and
    /// nothing is left, `None` if nothing is queued (then `waker`, if given, is woken when
    /// something is).
    fn take(&mut self, waker: Option<&Waker>) -> Option<Result<Message, LinkError>> {
        let queue = &self.queue;
        let mut state = queue.lock();
        if state.items.is_empty() {
            if state.senders_gone {
                return Some(Err(LinkError::Closed));
            }
            if let Some(waker) = waker {
                match &mut state.waker {
                    Some(w) if w.will_wake(waker) => {}
                    slot => *slot = Some(waker.clone()),
                }
            }
            return None;
        }
        // Both deques keep their memory: no allocation once they have grown.
        core::mem::swap(&mut state.items, &mut self.batch);
        queue.queued.0.store(false, Ordering::Release);
        drop(state);
        // Only a sender that found the queue full waits for room, and then the queue
        // stays full until this take.
        if self.batch.len() >= queue.capacity {
            queue.room.notify_waiters();
        }
        self.batch.pop_front().map(Ok)
    }
}

impl Drop for LocalReceiver {
    fn drop(&mut self) {
        let items = {
            let mut state = self.queue.lock();
            state.receiver_gone = true;
            core::mem::take(&mut state.items)
        };
        drop(items);
        self.queue.room.notify_waiters();
    }
}

impl MessageLink for LocalLink {
    type Sender = LocalSender;
    type Receiver = LocalReceiver;

    fn limit_message(&mut self, max: usize) {
        self.max_message = max;
    }

    fn split(self) -> (LocalSender, LocalReceiver) {
        let mut rx = self.rx;
        rx.spin = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread);
        (
            LocalSender {
                tx: self.tx,
                max_message: self.max_message,
            },
            rx,
        )
    }
}

impl LinkSender for LocalSender {
    async fn send(&self, mut message: Message) -> Result<(), LinkError> {
        let queue = &self.tx.0;
        // The first look takes no waiter slot; once the queue was full, each look is made
        // registered for room, so a take between the look and the wait wakes it.
        let mut full = false;
        loop {
            let room = queue.room.notified();
            tokio::pin!(room);
            if full {
                room.as_mut().enable();
            }
            match queue.try_push(message) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Failed(e)) => return Err(e),
                Err(TrySendError::Full(back)) => message = back,
            }
            if full {
                room.await;
            }
            full = true;
        }
    }

    fn try_send(&self, message: Message) -> Result<(), TrySendError> {
        self.tx.0.try_push(message)
    }

    fn max_message(&self) -> usize {
        self.max_message
    }

    fn close(&self) {
        self.tx.0.close_sending();
    }
}

impl LinkReceiver for LocalReceiver {
    async fn recv(&mut self) -> Result<Message, LinkError> {
        if let Some(message) = self.batch.pop_front() {
            return Ok(message);
        }
        // As the framed link's reader does: on a current-thread runtime, keep looking for
        // a while before sleeping, since the other end (often on another thread) is
        // likely about to answer, and a sleeping thread costs a wake-up to reach.
        if self.spin {
            let start = Instant::now();
            let mut polls = 0u32;
            loop {
                // Messages already waiting at the first look mean the other end sends
                // faster than this end takes: one pass of the runtime before taking lets
                // more come, so one take (one move of the queue between the cores)
                // serves more of them. What comes while spinning is taken at once: a
                // caller is likely waiting on it.
                if polls > 0 && self.queue.queued.0.load(Ordering::Acquire) {
                    if let Some(taken) = self.take(None) {
                        return taken;
                    }
                }
                // At least one pass, so what was waiting at the first look is taken here.
                if polls > 0 && start.elapsed() >= super::SPIN {
                    break;
                }
                polls += 1;
                if polls % super::YIELD_THREAD_EVERY == 0 {
                    std::thread::yield_now();
                }
                tokio::task::yield_now().await;
            }
        }
        poll_fn(|cx| match self.take(Some(cx.waker())) {
            Some(taken) => Poll::Ready(taken),
            None => Poll::Pending,
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;
    use volley_proto::rpc::Kind;

    const WAIT: Duration = Duration::from_secs(5);

    fn message(id: u32) -> Message {
        Message::new(Kind::CALL, id, 1, bytes::Bytes::new())
    }

    async fn recv(rx: &mut LocalReceiver) -> Result<Message, LinkError> {
        tokio::time::timeout(WAIT, rx.recv())
            .await
            .expect("the receiver answers in time")
    }

    #[tokio::test]
    async fn a_burst_arrives_in_order_and_a_full_queue_holds_its_sender() {
        let (a, b) = pair(3);
        let ((tx, _a_rx), (_b_tx, mut rx)) = (a.split(), b.split());
        for id in 0..3 {
            tx.try_send(message(id)).expect("room");
        }
        let Err(TrySendError::Full(back)) = tx.try_send(message(3)) else {
            panic!("a fourth message fits in a queue of three");
        };
        assert_eq!(back.head.call_id, 3, "the message comes back whole");
        // A sender waits for room; the take that empties the queue lets it on.
        let sender = tokio::spawn({
            let tx = tx.clone();
            async move { tx.send(message(3)).await }
        });
        for id in 0..4 {
            assert_eq!(recv(&mut rx).await.unwrap().head.call_id, id);
        }
        tokio::time::timeout(WAIT, sender)
            .await
            .expect("the waiting sender got room")
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn the_senders_going_ends_the_queue_after_what_is_in_it() {
        let (a, b) = pair(8);
        let ((tx, _a_rx), (_b_tx, mut rx)) = (a.split(), b.split());
        let clone = tx.clone();
        tx.try_send(message(7)).unwrap();
        drop(tx);
        clone
            .try_send(message(8))
            .expect("a clone keeps the direction open");
        drop(clone);
        assert_eq!(recv(&mut rx).await.unwrap().head.call_id, 7);
        assert_eq!(recv(&mut rx).await.unwrap().head.call_id, 8);
        assert!(matches!(recv(&mut rx).await, Err(LinkError::Closed)));
    }

    #[tokio::test]
    async fn a_sleeping_receiver_wakes_for_a_message_and_for_a_close() {
        let (a, b) = pair(8);
        let ((tx, _a_rx), (_b_tx, mut rx)) = (a.split(), b.split());
        // Straight to sleep, without the spin a current-thread runtime gets.
        rx.spin = false;
        let receiver = tokio::spawn(async move {
            let first = recv(&mut rx).await.map(|m| m.head.call_id);
            let end = recv(&mut rx).await.map(|m| m.head.call_id);
            (first, end)
        });
        // The receiver's task runs (and sleeps) first on this one-thread runtime.
        tokio::task::yield_now().await;
        tx.try_send(message(1)).unwrap();
        tokio::task::yield_now().await;
        tx.close();
        let (first, end) = tokio::time::timeout(WAIT, receiver).await.unwrap().unwrap();
        assert_eq!(first.unwrap(), 1);
        assert!(matches!(end, Err(LinkError::Closed)));
        assert!(matches!(
            tx.try_send(message(2)),
            Err(TrySendError::Failed(LinkError::Closed))
        ));
    }

    #[tokio::test]
    async fn the_receiver_going_fails_sends_and_frees_a_waiting_sender() {
        let (a, b) = pair(1);
        let ((tx, _a_rx), (_b_tx, rx)) = (a.split(), b.split());
        tx.try_send(message(1)).unwrap();
        let waiting = tokio::spawn({
            let tx = tx.clone();
            async move { tx.send(message(2)).await }
        });
        tokio::task::yield_now().await;
        drop(rx);
        let sent = tokio::time::timeout(WAIT, waiting).await.unwrap().unwrap();
        assert!(matches!(sent, Err(LinkError::Closed)));
        assert!(matches!(
            tx.try_send(message(3)),
            Err(TrySendError::Failed(LinkError::Closed))
        ));
        // An end dropped before it is split counts as gone too.
        let (a, b) = pair(1);
        drop(b);
        let (tx, _rx) = a.split();
        assert!(matches!(
            tx.try_send(message(1)),
            Err(TrySendError::Failed(LinkError::Closed))
        ));
    }

    #[tokio::test]
    async fn a_spinning_receiver_gathers_what_was_waiting_and_takes_what_comes_at_once() {
        let (a, b) = pair(16);
        let ((tx, _a_rx), (_b_tx, mut rx)) = (a.split(), b.split());
        assert!(rx.spin, "a current-thread runtime's receiver spins");
        // Waiting at the first look: the receiver lets the runtime run once before it
        // takes, and what was sent meanwhile comes in the same take.
        tx.try_send(message(0)).expect("room");
        {
            let first = rx.recv();
            tokio::pin!(first);
            assert!(
                futures::poll!(first.as_mut()).is_pending(),
                "the take waits a pass"
            );
            tx.try_send(message(1)).expect("room");
            let got = tokio::time::timeout(WAIT, first).await.expect("in time");
            assert_eq!(got.expect("a message").head.call_id, 0);
        }
        assert_eq!(
            rx.batch.len(),
            1,
            "the second message came in the same take"
        );
        assert_eq!(recv(&mut rx).await.expect("a message").head.call_id, 1);
        // Nothing waiting at the first look: a message sent while the receiver spins is
        // taken at its next look, not a pass later.
        let next = rx.recv();
        tokio::pin!(next);
        assert!(
            futures::poll!(next.as_mut()).is_pending(),
            "nothing queued yet"
        );
        tx.try_send(message(2)).expect("room");
        match futures::poll!(next.as_mut()) {
            Poll::Ready(got) => assert_eq!(got.expect("a message").head.call_id, 2),
            Poll::Pending => panic!("a message sent while the receiver spins waits a pass"),
        }
    }

    #[tokio::test]
    async fn a_spinning_receiver_learns_of_the_senders_end_at_its_next_look() {
        let (a, b) = pair(4);
        let ((tx, _a_rx), (_b_tx, mut rx)) = (a.split(), b.split());
        let next = rx.recv();
        tokio::pin!(next);
        assert!(
            futures::poll!(next.as_mut()).is_pending(),
            "nothing queued yet"
        );
        drop(tx);
        match futures::poll!(next.as_mut()) {
            Poll::Ready(got) => assert!(matches!(got, Err(LinkError::Closed)), "{got:?}"),
            Poll::Pending => panic!("the senders' end waits for the spin to run out"),
        }
    }
}

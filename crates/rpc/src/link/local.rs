//! The in-process link: two tasks in one process exchange messages by value over a
//! bounded channel. Nothing is encoded into frames and nothing is copied: the arguments
//! and segments are the same `Bytes` (shared by `Arc`) on both sides, as ARTIQ's two
//! cores share one buffer.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::mpsc;

use super::{LinkError, LinkReceiver, LinkSender, Message, MessageLink, TrySendError};

/// One end of an in-process link; see [`pair`].
#[derive(Debug)]
pub struct LocalLink {
    tx: mpsc::Sender<Message>,
    rx: mpsc::Receiver<Message>,
    max_message: usize,
}

/// The sending half of a [`LocalLink`].
#[derive(Clone, Debug)]
pub struct LocalSender {
    /// `None` once closed: the last real sender goes, so the peer sees the end.
    tx: Arc<Mutex<Option<mpsc::Sender<Message>>>>,
    max_message: usize,
}

/// The receiving half of a [`LocalLink`].
#[derive(Debug)]
pub struct LocalReceiver {
    rx: mpsc::Receiver<Message>,
    /// Whether to spin before sleeping: on a current-thread runtime only.
    spin: bool,
}

/// Two connected ends; each holds at most `capacity` messages sent and not yet taken
/// (1..=1_048_576; senders wait beyond it), and carries messages up to `max_message`.
pub fn pair(capacity: usize, max_message: usize) -> (LocalLink, LocalLink) {
    assert!(
        (1..=1 << 20).contains(&capacity),
        "local link capacity must be 1..=1048576, not {capacity}"
    );
    let (a_tx, a_rx) = mpsc::channel(capacity);
    let (b_tx, b_rx) = mpsc::channel(capacity);
    (
        LocalLink {
            tx: a_tx,
            rx: b_rx,
            max_message,
        },
        LocalLink {
            tx: b_tx,
            rx: a_rx,
            max_message,
        },
    )
}

impl MessageLink for LocalLink {
    type Sender = LocalSender;
    type Receiver = LocalReceiver;

    fn split(self) -> (LocalSender, LocalReceiver) {
        (
            LocalSender {
                tx: Arc::new(Mutex::new(Some(self.tx))),
                max_message: self.max_message,
            },
            LocalReceiver {
                rx: self.rx,
                spin: tokio::runtime::Handle::try_current().is_ok_and(|h| {
                    h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread
                }),
            },
        )
    }
}

impl LinkSender for LocalSender {
    async fn send(&self, message: Message) -> Result<(), LinkError> {
        let tx = self
            .tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(LinkError::Closed)?;
        tx.send(message).await.map_err(|_| LinkError::Closed)
    }

    fn try_send(&self, message: Message) -> Result<(), TrySendError> {
        let tx = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(tx) = tx.as_ref() else {
            return Err(TrySendError::Failed(LinkError::Closed));
        };
        tx.try_send(message).map_err(|e| match e {
            mpsc::error::TrySendError::Full(message) => TrySendError::Full(message),
            mpsc::error::TrySendError::Closed(_) => TrySendError::Failed(LinkError::Closed),
        })
    }

    fn max_message(&self) -> usize {
        self.max_message
    }

    fn close(&self) {
        self.tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

impl LinkReceiver for LocalReceiver {
    async fn recv(&mut self) -> Result<Message, LinkError> {
        // As the framed link's reader does: on a current-thread runtime, keep looking for
        // a while before sleeping, since the other end (often on another thread) is
        // likely about to answer, and a sleeping thread costs a wake-up to reach.
        if self.spin {
            let start = Instant::now();
            let mut polls = 0u32;
            loop {
                match self.rx.try_recv() {
                    Ok(message) => return Ok(message),
                    Err(mpsc::error::TryRecvError::Disconnected) => return Err(LinkError::Closed),
                    Err(mpsc::error::TryRecvError::Empty) => {}
                }
                if start.elapsed() >= super::SPIN {
                    break;
                }
                polls += 1;
                if polls % super::YIELD_THREAD_EVERY == 0 {
                    std::thread::yield_now();
                }
                tokio::task::yield_now().await;
            }
        }
        self.rx.recv().await.ok_or(LinkError::Closed)
    }
}

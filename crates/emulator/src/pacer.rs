//! The pacer: a thread that sends the boards' delayed UDP replies when they are due. It
//! spins (yielding the CPU) while a reply is due within 2 ms, so delays of tens of
//! microseconds (SC&MP's service time) hold to a few microseconds, which tokio's timers,
//! ticking in whole milliseconds, cannot do; otherwise it sleeps on a condition
//! variable until shortly before the next one, or until a reply is queued.

use core::net::SocketAddr;
use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use std::time::Instant;
use volley_proto::scp::MAX_DATAGRAM_LEN;

use crate::logic::{Fabric, Schedule};

/// A reply waiting for its time: its bytes held in place (no allocation per reply), how
/// many of them, where it goes, which board sends it.
type Due = ([u8; MAX_DATAGRAM_LEN], usize, SocketAddr, usize);

#[derive(Debug)]
struct Shared {
    queue: Mutex<Schedule<Due>>,
    wake: Condvar,
    stop: AtomicBool,
}

/// The pacer thread and its queue; dropping it stops the thread.
#[derive(Debug)]
pub(crate) struct Pacer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Schedule<Due>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Pacer {
    /// Starts the thread; `sockets[i]` is board `i`'s socket (a clone of the one its task
    /// reads).
    pub(crate) fn start(fabric: Arc<Fabric>, sockets: Vec<std::net::UdpSocket>) -> Self {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Schedule::default()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("volley-emulator-pacer".into())
                .spawn(move || run(&shared, &fabric, &sockets))
                .ok()
        };
        Self { shared, thread }
    }

    /// Queues `reply` (at most one SCP datagram) to `to` from board `board`, to leave at
    /// `at`.
    pub(crate) fn send_at(&self, at: Instant, reply: &[u8], to: SocketAddr, board: usize) {
        let mut bytes = [0u8; MAX_DATAGRAM_LEN];
        let len = reply.len().min(MAX_DATAGRAM_LEN);
        bytes[..len].copy_from_slice(&reply[..len]);
        self.shared.lock().push(at, (bytes, len, to, board));
        self.shared.wake.notify_one();
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(shared: &Shared, fabric: &Fabric, sockets: &[std::net::UdpSocket]) {
    let mut due = Vec::new();
    while !shared.stop.load(Ordering::Relaxed) {
        let mut queue = shared.lock();
        let now = Instant::now();
        while let Some(reply) = queue.pop_due(now) {
            due.push(reply);
        }
        if due.is_empty() {
            match queue.next_at() {
                Some(at) if at <= now + Duration::from_millis(2) => {
                    drop(queue);
                    std::thread::yield_now();
                }
                next => {
                    let wait = next.map_or(Duration::from_millis(100), |at| {
                        (at - now - Duration::from_millis(1)).min(Duration::from_millis(100))
                    });
                    let _ = shared.wake.wait_timeout(queue, wait);
                }
            }
            continue;
        }
        drop(queue);
        for (reply, len, to, board) in due.drain(..) {
            // A reply the socket cannot take now is lost, as a board's would be.
            if sockets[board].send_to(&reply[..len], to).is_ok() {
                fabric.boards[board].count_reply();
            }
        }
    }
}

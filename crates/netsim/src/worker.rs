//! The thread each relay runs on, stopped and joined when its owner is dropped.

use core::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A thread that runs until its stop flag is set; stopped and joined when dropped.
#[derive(Debug)]
pub(crate) struct Worker {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Sets the flag and waits for the thread.
    pub(crate) fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.halt();
    }
}

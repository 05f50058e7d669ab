//! The log's way to stderr: a bounded queue and a thread of its own that writes it, so
//! the runtime's threads never block in `write(2)`. A stderr that stalls (a full pipe
//! nobody reads) would otherwise freeze a server on its next warning; here, lines past
//! the queue are dropped and counted, and the count is written once stderr moves again.

use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::io::Write;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Instant;

use tracing_subscriber::fmt::MakeWriter;

/// Log lines waiting for stderr at most.
const QUEUE: usize = 1024;

/// What the writer thread is handed.
enum Item {
    Line(Vec<u8>),
    /// Answer once everything before it is written.
    Flush(SyncSender<()>),
}

/// Hands formatted log lines to the writer thread; cheap to clone.
#[derive(Clone)]
pub(crate) struct Lines {
    tx: SyncSender<Item>,
    dropped: Arc<AtomicU64>,
}

impl Lines {
    /// Starts the writer thread.
    pub(crate) fn start() -> std::io::Result<Self> {
        let (tx, rx) = sync_channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let counted = dropped.clone();
        std::thread::Builder::new()
            .name("volley-log".into())
            .spawn(move || write_lines(&rx, &counted))?;
        Ok(Self { tx, dropped })
    }

    /// Waits (up to `limit`) for the lines queued so far to reach stderr: at exit, so
    /// the last warnings are not lost.
    pub(crate) fn flush(&self, limit: Duration) {
        let (done, wait) = sync_channel(1);
        let until = Instant::now() + limit;
        let mut item = Item::Flush(done);
        loop {
            match self.tx.try_send(item) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) if Instant::now() < until => {
                    item = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return,
            }
        }
        let _ = wait.recv_timeout(until.saturating_duration_since(Instant::now()));
    }
}

fn write_lines(rx: &Receiver<Item>, dropped: &AtomicU64) {
    let mut stderr = std::io::stderr();
    while let Ok(item) = rx.recv() {
        let lost = dropped.swap(0, Ordering::Relaxed);
        if lost > 0 {
            let _ = writeln!(
                stderr,
                "volley: {lost} log lines dropped (stderr was not keeping up)"
            );
        }
        match item {
            Item::Line(line) => {
                let _ = stderr.write_all(&line);
            }
            Item::Flush(done) => {
                let _ = stderr.flush();
                let _ = done.try_send(());
            }
        }
    }
}

/// One log event, formatted here, queued whole when dropped.
pub(crate) struct LineWriter {
    line: Vec<u8>,
    lines: Lines,
}

impl Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.line.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if self.line.is_empty() {
            return;
        }
        let line = core::mem::take(&mut self.line);
        if self.lines.tx.try_send(Item::Line(line)).is_err() {
            self.lines.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl<'a> MakeWriter<'a> for Lines {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> LineWriter {
        LineWriter {
            line: Vec::new(),
            lines: self.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_and_counts_and_never_blocks() {
        // A queue with no thread behind it: as if stderr had stalled.
        let (tx, _rx) = sync_channel(2);
        let lines = Lines {
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
        };
        let started = Instant::now();
        for _ in 0..10_000 {
            let mut writer = lines.make_writer();
            writer.write_all(b"a warning\n").unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(lines.dropped.load(Ordering::Relaxed), 10_000 - 2);
    }
}

//! [`Stats`]: what the reader and writer have done, counted as they do it.

use core::sync::atomic::{AtomicU64, Ordering};

/// Counters kept by the reader and writer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames sent.
    pub frames_sent: u64,
    /// Write calls made (vectored or not).
    pub writes: u64,
    /// Payload bytes the writer copied into its coalescing buffer (only payloads under
    /// [`Config::copy_threshold`](crate::Config::copy_threshold)).
    pub bytes_copied: u64,
    /// Frames received.
    pub frames_received: u64,
    /// Reads made.
    pub reads: u64,
    /// Waker calls made by the reader.
    pub wakeups: u64,
    /// Frames that answered no outstanding request and that nobody took: the replies to
    /// cancelled requests, and frames from the peer after [`Unsolicited`](crate::Unsolicited)
    /// was dropped.
    pub unmatched: u64,
    /// Frames handed to [`Unsolicited`](crate::Unsolicited).
    pub incoming: u64,
    /// Payload bytes of file regions the kernel sent straight from the file
    /// (`sendfile(2)`), never entering this process's memory.
    pub file_bytes_sent: u64,
    /// Read buffers allocated. The reader reuses a buffer once every frame split from
    /// it has been dropped, so in a steady stream this stops growing.
    pub read_buffers: u64,
    /// Bytes of partly read frames the reader moved from one buffer to another. Its
    /// buffers are sized so that this stays zero; it counts what a stream that broke
    /// that rule would have cost.
    pub bytes_moved: u64,
    /// Bytes of memory the frames queued for the writer hold now, as counted against
    /// [`Config::write_budget`](crate::Config::write_budget): each frame's bytes in
    /// memory plus [`FRAME_COST`](crate::FRAME_COST).
    pub queued: u64,
    /// Times the reader spun ([`Config::spin`](crate::Config::spin)) before a read
    /// rather than sleeping at once.
    pub spins: u64,
    /// Microseconds the reader spent spinning.
    pub spun_us: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) frames_sent: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) bytes_copied: AtomicU64,
    pub(crate) frames_received: AtomicU64,
    pub(crate) reads: AtomicU64,
    pub(crate) wakeups: AtomicU64,
    pub(crate) unmatched: AtomicU64,
    pub(crate) incoming: AtomicU64,
    pub(crate) read_buffers: AtomicU64,
    pub(crate) file_bytes_sent: AtomicU64,
    pub(crate) bytes_moved: AtomicU64,
    pub(crate) spins: AtomicU64,
    pub(crate) spun_us: AtomicU64,
}

impl Counters {
    /// Adds `n` to a counter.
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            frames_sent: get(&self.frames_sent),
            writes: get(&self.writes),
            bytes_copied: get(&self.bytes_copied),
            frames_received: get(&self.frames_received),
            reads: get(&self.reads),
            wakeups: get(&self.wakeups),
            unmatched: get(&self.unmatched),
            incoming: get(&self.incoming),
            read_buffers: get(&self.read_buffers),
            file_bytes_sent: get(&self.file_bytes_sent),
            bytes_moved: get(&self.bytes_moved),
            spins: get(&self.spins),
            spun_us: get(&self.spun_us),
            queued: 0,
        }
    }
}

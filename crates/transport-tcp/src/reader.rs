//! The reader task: large reads, frames split off without copying, replies handed to
//! their waiters a batch at a time.

use core::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};
use volley_proto::wire::frame::{Decoder, HEADER_LEN};

use crate::connection::{Error, Reply, Shared};

/// Read buffers kept for reuse while frames split from them are still alive.
const SPARE_BUFFERS: usize = 16;

pub(crate) async fn run<R: AsyncRead + Unpin>(mut reader: R, shared: Arc<Shared>) {
    let config = shared.config;
    let decoder = Decoder::new(config.max_frame_len);
    let mut buffers = Buffers::new(config.read_chunk);
    shared.counters.read_buffers.fetch_add(1, Ordering::Relaxed);
    loop {
        // Room for at least a quarter chunk, or for the whole frame being assembled: its
        // length was checked against the limit before this.
        let want = match decoder.frame_len(&buffers.current) {
            Ok(Some(total)) => total
                .saturating_sub(buffers.current.len())
                .max(config.read_chunk / 4),
            Ok(None) => config.read_chunk / 4,
            Err(e) => return shared.fail(Error::Protocol(e)),
        };
        if buffers.make_room(want) {
            shared.counters.read_buffers.fetch_add(1, Ordering::Relaxed);
        }
        let buf = &mut buffers.current;
        match reader.read_buf(buf).await {
            Ok(0) => return shared.fail(Error::Closed),
            Ok(_) => {}
            Err(e) => return shared.fail(e.into()),
        }
        shared.counters.reads.fetch_add(1, Ordering::Relaxed);
        loop {
            let (ty, id, used) = match decoder.decode(buf) {
                Ok(Some((frame, used))) => (frame.ty, frame.id, used),
                Ok(None) => break,
                Err(e) => return shared.fail(Error::Protocol(e)),
            };
            let mut frame = buf.split_to(used).freeze();
            let body = frame.split_off(HEADER_LEN);
            shared
                .counters
                .frames_received
                .fetch_add(1, Ordering::Relaxed);
            shared.deliver(Reply { ty, id, body });
        }
    }
}

/// The buffer being read into, and earlier ones that frames (still held by callers) were
/// split from. A buffer whose frames are all dropped is reused as it is: a fresh
/// allocation would cost a page fault per page on its first read, which on a bulk
/// download was a fifth of the client's time.
struct Buffers {
    current: BytesMut,
    spare: Vec<BytesMut>,
    chunk: usize,
}

impl Buffers {
    fn new(chunk: usize) -> Self {
        Self {
            current: BytesMut::with_capacity(chunk),
            spare: Vec::with_capacity(SPARE_BUFFERS),
            chunk,
        }
    }

    /// Makes room for `want` more bytes after the unread ones; true if that took a new
    /// allocation.
    fn make_room(&mut self, want: usize) -> bool {
        if self.current.capacity() - self.current.len() >= want || self.current.try_reclaim(want) {
            return false;
        }
        // The unread tail (a partial frame) moves to a buffer with room for it and more.
        let need = self.current.len() + want;
        let reused = self.reclaim_spare(need);
        let fresh = reused.is_none();
        let mut next = reused.unwrap_or_else(|| BytesMut::with_capacity(need.max(self.chunk)));
        next.extend_from_slice(&self.current);
        let mut old = core::mem::replace(&mut self.current, next);
        old.clear();
        if self.spare.len() < SPARE_BUFFERS {
            self.spare.push(old);
        }
        fresh
    }

    /// A spare buffer whose frames are all gone and that holds `need` bytes.
    fn reclaim_spare(&mut self, need: usize) -> Option<BytesMut> {
        let i = self.spare.iter_mut().position(|b| b.try_reclaim(need))?;
        Some(self.spare.swap_remove(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_reused_once_its_frames_are_dropped() {
        let mut buffers = Buffers::new(1024);
        let first = buffers.current.as_ptr();
        buffers.current.extend_from_slice(&[1; 1000]);
        let frame = buffers.current.split_to(900).freeze();
        // The frame is alive: room for 512 more needs another buffer, tail carried over.
        assert!(buffers.make_room(512));
        assert_eq!(&buffers.current[..], &[1; 100][..]);
        let second = buffers.current.as_ptr();
        assert_ne!(second, first);
        buffers.current.extend_from_slice(&[2; 900]);
        let frame2 = buffers.current.split_to(1000).freeze();
        drop(frame);
        // The first buffer's frame is gone: it is reused, not a new allocation.
        assert!(!buffers.make_room(1024));
        assert_eq!(buffers.current.as_ptr(), first);
        assert_eq!(frame2[99], 1);
        assert_eq!(frame2[100], 2);
    }

    #[test]
    fn an_unshared_buffer_is_reclaimed_in_place() {
        let mut buffers = Buffers::new(1024);
        let first = buffers.current.as_ptr();
        buffers.current.extend_from_slice(&[3; 1024]);
        drop(buffers.current.split_to(1000).freeze());
        assert!(!buffers.make_room(512));
        assert_eq!(buffers.current.as_ptr(), first);
        assert_eq!(&buffers.current[..], &[3; 24][..]);
    }

    #[test]
    fn spares_are_bounded() {
        let mut buffers = Buffers::new(64);
        let mut alive = Vec::new();
        for _ in 0..20 {
            buffers.current.extend_from_slice(&[0; 64]);
            alive.push(buffers.current.split().freeze());
            assert!(buffers.make_room(64));
        }
        assert!(buffers.spare.len() <= SPARE_BUFFERS);
    }
}

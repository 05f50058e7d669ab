//! The writer task: every queued frame in one vectored write, small parts coalesced,
//! large payloads uncopied; a flush when the queue runs dry.

use core::sync::atomic::Ordering;
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::connection::{Error, Outgoing, Shared};

/// Most frames gathered into one batch.
const MAX_BATCH: usize = 1024;
/// Most slices handed to one `writev` (Linux's IOV_MAX is 1024). They live in an array
/// on the task's stack, not a vector allocated per call.
const MAX_IOV: usize = 64;

pub(crate) async fn run<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    shared: Arc<Shared>,
) {
    let vectored = writer.is_write_vectored();
    let threshold = shared.config.copy_threshold;
    let mut batch = Vec::with_capacity(64);
    let mut small = BytesMut::with_capacity(64 * 1024);
    let mut segments: VecDeque<Bytes> = VecDeque::with_capacity(128);
    loop {
        let Some(first) = rx.recv().await else {
            // Every sender is gone (the connection was closed or dropped).
            let _ = writer.shutdown().await;
            return;
        };
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let frames = batch.len() as u64;
        for out in batch.drain(..) {
            small.extend_from_slice(&out.header);
            small.extend_from_slice(out.head.as_slice());
            if out.payload.len() < threshold {
                shared
                    .counters
                    .bytes_copied
                    .fetch_add(out.payload.len() as u64, Ordering::Relaxed);
                small.extend_from_slice(&out.payload);
            } else if !out.payload.is_empty() {
                if !small.is_empty() {
                    segments.push_back(small.split().freeze());
                }
                segments.push_back(out.payload);
            }
        }
        if !small.is_empty() {
            segments.push_back(small.split().freeze());
        }
        if let Err(e) = write_all(&mut writer, &mut segments, vectored, &shared).await {
            return shared.fail(e.into());
        }
        shared
            .counters
            .frames_sent
            .fetch_add(frames, Ordering::Relaxed);
        if rx.is_empty() {
            if let Err(e) = writer.flush().await {
                return shared.fail(Error::from(e));
            }
        }
    }
}

/// Writes every segment, in as few calls as the stream allows, handling short writes.
/// Each segment is dropped as soon as it is fully written, so a caller waiting to reuse a
/// payload's buffer gets it back without waiting for the rest of the batch.
async fn write_all<W: AsyncWrite + Unpin>(
    writer: &mut W,
    segments: &mut VecDeque<Bytes>,
    vectored: bool,
    shared: &Shared,
) -> io::Result<()> {
    while !segments.is_empty() {
        let n = if vectored {
            let mut slices = [IoSlice::new(&[]); MAX_IOV];
            let mut n = 0;
            for (slot, seg) in slices.iter_mut().zip(segments.iter()) {
                *slot = IoSlice::new(seg);
                n += 1;
            }
            writer.write_vectored(&slices[..n]).await?
        } else {
            // A stream that does not forward vectored writes would write one slice per
            // call anyway; say so by writing them one at a time.
            writer.write(&segments[0]).await?
        };
        shared.counters.writes.fetch_add(1, Ordering::Relaxed);
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let mut left = n;
        while left > 0 {
            let Some(seg) = segments.front_mut() else {
                break;
            };
            if left >= seg.len() {
                left -= seg.len();
                segments.pop_front();
            } else {
                seg.advance(left);
                left = 0;
            }
        }
    }
    Ok(())
}

//! The writer task: every queued frame in one vectored write, small parts coalesced,
//! large payloads uncopied, file regions sent by the kernel or read in just before they
//! are written; a flush when the queue runs dry.

use core::future::poll_fn;
use core::sync::atomic::Ordering;
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::error::Error;
use crate::frames::{Outgoing, Payload};
use crate::sendfile::{FileRegion, SendFile};
use crate::shared::Shared;

/// Most slices handed to one `writev` (Linux's IOV_MAX is 1024). They live in an array
/// on the task's stack, not a vector allocated per call.
const MAX_IOV: usize = 64;
/// Most bytes of a file region read in at once, where the kernel cannot send it or the
/// region asks to be read in.
const FILE_CHUNK: usize = 256 * 1024;

/// Whether this task runs on a current-thread runtime.
pub(crate) fn current_thread() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread)
}

/// Adds one payload to what is to be written: copied into `small` if it is under the
/// threshold, else as its own segment after whatever `small` holds.
fn stage(
    payload: Payload,
    threshold: usize,
    small: &mut BytesMut,
    segments: &mut VecDeque<Payload>,
    shared: &Shared,
) {
    match payload {
        Payload::Mem(payload) if payload.len() < threshold => {
            shared
                .counters
                .bytes_copied
                .fetch_add(payload.len() as u64, Ordering::Relaxed);
            small.extend_from_slice(&payload);
        }
        Payload::Mem(payload) if payload.is_empty() => {}
        Payload::File(region) if region.is_empty() => {}
        payload => {
            if !small.is_empty() {
                segments.push_back(Payload::Mem(small.split().freeze()));
            }
            segments.push_back(payload);
        }
    }
}

/// [`run`], given at most [`Config::linger`](crate::Config::linger) to finish once the
/// connection is ending both ways, so that a peer that never reads cannot hold the
/// socket open by leaving the last write pending.
pub(crate) async fn run_until_ended<W: AsyncWrite + SendFile + Unpin>(
    writer: W,
    rx: mpsc::UnboundedReceiver<Outgoing>,
    shared: Arc<Shared>,
) {
    let mut ending = shared.ending.subscribe();
    let run = run(writer, rx, shared.clone());
    tokio::pin!(run);
    tokio::select! {
        () = &mut run => return,
        _ = ending.wait_for(|e| *e) => {}
    }
    let linger = shared.config.linger;
    if tokio::time::timeout(linger, run).await.is_err() {
        shared.fail(Error::Timeout {
            what: "the peer to take the last frames before the connection closed".into(),
            after: linger,
        });
    }
}

pub(crate) async fn run<W: AsyncWrite + SendFile + Unpin>(
    mut writer: W,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    shared: Arc<Shared>,
) {
    let vectored = writer.is_write_vectored();
    let gather = !current_thread();
    let threshold = shared.config.copy_threshold;
    let max_batch = shared.config.write_batch;
    let mut batch = Vec::with_capacity(64);
    let mut small = BytesMut::with_capacity(64 * 1024);
    // What is still to write, in order: coalesced heads and small bodies, and large
    // payloads (memory or file) as they came.
    let mut segments: VecDeque<Payload> = VecDeque::with_capacity(128);
    let mut scratch = Vec::new();
    // The batch's shares of the write budget, given back once it is written.
    let mut held = Vec::with_capacity(64);
    loop {
        let Some(first) = rx.recv().await else {
            // Every sender is gone (the connection was closed or dropped).
            let _ = writer.shutdown().await;
            return;
        };
        batch.push(first);
        if gather && rx.is_empty() {
            // On a multi-thread runtime the writer wakes on another worker as soon as the
            // first frame is queued; one yield lets the callers still running queue
            // theirs, so they go out in one write instead of one each. On a current-thread
            // runtime they already have.
            tokio::task::yield_now().await;
        }
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let frames = batch.len() as u64;
        for out in batch.drain(..) {
            held.push((out.budget, out.share));
            small.extend_from_slice(&out.header);
            small.extend_from_slice(out.head.as_slice());
            match out.payload {
                Payload::Parts(first, rest) => {
                    for piece in core::iter::once(first).chain(rest) {
                        stage(
                            Payload::Mem(piece),
                            threshold,
                            &mut small,
                            &mut segments,
                            &shared,
                        );
                    }
                }
                payload => stage(payload, threshold, &mut small, &mut segments, &shared),
            }
        }
        if !small.is_empty() {
            segments.push_back(Payload::Mem(small.split().freeze()));
        }
        let written = write_all(&mut writer, &mut segments, vectored, &mut scratch, &shared);
        if let Err(e) = written.await {
            return shared.fail(e.into());
        }
        held.clear();
        if shared.config.spin.is_some() {
            shared.last_write.store(shared.now_us(), Ordering::Relaxed);
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
async fn write_all<W: AsyncWrite + SendFile + Unpin>(
    writer: &mut W,
    segments: &mut VecDeque<Payload>,
    vectored: bool,
    scratch: &mut Vec<u8>,
    shared: &Shared,
) -> io::Result<()> {
    while let Some(front) = segments.front_mut() {
        let n = match front {
            Payload::File(region) => {
                send_file(writer, region, scratch, shared).await?;
                segments.pop_front();
                continue;
            }
            Payload::Parts(..) => unreachable!("`stage` splits pieces into segments"),
            Payload::Mem(first) if !vectored => {
                // A stream that does not forward vectored writes would write one slice
                // per call anyway; say so by writing them one at a time.
                writer.write(first).await?
            }
            Payload::Mem(_) => {
                let mut slices = [IoSlice::new(&[]); MAX_IOV];
                let mut n = 0;
                for (slot, seg) in slices.iter_mut().zip(segments.iter()) {
                    let Payload::Mem(bytes) = seg else { break };
                    *slot = IoSlice::new(bytes);
                    n += 1;
                }
                writer.write_vectored(&slices[..n]).await?
            }
        };
        shared.counters.writes.fetch_add(1, Ordering::Relaxed);
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let mut left = n;
        while left > 0 {
            let Some(Payload::Mem(seg)) = segments.front_mut() else {
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

/// Sends a whole file region: by the kernel where the stream can and the region allows,
/// else read into `scratch` (reused, so no allocation per frame) and written.
async fn send_file<W: AsyncWrite + SendFile + Unpin>(
    writer: &mut W,
    region: &mut FileRegion,
    scratch: &mut Vec<u8>,
    shared: &Shared,
) -> io::Result<()> {
    let short = || {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "a file region ends past the end of its file (did the file shrink?)",
        )
    };
    while !region.is_empty() {
        let sent = if region.kernel {
            poll_fn(|cx| writer.poll_send_file(cx, &region.file, region.offset, region.len)).await
        } else {
            None
        };
        match sent {
            Some(Ok(0)) => return Err(short()),
            Some(Ok(n)) => {
                shared.counters.writes.fetch_add(1, Ordering::Relaxed);
                shared
                    .counters
                    .file_bytes_sent
                    .fetch_add(n as u64, Ordering::Relaxed);
                region.advance(n);
            }
            Some(Err(e)) => return Err(e),
            None => {
                let n = region.len.min(FILE_CHUNK);
                scratch.resize(n, 0);
                match region.file.read_exact_at(scratch, region.offset) {
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(short()),
                    other => other?,
                }
                writer.write_all(scratch).await?;
                shared.counters.writes.fetch_add(1, Ordering::Relaxed);
                region.advance(n);
            }
        }
    }
    Ok(())
}

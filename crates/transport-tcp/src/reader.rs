//! The reader task: large reads, frames split off without copying, replies handed to
//! their waiters a batch at a time.

use core::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};
use volley_proto::wire::frame::{Decoder, HEADER_LEN};

use crate::connection::{Error, Reply, Shared};

pub(crate) async fn run<R: AsyncRead + Unpin>(mut reader: R, shared: Arc<Shared>) {
    let config = shared.config;
    let decoder = Decoder::new(config.max_frame_len);
    let mut buf = BytesMut::with_capacity(config.read_chunk);
    loop {
        // Room for at least a chunk, or for the whole frame being assembled: its length
        // was checked against the limit before this reserve.
        let want = match decoder.frame_len(&buf) {
            Ok(Some(total)) => total.saturating_sub(buf.len()).max(config.read_chunk / 4),
            Ok(None) => config.read_chunk / 4,
            Err(e) => return shared.fail(Error::Protocol(e)),
        };
        if buf.capacity() - buf.len() < want {
            buf.reserve(want.max(config.read_chunk));
        }
        match reader.read_buf(&mut buf).await {
            Ok(0) => return shared.fail(Error::Closed),
            Ok(_) => {}
            Err(e) => return shared.fail(e.into()),
        }
        shared.counters.reads.fetch_add(1, Ordering::Relaxed);
        loop {
            let (ty, id, used) = match decoder.decode(&buf) {
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

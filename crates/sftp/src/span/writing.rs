//! One byte range of a put: WRITEs in flight, from file regions or a stream.

use core::sync::atomic::{AtomicBool, Ordering};
use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use volley_proto::sftp::Request;
use volley_transport_tcp::{FileRegion, Pipeline};

use super::Stop;
use crate::Handle;
use crate::client::{SftpClient, SftpError, expect_ok, shown_local};

/// One range of a put.
pub(crate) struct WriteSpan<'a> {
    pub handle: &'a Handle,
    pub local: &'a Path,
    pub rpath: &'a str,
    pub from: u64,
    pub requests: usize,
    pub chunk: usize,
    pub send_from_file: bool,
    /// Once set, no new WRITE goes out; those out are waited for.
    pub stop: &'a Stop,
    /// Send the handle's CLOSE right after the last WRITE, not once every WRITE is
    /// answered (a round trip less per file), and set this once it is sent: the handle
    /// must then not be closed again (the server may have given its id to another file).
    /// The server takes requests in order, so the CLOSE still follows every WRITE, and a
    /// refused WRITE is still seen.
    pub close_when_sent: Option<&'a AtomicBool>,
}

/// Where a put's data comes from.
pub(crate) enum Source {
    /// A regular file, sent as regions the writer (or the kernel) reads, up to here.
    Regions(Arc<File>, u64),
    /// Anything else, read to its end chunk by chunk; `true` once it has ended.
    Stream(tokio::fs::File, bool),
}

impl Source {
    /// Whether everything from `offset` on has been sent.
    fn sent_all(&self, offset: u64) -> bool {
        match self {
            Self::Regions(_, to) => offset >= *to,
            Self::Stream(_, ended) => *ended,
        }
    }
}

/// Writes `source` from `span.from` (to its end: the region limit, or end of input);
/// `on_ack(bytes, gapless)` after each acknowledgement. Returns the bytes written
/// (with `span.close_when_sent`, once the CLOSE is answered too).
pub(crate) async fn write_span(
    client: &SftpClient,
    span: WriteSpan<'_>,
    source: &mut Source,
    mut on_ack: impl FnMut(u64, u64),
) -> Result<u64, SftpError> {
    let mut writing = Writing {
        client,
        pipeline: client.conn.pipeline(),
        offset: span.from,
        in_flight: HashMap::new(),
        span,
    };
    let mut done = 0u64;
    // The CLOSE's request id once sent, and whether its answer came.
    let mut close: Option<u32> = None;
    let mut closed = false;
    loop {
        writing.fill(source).await?;
        let sent_all = source.sent_all(writing.offset);
        if let (Some(sent), true, None) = (writing.span.close_when_sent, sent_all, close) {
            sent.store(true, Ordering::Relaxed);
            close = Some(writing.close().await?);
        }
        if writing.in_flight.is_empty() && close.is_none_or(|_| closed) {
            if writing.span.stop.is_stopped() && !sent_all {
                return Err(SftpError::Stopped);
            }
            break;
        }
        let rpath = writing.span.rpath;
        let reply = client.recv(&mut writing.pipeline, "write", rpath).await?;
        if Some(reply.id) == close {
            expect_ok(&reply, "close", rpath)?;
            closed = true;
            continue;
        }
        expect_ok(&reply, "write", rpath)?;
        let got = writing
            .in_flight
            .remove(&reply.id)
            .map_or(0, |(_, len)| len as u64);
        done += got;
        let lowest = writing.in_flight.values().map(|&(o, _)| o).min();
        on_ack(got, lowest.unwrap_or(writing.offset));
    }
    Ok(done)
}

/// A range's put as it goes.
struct Writing<'a> {
    client: &'a SftpClient,
    span: WriteSpan<'a>,
    pipeline: Pipeline,
    /// Where the next WRITE starts.
    offset: u64,
    /// Request id -> its data's offset and length.
    in_flight: HashMap<u32, (u64, usize)>,
}

impl Writing<'_> {
    /// Sends WRITEs up to the limit in flight, while the source has data and the
    /// caller has not stopped.
    async fn fill(&mut self, source: &mut Source) -> Result<(), SftpError> {
        while self.in_flight.len() < self.span.requests.max(1) && !self.span.stop.is_stopped() {
            let sent = match source {
                Source::Regions(file, to) => self.region(file, *to).await?,
                Source::Stream(_, true) => None,
                Source::Stream(reader, ended) => self.streamed(reader, ended).await?,
            };
            let Some((id, len)) = sent else {
                break;
            };
            self.in_flight.insert(id, (self.offset, len));
            self.offset += len as u64;
        }
        Ok(())
    }

    /// Sends the next region of `file` (up to `to`) as a WRITE: its id and length, or
    /// `None` at `to`.
    async fn region(
        &mut self,
        file: &Arc<File>,
        to: u64,
    ) -> Result<Option<(u32, usize)>, SftpError> {
        let left = to.saturating_sub(self.offset);
        if left == 0 {
            return Ok(None);
        }
        let len = self.span.chunk.min(left as usize);
        let region = FileRegion::new(file.clone(), self.offset, len);
        // Read in by the writer unless asked otherwise: a read here, on the runtime's
        // thread, could land just when the socket wants refilling and let the server
        // run dry.
        let region = match self.span.send_from_file {
            true => region,
            false => region.read_in(),
        };
        let handle = &self.span.handle.0;
        let id = self
            .client
            .send_write_from_file(&mut self.pipeline, handle, region)
            .await?;
        Ok(Some((id, len)))
    }

    /// Reads the next chunk of a stream and sends it as a WRITE: its id and length, or
    /// `None` at end of input (`ended` set once a chunk comes short).
    async fn streamed(
        &mut self,
        reader: &mut tokio::fs::File,
        ended: &mut bool,
    ) -> Result<Option<(u32, usize)>, SftpError> {
        let chunk = self.span.chunk;
        let data = read_chunk(reader, chunk)
            .await
            .map_err(|source| SftpError::Io {
                what: format!("cannot read {}", shown_local(self.span.local)),
                source,
            })?;
        if data.len() < chunk {
            *ended = true;
        }
        if data.is_empty() {
            return Ok(None);
        }
        let request = Request::Write {
            id: 0,
            handle: &self.span.handle.0,
            offset: self.offset,
            data: &data,
        };
        let len = data.len();
        let id = self
            .client
            .send(&mut self.pipeline, &request, data.clone(), "write")
            .await?;
        Ok(Some((id, len)))
    }

    /// Sends the handle's CLOSE behind the last WRITE: its request id.
    async fn close(&mut self) -> Result<u32, SftpError> {
        let request = Request::Close {
            id: 0,
            handle: &self.span.handle.0,
        };
        self.client
            .send(&mut self.pipeline, &request, Bytes::new(), "close")
            .await
    }
}

/// Reads up to `len` bytes, as many as come before end of input (a pipe gives them in
/// pieces; a WRITE should not be smaller than it must).
async fn read_chunk(reader: &mut tokio::fs::File, len: usize) -> std::io::Result<Bytes> {
    use tokio::io::AsyncReadExt;
    let mut buf = bytes::BytesMut::with_capacity(len);
    while buf.len() < len {
        let mut limited = (&mut *reader).take((len - buf.len()) as u64);
        if limited.read_buf(&mut buf).await? == 0 {
            break;
        }
    }
    Ok(buf.freeze())
}

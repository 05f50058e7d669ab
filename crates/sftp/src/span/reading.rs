//! One byte range of a get: READs in flight, their data written at their offsets.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::Bytes;
use volley_proto::sftp::Request;
use volley_transport_tcp::{Frame, Pipeline};

use super::Stop;
use crate::Handle;
use crate::client::{SftpClient, SftpError, data_or_eof, shown_local};

/// One range of a get.
pub(crate) struct ReadSpan<'a> {
    pub handle: &'a Handle,
    pub file: &'a File,
    pub local: &'a Path,
    pub rpath: &'a str,
    pub from: u64,
    /// Where the range ends; `None`: at end of file, first asking up to `stated`, then
    /// past it to see the end (or growth).
    pub to: Option<u64>,
    pub stated: Option<u64>,
    pub requests: usize,
    pub chunk: u64,
    /// Once set, no new READ goes out; those out are waited for.
    pub stop: &'a Stop,
}

/// Reads `span` into its file at the same offsets; `on_data(bytes, gapless)` after
/// each reply. Returns where the range ended: its `to`, or end of file.
pub(crate) async fn read_span(
    client: &SftpClient,
    span: ReadSpan<'_>,
    mut on_data: impl FnMut(u64, u64),
) -> Result<u64, SftpError> {
    let mut reading = Reading {
        client,
        pipeline: client.conn.pipeline(),
        in_flight: HashMap::new(),
        next: span.from,
        eof: None,
        horizon: span.to.or(span.stated).unwrap_or(u64::MAX),
        probing: false,
        done: 0,
        span,
    };
    loop {
        reading.fill().await?;
        if reading.in_flight.is_empty() {
            break;
        }
        let rpath = reading.span.rpath;
        let reply = client.recv(&mut reading.pipeline, "read", rpath).await?;
        if let Some(got) = reading.take(&reply).await? {
            on_data(got, reading.gapless());
        }
    }
    reading.end()
}

/// A range's get as it goes.
struct Reading<'a> {
    client: &'a SftpClient,
    span: ReadSpan<'a>,
    pipeline: Pipeline,
    /// Request id -> the offset and length asked for.
    in_flight: HashMap<u32, (u64, u32)>,
    /// Where the next READ starts.
    next: u64,
    /// Where the file ended, once a READ found its end.
    eof: Option<u64>,
    /// How far READs go before one looks past it: the range's end, or the stated size.
    horizon: u64,
    /// A READ past the stated size is out, to see the end (or growth).
    probing: bool,
    /// Bytes written.
    done: u64,
}

impl Reading<'_> {
    /// Sends READs up to the limit in flight, and the one past the stated size.
    async fn fill(&mut self) -> Result<(), SftpError> {
        let (stop, chunk, to) = (self.span.stop, self.span.chunk, self.span.to);
        let most = self.span.requests.max(1);
        while self.in_flight.len() < most
            && self.next < self.eof.unwrap_or(u64::MAX)
            && self.next < self.horizon
            && !stop.is_stopped()
        {
            let len = chunk.min(self.horizon - self.next).max(1) as u32;
            self.ask(self.next, len).await?;
            self.next += u64::from(len);
        }
        if to.is_none()
            && self.eof.is_none()
            && !self.probing
            && !stop.is_stopped()
            && self.next >= self.horizon
            && self.in_flight.len() < most
        {
            // Everything up to the stated size is asked for: ask past it as well, in
            // the same round trip, rather than once the rest has arrived.
            let len = chunk as u32;
            self.ask(self.next, len).await?;
            self.next += u64::from(len);
            self.probing = true;
        }
        Ok(())
    }

    /// Sends one READ.
    async fn ask(&mut self, offset: u64, len: u32) -> Result<(), SftpError> {
        let request = Request::Read {
            id: 0,
            handle: &self.span.handle.0,
            offset,
            len,
        };
        let id = self
            .client
            .send(&mut self.pipeline, &request, Bytes::new(), "read")
            .await?;
        self.in_flight.insert(id, (offset, len));
        Ok(())
    }

    /// Takes one reply: its data written, or the end of file seen. The bytes written,
    /// or `None` for a reply to no READ of this range.
    async fn take(&mut self, reply: &Frame) -> Result<Option<u64>, SftpError> {
        let Some((offset, len)) = self.in_flight.remove(&reply.id) else {
            return Ok(None);
        };
        let rpath = self.span.rpath;
        let data = match data_or_eof(reply, "read", rpath)? {
            Some(data) if !data.is_empty() => data,
            // End of file (or an empty DATA, which OpenSSH never sends mid-file).
            _ => {
                self.eof = Some(self.eof.map_or(offset, |e| e.min(offset)));
                return Ok(Some(0));
            }
        };
        let got = data.len() as u64;
        if got > u64::from(len) {
            return Err(SftpError::SizeMismatch {
                path: rpath.to_owned(),
                got,
                expected: u64::from(len),
            });
        }
        let span = &self.span;
        span.file
            .write_all_at(&data, offset)
            .map_err(|source| SftpError::Io {
                what: format!("cannot write {}", shown_local(span.local)),
                source,
            })?;
        self.done += got;
        if offset >= self.horizon {
            // Past the stated size: the file grew. Read on to its end.
            self.horizon = u64::MAX;
        }
        if (got as u32) < len {
            // A short read is not the end: ask again for the rest.
            self.ask(offset + got, len - got as u32).await?;
        }
        Ok(Some(got))
    }

    /// Every byte below the lowest READ still out has been written.
    fn gapless(&self) -> u64 {
        let lowest = self.in_flight.values().map(|&(o, _)| o).min();
        lowest
            .unwrap_or(self.next)
            .min(self.eof.unwrap_or(u64::MAX))
    }

    /// Where the range ended, once nothing is out; an error when it ended short.
    fn end(&self) -> Result<u64, SftpError> {
        let span = &self.span;
        let reached = span.from + self.done;
        let complete = self.eof.is_some() || span.to == Some(reached);
        if span.stop.is_stopped() && !complete {
            return Err(SftpError::Stopped);
        }
        let end = self.eof.unwrap_or(reached).min(span.to.unwrap_or(u64::MAX));
        if reached != end {
            return Err(SftpError::SizeMismatch {
                path: span.rpath.to_owned(),
                got: reached,
                expected: end,
            });
        }
        if let Some(to) = span.to.filter(|&to| end < to) {
            // A range ends where the next begins: a file that shrank under it cannot
            // be put together.
            return Err(SftpError::Shrank {
                path: span.rpath.to_owned(),
                stated: span.stated.unwrap_or(to),
                got: end,
            });
        }
        Ok(end)
    }
}

//! The transfer loops: one byte range of one open file, `requests` READs or WRITEs in
//! flight on one session. A whole-file transfer is one range; with several sessions
//! ([`Sessions`](crate::Sessions)) a large file is cut into one range per session.
//! [`Ranges`] tracks how far each range has arrived without a gap, so a part file can be
//! cut to the bytes that are surely there.

use core::sync::atomic::{AtomicBool, Ordering};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use volley_proto::sftp::Request;
use volley_transport_tcp::{FileRegion, Pipeline};

use crate::Handle;
use crate::client::{SftpClient, SftpError, data_or_eof, expect_ok};

/// Asks transfers to stop, as OpenSSH's `sftp` stops on Ctrl-C: no new READ or WRITE
/// goes out, those already out are answered, and the transfer ends with
/// [`SftpError::Stopped`] (inside [`SftpError::Kept`] when bytes were kept), its part
/// cut or recorded to hold exactly what arrived, for a resume. Clones stop together; a
/// tree starts no new file or listing.
#[derive(Clone, Debug, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    /// A handle not yet stopped.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks every transfer holding a clone to stop.
    pub fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Consecutive ranges `[from, to)` of one file, each with how far it has arrived with no
/// gap; the last may run to end of file.
#[derive(Debug)]
pub(crate) struct Ranges {
    bounds: Vec<(u64, Option<u64>)>,
    marks: Mutex<Vec<u64>>,
}

impl Ranges {
    /// One range, `[from, to)`, or from `from` to end of file.
    pub(crate) fn whole(from: u64, to: Option<u64>) -> Self {
        Self::of(vec![(from, to)])
    }

    /// `gaps` (sorted, apart) cut into pieces of `piece` bytes when they add up to two
    /// pieces or more, else one range a gap.
    pub(crate) fn cut(gaps: &[(u64, u64)], piece: u64) -> Self {
        Self::of(cut_bounds(gaps, piece))
    }

    /// What a get still needs of a file of `size` bytes: `gaps` (sorted, apart, within
    /// the file), cut into pieces of `piece` bytes when they add up to two pieces or
    /// more, the last range running on to end of file (a get sees growth and end of
    /// file as on one session): when the last gap ends before `size`, a range of its
    /// own from `size` looks for the end.
    pub(crate) fn missing(gaps: &[(u64, u64)], piece: u64, size: u64) -> Self {
        let mut bounds = cut_bounds(gaps, piece);
        match bounds.last_mut() {
            Some(last) if last.1 == Some(size) => last.1 = None,
            _ => bounds.push((size, None)),
        }
        Self::of(bounds)
    }

    /// What has arrived: each range from its start to how far it arrived without a gap
    /// (those with nothing left out).
    pub(crate) fn arrived(&self) -> Vec<(u64, u64)> {
        let marks = self.marks.lock().unwrap_or_else(PoisonError::into_inner);
        let starts = self.bounds.iter().map(|&(from, _)| from);
        starts
            .zip(marks.iter().copied())
            .filter(|&(a, b)| b > a)
            .collect()
    }

    fn of(bounds: Vec<(u64, Option<u64>)>) -> Self {
        let marks = Mutex::new(bounds.iter().map(|&(a, _)| a).collect());
        Self { bounds, marks }
    }

    /// The ranges, in order.
    pub(crate) fn bounds(&self) -> &[(u64, Option<u64>)] {
        &self.bounds
    }

    /// Records that range `i` has arrived without a gap up to `mark`; returns how far
    /// the whole file has (up to the first range not complete).
    pub(crate) fn mark(&self, i: usize, mark: u64) -> u64 {
        let mut marks = self.marks.lock().unwrap_or_else(PoisonError::into_inner);
        marks[i] = mark;
        for (&(_, to), &mark) in self.bounds.iter().zip(marks.iter()) {
            if to != Some(mark) {
                return mark;
            }
        }
        marks.last().copied().unwrap_or(0)
    }
}

/// `gaps` cut as [`Ranges::cut`] cuts them.
fn cut_bounds(gaps: &[(u64, u64)], piece: u64) -> Vec<(u64, Option<u64>)> {
    let piece = piece.max(1);
    let total: u64 = gaps.iter().map(|&(a, b)| b - a).sum();
    let piece = if total < piece.saturating_mul(2) {
        u64::MAX
    } else {
        piece
    };
    let mut bounds = Vec::new();
    for &(from, to) in gaps {
        let mut at = from;
        while at < to {
            let next = at.saturating_add(piece).min(to);
            bounds.push((at, Some(next)));
            at = next;
        }
    }
    bounds
}

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

/// Reads `span` into its file at the same offsets; `on_data(bytes, gapless)` after
/// each reply. Returns where the range ended: its `to`, or end of file.
pub(crate) async fn read_span(
    client: &SftpClient,
    span: ReadSpan<'_>,
    mut on_data: impl FnMut(u64, u64),
) -> Result<u64, SftpError> {
    let mut pipeline = client.conn.pipeline();
    let mut in_flight: HashMap<u32, (u64, u32)> = HashMap::new();
    let mut next = span.from;
    let mut eof: Option<u64> = None;
    let mut horizon = span.to.or(span.stated).unwrap_or(u64::MAX);
    // A READ past the stated size is out, to see the end (or growth).
    let mut probing = false;
    let mut done = 0u64;
    let rpath = span.rpath;
    loop {
        while in_flight.len() < span.requests.max(1)
            && next < eof.unwrap_or(u64::MAX)
            && next < horizon
            && !span.stop.is_stopped()
        {
            let len = span.chunk.min(horizon - next).max(1) as u32;
            issue_read(
                client,
                &mut pipeline,
                &mut in_flight,
                span.handle,
                next,
                len,
            )
            .await?;
            next += u64::from(len);
        }
        if span.to.is_none()
            && eof.is_none()
            && !probing
            && !span.stop.is_stopped()
            && next >= horizon
            && in_flight.len() < span.requests.max(1)
        {
            // Everything up to the stated size is asked for: ask past it as well, in
            // the same round trip, rather than once the rest has arrived.
            let len = span.chunk as u32;
            issue_read(
                client,
                &mut pipeline,
                &mut in_flight,
                span.handle,
                next,
                len,
            )
            .await?;
            next += u64::from(len);
            probing = true;
        }
        if in_flight.is_empty() {
            break;
        }
        let reply = client.recv(&mut pipeline, "read", rpath).await?;
        let Some((offset, len)) = in_flight.remove(&reply.id) else {
            continue;
        };
        let mut got = 0;
        match data_or_eof(&reply, "read", rpath)? {
            Some(data) if !data.is_empty() => {
                if data.len() > len as usize {
                    return Err(SftpError::SizeMismatch {
                        path: rpath.to_owned(),
                        got: data.len() as u64,
                        expected: u64::from(len),
                    });
                }
                span.file
                    .write_all_at(&data, offset)
                    .map_err(|source| SftpError::Io {
                        what: format!("cannot write {}", crate::client::shown_local(span.local)),
                        source,
                    })?;
                done += data.len() as u64;
                got = data.len() as u64;
                if offset >= horizon {
                    // Past the stated size: the file grew. Read on to its end.
                    horizon = u64::MAX;
                }
                if (got as u32) < len {
                    // A short read is not the end: ask again for the rest.
                    issue_read(
                        client,
                        &mut pipeline,
                        &mut in_flight,
                        span.handle,
                        offset + got,
                        len - got as u32,
                    )
                    .await?;
                }
            }
            // End of file (or an empty DATA, which OpenSSH never sends mid-file).
            _ => eof = Some(eof.map_or(offset, |e| e.min(offset))),
        }
        // Every byte below the lowest read still out has been written.
        let gapless = in_flight.values().map(|&(o, _)| o).min().unwrap_or(next);
        on_data(got, gapless.min(eof.unwrap_or(u64::MAX)));
    }
    let complete = eof.is_some() || span.to == Some(span.from + done);
    if span.stop.is_stopped() && !complete {
        return Err(SftpError::Stopped);
    }
    let end = eof
        .unwrap_or(span.from + done)
        .min(span.to.unwrap_or(u64::MAX));
    if span.from + done != end {
        return Err(SftpError::SizeMismatch {
            path: rpath.to_owned(),
            got: span.from + done,
            expected: end,
        });
    }
    if let Some(to) = span.to.filter(|&to| end < to) {
        // A range ends where the next begins: a file that shrank under it cannot
        // be put together.
        return Err(SftpError::Shrank {
            path: rpath.to_owned(),
            stated: span.stated.unwrap_or(to),
            got: end,
        });
    }
    Ok(end)
}

async fn issue_read(
    client: &SftpClient,
    pipeline: &mut Pipeline,
    in_flight: &mut HashMap<u32, (u64, u32)>,
    handle: &Handle,
    offset: u64,
    len: u32,
) -> Result<(), SftpError> {
    let request = Request::Read {
        id: 0,
        handle: &handle.0,
        offset,
        len,
    };
    let id = client
        .send(pipeline, &request, Bytes::new(), "read")
        .await?;
    in_flight.insert(id, (offset, len));
    Ok(())
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
    let mut pipeline = client.conn.pipeline();
    let mut offset = span.from;
    // Request id -> its data's offset and length.
    let mut in_flight: HashMap<u32, (u64, usize)> = HashMap::new();
    let mut done = 0u64;
    // The CLOSE's request id once sent, and whether its answer came.
    let mut close: Option<u32> = None;
    let mut closed = false;
    loop {
        while in_flight.len() < span.requests.max(1) && !span.stop.is_stopped() {
            let sent = match source {
                Source::Regions(file, to) => {
                    let left = to.saturating_sub(offset);
                    if left == 0 {
                        break;
                    }
                    let len = span.chunk.min(left as usize);
                    let region = FileRegion::new(file.clone(), offset, len);
                    // Read in by the writer unless asked otherwise: a read here, on
                    // the runtime's thread, could land just when the socket wants
                    // refilling and let the server run dry.
                    let region = if span.send_from_file {
                        region
                    } else {
                        region.read_in()
                    };
                    let id = client
                        .send_write_from_file(&mut pipeline, &span.handle.0, region)
                        .await?;
                    (id, len)
                }
                Source::Stream(_, true) => break,
                Source::Stream(reader, ended) => {
                    let data =
                        read_chunk(reader, span.chunk)
                            .await
                            .map_err(|source| SftpError::Io {
                                what: format!(
                                    "cannot read {}",
                                    crate::client::shown_local(span.local)
                                ),
                                source,
                            })?;
                    if data.len() < span.chunk {
                        *ended = true;
                    }
                    if data.is_empty() {
                        break;
                    }
                    let request = Request::Write {
                        id: 0,
                        handle: &span.handle.0,
                        offset,
                        data: &data,
                    };
                    let len = data.len();
                    let id = client
                        .send(&mut pipeline, &request, data.clone(), "write")
                        .await?;
                    (id, len)
                }
            };
            in_flight.insert(sent.0, (offset, sent.1));
            offset += sent.1 as u64;
        }
        let sent_all = match source {
            Source::Regions(_, to) => offset >= *to,
            Source::Stream(_, ended) => *ended,
        };
        if let (Some(sent), true, None) = (span.close_when_sent, sent_all, close) {
            let request = Request::Close {
                id: 0,
                handle: &span.handle.0,
            };
            sent.store(true, Ordering::Relaxed);
            close = Some(
                client
                    .send(&mut pipeline, &request, Bytes::new(), "close")
                    .await?,
            );
        }
        if in_flight.is_empty() && close.is_none_or(|_| closed) {
            if span.stop.is_stopped() && !sent_all {
                return Err(SftpError::Stopped);
            }
            break;
        }
        let reply = client.recv(&mut pipeline, "write", span.rpath).await?;
        if Some(reply.id) == close {
            expect_ok(&reply, "close", span.rpath)?;
            closed = true;
            continue;
        }
        expect_ok(&reply, "write", span.rpath)?;
        let mut got = 0;
        if let Some((_, len)) = in_flight.remove(&reply.id) {
            got = len as u64;
            done += got;
        }
        let gapless = in_flight.values().map(|&(o, _)| o).min().unwrap_or(offset);
        on_ack(got, gapless);
    }
    Ok(done)
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

#[cfg(test)]
mod tests {
    use super::Ranges;

    #[test]
    fn pieces_report_the_gapless_prefix() {
        let r = Ranges::cut(&[(100, 1100)], 250);
        assert_eq!(
            r.bounds(),
            [
                (100, Some(350)),
                (350, Some(600)),
                (600, Some(850)),
                (850, Some(1100))
            ]
        );
        // Later pieces arriving do not move the prefix past an incomplete earlier one.
        assert_eq!(r.mark(2, 850), 100);
        assert_eq!(r.mark(0, 300), 300);
        assert_eq!(r.mark(0, 350), 350);
        assert_eq!(r.mark(1, 600), 850, "pieces 0-2 complete, 3 not begun");
        // Shorter than two pieces: one; the last piece shorter.
        assert_eq!(Ranges::cut(&[(0, 300)], 200).bounds(), [(0, Some(300))]);
        assert_eq!(Ranges::cut(&[(5, 5)], 200).bounds(), []);
        assert_eq!(
            Ranges::cut(&[(0, 500)], 200).bounds().last(),
            Some(&(400, Some(500)))
        );
    }

    #[test]
    fn missing_cuts_the_gaps_and_runs_on_to_the_end() {
        let open = Ranges::missing(&[(0, 1000)], 500, 1000);
        assert_eq!(open.bounds(), [(0, Some(500)), (500, None)]);
        assert_eq!(open.mark(0, 500), 500);
        assert_eq!(open.mark(1, 777), 777);
        // Short of two pieces: one range a gap.
        let few = Ranges::missing(&[(10, 20), (50, 100)], 500, 100);
        assert_eq!(few.bounds(), [(10, Some(20)), (50, None)]);
        // The tail is there already: a range of its own looks for the end.
        let tail = Ranges::missing(&[(0, 400), (600, 1100)], 300, 2000);
        assert_eq!(
            tail.bounds(),
            [
                (0, Some(300)),
                (300, Some(400)),
                (600, Some(900)),
                (900, Some(1100)),
                (2000, None)
            ]
        );
        tail.mark(1, 350);
        tail.mark(2, 900);
        assert_eq!(tail.arrived(), [(300, 350), (600, 900)]);
        // Nothing missing: only the look for the end.
        assert_eq!(Ranges::missing(&[], 300, 70).bounds(), [(70, None)]);
    }
}

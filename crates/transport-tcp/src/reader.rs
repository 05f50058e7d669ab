//! The reader task: large reads into buffers sized so that no frame is ever moved,
//! frames split off without copying, replies handed to their waiters a batch at a time,
//! every other frame to the application's [`Unsolicited`](crate::Unsolicited) queue.

use core::sync::atomic::Ordering;
use core::time::Duration;
use std::io;
use std::sync::Arc;

use futures::FutureExt;

use bytes::{BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use volley_proto::wire::frame::{Decoder, HEADER_LEN};

use crate::error::Error;
use crate::frames::Frame;
use crate::shared::Shared;
use crate::stats::Counters;

/// Read buffers kept for reuse while frames split from them are still alive.
const SPARE_BUFFERS: usize = 16;
/// Reads of `read_chunk` each buffer takes before the largest frame's room.
const READS_PER_BUFFER: usize = 4;

/// A malformed frame, or, in place of the first frame, a TLS record: a TLS peer on a
/// stream that expects frames is told apart from a broken one.
fn protocol(e: volley_proto::wire::Error, first: bool, bytes: &[u8]) -> Error {
    if first && volley_proto::wire::frame::looks_like_tls(bytes) {
        Error::PeerSpeaksTls
    } else {
        Error::Protocol(e)
    }
}

pub(crate) async fn run<R: AsyncRead + Unpin>(
    mut reader: R,
    shared: Arc<Shared>,
    incoming: mpsc::Sender<Frame>,
) {
    let config = shared.config;
    // The first frame may be held to a smaller limit (a handshake); the rest to the
    // largest frame.
    let mut decoder = Decoder::new(config.first_frame_max.unwrap_or(config.max_frame_len));
    let mut first = config.first_frame_max.is_some();
    let mut buffers = Buffers::new(
        config.read_chunk,
        config.first_frame_max.unwrap_or(config.max_frame_len),
    );
    let mut ending = shared.ending.subscribe();
    Counters::add(&shared.counters.read_buffers, 1);
    let mut paused = shared.paused.subscribe();
    let spin_here = crate::writer::current_thread();
    let mut gate = SpinGate::default();
    // Frames nobody waits for go to `incoming` while the application holds it.
    let mut incoming = Some(incoming);
    loop {
        // The owner may change the limit (before a handshake settles it): it holds from
        // the next frame on.
        if !first && buffers.max_frame != shared.max_frame_len() {
            buffers.max_frame = shared.max_frame_len();
            decoder = Decoder::new(buffers.max_frame);
        }
        let current = match decoder.frame_len(&buffers.current) {
            Ok(total) => total,
            Err(e) => return shared.fail(protocol(e, first, &buffers.current)),
        };
        let plan = buffers.plan(current);
        if plan.fresh {
            Counters::add(&shared.counters.read_buffers, 1);
        }
        Counters::add(&shared.counters.bytes_moved, plan.moved as u64);
        // Paused by the owner: wait until resumed (or every handle is gone, or the
        // connection is ending).
        let is_paused = *paused.borrow_and_update();
        if is_paused {
            tokio::select! {
                resumed = paused.wait_for(|p| !*p).map(|r| r.is_ok()) => if !resumed { return },
                () = ending.wait_for(|e| *e).map(drop) => return linger(&mut reader, &shared).await,
            }
        }
        let read = async {
            let mut limited = (&mut buffers.current).limit(plan.limit);
            if let Some(spin) = config.spin.filter(|_| spin_here && gate.open()) {
                let (n, waited) = spin_read(&mut reader, &mut limited, spin, &shared).await;
                gate.spent(waited, spin);
                if let Some(n) = n {
                    return n;
                }
            }
            reader.read_buf(&mut limited).await
        };
        let read = async {
            match config.idle_timeout {
                Some(idle) => tokio::time::timeout(idle, read).await.map_err(|_| idle),
                None => Ok(read.await),
            }
        };
        let n = tokio::select! {
            n = read => n,
            () = ending.wait_for(|e| *e).map(drop) => return linger(&mut reader, &shared).await,
        };
        let got = match n {
            Ok(n) => n,
            Err(idle) => {
                return shared.fail(Error::Timeout {
                    what: "a byte from an idle peer".into(),
                    after: idle,
                });
            }
        };
        let got = match got {
            Ok(0) => return shared.fail(Error::Closed),
            Ok(got) => got,
            Err(e) => return shared.fail(e.into()),
        };
        Counters::add(&shared.counters.reads, 1);
        let mut frames = 0;
        loop {
            let (ty, id, used) = match decoder.decode(&buffers.current) {
                Ok(Some((frame, used))) => (frame.ty, frame.id, used),
                Ok(None) => break,
                Err(e) => return shared.fail(protocol(e, first, &buffers.current)),
            };
            frames += 1;
            if first {
                // The handshake is in: later frames may be as large as any.
                first = false;
                buffers.max_frame = shared.max_frame_len();
                decoder = Decoder::new(buffers.max_frame);
            }
            let buf = &mut buffers.current;
            let mut frame = buf.split_to(used).freeze();
            let body = frame.split_off(HEADER_LEN);
            Counters::add(&shared.counters.frames_received, 1);
            let Some(frame) = shared.deliver(Frame { ty, id, body }) else {
                continue;
            };
            match &incoming {
                Some(tx) => match tx.send(frame).await {
                    Ok(()) => Counters::add(&shared.counters.incoming, 1),
                    Err(_) => {
                        incoming = None;
                        Counters::add(&shared.counters.unmatched, 1);
                    }
                },
                None => Counters::add(&shared.counters.unmatched, 1),
            }
        }
        if let Some(spin) = config.spin {
            gate.earned(frames, got, spin);
        }
    }
}

/// Bytes a closing connection reads and throws away while it waits for the peer's end
/// of stream (so that its close is not a reset that could destroy the reason it sent).
const LINGER_BYTES: usize = 256 * 1024;

/// The connection is ending both ways: discard what the peer still sends until its end
/// of stream, for at most [`Config::linger`](crate::Config::linger) and
/// [`LINGER_BYTES`], then end (dropping the read half).
async fn linger<R: AsyncRead + Unpin>(reader: &mut R, shared: &Shared) {
    let mut scratch = [0u8; 4096];
    let mut left = LINGER_BYTES;
    let drain = async {
        while left > 0 {
            match reader.read(&mut scratch).await {
                Ok(0) | Err(_) => return,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(shared.config.linger, drain).await;
    shared.fail(Error::Shutdown);
}

/// Reads that go straight to sleep once spinning rests.
const RESTING_READS: u32 = 128;

/// Bytes read that pay for a quarter of a spin, as a whole frame does.
const BULK_READ: usize = 16 * 1024;

/// Whether the reader spins before its next read. Spinning pays when what comes brings
/// work (a reply to what was just written, a batch of calls): it saves a wake-up per
/// read. A trickle of bytes brings next to none, and each spin burns most of the gap
/// between them. So the time spun is a debt: the whole spin when nothing came, the wait
/// when something did, except for the first read after this end wrote (that is the
/// answer spinning waits for, however long the peer took to make it, and a peer can buy
/// at most one such read per write of ours). Each whole frame read pays a quarter of a
/// spin of the debt, and so does each [`BULK_READ`] of bytes (a large frame arrives over
/// many reads, none with a whole frame, and spinning between them is what keeps its
/// transfer fast); past two spins' worth of debt, the next [`RESTING_READS`] reads sleep
/// at once, then spinning is tried again. Credit is kept up to four spins' worth, so a
/// busy stretch pays for its end. A peer sending a little at a time thus costs a wake-up
/// per read, not a spinning thread.
#[derive(Debug, Default)]
struct SpinGate {
    /// Microseconds spun beyond what the frames read paid for (negative: credit).
    debt: i64,
    resting: u32,
}

impl SpinGate {
    fn open(&mut self) -> bool {
        if self.resting > 0 {
            self.resting -= 1;
            return false;
        }
        true
    }

    /// Notes how long a spin waited (`None`: it gave up after the whole spin).
    fn spent(&mut self, waited_us: Option<u64>, spin: Duration) {
        let spin = spin.as_micros() as i64;
        let waited = waited_us.map_or(spin, |w| i64::try_from(w).unwrap_or(i64::MAX));
        self.debt = self.debt.saturating_add(waited.min(spin));
    }

    /// Notes the whole frames and the bytes a read brought, and rests spinning if they do
    /// not pay.
    fn earned(&mut self, frames: u64, bytes: usize, spin: Duration) {
        let spin = spin.as_micros() as i64;
        let paying = frames.saturating_add((bytes / BULK_READ) as u64);
        let credit = i64::try_from(paying)
            .unwrap_or(i64::MAX)
            .saturating_mul(spin / 4);
        self.debt = self.debt.saturating_sub(credit).max(-4 * spin);
        if self.debt > 2 * spin {
            self.debt = 0;
            self.resting = RESTING_READS;
        }
    }
}

/// Polls the stream until `spin` has passed since the later of this call and the
/// writer's last write, yielding between polls: to the runtime (its other tasks, and its
/// poll of the sockets), and every [`YIELD_THREAD_EVERY`] polls to other threads.
/// Returns what a read got (`None` if nothing came) and, if it got something, the
/// microseconds of waiting to charge to the spin (none if this end wrote during the
/// spin). A read future dropped while pending has taken nothing, so trying again is
/// safe.
async fn spin_read<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut impl BufMut,
    spin: Duration,
    shared: &Shared,
) -> (Option<io::Result<usize>>, Option<u64>) {
    let spin = spin.as_micros() as u64;
    let start = shared.now_us();
    Counters::add(&shared.counters.spins, 1);
    let spun = |now: u64| {
        let waited = now.saturating_sub(start);
        Counters::add(&shared.counters.spun_us, waited);
        waited
    };
    let mut polls = 0u32;
    loop {
        if let Some(n) = reader.read_buf(buf).now_or_never() {
            let waited = spun(shared.now_us());
            // The answer to a write of ours is not charged (see `SpinGate`).
            let asked = shared.last_write.load(Ordering::Relaxed) > start;
            return (Some(n), Some(if asked { 0 } else { waited }));
        }
        let now = shared.now_us();
        let since = start.max(shared.last_write.load(Ordering::Relaxed));
        if now.saturating_sub(since) >= spin {
            spun(now);
            return (None, None);
        }
        polls += 1;
        if polls % YIELD_THREAD_EVERY == 0 {
            std::thread::yield_now();
        }
        tokio::task::yield_now().await;
    }
}

/// Polls of a spin per offer of the CPU to other threads (`sched_yield`): every poll
/// yields to the runtime, every this many to the OS too. Yielding the thread at every poll
/// makes each poll a system call more, which sequential calls feel; never yielding it
/// starves a peer that shares this CPU and must run to answer. (The measurements that
/// chose four are in the commit that set it.)
const YIELD_THREAD_EVERY: u32 = 4;

/// What the next read may take, and what making room for it cost.
#[derive(Debug, PartialEq, Eq)]
struct Plan {
    /// Most bytes to read.
    limit: usize,
    /// A new buffer was allocated.
    fresh: bool,
    /// Bytes of a partial frame moved to another buffer.
    moved: usize,
}

/// The buffer being read into, and earlier ones that frames (still held by callers) were
/// split from. A buffer whose frames are all dropped is reused as it is: a fresh
/// allocation would cost a page fault per page on its first read, which on a bulk
/// download was a fifth of the client's time.
///
/// The rule that keeps frames where they land: a read of up to `chunk` bytes starts
/// only if the buffer has room after it for the largest frame, so every frame that
/// starts in a read ends in the same buffer. Near a buffer's end, a frame already begun
/// is read to its end (or its header to its end) and no further; at the next frame
/// boundary, reading moves to a buffer with room, and nothing is carried over.
struct Buffers {
    current: BytesMut,
    spare: Vec<BytesMut>,
    chunk: usize,
    /// The largest frame.
    max_frame: usize,
}

impl Buffers {
    fn new(chunk: usize, max_frame: usize) -> Self {
        let mut buffers = Self {
            current: BytesMut::new(),
            spare: Vec::with_capacity(SPARE_BUFFERS),
            chunk,
            max_frame,
        };
        buffers.current = BytesMut::with_capacity(buffers.size());
        buffers
    }

    /// The capacity of a buffer: a few reads and the largest frame.
    fn size(&self) -> usize {
        self.chunk * READS_PER_BUFFER + self.max_frame
    }

    /// Room for a whole read followed by the largest frame.
    fn room_for_a_read(&self) -> usize {
        self.chunk + self.max_frame
    }

    /// Decides the next read. `frame` is the length of the partial frame at the front
    /// of the unread bytes, if its header has come.
    fn plan(&mut self, frame: Option<usize>) -> Plan {
        let have = self.current.len();
        let room = self.current.capacity();
        // Room for a full read, and for the frame begun, if any.
        if room - have >= self.room_for_a_read() && frame.is_none_or(|total| room >= total) {
            return self.read(self.chunk, false, 0);
        }
        match frame {
            // A frame begun that fits: read up to its end and no further.
            Some(total) if room >= total => self.read(total - have, false, 0),
            // A header begun (it fits: a read started only with room for a frame).
            None if have > 0 && room >= HEADER_LEN => self.read(HEADER_LEN - have, false, 0),
            // At a frame boundary (or a stream that broke the rule above): on to a
            // buffer with room.
            _ => {
                let need = self.room_for_a_read().max(frame.unwrap_or(0));
                if have == 0 && self.current.try_reclaim(need) {
                    return self.read(self.chunk, false, 0);
                }
                let reused = self.reclaim_spare(need);
                let fresh = reused.is_none();
                let mut next =
                    reused.unwrap_or_else(|| BytesMut::with_capacity(need.max(self.size())));
                next.extend_from_slice(&self.current);
                let mut old = core::mem::replace(&mut self.current, next);
                old.clear();
                if self.spare.len() < SPARE_BUFFERS {
                    self.spare.push(old);
                }
                self.read(self.chunk, fresh, have)
            }
        }
    }

    fn read(&self, limit: usize, fresh: bool, moved: usize) -> Plan {
        Plan {
            limit: limit.max(1),
            fresh,
            moved,
        }
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
    fn reads_that_bring_work_keep_spinning_and_a_trickle_rests_it() {
        let spin = Duration::from_micros(250);
        let mut gate = SpinGate::default();
        // Replies within a round trip, one frame each, with a burst's end now and then;
        // then batches of 64 calls that come late in the spin: always spinning.
        for i in 0..10_000 {
            assert!(gate.open(), "spin {i}");
            gate.spent((i % 20 != 0).then_some(30), spin);
            gate.earned(1, 8, spin);
        }
        for i in 0..10_000 {
            assert!(gate.open(), "batch {i}");
            gate.spent(Some(200), spin);
            gate.earned(64, 64 * 24, spin);
        }
        // A large frame over many reads, none holding a whole frame, each a while after
        // the last: the bytes pay, so it spins all the way.
        for i in 0..10_000 {
            assert!(gate.open(), "bulk read {i}");
            gate.spent(Some(60), spin);
            gate.earned(u64::from(i % 64 == 63), 64 * 1024, spin);
        }
        // A byte every 200 us, a whole frame every tenth read: a few spins, then a rest.
        let mut gate = SpinGate::default();
        let (mut spins, mut reads) = (0, 0);
        for i in 0..10_000 {
            reads += 1;
            if gate.open() {
                spins += 1;
                gate.spent(Some(200), spin);
            }
            gate.earned(u64::from(i % 10 == 0), 1, spin);
        }
        assert!(spins * 10 < reads, "{spins} spins in {reads} reads");
        assert!(spins > 0, "spinning is tried again after a rest");
    }

    /// Reads `n` bytes of `byte` as a read planned now would (up to its limit).
    fn fill(buffers: &mut Buffers, plan: &Plan, n: usize, byte: u8) {
        assert!(
            n <= plan.limit,
            "a read of {n} past the plan's {}",
            plan.limit
        );
        buffers.current.put_bytes(byte, n);
    }

    #[test]
    fn a_buffer_is_reused_once_its_frames_are_dropped() {
        let mut buffers = Buffers::new(1024, 1024);
        let first = buffers.current.as_ptr();
        // Fill the first buffer with frames held by a caller, up to its last read.
        let mut held = Vec::new();
        while buffers.current.capacity() >= buffers.room_for_a_read() {
            let plan = buffers.plan(None);
            fill(&mut buffers, &plan, 1024, 1);
            held.push(buffers.current.split().freeze());
        }
        // At a boundary without room: another buffer, nothing moved.
        let plan = buffers.plan(None);
        assert_eq!((plan.fresh, plan.moved), (true, 0));
        assert_ne!(buffers.current.as_ptr(), first);
        fill(&mut buffers, &plan, 10, 2);
        let frame = buffers.current.split().freeze();
        // Its frames gone, the first buffer comes back when the second runs out.
        drop(held);
        while buffers.current.capacity() >= buffers.room_for_a_read() {
            let plan = buffers.plan(None);
            fill(&mut buffers, &plan, 1024, 3);
            let _ = buffers.current.split();
        }
        let plan = buffers.plan(None);
        assert_eq!((plan.fresh, plan.moved), (false, 0));
        assert_eq!(buffers.current.as_ptr(), first);
        assert_eq!(frame[..], [2; 10]);
    }

    #[test]
    fn a_frame_begun_near_the_end_is_read_to_its_end_and_never_moved() {
        let mut buffers = Buffers::new(1000, 5000);
        // Reads until one more full read is allowed, and no more after it.
        while buffers.current.capacity() >= buffers.room_for_a_read() + 1000 {
            let plan = buffers.plan(None);
            fill(&mut buffers, &plan, 1000, 0);
            let _ = buffers.current.split();
        }
        // The last full read ends with 3 bytes of a 4000-byte frame's header; then come
        // the rest of the header, then exactly the frame's remainder.
        let plan = buffers.plan(None);
        assert_eq!(plan.limit, 1000);
        fill(&mut buffers, &plan, 997, 0);
        let _ = buffers.current.split();
        fill(&mut buffers, &plan, 3, 9);
        let plan = buffers.plan(None);
        assert_eq!(plan.limit, HEADER_LEN - 3);
        fill(&mut buffers, &plan, HEADER_LEN - 3, 9);
        let plan = buffers.plan(Some(4000));
        assert_eq!((plan.limit, plan.moved), (4000 - HEADER_LEN, 0));
        fill(&mut buffers, &plan, 4000 - HEADER_LEN, 9);
        let whole = buffers.current.split();
        assert_eq!(whole.len(), 4000);
        // The next frame starts in a buffer with room.
        let plan = buffers.plan(None);
        assert_eq!((plan.limit, plan.moved), (1000, 0));
        assert!(buffers.current.capacity() >= buffers.room_for_a_read());
    }

    #[test]
    fn spares_are_bounded() {
        let mut buffers = Buffers::new(64, 64);
        let mut alive = Vec::new();
        for _ in 0..200 {
            let plan = buffers.plan(None);
            fill(&mut buffers, &plan, 64, 0);
            alive.push(buffers.current.split().freeze());
        }
        assert!(buffers.spare.len() <= SPARE_BUFFERS);
    }
}

//! The board's logic, with no sockets: what a request does to the board's state (memory,
//! sver, read, write, fill, iptag TTO, the transient-tag pool, loss) and what it answers,
//! at an instant the caller gives.

use core::cmp::Reverse;
use core::net::SocketAddr;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::collections::BinaryHeap;
use std::sync::{Mutex, MutexGuard};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;
use volley_proto::wire::scp::{
    self, Command, DataType, MAX_DATAGRAM_LEN, ReplyRepr, RequestRepr, ReturnCode, TtoInfo,
    Version, VersionInfo,
};
use volley_proto::wire::sdp::{self, Address};

use crate::board::BoardConfig;
use crate::memory::Memory;

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: BoardConfig,
    pub(crate) state: Mutex<State>,
    pub(crate) requests: AtomicU64,
    pub(crate) replies: AtomicU64,
    pub(crate) error_replies: AtomicU64,
    pub(crate) dropped_no_tag: AtomicU64,
    pub(crate) dropped_oversize: AtomicU64,
    pub(crate) dropped_malformed: AtomicU64,
    pub(crate) replies_lost: AtomicU64,
}

#[derive(Debug)]
pub(crate) struct State {
    pub(crate) memory: Memory,
    pub(crate) tto: u8,
    /// When each transient tag frees; `None` = free.
    pub(crate) tags: Vec<Option<Instant>>,
    pub(crate) rng: StdRng,
}

/// What the board does with one request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Reply with these many bytes of the output buffer after `delay`.
    Reply { len: usize, delay: Duration },
    /// Nothing to send.
    Silent,
}

/// Replies waiting for their time, earliest first.
#[derive(Debug)]
pub(crate) struct Schedule<T: Ord> {
    heap: BinaryHeap<Reverse<(Instant, u64, T)>>,
    order: u64,
}

impl Shared {
    pub(crate) fn new(config: BoardConfig) -> Self {
        Self {
            state: Mutex::new(State {
                memory: Memory::new(config.memory_budget),
                tto: config.tto,
                tags: vec![None; usize::from(config.pool_size)],
                rng: StdRng::seed_from_u64(config.seed),
            }),
            config,
            requests: AtomicU64::new(0),
            replies: AtomicU64::new(0),
            error_replies: AtomicU64::new(0),
            dropped_no_tag: AtomicU64::new(0),
            dropped_oversize: AtomicU64::new(0),
            dropped_malformed: AtomicU64::new(0),
            replies_lost: AtomicU64::new(0),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave memory half-written in a way that
        // matters to an emulator; carry on with the data.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Handles one request, writing any reply into `out`. Checks as SC&MP does:
    /// oversize datagrams dropped, a short SDP part answered with `RC_LEN`, unknown
    /// commands `RC_CMD`, bad arguments `RC_ARG`.
    pub(crate) fn handle(
        &self,
        state: &mut State,
        request: &[u8],
        out: &mut [u8; MAX_DATAGRAM_LEN],
    ) -> Action {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if request.len() > MAX_DATAGRAM_LEN {
            self.dropped_oversize.fetch_add(1, Ordering::Relaxed);
            return Action::Silent;
        }
        let Ok(parsed) = RequestRepr::parse(request) else {
            // Under 24 bytes of SDP: RC_LEN, if there is a sequence number to echo.
            let Ok(packet) = scp::Packet::new_checked(request) else {
                self.dropped_malformed.fetch_add(1, Ordering::Relaxed);
                return Action::Silent;
            };
            let header = sdp::Repr::parse(&packet.sdp());
            let reply = ReplyRepr {
                sdp: header.reply(),
                rc: ReturnCode::LEN,
                seq: packet.seq(),
                body: &[],
            };
            return self.reply(&reply, out, Duration::ZERO, header.flags.reply_expected());
        };
        let mut dest = parsed.sdp.dest;
        if (dest.x, dest.y) == (255, 255) {
            // The Ethernet-attached chip answers for "whichever chip you are".
            (dest.x, dest.y) = (0, 0);
        }
        let config = &self.config;
        let hops = u32::from(dest.x) + u32::from(dest.y);
        let delay = config.processing_delay + config.hop_latency * hops;
        let wants_reply = parsed.sdp.flags.reply_expected();
        if dest.x >= config.width || dest.y >= config.height {
            return self.reply(&parsed.reply(ReturnCode::ROUTE), out, delay, wants_reply);
        }
        let mut body = [0u8; scp::MAX_DATA_LEN + 12];
        let (rc, body_len) = execute(state, &parsed, dest, &mut body);
        let reply = ReplyRepr {
            body: &body[..body_len],
            ..parsed.reply(rc)
        };
        self.reply(&reply, out, delay, wants_reply)
    }

    fn reply(
        &self,
        reply: &ReplyRepr<'_>,
        out: &mut [u8; MAX_DATAGRAM_LEN],
        delay: Duration,
        wanted: bool,
    ) -> Action {
        if !wanted {
            return Action::Silent;
        }
        if reply.rc != ReturnCode::OK {
            self.error_replies.fetch_add(1, Ordering::Relaxed);
        }
        match reply.emit(out) {
            Ok(len) => Action::Reply { len, delay },
            Err(_) => Action::Silent,
        }
    }
}

/// Runs one parsed request against the board state; returns the return code and the
/// reply body written into `body`.
fn execute(
    state: &mut State,
    request: &RequestRepr<'_>,
    chip: Address,
    body: &mut [u8],
) -> (ReturnCode, usize) {
    match request.cmd {
        Command::SVER => {
            let info = VersionInfo {
                core: chip,
                phys_cpu: chip.cpu,
                buffer_size: scp::MAX_DATA_LEN as u16,
                build_date: 0,
                name: "SC&MP/SpiNNaker",
                version: Version::Semantic {
                    major: 4,
                    minor: 0,
                    patch: 0,
                },
            };
            match info.emit(body) {
                Ok(n) => (ReturnCode::OK, n),
                Err(_) => (ReturnCode::BUF, 0),
            }
        }
        Command::READ => match request.transfer_args() {
            Ok((address, len, ty)) if aligned(address, len, ty) => {
                match state.memory.read(chip.x, chip.y, address, &mut body[..len]) {
                    Ok(()) => (ReturnCode::OK, len),
                    Err(refused) => (refused.code(), 0),
                }
            }
            _ => (ReturnCode::ARG, 0),
        },
        Command::WRITE => match request.transfer_args() {
            Ok((address, len, ty)) if aligned(address, len, ty) && len == request.data.len() => {
                match state.memory.write(chip.x, chip.y, address, request.data) {
                    Ok(()) => (ReturnCode::OK, 0),
                    Err(refused) => (refused.code(), 0),
                }
            }
            _ => (ReturnCode::ARG, 0),
        },
        Command::FILL => {
            let [address, value, len] = request.args;
            if address % 4 != 0 || len % 4 != 0 {
                return (ReturnCode::ARG, 0);
            }
            match state.memory.fill(chip.x, chip.y, address, value, len) {
                Ok(()) => (ReturnCode::OK, 0),
                Err(refused) => (refused.code(), 0),
            }
        }
        Command::IPTAG if request.args[0] >> 16 == scp::IPTAG_TTO => {
            let info = TtoInfo {
                fixed_tags: 8,
                pool_size: state.tags.len() as u8,
                record_size: 32,
                tto: state.tto,
            };
            // 0..=15 sets the timeout; anything larger only queries it.
            if let code @ 0..=15 = request.args[1] {
                state.tto = code as u8;
            }
            let out = info.to_body();
            body[..4].copy_from_slice(&out);
            (ReturnCode::OK, 4)
        }
        Command::IPTAG => (ReturnCode::ARG, 0),
        _ => (ReturnCode::CMD, 0),
    }
}

/// SC&MP moves words and halfwords only at matching alignment.
fn aligned(address: u32, len: usize, ty: DataType) -> bool {
    let unit = match ty {
        DataType::Byte => 1,
        DataType::Short => 2,
        DataType::Word => 4,
    };
    address % unit == 0 && len % unit as usize == 0
}

impl State {
    /// Takes a free transient tag until `until`; `false` if all are taken.
    fn take_tag(&mut self, now: Instant, until: Instant) -> bool {
        match self
            .tags
            .iter_mut()
            .find(|t| t.is_none_or(|busy| busy <= now))
        {
            Some(tag) => {
                *tag = Some(until);
                true
            }
            None => false,
        }
    }

    fn tto_duration(&self) -> Option<Duration> {
        scp::tto_millis(self.tto).map(Duration::from_millis)
    }
}

impl<T: Ord> Default for Schedule<T> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            order: 0,
        }
    }
}

impl<T: Ord> Schedule<T> {
    pub(crate) fn push(&mut self, at: Instant, item: T) {
        self.order += 1;
        self.heap.push(Reverse((at, self.order, item)));
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    pub(crate) fn next_at(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<T> {
        if self.next_at()? > now {
            return None;
        }
        self.heap.pop().map(|Reverse((_, _, item))| item)
    }
}

/// Handles one datagram that arrived at `now`: takes a transient tag for its reply (dropping the request if
/// none is free) and returns the length of a reply to send now, or schedules a delayed
/// one.
pub(crate) fn on_datagram(
    shared: &Shared,
    now: Instant,
    datagram: &[u8],
    from: SocketAddr,
    out: &mut [u8; MAX_DATAGRAM_LEN],
    delayed: &mut Schedule<(Vec<u8>, SocketAddr)>,
) -> Option<usize> {
    let mut state = shared.lock();
    let Action::Reply { len, delay } = shared.handle(&mut state, datagram, out) else {
        return None;
    };
    let lost =
        shared.config.reply_loss > 0.0 && state.rng.random_bool(shared.config.reply_loss.min(1.0));
    // The tag is held until the reply leaves or, if the reply is lost, until the
    // transient-tag timeout frees it (code 0: never).
    let hold = if lost {
        state
            .tto_duration()
            .map_or(now + Duration::from_secs(86_400 * 365), |t| now + delay + t)
    } else {
        now + delay
    };
    if !state.take_tag(now, hold) {
        shared.dropped_no_tag.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    if lost {
        shared.replies_lost.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    if delay.is_zero() {
        Some(len)
    } else {
        delayed.push(now + delay, (out[..len].to_vec(), from));
        None
    }
}

/// The board's request handling with no sockets, for fuzzing (`--features fuzzing`).
#[cfg(feature = "fuzzing")]
#[derive(Debug)]
pub struct Handler {
    shared: Shared,
    delayed: Schedule<(Vec<u8>, SocketAddr)>,
}

#[cfg(feature = "fuzzing")]
impl Handler {
    /// A board with these settings (checked as [`Board::bind`] checks them).
    pub fn new(config: BoardConfig) -> std::io::Result<Self> {
        config.check()?;
        Ok(Self {
            shared: Shared::new(config),
            delayed: Schedule::default(),
        })
    }

    /// Answers one datagram as the board would: the reply's bytes, or `None` (no reply
    /// wanted, dropped, or delayed).
    pub fn handle(&mut self, datagram: &[u8]) -> Option<Vec<u8>> {
        let mut out = [0u8; MAX_DATAGRAM_LEN];
        let from = SocketAddr::from(([127, 0, 0, 1], 1));
        let len = on_datagram(
            &self.shared,
            Instant::now(),
            datagram,
            from,
            &mut out,
            &mut self.delayed,
        )?;
        Some(out[..len].to_vec())
    }

    /// Bytes of written memory held.
    pub fn memory_bytes(&self) -> usize {
        self.shared.lock().memory.held_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SDRAM_BASE;

    fn encode(request: &RequestRepr<'_>) -> Vec<u8> {
        let mut bytes = vec![0u8; request.buffer_len()];
        request.emit(&mut bytes).unwrap();
        bytes
    }

    /// Handles `request` at `now` and returns the return code of an immediate reply.
    fn rc(shared: &Shared, now: Instant, request: &RequestRepr<'_>) -> Option<ReturnCode> {
        let mut out = [0u8; MAX_DATAGRAM_LEN];
        let mut delayed = Schedule::default();
        let from = SocketAddr::from(([127, 0, 0, 1], 9));
        let len = on_datagram(shared, now, &encode(request), from, &mut out, &mut delayed)?;
        Some(ReplyRepr::parse(&out[..len]).unwrap().rc)
    }

    #[test]
    fn requests_get_the_codes_scamp_gives_without_a_socket() {
        let shared = Shared::new(BoardConfig::default());
        let now = Instant::now();
        let chip = Address::core(1, 1, 0);
        let write = scp::write_request(chip, SDRAM_BASE, &[1, 2, 3, 4]).unwrap();
        assert_eq!(rc(&shared, now, &write), Some(ReturnCode::OK));
        let outside = scp::read_request(chip, 0x1000, 4).unwrap();
        assert_eq!(rc(&shared, now, &outside), Some(ReturnCode::ARG));
        let far = scp::read_request(Address::core(9, 0, 0), SDRAM_BASE, 4).unwrap();
        assert_eq!(rc(&shared, now, &far), Some(ReturnCode::ROUTE));
        let unaligned_fill = scp::fill_request(chip, SDRAM_BASE + 2, 0, 8);
        assert_eq!(rc(&shared, now, &unaligned_fill), Some(ReturnCode::ARG));
        let unknown = RequestRepr {
            cmd: Command(99),
            ..scp::sver_request(chip)
        };
        assert_eq!(rc(&shared, now, &unknown), Some(ReturnCode::CMD));
        let mut word = [0u8; 4];
        shared
            .lock()
            .memory
            .read(1, 1, SDRAM_BASE, &mut word)
            .unwrap();
        assert_eq!(word, [1, 2, 3, 4]);
    }

    #[test]
    fn the_tag_pool_drops_requests_beyond_it_until_a_tag_frees() {
        let config = BoardConfig {
            processing_delay: Duration::from_millis(10),
            ..BoardConfig::default()
        };
        let shared = Shared::new(config);
        let t0 = Instant::now();
        let sver = scp::sver_request(Address::core(0, 0, 0));
        // Each delayed reply holds a tag for 10 ms: 8 fit, the 9th is dropped.
        for _ in 0..8 {
            assert_eq!(rc(&shared, t0, &sver), None);
        }
        assert_eq!(shared.dropped_no_tag.load(Ordering::Relaxed), 0);
        assert_eq!(rc(&shared, t0, &sver), None);
        assert_eq!(shared.dropped_no_tag.load(Ordering::Relaxed), 1);
        // At 10 ms the tags are free again.
        assert_eq!(rc(&shared, t0 + Duration::from_millis(10), &sver), None);
        assert_eq!(shared.dropped_no_tag.load(Ordering::Relaxed), 1);
    }
}

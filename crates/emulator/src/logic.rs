//! The boards' logic, with no sockets: which board a request is for, the transient-tag
//! pool, loss, and what the answer costs in time, at an instant the caller gives (what
//! each command does is in `answer`).

use core::cmp::Reverse;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;
use std::collections::BinaryHeap;
use std::sync::{Mutex, MutexGuard};

use rand::Rng;
use std::time::Instant;
use volley_proto::scp::machine::Geometry;
use volley_proto::scp::sdp::{self, Address};
use volley_proto::scp::{self, MAX_DATAGRAM_LEN, ReplyRepr, RequestRepr, ReturnCode};

use crate::answer::execute;
use crate::config::{BoardConfig, BoardStats};
use crate::state::State;

/// One board's state and counters. Its transient tags are taken only by the task that
/// serves its socket; its memory is also reached by the other boards' tasks, for
/// requests they forward to its chips.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    /// Set by `stop_board`: the board answers nothing, and requests forwarded to its
    /// chips fail as SC&MP's P2P does when a destination dies.
    pub(crate) stopped: AtomicBool,
    pub(crate) requests: AtomicU64,
    pub(crate) replies: AtomicU64,
    pub(crate) error_replies: AtomicU64,
    pub(crate) dropped_no_tag: AtomicU64,
    pub(crate) dropped_no_buffer: AtomicU64,
    pub(crate) dropped_oversize: AtomicU64,
    pub(crate) dropped_malformed: AtomicU64,
    pub(crate) replies_lost: AtomicU64,
}

/// Which chips exist and which board answers for each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// One board whose chips fill a `width` x `height` box (what rig's tests drive).
    Box { width: u8, height: u8 },
    /// A machine of SpiNN-5 boards, as SpiNNMan discovers it.
    Machine(Geometry),
}

/// Every board of an emulated machine (one, for a [`Board`](crate::Board)), with the
/// settings they share.
#[derive(Debug)]
pub(crate) struct Fabric {
    pub(crate) config: BoardConfig,
    pub(crate) layout: Layout,
    /// Each board's Ethernet IP address, as its chips report it.
    pub(crate) ips: Vec<[u8; 4]>,
    pub(crate) boards: Vec<Shared>,
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
    fn new(config: &BoardConfig, seed: u64) -> Self {
        Self {
            state: Mutex::new(State::new(config, seed)),
            stopped: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            replies: AtomicU64::new(0),
            error_replies: AtomicU64::new(0),
            dropped_no_tag: AtomicU64::new(0),
            dropped_no_buffer: AtomicU64::new(0),
            dropped_oversize: AtomicU64::new(0),
            dropped_malformed: AtomicU64::new(0),
            replies_lost: AtomicU64::new(0),
        }
    }

    /// The counters so far.
    pub(crate) fn stats(&self) -> BoardStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        BoardStats {
            requests: get(&self.requests),
            replies: get(&self.replies),
            error_replies: get(&self.error_replies),
            dropped_no_tag: get(&self.dropped_no_tag),
            dropped_no_buffer: get(&self.dropped_no_buffer),
            dropped_oversize: get(&self.dropped_oversize),
            dropped_malformed: get(&self.dropped_malformed),
            replies_lost: get(&self.replies_lost),
            memory_bytes: self.lock().memory.held_bytes() as u64,
        }
    }

    /// Copies `len` bytes of chip (`x`, `y`)'s SDRAM from `address`, or `None` outside
    /// it (the length is checked before anything is allocated).
    pub(crate) fn read_memory(&self, x: u8, y: u8, address: u32, len: usize) -> Option<Vec<u8>> {
        if len > crate::SDRAM_SIZE as usize {
            return None;
        }
        let mut out = vec![0; len];
        let memory = &self.lock().memory;
        memory.read(x, y, address, &mut out).ok().map(|()| out)
    }

    /// Counts a reply sent.
    pub(crate) fn count_reply(&self) {
        self.replies.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave memory half-written in a way that
        // matters to an emulator; carry on with the data.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
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

impl Fabric {
    /// One board whose chips fill the config's box.
    pub(crate) fn single(config: BoardConfig) -> Self {
        let layout = Layout::Box {
            width: config.width,
            height: config.height,
        };
        Self::new(config, layout, vec![[127, 0, 0, 1]])
    }

    /// A machine of `geometry`'s boards, board `i` reporting `ips[i]`.
    pub(crate) fn new(config: BoardConfig, layout: Layout, ips: Vec<[u8; 4]>) -> Self {
        let boards = (0..ips.len() as u64)
            .map(|i| Shared::new(&config, config.seed.wrapping_add(i)))
            .collect();
        Self {
            config,
            layout,
            ips,
            boards,
        }
    }

    /// The machine the chips' system variables, P2P tables and chip info describe: the
    /// machine's, or for one board of SpiNN-5's 8 x 8 box a machine of that one board (so
    /// a host discovers a plain board as it discovers a machine).
    pub(crate) fn geometry(&self) -> Option<Geometry> {
        match self.layout {
            Layout::Machine(geometry) => Some(geometry),
            Layout::Box {
                width: 8,
                height: 8,
            } => Geometry::for_boards(1).ok(),
            Layout::Box { .. } => None,
        }
    }

    /// Board `index`'s Ethernet chip, where its requests enter the machine.
    fn ethernet(&self, index: usize) -> (u8, u8) {
        match self.layout {
            Layout::Box { .. } => (0, 0),
            Layout::Machine(geometry) => geometry.ethernet(index).unwrap_or((0, 0)),
        }
    }

    /// The board that owns chip (`x`, `y`) and the P2P hops from board `index`'s
    /// Ethernet chip to it, or `None` if there is no such chip.
    fn locate(&self, index: usize, x: u8, y: u8) -> Option<(usize, u32)> {
        match self.layout {
            Layout::Box { width, height } => {
                (x < width && y < height).then_some((0, u32::from(x) + u32::from(y)))
            }
            Layout::Machine(geometry) => {
                let owner = geometry.board_of(x, y)?;
                Some((owner, geometry.hops(self.ethernet(index), (x, y))))
            }
        }
    }

    /// Handles one request that arrived at board `index`, writing any reply into
    /// `out`. Checks as SC&MP does: oversize datagrams dropped, a short SDP part
    /// answered with `RC_LEN`, a chip that does not exist `RC_ROUTE`, unknown commands
    /// `RC_CMD`, bad arguments `RC_ARG`. A request for another board's chip is carried
    /// out on that board, as SpiNNaker forwards it over its inter-board links, and pays
    /// the extra hops.
    pub(crate) fn handle(
        &self,
        index: usize,
        request: &[u8],
        out: &mut [u8; MAX_DATAGRAM_LEN],
    ) -> Action {
        match self.route(index, request, out) {
            Ok(routed) => self.answer(index, &routed, None, out),
            Err(action) => action,
        }
    }

    /// Counts a request that arrived at board `index` and parses it, once: where it
    /// goes, or (`Err`) what is done with one that cannot go anywhere (dropped, or
    /// answered `RC_LEN` into `out`).
    fn route<'a>(
        &self,
        index: usize,
        request: &'a [u8],
        out: &mut [u8; MAX_DATAGRAM_LEN],
    ) -> Result<Routed<'a>, Action> {
        let board = &self.boards[index];
        board.requests.fetch_add(1, Ordering::Relaxed);
        if request.len() > MAX_DATAGRAM_LEN {
            board.dropped_oversize.fetch_add(1, Ordering::Relaxed);
            return Err(Action::Silent);
        }
        let Ok(parsed) = RequestRepr::parse(request) else {
            // Under 24 bytes of SDP: RC_LEN, if there is a sequence number to echo.
            let Ok(packet) = scp::Packet::new_checked(request) else {
                board.dropped_malformed.fetch_add(1, Ordering::Relaxed);
                return Err(Action::Silent);
            };
            let header = sdp::Repr::parse(&packet.sdp());
            let reply = ReplyRepr {
                sdp: header.reply(),
                rc: ReturnCode::LEN,
                seq: packet.seq(),
                body: &[],
            };
            return Err(board.reply(&reply, out, Duration::ZERO, header.flags.reply_expected()));
        };
        let mut dest = parsed.sdp.dest;
        (dest.x, dest.y) = root_for_any(dest.x, dest.y);
        let place = self.locate(index, dest.x, dest.y);
        Ok(Routed {
            parsed,
            dest,
            place,
        })
    }

    /// Answers a routed request at board `index`: `RC_ROUTE` if its chip does not
    /// exist, `refused` without carrying it out if given, else carried out on the board
    /// that owns the chip (`RC_P2P_TIMEOUT` if that board is stopped).
    fn answer(
        &self,
        index: usize,
        routed: &Routed<'_>,
        refused: Option<ReturnCode>,
        out: &mut [u8; MAX_DATAGRAM_LEN],
    ) -> Action {
        let board = &self.boards[index];
        let Routed {
            parsed,
            dest,
            place,
        } = routed;
        let wants_reply = parsed.sdp.flags.reply_expected();
        let config = &self.config;
        let Some((owner, hops)) = *place else {
            let delay = config.processing_delay;
            return board.reply(&parsed.reply(ReturnCode::ROUTE), out, delay, wants_reply);
        };
        let mut body = [0u8; scp::MAX_DATA_LEN + 12];
        let (rc, body_len, delay) = match refused {
            Some(rc) => (rc, 0, config.processing_delay),
            None => {
                let delay = config.processing_delay + config.hop_latency * hops;
                if self.boards[owner].stopped.load(Ordering::Relaxed) {
                    (ReturnCode::P2P_TIMEOUT, 0, delay)
                } else {
                    let mut state = self.boards[owner].lock();
                    let (geometry, ip) = (self.geometry(), self.ips[owner]);
                    let (rc, len) = execute(geometry, ip, &mut state, parsed, *dest, &mut body);
                    (rc, len, delay)
                }
            }
        };
        let mut reply = ReplyRepr {
            body: &body[..body_len],
            ..parsed.reply(rc)
        };
        // The reply comes from the chip that answered, not from "whichever chip".
        (reply.sdp.src.x, reply.sdp.src.y) = (dest.x, dest.y);
        board.reply(&reply, out, delay, wants_reply)
    }
}

/// A request that parsed: its chip ((255, 255) made the root chip), and the board that
/// owns the chip with the hops to it from the board it came in by (`None`: no such chip).
pub(crate) struct Routed<'a> {
    parsed: RequestRepr<'a>,
    dest: Address,
    place: Option<(usize, u32)>,
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

/// SC&MP sends (255, 255) to the root chip, through whichever board it came in by
/// (`scamp-3.c`, `proc_route_msg`).
fn root_for_any(x: u8, y: u8) -> (u8, u8) {
    if (x, y) == (255, 255) { (0, 0) } else { (x, y) }
}

/// What to do with one datagram's reply.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Send these many bytes of the output buffer now.
    Now(usize),
    /// Send these many bytes of the output buffer at this instant.
    At(Instant, usize),
    /// Send nothing: no reply wanted, dropped, or lost.
    Nothing,
}

/// Handles one datagram that arrived at board `index` at `now`: drops it if every
/// transient tag is taken (before it does anything, as SC&MP frees the packet) or, with
/// SC&MP's costs on, every message buffer; else waits its turn at the monitor, crosses
/// the P2P hops to its chip (or is refused `RC_P2P_BUSY` if that chip's streams are all
/// taken), is carried out, and holds a tag (and a buffer) until its reply leaves.
pub(crate) fn on_datagram(
    fabric: &Fabric,
    index: usize,
    now: Instant,
    datagram: &[u8],
    out: &mut [u8; MAX_DATAGRAM_LEN],
) -> Outcome {
    let board = &fabric.boards[index];
    if board.stopped.load(Ordering::Relaxed) {
        return Outcome::Nothing;
    }
    let costs = fabric.config.scamp;
    // Only this board's serving task takes its tags and its monitor's slots, so what is
    // found free here stays free until the request below has run.
    let mut ready = {
        let mut state = board.lock();
        let slot = match (state.has_free_tag(now), &costs) {
            (false, _) => Err(&board.dropped_no_tag),
            (true, None) => Ok(now),
            (true, Some(costs)) => state
                .monitor
                .admit(costs, now)
                .ok_or(&board.dropped_no_buffer),
        };
        match slot {
            Ok(ready) => ready,
            Err(counter) => {
                board.requests.fetch_add(1, Ordering::Relaxed);
                counter.fetch_add(1, Ordering::Relaxed);
                return Outcome::Nothing;
            }
        }
    };
    let action = match fabric.route(index, datagram, out) {
        Err(action) => action,
        Ok(routed) => {
            let mut refused = None;
            if let (Some(costs), Some((owner, hops))) = (&costs, routed.place) {
                if hops > 0 {
                    let chip = (routed.dest.x, routed.dest.y);
                    let mut state = fabric.boards[owner].lock();
                    match state.streams.forward(costs, chip, ready, hops) {
                        None => refused = Some(ReturnCode::P2P_BUSY),
                        Some(until) => {
                            drop(state);
                            if !costs.p2p_monitor.is_zero() {
                                // The Ethernet chip's monitor passes it on all the while.
                                board.lock().monitor.busy_until(until);
                            }
                            ready = until;
                        }
                    }
                }
            }
            fabric.answer(index, &routed, refused, out)
        }
    };
    let Action::Reply { len, delay } = action else {
        return Outcome::Nothing;
    };
    let at = ready + delay;
    let mut state = board.lock();
    let loss = fabric.config.reply_loss;
    let lost = loss > 0.0 && state.rng.random_bool(loss.min(1.0));
    // The tag is held until the reply leaves or, if the reply is lost, until the
    // transient-tag timeout frees it (code 0: never).
    let hold = if lost {
        state
            .tto_duration()
            .map_or(now + Duration::from_secs(86_400 * 365), |t| at + t)
    } else {
        at
    };
    state.take_tag(now, hold);
    if costs.is_some() {
        state.monitor.hold(at);
    }
    drop(state);
    if lost {
        board.replies_lost.fetch_add(1, Ordering::Relaxed);
        Outcome::Nothing
    } else if at <= now {
        Outcome::Now(len)
    } else {
        Outcome::At(at, len)
    }
}

/// The board's request handling with no sockets, for fuzzing (`--features fuzzing`).
#[cfg(feature = "fuzzing")]
#[derive(Debug)]
pub struct Handler {
    fabric: Fabric,
}

#[cfg(feature = "fuzzing")]
impl Handler {
    /// A board with these settings (checked as [`Board::bind`] checks them).
    pub fn new(config: BoardConfig) -> std::io::Result<Self> {
        config.check()?;
        Ok(Self {
            fabric: Fabric::single(config),
        })
    }

    /// Answers one datagram as the board would: the reply's bytes, or `None` (no reply
    /// wanted, dropped, or delayed).
    pub fn handle(&mut self, datagram: &[u8]) -> Option<Vec<u8>> {
        let mut out = [0u8; MAX_DATAGRAM_LEN];
        match on_datagram(&self.fabric, 0, Instant::now(), datagram, &mut out) {
            Outcome::Now(len) => Some(out[..len].to_vec()),
            Outcome::At(..) | Outcome::Nothing => None,
        }
    }

    /// Bytes of written memory held.
    pub fn memory_bytes(&self) -> usize {
        self.fabric.boards[0].lock().memory.held_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SDRAM_BASE;
    use crate::costs::ScampCosts;
    use volley_proto::scp::Command;
    use volley_proto::scp::sdp::Address;

    fn encode(request: &RequestRepr<'_>) -> Vec<u8> {
        let mut bytes = vec![0u8; request.buffer_len()];
        request.emit(&mut bytes).unwrap();
        bytes
    }

    /// Handles `request` at `now` and returns the return code of an immediate reply.
    fn rc(fabric: &Fabric, now: Instant, request: &RequestRepr<'_>) -> Option<ReturnCode> {
        match outcome(fabric, now, request) {
            (Outcome::Now(_), Some(rc)) => Some(rc),
            _ => None,
        }
    }

    /// Handles `request` at `now`: what happens to its reply, and the reply's code.
    fn outcome(
        fabric: &Fabric,
        now: Instant,
        request: &RequestRepr<'_>,
    ) -> (Outcome, Option<ReturnCode>) {
        let mut out = [0u8; MAX_DATAGRAM_LEN];
        let outcome = on_datagram(fabric, 0, now, &encode(request), &mut out);
        let rc = match outcome {
            Outcome::Now(len) | Outcome::At(_, len) => {
                Some(ReplyRepr::parse(&out[..len]).unwrap().rc)
            }
            Outcome::Nothing => None,
        };
        (outcome, rc)
    }

    /// A board of 16 tags with SC&MP's costs: a monitor time of 100 us, the P2P times
    /// given, `streams` a chip and `buffers` a board.
    fn costly(p2p_hop: Duration, p2p_monitor: Duration, streams: u8, buffers: u16) -> BoardConfig {
        BoardConfig {
            pool_size: 16,
            scamp: Some(ScampCosts {
                service: Duration::from_micros(100),
                p2p_hop,
                p2p_monitor,
                streams,
                buffers,
            }),
            ..BoardConfig::default()
        }
    }

    #[test]
    fn scamp_costs_queue_at_the_monitor_hold_p2p_streams_and_run_out_of_buffers() {
        let config = costly(Duration::from_millis(1), Duration::ZERO, 2, 5);
        let t0 = Instant::now();
        let us = Duration::from_micros;
        // The Ethernet chip: one request at a time, 100 us each.
        let fabric = Fabric::single(config.clone());
        let sver = scp::sver_request(Address::core(0, 0, 0));
        for i in 1..=3 {
            assert_eq!(
                outcome(&fabric, t0, &sver),
                (Outcome::At(t0 + us(100 * i), 48), Some(ReturnCode::OK))
            );
        }
        // Two more fill the five buffers; the sixth is dropped.
        outcome(&fabric, t0, &sver);
        outcome(&fabric, t0, &sver);
        assert_eq!(outcome(&fabric, t0, &sver).0, Outcome::Nothing);
        assert_eq!(
            fabric.boards[0].dropped_no_buffer.load(Ordering::Relaxed),
            1
        );

        // Chip (2, 1), two hops away over P2P: two streams, then RC_P2P_BUSY.
        let fabric = Fabric::single(config);
        let far = scp::read_request(Address::core(2, 1, 0), SDRAM_BASE, 4).unwrap();
        let (first, rc) = outcome(&fabric, t0, &far);
        assert_eq!(
            (first, rc),
            (
                Outcome::At(t0 + us(100) + us(3000), 18),
                Some(ReturnCode::OK)
            )
        );
        outcome(&fabric, t0, &far);
        let (busy, rc) = outcome(&fabric, t0, &far);
        assert_eq!(
            (busy, rc),
            (Outcome::At(t0 + us(300), 14), Some(ReturnCode::P2P_BUSY))
        );
    }

    #[test]
    fn in_the_monitors_model_p2p_requests_hold_both_monitors() {
        let config = costly(Duration::from_micros(1), Duration::from_micros(600), 8, 32);
        let t0 = Instant::now();
        let us = Duration::from_micros;
        let fabric = Fabric::single(config);
        // Chip (2, 1), three hops (as in the per-hop test): the monitor's 100 us, then
        // 600 us at both monitors and 3 us of hops.
        let far = scp::read_request(Address::core(2, 1, 0), SDRAM_BASE, 4).unwrap();
        assert_eq!(
            outcome(&fabric, t0, &far),
            (Outcome::At(t0 + us(703), 18), Some(ReturnCode::OK))
        );
        // Another chip's request waits for the Ethernet monitor the first still holds.
        let other = scp::read_request(Address::core(1, 0, 0), SDRAM_BASE, 4).unwrap();
        assert_eq!(
            outcome(&fabric, t0, &other),
            (
                Outcome::At(t0 + us(703 + 100 + 601), 18),
                Some(ReturnCode::OK)
            )
        );
        // So does a request for the Ethernet chip itself.
        let sver = scp::sver_request(Address::core(0, 0, 0));
        assert_eq!(
            outcome(&fabric, t0, &sver),
            (Outcome::At(t0 + us(1404 + 100), 48), Some(ReturnCode::OK))
        );
    }

    #[test]
    fn requests_get_the_codes_scamp_gives_without_a_socket() {
        let shared = Fabric::single(BoardConfig::default());
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
        shared.boards[0]
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
        let shared = Fabric::single(config);
        let t0 = Instant::now();
        let sver = scp::sver_request(Address::core(0, 0, 0));
        // Each delayed reply holds a tag for 10 ms: 8 fit, the 9th is dropped.
        for _ in 0..8 {
            assert_eq!(rc(&shared, t0, &sver), None);
        }
        assert_eq!(shared.boards[0].dropped_no_tag.load(Ordering::Relaxed), 0);
        assert_eq!(rc(&shared, t0, &sver), None);
        assert_eq!(shared.boards[0].dropped_no_tag.load(Ordering::Relaxed), 1);
        // At 10 ms the tags are free again.
        assert_eq!(rc(&shared, t0 + Duration::from_millis(10), &sver), None);
        assert_eq!(shared.boards[0].dropped_no_tag.load(Ordering::Relaxed), 1);
    }
}

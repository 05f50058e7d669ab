//! [`EmulatedMachine`]: many emulated SpiNN-5 boards that answer as one SpiNNaker machine, each
//! on its own address, every one answering for every chip.

use core::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use core::sync::atomic::Ordering;
use std::io;
use std::sync::Arc;

use tokio::net::UdpSocket;
use tokio::task::JoinHandle;
use volley_proto::scp::PORT;
use volley_proto::scp::machine::Geometry;

use crate::board::{first_to_stop, shut_down};
use crate::config::{BoardConfig, BoardStats};
use crate::logic::{Fabric, Layout};
use crate::pacer::Pacer;
use crate::serve::serve_udp;

/// Settings of an emulated machine.
#[derive(Clone, Debug, PartialEq)]
pub struct MachineConfig {
    /// Boards: 1, or three per triad in a rectangle of triads
    /// ([`Geometry::for_boards`]).
    pub boards: usize,
    /// Board `i` binds `base + i` (carrying into higher octets).
    pub base: Ipv4Addr,
    /// The port every board binds: SpiNNaker's 17893 by default, which SpiNNMan always
    /// uses; 0 gives each board a free port of its own (for clients that take a port).
    pub port: u16,
    /// Board `i` reports `report_base + i` as its Ethernet IP address (to the host's
    /// discovery) instead of its own address, so that a host reaches each board through
    /// a relay there (`volley netsim --boards`).
    pub report_base: Option<Ipv4Addr>,
    /// Each board's settings: delays, loss, its transient tags, its memory budget.
    /// `width` and `height` are not used (a board is SpiNN-5's 48 chips), and `spin`
    /// should stay zero unless each board has a thread of its own: every board's socket
    /// is served by a task, and a spinning task holds its thread.
    pub board: BoardConfig,
}

impl Default for MachineConfig {
    /// Three boards at 127.0.1.0, 127.0.1.1 and 127.0.1.2, port 17893, no spin.
    fn default() -> Self {
        Self {
            boards: 3,
            base: Ipv4Addr::new(127, 0, 1, 0),
            port: PORT,
            report_base: None,
            board: BoardConfig {
                spin: core::time::Duration::ZERO,
                ..BoardConfig::default()
            },
        }
    }
}

/// A running emulated machine.
#[derive(Debug)]
pub struct EmulatedMachine {
    geometry: Geometry,
    addrs: Vec<SocketAddr>,
    fabric: Arc<Fabric>,
    tasks: Vec<JoinHandle<io::Result<()>>>,
}

/// Board `i`'s address from `base`, or `None` past the end of IPv4.
fn nth(base: Ipv4Addr, i: usize) -> Option<Ipv4Addr> {
    let i = u32::try_from(i).ok()?;
    u32::from(base).checked_add(i).map(Ipv4Addr::from)
}

impl EmulatedMachine {
    /// Checks the settings, binds every board's socket and starts serving.
    pub async fn bind(config: MachineConfig) -> io::Result<Self> {
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
        let geometry = Geometry::for_boards(config.boards).map_err(|e| invalid(e.to_string()))?;
        config.board.check()?;
        let past_the_end = |base: Ipv4Addr| {
            invalid(format!(
                "{} boards from {base} run past 255.255.255.255",
                config.boards
            ))
        };
        let last = config.boards - 1;
        nth(config.base, last).ok_or_else(|| past_the_end(config.base))?;
        let report = config.report_base.unwrap_or(config.base);
        nth(report, last).ok_or_else(|| past_the_end(report))?;
        let mut sockets = Vec::with_capacity(config.boards);
        let mut addrs = Vec::with_capacity(config.boards);
        let mut clones = Vec::with_capacity(config.boards);
        for i in 0..config.boards {
            let ip = nth(config.base, i).ok_or_else(|| past_the_end(config.base))?;
            let addr = SocketAddr::V4(SocketAddrV4::new(ip, config.port));
            let socket = std::net::UdpSocket::bind(addr).map_err(|e| {
                io::Error::new(e.kind(), format!("board {i} cannot bind {addr}: {e}"))
            })?;
            socket.set_nonblocking(true)?;
            clones.push(socket.try_clone()?);
            let socket = UdpSocket::from_std(socket)?;
            addrs.push(socket.local_addr()?);
            sockets.push(socket);
        }
        let ips = (0..config.boards)
            .map(|i| nth(report, i).map_or([0; 4], |ip| ip.octets()))
            .collect();
        let fabric = Arc::new(Fabric::new(config.board, Layout::Machine(geometry), ips));
        let pacer = Arc::new(Pacer::start(fabric.clone(), clones));
        let tasks = sockets
            .into_iter()
            .enumerate()
            .map(|(i, socket)| tokio::spawn(serve_udp(socket, fabric.clone(), pacer.clone(), i)))
            .collect();
        Ok(Self {
            geometry,
            addrs,
            fabric,
            tasks,
        })
    }

    /// The machine's shape.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Where the root board (the one with chip (0, 0)) listens.
    pub fn root(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Where each board listens, board 0 first.
    pub fn board_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Board `board`'s counters, or `None` past the last board.
    pub fn stats(&self, board: usize) -> Option<BoardStats> {
        self.fabric.boards.get(board).map(|b| b.stats())
    }

    /// Stops board `board` answering, as if its SC&MP died: its socket stays open and
    /// takes requests but answers none, and requests other boards forward to its chips
    /// are answered `RC_P2P_TIMEOUT`. `false` past the last board.
    pub fn stop_board(&self, board: usize) -> bool {
        let Some(shared) = self.fabric.boards.get(board) else {
            return false;
        };
        shared.stopped.store(true, Ordering::Relaxed);
        true
    }

    /// Copies `len` bytes of chip (`x`, `y`)'s SDRAM from `address`, or `None` if there
    /// is no such chip or the range is outside its SDRAM.
    pub fn read_memory(&self, x: u8, y: u8, address: u32, len: usize) -> Option<Vec<u8>> {
        let board = self.geometry.board_of(x, y)?;
        self.fabric.boards[board].read_memory(x, y, address, len)
    }

    /// Waits until a board's serving task stops, which it does only when it fails, and
    /// says why.
    pub async fn stopped(&mut self) -> io::Error {
        first_to_stop(&mut self.tasks).await
    }

    /// Stops serving and waits for the tasks to end.
    pub async fn shutdown(mut self) {
        shut_down(&mut self.tasks).await;
    }
}

impl Drop for EmulatedMachine {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

//! [`Machine`]: one client for a SpiNNaker machine of many boards. Given the root
//! board's address it discovers the machine (its size, which chips are alive, each
//! board's Ethernet IP, every chip's summary), keeps one [`ScpClient`] per board, sends
//! each chip's requests through the board that chip is on, and runs every board's
//! window at once from the caller's task: a batch spread over the machine
//! ([`Machine::write_many`], [`Machine::read_many`]) moves at the sum of the boards'
//! rates, not one board's.
//!
//! - `discover`: the walk from the root board to the whole machine.
//!
//! # Example
//!
//! ```no_run
//! use volley_proto::scp::sdp::Address;
//! use volley_transport_udp::{Machine, ScpConfig};
//!
//! # async fn load() -> Result<(), volley_transport_udp::MachineError> {
//! let mut machine = Machine::discover("10.11.192.1:17893".parse().unwrap(), ScpConfig::default()).await?;
//! println!("{} boards, {} chips", machine.boards().len(), machine.chips().len());
//! let data = vec![7u8; 4096];
//! let writes: Vec<_> = machine
//!     .chips()
//!     .iter()
//!     .map(|&(x, y)| (Address::core(x, y, 0), 0x6000_0000, &data[..]))
//!     .collect();
//! machine.write_many(&writes).await?;
//! # Ok(())
//! # }
//! ```

mod discover;

use core::net::SocketAddr;
use core::time::Duration;

use futures::future::join_all;
use volley_proto::scp::machine::{ChipInfo, Geometry};
use volley_proto::scp::sdp::Address;

use crate::scp::client::{Op, ScpClient, ScpError, check_range};

/// One board of a discovered machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoardInfo {
    /// The board's number in the machine's geometry.
    pub index: usize,
    /// Its Ethernet chip.
    pub ethernet: (u8, u8),
    /// Where its SC&MP listens: the IP its Ethernet chip reports, on the root's port.
    pub addr: SocketAddr,
    /// Requests its window keeps in flight (its transient-tag pool).
    pub window: usize,
}

/// Why a machine operation failed: what went wrong, and on which board.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    /// An SCP operation through one board failed (the error names the command, chip and
    /// address).
    #[error("board {board} ({addr}): {source}")]
    Board {
        /// The board's number.
        board: usize,
        /// The board's address.
        addr: SocketAddr,
        /// What went wrong.
        #[source]
        source: ScpError,
    },
    /// The root's name or address does not resolve.
    #[error("cannot resolve `{root}`: {why}")]
    Resolve {
        /// The root as given.
        root: String,
        /// Why.
        why: String,
    },
    /// The machine answered discovery with something no SpiNN-5 machine says.
    #[error("discovery: {0}")]
    Discovery(String),
    /// A chip that is not in the machine, or not alive.
    #[error("chip ({x}, {y}) is not a live chip of this machine")]
    NoSuchChip {
        /// Its x.
        x: u8,
        /// Its y.
        y: u8,
    },
}

/// A discovered machine and a client per board.
#[derive(Debug)]
pub struct Machine {
    geometry: Geometry,
    boards: Vec<BoardInfo>,
    clients: Vec<ScpClient>,
    /// Every live chip, in the geometry's order, with its summary.
    chips: Vec<(u8, u8)>,
    infos: Vec<ChipInfo>,
    /// Each chip's board (an index into `boards`), by `x * height + y`; `u16::MAX` for a
    /// chip that is not alive.
    board_of: Vec<u16>,
    discovery: Duration,
}

/// Items of a batch grouped by board, each item keeping its index in the batch.
type Groups = Vec<Vec<usize>>;

/// Bytes of one item a batch sends before moving on to the next item of the same board:
/// four requests, the most spinnaker_tools #25 found worth keeping in flight to one chip
/// reached over P2P.
pub const STRIPE: usize = 4 * volley_proto::scp::MAX_DATA_LEN;

/// Interleaves items' pieces: the first piece of every item, then the second of every
/// item that has one, and so on; each piece with its chip and its own start address.
fn stripes<'a, P: AsRef<[u8]> + 'a>(
    items: impl Iterator<Item = (Address, u32, impl Iterator<Item = P> + 'a)>,
) -> impl Iterator<Item = (Address, u32, P)> + 'a {
    let mut items: Vec<_> = items.collect();
    let mut out = Vec::new();
    loop {
        let mut any = false;
        for (chip, address, pieces) in &mut items {
            if let Some(piece) = pieces.next() {
                let len = piece.as_ref().len() as u32;
                out.push((*chip, *address, piece));
                *address = address.wrapping_add(len);
                any = true;
            }
        }
        if !any {
            return out.into_iter();
        }
    }
}

impl Machine {
    /// The machine's shape.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Its boards, as discovered.
    pub fn boards(&self) -> &[BoardInfo] {
        &self.boards
    }

    /// Every live chip.
    pub fn chips(&self) -> &[(u8, u8)] {
        &self.chips
    }

    /// Each live chip's `CMD_INFO` summary, in the order of [`chips`](Self::chips).
    pub fn chip_infos(&self) -> &[ChipInfo] {
        &self.infos
    }

    /// How long discovery took, from nothing open to the machine known.
    pub fn discovery_time(&self) -> Duration {
        self.discovery
    }

    /// The board (an index into [`boards`](Self::boards)) whose Ethernet chip reaches
    /// (`x`, `y`).
    pub fn board_of(&self, x: u8, y: u8) -> Result<usize, MachineError> {
        let at = usize::from(x) * usize::from(self.geometry.height()) + usize::from(y);
        match self.board_of.get(at) {
            Some(&board) if board != u16::MAX && u16::from(y) < self.geometry.height() => {
                Ok(usize::from(board))
            }
            _ => Err(MachineError::NoSuchChip { x, y }),
        }
    }

    /// The client of the board that reaches (`x`, `y`), for operations
    /// [`Machine`] has no method for (a streamed write, one with progress).
    pub fn client_for(&mut self, x: u8, y: u8) -> Result<&mut ScpClient, MachineError> {
        let board = self.board_of(x, y)?;
        Ok(&mut self.clients[board])
    }

    fn fail(&self, board: usize) -> impl Fn(ScpError) -> MachineError + '_ {
        move |source| MachineError::Board {
            board: self.boards[board].index,
            addr: self.boards[board].addr,
            source,
        }
    }

    /// Reads `buf.len()` bytes from `address` on `chip`.
    pub async fn read(
        &mut self,
        chip: Address,
        address: u32,
        buf: &mut [u8],
    ) -> Result<(), MachineError> {
        let board = self.board_of(chip.x, chip.y)?;
        let result = self.clients[board].read(chip, address, buf).await;
        result.map_err(self.fail(board))
    }

    /// Writes `data` to `address` on `chip`.
    pub async fn write(
        &mut self,
        chip: Address,
        address: u32,
        data: &[u8],
    ) -> Result<(), MachineError> {
        let board = self.board_of(chip.x, chip.y)?;
        let result = self.clients[board].write(chip, address, data).await;
        result.map_err(self.fail(board))
    }

    /// Writes `len` bytes read in order from `source` to `address` on `chip`
    /// ([`ScpClient::write_from`]).
    pub async fn write_from(
        &mut self,
        chip: Address,
        address: u32,
        len: u32,
        source: &mut (dyn std::io::Read + Send),
    ) -> Result<(), MachineError> {
        let board = self.board_of(chip.x, chip.y)?;
        let result = self.clients[board]
            .write_from(chip, address, len, source)
            .await;
        result.map_err(self.fail(board))
    }

    /// Fills `len` bytes from `address` on `chip` with the word `value`.
    pub async fn fill(
        &mut self,
        chip: Address,
        address: u32,
        value: u32,
        len: u32,
    ) -> Result<(), MachineError> {
        let board = self.board_of(chip.x, chip.y)?;
        let result = self.clients[board].fill(chip, address, value, len).await;
        result.map_err(self.fail(board))
    }

    /// Asks `chip` for its software version, through its board.
    pub async fn sver(&mut self, chip: Address) -> Result<crate::SoftwareVersion, MachineError> {
        let board = self.board_of(chip.x, chip.y)?;
        let result = self.clients[board].sver(chip).await;
        result.map_err(self.fail(board))
    }

    /// Each board's client counters, in the order of [`boards`](Self::boards).
    pub fn stats(&self) -> Vec<crate::ClientStats> {
        self.clients.iter().map(ScpClient::stats).collect()
    }

    /// Each board's window, in the order of [`boards`](Self::boards).
    pub fn windows(&self) -> Vec<usize> {
        self.clients.iter().map(ScpClient::window_size).collect()
    }

    /// Groups the chips of a batch by board, checking each is alive first.
    /// Checks each item's chip is alive and its range fits the address space, before
    /// anything is sent.
    fn group(
        &self,
        items: impl Iterator<Item = (Address, u32, usize)>,
    ) -> Result<Groups, MachineError> {
        let mut groups = vec![Vec::new(); self.boards.len()];
        for (i, (chip, address, len)) in items.enumerate() {
            let board = self.board_of(chip.x, chip.y)?;
            check_range(address, len).map_err(self.fail(board))?;
            groups[board].push(i);
        }
        Ok(groups)
    }

    /// Writes every `(chip, address, data)` item, each board's items through that
    /// board's window, all boards at once. Within a board the items are interleaved
    /// [`STRIPE`] bytes at a time, so the window spreads over the board's chips and a
    /// chip reached over P2P has a few requests in flight, not the whole window, whenever
    /// there are other chips to spread over. Every board runs its items to the end even
    /// if another fails, so one dead board costs only its own chips' data; the first
    /// failure (in board order) is returned.
    pub async fn write_many(
        &mut self,
        items: &[(Address, u32, &[u8])],
    ) -> Result<(), MachineError> {
        self.write_many_with_progress(items, |_, _| {}).await
    }

    /// [`write_many`](Self::write_many), calling `progress(board, bytes)` with the bytes
    /// board `board` (an index into [`boards`](Self::boards)) has written so far, once per
    /// batch of its replies that completed any.
    pub async fn write_many_with_progress(
        &mut self,
        items: &[(Address, u32, &[u8])],
        progress: impl Fn(usize, u64),
    ) -> Result<(), MachineError> {
        let groups = self.group(items.iter().map(|&(c, a, d)| (c, a, d.len())))?;
        let progress = &progress;
        let runs =
            self.clients
                .iter_mut()
                .zip(groups)
                .enumerate()
                .map(|(board, (client, group))| {
                    let mut ops: Vec<Op<'_>> = stripes(group.iter().map(|&i| {
                        let (chip, address, data) = items[i];
                        (chip, address, data.chunks(STRIPE))
                    }))
                    .map(|(chip, address, data)| Op::Write {
                        chip,
                        address,
                        data,
                    })
                    .collect();
                    async move {
                        client
                            .execute_with_progress(&mut ops, |done| progress(board, done))
                            .await
                    }
                });
        let results = join_all(runs).await;
        self.first_failure(results)
    }

    /// Reads into every `(chip, address, buffer)` item, as
    /// [`write_many`](Self::write_many) writes.
    pub async fn read_many(
        &mut self,
        items: &mut [(Address, u32, &mut [u8])],
    ) -> Result<(), MachineError> {
        let groups = self.group(items.iter().map(|(c, a, b)| (*c, *a, b.len())))?;
        let mut per_board: Vec<Vec<(Address, u32, core::slice::ChunksMut<'_, u8>)>> =
            groups.iter().map(|g| Vec::with_capacity(g.len())).collect();
        let mut board_of_item = vec![0; items.len()];
        for (board, group) in groups.iter().enumerate() {
            for &i in group {
                board_of_item[i] = board;
            }
        }
        for (i, (chip, address, buf)) in items.iter_mut().enumerate() {
            per_board[board_of_item[i]].push((*chip, *address, buf.chunks_mut(STRIPE)));
        }
        let runs = self
            .clients
            .iter_mut()
            .zip(per_board)
            .map(|(client, items)| {
                let mut ops: Vec<Op<'_>> = stripes(items.into_iter())
                    .map(|(chip, address, buf)| Op::Read { chip, address, buf })
                    .collect();
                async move { client.execute(&mut ops).await }
            });
        let results = join_all(runs).await;
        self.first_failure(results)
    }

    fn first_failure(&self, results: Vec<Result<(), ScpError>>) -> Result<(), MachineError> {
        for (board, result) in results.into_iter().enumerate() {
            result.map_err(self.fail(board))?;
        }
        Ok(())
    }
}

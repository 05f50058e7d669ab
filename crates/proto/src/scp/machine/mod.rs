//! A SpiNNaker machine as the host sees it, with no IO: which chips exist, which board
//! each belongs to, where the Ethernet chips are, how far apart two chips are, and the
//! route a chip's P2P table gives to each other chip. Shared by the emulated machine
//! (which answers for it) and the host's machine client (which discovers it).
//!
//! A machine is one SpiNN-5 board (48 chips in an 8 x 8 box with two corners cut off,
//! no wrap-around) or a rectangle of triads: three boards tile a 12 x 12 torus, with
//! Ethernet chips at (0, 0), (4, 8) and (8, 4) of each triad, so every chip with
//! `x % 4 == 0` and `(x + y) % 12 == 0` is one. A chip's board is the one whose
//! Ethernet chip is nearest by the hexagonal metric, measured to the centre of the
//! board as SpiNNMachine's `SpiNNakerTriadGeometry` does (ties to the first in its
//! order), so the two agree on every chip.
//!
//! # Example
//!
//! ```
//! use volley_proto::scp::machine::Geometry;
//!
//! let machine = Geometry::for_boards(3).unwrap();
//! assert_eq!((machine.width(), machine.height()), (12, 12));
//! assert_eq!(machine.chips(), 144);
//! assert_eq!(machine.ethernet(1), Some((4, 8)));
//! assert_eq!(machine.board_of(5, 9), Some(1));
//! assert!(Geometry::for_boards(4).is_err());
//! ```

mod info;

pub use info::{
    CORES, ChipInfo, INFO_ARG, INFO_LEN, P2P_TABLE_BASE, P2P_TABLE_LEN, Route, SV_BASE, SV_LEN,
    chip_info_request, p2p_column_len, p2p_column_read, parse_p2p_column, sv,
};

use core::fmt;

/// Chips on one SpiNN-5 board.
pub const BOARD_CHIPS: usize = 48;
/// Chips across (and up) a triad of three boards.
pub const TRIAD: u8 = 12;
/// Most triads across or up: 21 x 12 = 252 chips still fits a chip coordinate's byte.
pub const MAX_TRIADS: u8 = 21;
/// The Ethernet chips of a triad, in the order boards are numbered within it.
pub const TRIAD_ETHERNETS: [(u8, u8); 3] = [(0, 0), (4, 8), (8, 4)];

/// The links out of a chip, in SpiNNaker's numbering (0 east .. 5 south), as (dx, dy).
pub const LINKS: [(i8, i8); 6] = [(1, 0), (1, 1), (0, 1), (-1, 0), (-1, -1), (0, -1)];

/// A machine's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Geometry {
    /// One SpiNN-5 board of 48 chips, no wrap-around.
    Board,
    /// `across` x `up` triads of three boards, a torus of `12 across` x `12 up` chips.
    Triads {
        /// Triads across (1..=[`MAX_TRIADS`]).
        across: u8,
        /// Triads up (1..=[`MAX_TRIADS`]).
        up: u8,
    },
}

/// A board count no machine of SpiNN-5 boards has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoardCountError {
    /// The count asked for.
    pub boards: usize,
}

impl fmt::Display for BoardCountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} boards is not a machine: a machine is 1 board, or 3 boards to a triad in \
             a rectangle of triads at most {MAX_TRIADS} a side: 1, 3, 6, 9, 12, 15, 18, 21, 24, \
             27, 30, 33, 36, 39, 42, 45, 48, ..., 1200, ..., {}",
            self.boards,
            3 * usize::from(MAX_TRIADS) * usize::from(MAX_TRIADS)
        )
    }
}

impl core::error::Error for BoardCountError {}

impl Geometry {
    /// The machine of `boards` boards: 1, or three per triad in the squarest rectangle
    /// of triads (wider than tall) that holds exactly that many, as spalloc allocates
    /// them. Any other count is an error that lists the ones that exist.
    pub fn for_boards(boards: usize) -> Result<Self, BoardCountError> {
        if boards == 1 {
            return Ok(Self::Board);
        }
        let error = BoardCountError { boards };
        if boards == 0 || boards % 3 != 0 {
            return Err(error);
        }
        let triads = boards / 3;
        let max = usize::from(MAX_TRIADS);
        // The tallest rectangle no taller than it is wide.
        (1..=max)
            .rev()
            .filter(|up| up * up <= triads && triads % up == 0 && triads / up <= max)
            .map(|up| Self::Triads {
                across: (triads / up) as u8,
                up: up as u8,
            })
            .next()
            .ok_or(error)
    }

    /// The machine whose system variables give `width` x `height` chips: 8 x 8 is one
    /// board, multiples of 12 a torus of triads; `None` for any other size (a machine
    /// of 12n + 4 chips without wrap-around is not modelled).
    pub fn from_size(width: u16, height: u16) -> Option<Self> {
        let t = u16::from(TRIAD);
        let triads = |size: u16| {
            (size % t == 0 && (1..=u16::from(MAX_TRIADS)).contains(&(size / t)))
                .then_some((size / t) as u8)
        };
        match (width, height) {
            (8, 8) => Some(Self::Board),
            _ => Some(Self::Triads {
                across: triads(width)?,
                up: triads(height)?,
            }),
        }
    }

    /// Boards in the machine.
    pub const fn boards(&self) -> usize {
        match *self {
            Self::Board => 1,
            Self::Triads { across, up } => 3 * across as usize * up as usize,
        }
    }

    /// Chips across (the machine's width as its system variables give it).
    pub const fn width(&self) -> u16 {
        match *self {
            Self::Board => 8,
            Self::Triads { across, .. } => across as u16 * TRIAD as u16,
        }
    }

    /// Chips up.
    pub const fn height(&self) -> u16 {
        match *self {
            Self::Board => 8,
            Self::Triads { up, .. } => up as u16 * TRIAD as u16,
        }
    }

    /// Chips in the machine.
    pub const fn chips(&self) -> usize {
        self.boards() * BOARD_CHIPS
    }

    /// Whether the machine wraps around (a torus) in both directions.
    pub const fn wraps(&self) -> bool {
        matches!(self, Self::Triads { .. })
    }

    /// Whether chip (`x`, `y`) exists.
    pub fn contains(&self, x: u8, y: u8) -> bool {
        if u16::from(x) >= self.width() || u16::from(y) >= self.height() {
            return false;
        }
        match self {
            // The board's hexagon: the 8 x 8 box less its top-left and bottom-right.
            Self::Board => y <= x + 3 && x <= y + 4,
            Self::Triads { .. } => true,
        }
    }

    /// The Ethernet chip of the board chip (`x`, `y`) is on, or `None` if there is no
    /// such chip.
    pub fn ethernet_of(&self, x: u8, y: u8) -> Option<(u8, u8)> {
        if !self.contains(x, y) {
            return None;
        }
        Some(match self {
            Self::Board => (0, 0),
            Self::Triads { .. } => {
                let (dx, dy) = OFFSETS[usize::from(y % TRIAD)][usize::from(x % TRIAD)];
                (
                    wrap(i32::from(x) - i32::from(dx), self.width()),
                    wrap(i32::from(y) - i32::from(dy), self.height()),
                )
            }
        })
    }

    /// Whether chip (`x`, `y`) is an Ethernet chip.
    pub fn is_ethernet(&self, x: u8, y: u8) -> bool {
        self.ethernet_of(x, y) == Some((x, y))
    }

    /// The board chip (`x`, `y`) is on: boards are numbered triad by triad (rows of
    /// triads from the bottom, each left to right), and within a triad in the order of
    /// [`TRIAD_ETHERNETS`].
    pub fn board_of(&self, x: u8, y: u8) -> Option<usize> {
        let (ex, ey) = self.ethernet_of(x, y)?;
        Some(match *self {
            Self::Board => 0,
            Self::Triads { across, .. } => {
                let triad = usize::from(ey / TRIAD) * usize::from(across) + usize::from(ex / TRIAD);
                let local = (ex % TRIAD, ey % TRIAD);
                let within = TRIAD_ETHERNETS.iter().position(|&e| e == local)?;
                triad * 3 + within
            }
        })
    }

    /// Board `board`'s Ethernet chip, or `None` past the last board.
    pub fn ethernet(&self, board: usize) -> Option<(u8, u8)> {
        if board >= self.boards() {
            return None;
        }
        Some(match *self {
            Self::Board => (0, 0),
            Self::Triads { across, .. } => {
                let triad = board / 3;
                let (ex, ey) = TRIAD_ETHERNETS[board % 3];
                let tx = (triad % usize::from(across)) as u8;
                let ty = (triad / usize::from(across)) as u8;
                (tx * TRIAD + ex, ty * TRIAD + ey)
            }
        })
    }

    /// Every chip, column by column (x, then y).
    pub fn iter_chips(&self) -> impl Iterator<Item = (u8, u8)> + '_ {
        (0..self.width()).flat_map(move |x| {
            (0..self.height())
                .map(move |y| (x as u8, y as u8))
                .filter(move |&(x, y)| self.contains(x, y))
        })
    }

    /// The chip over `link` (0..6) from (`x`, `y`), if there is one.
    pub fn neighbour(&self, x: u8, y: u8, link: usize) -> Option<(u8, u8)> {
        let (dx, dy) = *LINKS.get(link)?;
        let (nx, ny) = (i32::from(x) + i32::from(dx), i32::from(y) + i32::from(dy));
        let (nx, ny) = if self.wraps() {
            (wrap(nx, self.width()), wrap(ny, self.height()))
        } else {
            (u8::try_from(nx).ok()?, u8::try_from(ny).ok()?)
        };
        self.contains(nx, ny).then_some((nx, ny))
    }

    /// The links of (`x`, `y`) that lead to a chip, one bit per link.
    pub fn links(&self, x: u8, y: u8) -> u8 {
        (0..LINKS.len())
            .filter(|&link| self.neighbour(x, y, link).is_some())
            .fold(0, |bits, link| bits | 1 << link)
    }

    /// The shortest move from `from` to `to` as (dx, dy), wrapping where the machine
    /// does; on a hexagonal mesh a move costs `max(|dx|, |dy|)` links when dx and dy
    /// share a sign and `|dx| + |dy|` when they do not.
    fn shortest(&self, from: (u8, u8), to: (u8, u8)) -> (i32, i32) {
        let dx = i32::from(to.0) - i32::from(from.0);
        let dy = i32::from(to.1) - i32::from(from.1);
        if !self.wraps() {
            return (dx, dy);
        }
        let (w, h) = (i32::from(self.width()), i32::from(self.height()));
        let mut best = (dx, dy);
        for cx in [dx - w, dx, dx + w] {
            for cy in [dy - h, dy, dy + h] {
                if cost(cx, cy) < cost(best.0, best.1) {
                    best = (cx, cy);
                }
            }
        }
        best
    }

    /// Links a P2P packet crosses from `from` to `to`.
    pub fn hops(&self, from: (u8, u8), to: (u8, u8)) -> u32 {
        let (dx, dy) = self.shortest(from, to);
        cost(dx, dy)
    }

    /// The first step of a shortest route from `from` to `to`, as `from`'s P2P table
    /// holds it ([`Route::Monitor`] when they are the same chip, [`Route::None`] when
    /// either does not exist). Only whether a route exists is something SpiNNMan reads;
    /// the direction is a shortest path's first link, not SC&MP's exact choice.
    pub fn route(&self, from: (u8, u8), to: (u8, u8)) -> Route {
        if !self.contains(from.0, from.1) || !self.contains(to.0, to.1) {
            return Route::None;
        }
        let (dx, dy) = self.shortest(from, to);
        match (dx.signum(), dy.signum()) {
            (0, 0) => Route::Monitor,
            (1, 1) => Route::NorthEast,
            (-1, -1) => Route::SouthWest,
            (1, _) => Route::East,
            (-1, _) => Route::West,
            (_, 1) => Route::North,
            _ => Route::South,
        }
    }
}

/// Links crossed by a move of (dx, dy) on the hexagonal mesh.
fn cost(dx: i32, dy: i32) -> u32 {
    if (dx >= 0) == (dy >= 0) {
        dx.unsigned_abs().max(dy.unsigned_abs())
    } else {
        dx.unsigned_abs() + dy.unsigned_abs()
    }
}

fn wrap(v: i32, size: u16) -> u8 {
    v.rem_euclid(i32::from(size)) as u8
}

/// Where each chip of a triad sits relative to its board's Ethernet chip, by
/// `[y][x]`: worked out once, at compile time, so finding a chip's board is a table read.
const OFFSETS: [[(u8, u8); TRIAD as usize]; TRIAD as usize] = offsets();

const fn offsets() -> [[(u8, u8); TRIAD as usize]; TRIAD as usize] {
    let mut table = [[(0, 0); TRIAD as usize]; TRIAD as usize];
    let mut y = 0;
    while y < TRIAD {
        let mut x = 0;
        while x < TRIAD {
            table[y as usize][x as usize] = offset_from_ethernet(x, y);
            x += 1;
        }
        y += 1;
    }
    table
}

/// Where chip (`x`, `y`) of a triad sits relative to its board's Ethernet chip:
/// SpiNNMachine's rule, in tenths of a chip so it stays in integers. Each candidate
/// Ethernet chip (the triad's three and their copies one triad away) is measured to its
/// board's centre, 3.6 chips right and 3.4 up of it; the nearest wins, the first in
/// order on a tie.
const fn offset_from_ethernet(x: u8, y: u8) -> (u8, u8) {
    let t = TRIAD as i32;
    let (px, py) = (x as i32 * 10, y as i32 * 10);
    let shifts = [-t, 0, t];
    let mut best = (i32::MAX, (0, 0));
    let mut e = 0;
    while e < TRIAD_ETHERNETS.len() {
        let (ex, ey) = TRIAD_ETHERNETS[e];
        let mut i = 0;
        while i < 3 {
            let mut j = 0;
            while j < 3 {
                let (cx, cy) = (ex as i32 + shifts[i], ey as i32 + shifts[j]);
                let dx = px - (cx * 10 + 36);
                let dy = py - (cy * 10 + 34);
                let distance = max(max(dx.abs(), dy.abs()), (dx - dy).abs());
                if distance < best.0 {
                    best = (distance, (cx, cy));
                }
                j += 1;
            }
            i += 1;
        }
        e += 1;
    }
    let (cx, cy) = best.1;
    ((x as i32 - cx) as u8, (y as i32 - cy) as u8)
}

const fn max(a: i32, b: i32) -> i32 {
    if a > b { a } else { b }
}

#[cfg(test)]
mod tests;

//! What a chip tells the host about itself and the machine: the `CMD_INFO` chip summary,
//! the system variables at [`SV_BASE`], and the P2P routing table in the router's
//! registers at [`P2P_TABLE_BASE`], laid out as SC&MP keeps them (`scamp-cmd.c`
//! `cmd_info`, `sark.h`'s `sv_t`) and as SpiNNMan 7.4.1 reads them
//! (`chip_summary_info.py`, `system_variable_boot_values.py`, `p2p_table.py`).

use super::Geometry;
use crate::scp::sdp::Address;
use crate::scp::{Command, RequestRepr};
use crate::wire::cursor::Reader;
use crate::wire::{Error, Result};

/// Cores per chip (one monitor, seventeen for applications).
pub const CORES: usize = 18;
/// Where each chip's system variables (`sv_t`) start.
pub const SV_BASE: u32 = 0xf500_7f00;
/// Bytes of system variables.
pub const SV_LEN: usize = 256;
/// Where the router's P2P table starts: 3 bits per destination, 8 to a word, 32 words
/// (256 rows) per column, 256 columns.
pub const P2P_TABLE_BASE: u32 = 0xe101_0000;
/// Bytes of the P2P table.
pub const P2P_TABLE_LEN: u32 = 256 * 32 * 4;
/// `CMD_INFO`'s arg1 as SpiNNMan sends it: everything but the sizes.
pub const INFO_ARG: u32 = 0x5f;
/// Bytes of a `CMD_INFO` reply body: three words, 18 core states, the nearest Ethernet
/// chip, the IP address, the link towards the root chip.
pub const INFO_LEN: usize = 12 + CORES + 2 + 4 + 2;

/// Offsets of the system variables the emulated machine fills in (all others read as
/// zero).
pub mod sv {
    /// This chip's y.
    pub const Y: usize = 0x00;
    /// This chip's x.
    pub const X: usize = 0x01;
    /// Chips up the machine.
    pub const Y_SIZE: usize = 0x02;
    /// Chips across the machine.
    pub const X_SIZE: usize = 0x03;
    /// 1 when P2P routing is up.
    pub const P2P_ACTIVE: usize = 0x06;
    /// The nearest Ethernet chip's y.
    pub const NEAREST_ETHERNET_Y: usize = 0x08;
    /// The nearest Ethernet chip's x.
    pub const NEAREST_ETHERNET_X: usize = 0x09;
    /// 1 when this chip's Ethernet is up.
    pub const ETHERNET_UP: usize = 0x0b;
    /// The root chip's y.
    pub const P2P_ROOT_Y: usize = 0x2e;
    /// The root chip's x.
    pub const P2P_ROOT_X: usize = 0x2f;
    /// 1 on the root chip.
    pub const ROOT_CHIP: usize = 0x40;
    /// Physical-to-virtual core map, [`CORE_MAP_LEN`] bytes.
    pub const PHYS_TO_VIRT: usize = 0x94;
    /// Virtual-to-physical core map, [`CORE_MAP_LEN`] bytes.
    pub const VIRT_TO_PHYS: usize = 0xa8;
    /// Bytes of each core map.
    pub const CORE_MAP_LEN: usize = 20;
    /// Working cores.
    pub const WORKING_CORES: usize = 0xbc;
    /// Where SDRAM starts (a little-endian word).
    pub const SDRAM_BASE: usize = 0xc0;
    /// This chip's Ethernet IP address, four bytes, zero on other chips.
    pub const ETHERNET_IP: usize = 0xf0;
}

/// A direction in a P2P table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// Over link 0.
    East = 0,
    /// Over link 1.
    NorthEast = 1,
    /// Over link 2.
    North = 2,
    /// Over link 3.
    West = 3,
    /// Over link 4.
    SouthWest = 4,
    /// Over link 5.
    South = 5,
    /// No such chip.
    None = 6,
    /// This chip.
    Monitor = 7,
}

impl Route {
    /// The route a table entry's three bits hold.
    pub const fn from_bits(bits: u32) -> Self {
        match bits & 7 {
            0 => Self::East,
            1 => Self::NorthEast,
            2 => Self::North,
            3 => Self::West,
            4 => Self::SouthWest,
            5 => Self::South,
            6 => Self::None,
            _ => Self::Monitor,
        }
    }
}

/// A chip's `CMD_INFO` summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChipInfo {
    /// Working cores, the monitor included.
    pub cores: u8,
    /// Working links, one bit per link.
    pub links: u8,
    /// Multicast routing entries in the largest free block.
    pub free_routing_entries: u16,
    /// Whether this chip's Ethernet is up.
    pub ethernet_up: bool,
    /// Bytes in the largest free block of the SDRAM heap.
    pub largest_free_sdram: u32,
    /// Bytes in the largest free block of the system RAM heap.
    pub largest_free_sram: u32,
    /// Each core's state (SARK's `cpu_state_e`: 7 running, 15 idle).
    pub core_states: [u8; CORES],
    /// The nearest chip with Ethernet, (x, y).
    pub nearest_ethernet: (u8, u8),
    /// This chip's Ethernet IP address; all zeros on a chip without one.
    pub ip: [u8; 4],
    /// The P2P table's route from this chip towards the root chip, if it was sent.
    pub parent_link: Option<Route>,
}

/// SARK's core state for the monitor, running SC&MP.
const CORE_RUNNING: u8 = 7;
/// SARK's core state for a core waiting for an application.
const CORE_IDLE: u8 = 15;
/// Free multicast routing entries on a fresh chip (SpiNN-5's 1024, less SC&MP's own).
const FREE_ROUTING_ENTRIES: u16 = 1023;
/// Free system RAM on a fresh chip, as the emulated machine reports it.
const FREE_SRAM: u32 = 24 * 1024;

impl ChipInfo {
    /// The summary a chip of `geometry` gives: every core working and idle but the
    /// monitor, the links that lead to a chip, the nearest Ethernet chip, `ip` on an
    /// Ethernet chip, `sdram` bytes free.
    pub fn of(geometry: &Geometry, x: u8, y: u8, ip: [u8; 4], sdram: u32) -> Option<Self> {
        let nearest_ethernet = geometry.ethernet_of(x, y)?;
        let ethernet = nearest_ethernet == (x, y);
        let mut core_states = [CORE_IDLE; CORES];
        core_states[0] = CORE_RUNNING;
        Some(Self {
            cores: CORES as u8,
            links: geometry.links(x, y),
            free_routing_entries: FREE_ROUTING_ENTRIES,
            ethernet_up: ethernet,
            largest_free_sdram: sdram,
            largest_free_sram: FREE_SRAM,
            core_states,
            nearest_ethernet,
            ip: if ethernet { ip } else { [0; 4] },
            parent_link: Some(geometry.route((x, y), (0, 0))),
        })
    }

    /// The reply body SC&MP sends for `CMD_INFO`.
    pub fn emit(&self) -> [u8; INFO_LEN] {
        let mut out = [0u8; INFO_LEN];
        let flags = u32::from(self.cores & 0x1f)
            | u32::from(self.links & 0x3f) << 8
            | u32::from(self.free_routing_entries & 0x7ff) << 14
            | u32::from(self.ethernet_up) << 25;
        out[0..4].copy_from_slice(&flags.to_le_bytes());
        out[4..8].copy_from_slice(&self.largest_free_sdram.to_le_bytes());
        out[8..12].copy_from_slice(&self.largest_free_sram.to_le_bytes());
        out[12..30].copy_from_slice(&self.core_states);
        // The P2P address, y in the low byte.
        out[30] = self.nearest_ethernet.1;
        out[31] = self.nearest_ethernet.0;
        out[32..36].copy_from_slice(&self.ip);
        out[36] = self.parent_link.map_or(Route::None as u8, |r| r as u8);
        out
    }

    /// Decodes a `CMD_INFO` reply body (the link towards the root is optional, as
    /// SpiNNMan reads it).
    pub fn parse(body: &[u8]) -> Result<Self> {
        let mut r = Reader::new(body);
        let flags = r.u32_le("chip info flags")?;
        let largest_free_sdram = r.u32_le("chip info free SDRAM")?;
        let largest_free_sram = r.u32_le("chip info free SRAM")?;
        let mut core_states = [0u8; CORES];
        core_states.copy_from_slice(r.bytes(CORES, "chip info core states")?);
        let y = r.u8("chip info nearest Ethernet")?;
        let x = r.u8("chip info nearest Ethernet")?;
        let mut ip = [0u8; 4];
        ip.copy_from_slice(r.bytes(4, "chip info IP address")?);
        let parent_link = match r.u16_le("chip info parent link") {
            Ok(bits) if bits < 6 => Some(Route::from_bits(u32::from(bits))),
            _ => None,
        };
        Ok(Self {
            cores: (flags & 0x1f) as u8,
            links: (flags >> 8 & 0x3f) as u8,
            free_routing_entries: (flags >> 14 & 0x7ff) as u16,
            ethernet_up: flags >> 25 & 1 == 1,
            largest_free_sdram,
            largest_free_sram,
            core_states,
            nearest_ethernet: (x, y),
            ip,
            parent_link,
        })
    }
}

impl Geometry {
    /// Chip (`x`, `y`)'s system variables, with `ip` on an Ethernet chip and SDRAM from
    /// `sdram_base`, or `None` if there is no such chip.
    pub fn system_variables(
        &self,
        x: u8,
        y: u8,
        ip: [u8; 4],
        sdram_base: u32,
    ) -> Option<[u8; SV_LEN]> {
        let (ex, ey) = self.ethernet_of(x, y)?;
        let ethernet = (ex, ey) == (x, y);
        let mut out = [0u8; SV_LEN];
        out[sv::Y] = y;
        out[sv::X] = x;
        // A 256-chip dimension does not occur: MAX_TRIADS keeps both under 256.
        out[sv::Y_SIZE] = self.height() as u8;
        out[sv::X_SIZE] = self.width() as u8;
        out[sv::P2P_ACTIVE] = 1;
        out[sv::NEAREST_ETHERNET_Y] = ey;
        out[sv::NEAREST_ETHERNET_X] = ex;
        out[sv::ETHERNET_UP] = u8::from(ethernet);
        out[sv::ROOT_CHIP] = u8::from((x, y) == (0, 0));
        for core in 0..sv::CORE_MAP_LEN {
            let entry = if core < CORES { core as u8 } else { 0xff };
            out[sv::PHYS_TO_VIRT + core] = entry;
            out[sv::VIRT_TO_PHYS + core] = entry;
        }
        out[sv::WORKING_CORES] = CORES as u8;
        out[sv::SDRAM_BASE..sv::SDRAM_BASE + 4].copy_from_slice(&sdram_base.to_le_bytes());
        if ethernet {
            out[sv::ETHERNET_IP..sv::ETHERNET_IP + 4].copy_from_slice(&ip);
        }
        Some(out)
    }

    /// Word `word` of `from`'s P2P table (at [`P2P_TABLE_BASE`] + 4 x `word`): the
    /// routes to eight chips of one column.
    pub fn p2p_word(&self, from: (u8, u8), word: u32) -> u32 {
        let column = word / 32;
        let first_row = (word % 32) * 8;
        (0..8).fold(0, |bits, i| {
            let row = first_row + i;
            let route = match (u8::try_from(column), u8::try_from(row)) {
                (Ok(x), Ok(y)) => self.route(from, (x, y)),
                _ => Route::None,
            };
            bits | (route as u32) << (3 * i)
        })
    }
}

/// Bytes of one column of the P2P table a host reads for a machine `height` chips up.
pub const fn p2p_column_len(height: u16) -> usize {
    (height as usize).div_ceil(8) * 4
}

/// Where column `column` of the P2P table starts.
pub const fn p2p_column_read(column: u16) -> u32 {
    P2P_TABLE_BASE + column as u32 * 32 * 4
}

/// The routes of one column of a P2P table as read from [`p2p_column_read`]: for each
/// row up to `height`, its route. Refuses a column shorter than [`p2p_column_len`].
pub fn parse_p2p_column(
    bytes: &[u8],
    height: u16,
) -> Result<impl Iterator<Item = (u8, Route)> + '_> {
    let needed = p2p_column_len(height);
    if bytes.len() < needed {
        return Err(Error::Truncated {
            what: "P2P table column",
            needed,
            available: bytes.len(),
        });
    }
    Ok((0..height.min(256)).map(move |row| {
        let at = usize::from(row / 8) * 4;
        let word = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        (
            row as u8,
            Route::from_bits(word >> (3 * u32::from(row % 8))),
        )
    }))
}

/// The `CMD_INFO` request SpiNNMan sends to chip `dest`.
pub const fn chip_info_request(dest: Address) -> RequestRepr<'static> {
    RequestRepr::new(dest, Command::INFO, [INFO_ARG, 0, 0], &[])
}

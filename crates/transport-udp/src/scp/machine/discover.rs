//! Discovery, from the root board's address to the whole machine, asking what SpiNNMan
//! 7.4.1 asks (`get_machine_details`, `discover_scamp_connections`) but with many
//! requests in flight, and each board's chips asked through that board:
//!
//! 1. through the root board: the machine's size (system variables), SC&MP's version,
//!    the root chip's P2P table (which chips are alive, one column per request, all in
//!    flight), and each board's Ethernet chip's summary (its IP address);
//! 2. a client per board at that IP (the root's port), each window sized from its
//!    board's transient-tag pool, all opened at once;
//! 3. every live chip's `CMD_INFO` summary, through its own board, all boards at once.

use core::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use futures::future::join_all;
use volley_proto::scp::machine::{
    ChipInfo, Geometry, Route, SV_BASE, chip_info_request, p2p_column_len, p2p_column_read,
    parse_p2p_column, sv,
};
use volley_proto::scp::sdp::Address;

use super::{BoardInfo, Machine, MachineError};
use crate::scp::client::{Op, ScpClient, ScpConfig, ScpError, WindowSize};

impl Machine {
    /// [`discover`](Self::discover) from ROOT as a user types it: HOST or HOST:PORT
    /// (port 17893 by default), a name resolved to its IPv4 address if it has one.
    pub async fn discover_host(root: &str, config: ScpConfig) -> Result<Self, MachineError> {
        Self::discover(resolve(root).await?, config).await
    }

    /// Discovers the machine whose root board (the one with chip (0, 0)) listens at
    /// `root`, and opens a client per board with `config` (an
    /// [`Auto`](WindowSize::Auto) window is sized from each board's own tag pool). Boards
    /// are reached at the IP their Ethernet chip reports, on `root`'s port; a board whose
    /// Ethernet is down is reached through the root board.
    pub async fn discover(root: SocketAddr, config: ScpConfig) -> Result<Self, MachineError> {
        let started = Instant::now();
        let on_root = |source| MachineError::Board {
            board: 0,
            addr: root,
            source,
        };
        let mut client = open(root, (0, 0), &config).await.map_err(on_root)?;

        let mut size = [0u8; 2];
        let at = SV_BASE + sv::Y_SIZE as u32;
        let root_chip = Address::core(0, 0, 0);
        client
            .read(root_chip, at, &mut size)
            .await
            .map_err(on_root)?;
        let [height, width] = size.map(u16::from);
        let geometry = Geometry::from_size(width, height).ok_or_else(|| {
            MachineError::Discovery(format!(
                "the machine reports {width} x {height} chips; volley knows one SpiNN-5 \
                 board (8 x 8) and tori of triads (multiples of 12 each way)"
            ))
        })?;
        let version = client.sver(root_chip).await.map_err(on_root)?;
        if !version.name.starts_with("SC&MP") {
            return Err(MachineError::Discovery(format!(
                "the root chip runs {:?}, not SC&MP",
                version.name
            )));
        }

        let alive = p2p_table(&mut client, geometry).await.map_err(on_root)?;
        let ethernets: Vec<(usize, (u8, u8))> = (0..geometry.boards())
            .filter_map(|b| geometry.ethernet(b).map(|e| (b, e)))
            .filter(|&(_, (x, y))| alive[index(geometry, x, y)])
            .collect();
        let chips: Vec<(u8, u8)> = ethernets.iter().map(|&(_, e)| e).collect();
        let ethernet_infos = chip_infos(&mut client, &chips).await.map_err(on_root)?;

        // A client per board whose Ethernet is up; the root board's is the one open.
        let mut boards = vec![BoardInfo {
            index: 0,
            ethernet: (0, 0),
            addr: root,
            window: client.window_size(),
        }];
        let mut opening = Vec::new();
        for (&(board, ethernet), info) in ethernets.iter().zip(&ethernet_infos) {
            if board == 0 || !info.ethernet_up || info.ip == [0; 4] {
                continue;
            }
            let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::from(info.ip)), root.port());
            opening.push((board, ethernet, addr));
        }
        let opened = join_all(
            opening
                .iter()
                .map(|&(_, ethernet, addr)| open(addr, ethernet, &config)),
        )
        .await;
        let mut clients = vec![client];
        for (&(board, ethernet, addr), result) in opening.iter().zip(opened) {
            let client = result.map_err(|source| MachineError::Board {
                board,
                addr,
                source,
            })?;
            boards.push(BoardInfo {
                index: board,
                ethernet,
                addr,
                window: client.window_size(),
            });
            clients.push(client);
        }

        // Each live chip to the client of its board (the root's, if its board has none).
        let mut board_of =
            vec![u16::MAX; usize::from(geometry.width()) * usize::from(geometry.height())];
        let mut groups = vec![Vec::new(); clients.len()];
        for (x, y) in geometry.iter_chips() {
            let at = index(geometry, x, y);
            if !alive[at] {
                continue;
            }
            let board = geometry.board_of(x, y).unwrap_or(0);
            let client = boards.iter().position(|b| b.index == board).unwrap_or(0);
            board_of[at] = client as u16;
            groups[client].push((x, y));
        }
        let asked = join_all(
            clients
                .iter_mut()
                .zip(&groups)
                .map(|(client, chips)| chip_infos(client, chips)),
        )
        .await;
        let mut chips = Vec::new();
        let mut infos = Vec::new();
        for (board, (result, group)) in asked.into_iter().zip(&groups).enumerate() {
            let answers = result.map_err(|source| MachineError::Board {
                board: boards[board].index,
                addr: boards[board].addr,
                source,
            })?;
            for (&(x, y), info) in group.iter().zip(answers) {
                let expected = geometry.ethernet_of(x, y);
                if Some(info.nearest_ethernet) != expected {
                    return Err(MachineError::Discovery(format!(
                        "chip ({x}, {y}) says its nearest Ethernet chip is {:?}; a SpiNN-5 \
                         machine of this size puts it at {expected:?}",
                        info.nearest_ethernet
                    )));
                }
                chips.push((x, y));
                infos.push(info);
            }
        }
        Ok(Self {
            geometry,
            boards,
            clients,
            chips,
            infos,
            board_of,
            discovery: started.elapsed(),
        })
    }
}

/// ROOT as a user gives it (the one rule of [`target::split`](crate::target::split),
/// port 17893 by default), resolved to an IPv4 address if it has one: a machine's boards
/// are IPv4 hosts.
async fn resolve(root: &str) -> Result<SocketAddr, MachineError> {
    let addrs = crate::target::lookup(root, volley_proto::scp::PORT)
        .await
        .map_err(|e| MachineError::Resolve {
            root: root.to_owned(),
            why: e.to_string(),
        })?;
    Ok(addrs[0])
}

/// Where chip (`x`, `y`) sits in per-chip tables.
fn index(geometry: Geometry, x: u8, y: u8) -> usize {
    usize::from(x) * usize::from(geometry.height()) + usize::from(y)
}

/// Opens a client to the board whose Ethernet chip is `ethernet`, sizing an automatic
/// window from that board's tag pool.
async fn open(
    addr: SocketAddr,
    ethernet: (u8, u8),
    config: &ScpConfig,
) -> Result<ScpClient, ScpError> {
    let auto = config.window == WindowSize::Auto;
    let first = ScpConfig {
        window: if auto {
            WindowSize::Fixed(1)
        } else {
            config.window
        },
        ..config.clone()
    };
    let mut client = ScpClient::connect(addr, first).await?;
    if auto {
        let chip = Address::core(ethernet.0, ethernet.1, 0);
        client.auto_window(chip, config.rto).await?;
    }
    Ok(client)
}

/// Reads the root chip's P2P table, a column per request, all in flight: which chips
/// are alive, by [`index`].
async fn p2p_table(client: &mut ScpClient, geometry: Geometry) -> Result<Vec<bool>, ScpError> {
    let len = p2p_column_len(geometry.height());
    let mut columns = vec![vec![0u8; len]; usize::from(geometry.width())];
    let mut ops: Vec<Op<'_>> = columns
        .iter_mut()
        .zip(0..)
        .map(|(buf, column)| Op::Read {
            chip: Address::core(0, 0, 0),
            address: p2p_column_read(column),
            buf,
        })
        .collect();
    client.execute(&mut ops).await?;
    drop(ops);
    let mut alive = vec![false; usize::from(geometry.width()) * usize::from(geometry.height())];
    for (x, column) in columns.iter().enumerate() {
        for (y, route) in parse_p2p_column(column, geometry.height())? {
            let x = x as u8;
            if route != Route::None && geometry.contains(x, y) {
                alive[index(geometry, x, y)] = true;
            }
        }
    }
    Ok(alive)
}

/// Asks every chip of `chips` for its summary through `client`, all in flight.
async fn chip_infos(client: &mut ScpClient, chips: &[(u8, u8)]) -> Result<Vec<ChipInfo>, ScpError> {
    let mut replies = vec![Vec::new(); chips.len()];
    let mut ops: Vec<Op<'_>> = chips
        .iter()
        .zip(replies.iter_mut())
        .map(|(&(x, y), reply)| Op::Raw {
            request: chip_info_request(Address::core(x, y, 0)),
            reply,
        })
        .collect();
    client.execute(&mut ops).await?;
    drop(ops);
    replies
        .iter()
        .map(|body| ChipInfo::parse(body).map_err(ScpError::from))
        .collect()
}

//! The machine client against emulated machines: discovery, a batch over every chip of
//! every board read back byte for byte, a board that dies mid-load, and every board's
//! traffic through a lossy relay of its own. Emulated boards listen on SpiNNaker's port,
//! so each test takes its own range of loopback addresses.

use core::net::{Ipv4Addr, SocketAddr};
use core::time::Duration;

use rand::{Rng, SeedableRng};
use tokio::time::timeout;
use volley_emulator::{EmulatedMachine as Emulated, MachineConfig, SDRAM_BASE};
use volley_netsim::{LinkConfig, LinkSim};
use volley_proto::scp::sdp::Address;
use volley_proto::scp::window::Rto;
use volley_transport_udp::{Machine, MachineError, ScpConfig, ScpError, WindowSize};

const LIMIT: Duration = Duration::from_secs(60);

async fn emulate(boards: usize, base: Ipv4Addr, report_base: Option<Ipv4Addr>) -> Emulated {
    Emulated::bind(MachineConfig {
        boards,
        base,
        report_base,
        ..MachineConfig::default()
    })
    .await
    .unwrap()
}

fn auto() -> ScpConfig {
    ScpConfig {
        window: WindowSize::Auto,
        ..ScpConfig::default()
    }
}

/// `len` seeded bytes for each chip of `chips`.
fn payloads(chips: &[(u8, u8)], len: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    chips
        .iter()
        .map(|_| (0..len).map(|_| rng.random()).collect())
        .collect()
}

/// Writes `data[i]` to every chip, reads it all back and compares, byte for byte.
async fn load_and_check(machine: &mut Machine, data: &[Vec<u8>]) {
    let chips = machine.chips().to_vec();
    let writes: Vec<_> = chips
        .iter()
        .zip(data)
        .map(|(&(x, y), bytes)| (Address::core(x, y, 0), SDRAM_BASE, &bytes[..]))
        .collect();
    timeout(LIMIT, machine.write_many(&writes))
        .await
        .unwrap()
        .unwrap();
    let mut back: Vec<Vec<u8>> = data.iter().map(|d| vec![0; d.len()]).collect();
    let mut reads: Vec<_> = chips
        .iter()
        .zip(back.iter_mut())
        .map(|(&(x, y), buf)| (Address::core(x, y, 0), SDRAM_BASE, &mut buf[..]))
        .collect();
    timeout(LIMIT, machine.read_many(&mut reads))
        .await
        .unwrap()
        .unwrap();
    for (i, (want, got)) in data.iter().zip(&back).enumerate() {
        assert!(want == got, "chip {:?} read back differs", chips[i]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovers_a_machine_and_loads_every_chip_of_every_board() {
    let base = Ipv4Addr::new(127, 0, 7, 0);
    let emulated = emulate(24, base, None).await;
    let root = SocketAddr::from((base, 17893));
    let mut machine = timeout(LIMIT, Machine::discover(root, auto()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(machine.boards().len(), 24);
    assert_eq!(machine.chips().len(), 24 * 48);
    for (i, board) in machine.boards().iter().enumerate() {
        assert_eq!(board.addr, emulated.board_addrs()[board.index], "board {i}");
        assert_eq!(board.window, 8, "the window is the board's tag pool");
        assert_eq!(
            Some(board.ethernet),
            machine.geometry().ethernet(board.index)
        );
    }
    assert!(machine.chip_infos().iter().all(|info| info.cores == 18));
    let data = payloads(machine.chips(), 1000, 1);
    load_and_check(&mut machine, &data).await;
    // Each chip's data went through its own board and sits in its memory.
    for (i, &(x, y)) in machine.chips().iter().enumerate().step_by(37) {
        assert_eq!(
            emulated.read_memory(x, y, SDRAM_BASE, 1000).unwrap(),
            data[i]
        );
    }
    for board in 0..24 {
        assert!(
            emulated.stats(board).unwrap().memory_bytes > 0,
            "board {board}"
        );
    }
    assert!(matches!(
        machine.board_of(48, 0),
        Err(MachineError::NoSuchChip { x: 48, y: 0 })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_board_that_dies_fails_its_own_chips_and_no_others() {
    let base = Ipv4Addr::new(127, 0, 8, 0);
    let emulated = emulate(6, base, None).await;
    let root = SocketAddr::from((base, 17893));
    let config = ScpConfig {
        rto: Rto::Fixed(Duration::from_millis(50).into()),
        max_tries: 3,
        ..auto()
    };
    let mut machine = timeout(LIMIT, Machine::discover(root, config))
        .await
        .unwrap()
        .unwrap();
    assert!(emulated.stop_board(4));
    let chips = machine.chips().to_vec();
    let data = payloads(&chips, 600, 2);
    let writes: Vec<_> = chips
        .iter()
        .zip(&data)
        .map(|(&(x, y), bytes)| (Address::core(x, y, 0), SDRAM_BASE, &bytes[..]))
        .collect();
    let error = timeout(LIMIT, machine.write_many(&writes))
        .await
        .unwrap()
        .unwrap_err();
    let MachineError::Board { board, source, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(*board, 4, "{error}");
    let ScpError::Timeout { chip, .. } = source else {
        panic!("{error}");
    };
    assert_eq!(
        machine.geometry().board_of(chip.x, chip.y),
        Some(4),
        "{error}"
    );
    assert!(error.to_string().contains("board 4"), "{error}");
    // Every other board's chips hold all of their data.
    for (i, &(x, y)) in chips.iter().enumerate() {
        if machine.geometry().board_of(x, y) != Some(4) {
            assert_eq!(
                emulated.read_memory(x, y, SDRAM_BASE, 600).unwrap(),
                data[i]
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_board_through_its_own_lossy_relay() {
    let (base, relays) = (Ipv4Addr::new(127, 0, 9, 0), Ipv4Addr::new(127, 0, 10, 0));
    let boards = 3;
    let emulated = emulate(boards, base, Some(relays)).await;
    let links: Vec<LinkSim> = (0..boards)
        .map(|i| {
            let listen = SocketAddr::from((Ipv4Addr::from(u32::from(relays) + i as u32), 17893));
            let config = LinkConfig {
                loss: 0.05,
                seed: i as u64,
                ..LinkConfig::default()
            };
            LinkSim::start(listen, emulated.board_addrs()[i], config).unwrap()
        })
        .collect();
    let root = SocketAddr::from((relays, 17893));
    let mut machine = timeout(LIMIT, Machine::discover(root, auto()))
        .await
        .unwrap()
        .unwrap();
    assert!(
        machine
            .boards()
            .iter()
            .all(|b| b.addr.ip() != core::net::IpAddr::V4(base))
    );
    let data = payloads(machine.chips(), 2048, 3);
    load_and_check(&mut machine, &data).await;
    // A lost request costs its board one retransmit timeout, not a stalled window: no
    // board goes a second (what SpiNNMan waits before resending its whole window)
    // without a reply completing something.
    let chips = machine.chips().to_vec();
    let data = payloads(&chips, 8192, 4);
    let writes: Vec<_> = chips
        .iter()
        .zip(&data)
        .map(|(&(x, y), bytes)| (Address::core(x, y, 0), SDRAM_BASE + 0x10_0000, &bytes[..]))
        .collect();
    let start = std::time::Instant::now();
    let last = std::sync::Mutex::new(vec![(start, Duration::ZERO); boards]);
    let progress = |board: usize, _done: u64| {
        let mut last = last.lock().unwrap();
        let (at, longest) = last[board];
        last[board] = (std::time::Instant::now(), longest.max(at.elapsed()));
    };
    timeout(LIMIT, machine.write_many_with_progress(&writes, progress))
        .await
        .unwrap()
        .unwrap();
    for (board, (_, longest)) in last.into_inner().unwrap().into_iter().enumerate() {
        assert!(
            longest < Duration::from_secs(1),
            "board {board} stalled for {longest:?}"
        );
    }
    for (i, link) in links.iter().enumerate() {
        assert!(
            link.stats().dropped > 0,
            "relay {i} dropped nothing: {:?}",
            link.stats()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_board_is_a_machine_of_one_board() {
    // `volley emulate --udp ADDR`: one board, discovered as a machine is.
    let board = volley_emulator::Board::bind(
        SocketAddr::from((Ipv4Addr::new(127, 0, 25, 1), 0)),
        None,
        volley_emulator::BoardConfig::default(),
    )
    .await
    .unwrap();
    let mut machine = timeout(LIMIT, Machine::discover(board.udp_addr(), auto()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(machine.boards().len(), 1);
    assert_eq!(machine.chips().len(), 48);
    assert_eq!(machine.boards()[0].addr, board.udp_addr());
    let data = payloads(machine.chips(), 300, 9);
    load_and_check(&mut machine, &data).await;
}

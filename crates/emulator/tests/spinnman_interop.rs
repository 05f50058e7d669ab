//! SpiNNMan 7.4.1's own `Transceiver` against emulated machines of 3 and 24 boards:
//! `create_transceiver_from_hostname`, `get_machine_details`,
//! `discover_scamp_connections`, then writes and read-backs to chips on every board,
//! byte for byte (the script, `spinnman_interop.py`, checks them). SpiNNMan always uses
//! port 17893, so each test takes its own range of loopback addresses.

mod python;

use core::net::Ipv4Addr;
use core::time::Duration;

use volley_emulator::{EmulatedMachine, MachineConfig, SDRAM_BASE};

async fn discover_and_load(boards: usize, base: Ipv4Addr, seed: u32) {
    let machine = EmulatedMachine::bind(MachineConfig {
        boards,
        base,
        ..MachineConfig::default()
    })
    .await
    .unwrap();
    let args = [base.to_string(), boards.to_string(), seed.to_string()];
    let stdout = python::run("spinnman_interop.py", &args, Duration::from_secs(240)).await;
    let chips = 48 * boards;
    assert!(
        stdout.contains(&format!("ok boards={boards} chips={chips}")),
        "{stdout}"
    );
    // Each board served its own share: after discovery, SpiNNMan checked every board's
    // connection directly, and sent each chip's requests through its own board.
    for board in 0..boards {
        let stats = machine.stats(board).unwrap();
        assert!(stats.requests > 0, "board {board} saw nothing: {stats:?}");
        assert!(
            stats.memory_bytes > 0,
            "board {board} holds nothing: {stats:?}"
        );
    }
    // What SpiNNMan wrote to the root chip is in the emulator's memory.
    assert!(
        machine
            .read_memory(0, 0, SDRAM_BASE, 1 << 20)
            .unwrap()
            .iter()
            .any(|&b| b != 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinnman_discovers_and_loads_a_three_board_machine() {
    discover_and_load(3, Ipv4Addr::new(127, 0, 5, 0), 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinnman_discovers_and_loads_a_24_board_machine() {
    discover_and_load(24, Ipv4Addr::new(127, 0, 6, 0), 2).await;
}

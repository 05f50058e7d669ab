//! rig 2.4.1 (the real SpiNNaker host library, in Python) against the emulator, directly
//! and through the link simulator with 10% loss each way. `cargo xtask test` installs rig
//! into a venv under `target/peers/venv`; `VOLLEY_PYTHON` may name another interpreter.

mod python;

use core::time::Duration;

use volley_emulator::{Board, BoardConfig, SDRAM_BASE};
use volley_netsim::LinkConfig;

/// Runs the rig script against `port`; panics with its output if it fails.
async fn run_rig(port: u16, seed: u32, lossy: bool) {
    let mut args = vec![port.to_string(), seed.to_string()];
    if lossy {
        args.push("--lossy".into());
    }
    let stdout = python::run("rig_interop.py", &args, Duration::from_secs(240)).await;
    assert!(
        stdout.contains("machine-controller ok") && stdout.contains("scp-connection ok"),
        "{stdout}"
    );
}

async fn board() -> Board {
    volley_emulator::testing::board(BoardConfig::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rig_reads_and_writes_the_emulator() {
    let board = board().await;
    run_rig(board.udp_addr().port(), 11, false).await;
    // What rig wrote is in the emulator's memory where rig put it.
    let stats = board.stats();
    assert!(stats.requests >= 4 * 4096, "{stats:?}");
    assert_eq!(stats.error_replies, 0, "{stats:?}");
    assert!(
        board
            .read_memory(1, 2, SDRAM_BASE, 1 << 20)
            .unwrap()
            .iter()
            .any(|&b| b != 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rig_through_a_link_losing_ten_percent() {
    let board = board().await;
    let link = volley_netsim::testing::relay(
        board.udp_addr(),
        LinkConfig {
            loss: 0.1,
            seed: 5,
            ..LinkConfig::default()
        },
    );
    run_rig(link.local_addr().port(), 12, true).await;
    assert!(link.stats().dropped > 100, "{:?}", link.stats());
}

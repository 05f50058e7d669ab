//! Helpers for integration tests (volley's and yours): an emulated board on loopback, in
//! one call.
//!
//! ```
//! use volley_emulator::BoardConfig;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let board = volley_emulator::testing::board(BoardConfig::default()).await;
//! assert!(board.udp_addr().ip().is_loopback());
//! # }
//! ```

use crate::{Board, BoardConfig};

/// A board on `127.0.0.1` (a port the kernel picks) with `config`, UDP only. Panics,
/// saying why, if it cannot bind: a test cannot go on without it.
pub async fn board(config: BoardConfig) -> Board {
    Board::bind("127.0.0.1:0".parse().expect("an address"), None, config)
        .await
        .unwrap_or_else(|e| panic!("the emulated board cannot bind 127.0.0.1: {e}"))
}

/// [`board`] with a TCP listener too, on a port of its own.
pub async fn board_with_tcp(config: BoardConfig) -> Board {
    let any = "127.0.0.1:0".parse().expect("an address");
    Board::bind(any, Some(any), config)
        .await
        .unwrap_or_else(|e| panic!("the emulated board cannot bind 127.0.0.1: {e}"))
}

//! An emulated SpiNNaker board, or machine of boards, that rig 2.4.1 and SpiNNMan drive
//! unchanged: SCP over UDP as SC&MP answers it (sver, read, write, fill, iptag TTO;
//! `RC_ARG`, `RC_CMD`, `RC_LEN`, `RC_ROUTE`, `RC_BUF`), the 8-entry transient-IPTag pool
//! that drops requests beyond it, 128 MiB of sparse SDRAM per chip (also reached,
//! unbuffered, at `0x70000000`) under a memory budget, processing delay, per-hop
//! latency and in-board reply loss; and the same SCP packets framed over TCP, for
//! UDP-against-TCP runs of one workload.
//!
//! - [`Board`]: binds, serves on its own tasks, counts ([`BoardStats`]), and says why if
//!   a serving task dies ([`Board::stopped`]).
//! - [`BoardConfig`]: its settings, checked before anything is bound.
//! - [`EmulatedMachine`]: a machine of SpiNN-5 boards (48 chips each, triads of three on a torus),
//!   each board on its own address, every board answering for every chip (a request for
//!   another board's chip is carried out there and pays the extra hops). It answers what
//!   SpiNNMan 7.4.1's discovery asks (`CMD_INFO` chip summaries, the system variables at
//!   `0xf5007f00`, the P2P table at `0xe1010000`), so SpiNNMan's own `Transceiver`
//!   discovers and loads it unchanged. Not modelled: booting, BMPs, applications,
//!   multicast routing, dead chips and links, writes to the system variables or router
//!   registers (answered `RC_ARG`).
//! - [`ScampCosts`]: SC&MP's costs, each default with its source: the Ethernet chip's
//!   time per request, P2P streams held per hop, message buffers.
//!
//! # Example
//!
//! ```
//! use volley_emulator::{Board, BoardConfig, SDRAM_BASE};
//! use volley_proto::scp::sdp::Address;
//! use volley_transport_udp::{ScpClient, ScpConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let board = Board::bind("127.0.0.1:0".parse()?, None, BoardConfig::default()).await?;
//! let mut client = ScpClient::connect(board.udp_addr(), ScpConfig::default()).await?;
//! let chip = Address::core(0, 0, 0);
//! client.write(chip, SDRAM_BASE, b"hello, board").await?;
//! assert_eq!(board.read_memory(0, 0, SDRAM_BASE, 12).as_deref(), Some(&b"hello, board"[..]));
//! assert_eq!(client.sver(chip).await?.name, "SC&MP/SpiNNaker");
//! # Ok(())
//! # }
//! ```

mod answer;
mod board;
mod checks;
mod config;
mod costs;
mod logic;
mod machine;
mod memory;
mod pacer;
mod serve;
mod state;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;

pub use board::Board;
pub use checks::{ConfigError, MAX_DELAY};
pub use config::{BoardConfig, BoardStats, SDRAM_BASE, SDRAM_SIZE, SDRAM_UNBUFFERED};
pub use costs::ScampCosts;
#[cfg(feature = "fuzzing")]
pub use logic::Handler;
pub use machine::{EmulatedMachine, MachineConfig};

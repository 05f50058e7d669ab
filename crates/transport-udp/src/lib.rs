//! SCP over UDP for SpiNNaker boards, done the fast and reliable way: a window of
//! requests in flight, each resent with its exact bytes until answered.
//!
//! - [`ScpClient`]: `sver`, `read`, `write`, `fill`, `iptag_tto`, and batches over many
//!   chips through one window ([`ScpClient::execute`]), with progress and streamed
//!   writes ([`Op::WriteFrom`]); errors that say what happened ([`ScpError`], [`NoReply`]).
//! - [`Machine`]: one client for a machine of many boards: discovery from the root board,
//!   a client per board, each chip's requests through its own board, every board's window
//!   at once ([`Machine::write_many`], [`Machine::read_many`]).
//! - [`datagrams`]: the batched UDP I/O under it (and under `volley-emulator`).
//!
//! On Linux the client hands the kernel a window's worth of datagrams per system call
//! (UDP segmentation offload out, `UDP_GRO` in); the board still sees one SCP packet per
//! datagram, and a lone datagram costs one plain `send` or `recv`. The emulator to test
//! against is `volley-emulator`, the link simulator `volley-netsim`.
//!
//! # Example
//!
//! ```no_run
//! use volley_proto::scp::sdp::Address;
//! use volley_transport_udp::{ScpClient, ScpConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A board (or `volley emulate`) on its SCP port.
//! let mut client = ScpClient::connect_host("localhost:17893", false, ScpConfig::default()).await?;
//! let chip = Address::core(0, 0, 0);
//! let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
//! client.write(chip, 0x6000_0000, &data).await?;
//! let back = client.read_bytes(chip, 0x6000_0000, data.len()).await?;
//! assert_eq!(back, data);
//! println!("{}", client.sver(chip).await?.name);
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "channel")]
pub mod channel;
pub mod datagrams;
#[cfg(feature = "scp")]
mod scp;
pub mod target;

#[cfg(feature = "scp")]
pub use scp::client::{
    ClientStats, ConfigError as ScpConfigError, NoReply, Op, ScpClient, ScpConfig, ScpError,
    SoftwareVersion, Source, WindowSize, check_range,
};
#[cfg(feature = "scp")]
pub use scp::machine::{BoardInfo, Machine, MachineError, STRIPE};

#[cfg(feature = "scp")]
/// The frame type that carries an SCP datagram over TCP (`u32 length | type | u32 id |
/// datagram`); the id is the request's sequence number, echoed in the reply.
pub const SCP_FRAME_TYPE: u8 = 0x53;

//! SCP over UDP for SpiNNaker boards, done the fast and reliable way: a window of
//! requests in flight, each resent with its exact bytes until answered; plus a board
//! emulator to test against and a user-space link simulator (delay, jitter, loss,
//! duplication, reordering, rate) because `tc netem` is not always available.
//!
//! - [`ScpClient`]: `sver`, `read`, `write`, `fill`, `iptag_tto`, and batches over many
//!   chips through one window ([`ScpClient::execute`]).
//! - [`Board`]: the emulator, on UDP and (framed) TCP.
//! - [`LinkSim`]: the link simulator, a UDP relay.
//!
//! On Linux the client and the emulator hand the kernel a window's worth of datagrams
//! per system call (UDP segmentation offload out, `UDP_GRO` in); peers still see one SCP
//! packet per datagram, and a lone datagram costs one plain `send` or `recv`.
//!
//! # Example
//!
//! ```
//! use volley_proto::wire::sdp::Address;
//! use volley_transport_udp::{Board, BoardConfig, ScpClient, ScpConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let board = Board::bind("127.0.0.1:0".parse()?, None, BoardConfig::default()).await?;
//! let mut client = ScpClient::connect(board.udp_addr(), ScpConfig::default()).await?;
//!
//! let chip = Address::core(0, 0, 0);
//! let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
//! client.write(chip, 0x6000_0000, &data).await?;
//! let back = client.read_bytes(chip, 0x6000_0000, data.len()).await?;
//! assert_eq!(back, data);
//! assert_eq!(client.sver(chip).await?.name, "SC&MP/SpiNNaker");
//! # Ok(())
//! # }
//! ```

mod board;
mod client;
mod datagrams;
mod netsim;

#[cfg(feature = "fuzzing")]
pub use board::Handler;
pub use board::{Board, BoardConfig, BoardStats, SDRAM_BASE, SDRAM_SIZE};
pub use client::{
    ClientStats, NoReply, Op, ScpClient, ScpConfig, ScpError, SoftwareVersion, Source, WindowSize,
    check_range,
};
pub use netsim::{LinkConfig, LinkSim, LinkStats};

/// The longest delay, jitter or latency the emulator and the link simulator take: an hour.
pub const MAX_DELAY: core::time::Duration = core::time::Duration::from_secs(3600);

fn check_delay(what: &str, value: core::time::Duration) -> std::io::Result<()> {
    if value > MAX_DELAY {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a {what} of {value:?} is over the limit of one hour"),
        ));
    }
    Ok(())
}

fn check_fraction(what: &str, value: f64) -> std::io::Result<()> {
    if !(0.0..=1.0).contains(&value) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a {what} of {value} is not a fraction between 0 and 1"),
        ));
    }
    Ok(())
}

/// The frame type that carries an SCP datagram over TCP (`u32 length | type | u32 id |
/// datagram`); the id is the request's sequence number, echoed in the reply.
pub const SCP_FRAME_TYPE: u8 = 0x53;

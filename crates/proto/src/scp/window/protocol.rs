//! The window's view of SCP: the sequence number lives at bytes 12..14 of the datagram,
//! a reply's outcome is its return code.

use alloc::vec::Vec;

use super::{Outcome, Protocol};
use crate::scp::{Packet, ReturnCode};

/// SCP as the window sees it, with the set of return codes that mean "try again later".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScpProtocol {
    retry: Vec<ReturnCode>,
}

impl ScpProtocol {
    /// Retries the given return codes; every other code but `RC_OK` is fatal.
    pub fn with_retry_codes(retry: impl IntoIterator<Item = ReturnCode>) -> Self {
        Self {
            retry: retry.into_iter().collect(),
        }
    }

    /// SpiNNMan's retry set: `RC_SUM`, `RC_P2P_BUSY`, `RC_TIMEOUT`, `RC_P2P_TIMEOUT`,
    /// `RC_LEN` and `RC_P2P_NOREPLY`.
    pub fn spinnman() -> Self {
        Self::with_retry_codes([
            ReturnCode::SUM,
            ReturnCode::P2P_BUSY,
            ReturnCode::TIMEOUT,
            ReturnCode::P2P_TIMEOUT,
            ReturnCode::LEN,
            ReturnCode::P2P_NOREPLY,
        ])
    }

    /// The codes retried.
    pub fn retry_codes(&self) -> &[ReturnCode] {
        &self.retry
    }
}

impl Default for ScpProtocol {
    /// rig's retry set: `RC_SUM` and `RC_P2P_BUSY`.
    fn default() -> Self {
        Self::with_retry_codes([ReturnCode::SUM, ReturnCode::P2P_BUSY])
    }
}

impl Protocol for ScpProtocol {
    fn check_request(&self, request: &[u8]) -> Result<(), crate::wire::Error> {
        Packet::new_checked(request).map(|_| ())
    }

    fn set_seq(&self, request: &mut [u8], seq: u16) {
        // `check_request` passed: the packet is long enough to hold its sequence number.
        Packet::new_unchecked(request).set_seq(seq);
    }

    fn classify(&self, reply: &[u8]) -> Option<(u16, Outcome)> {
        let packet = Packet::new_checked(reply).ok()?;
        let rc = ReturnCode(packet.cmd_rc());
        let outcome = if rc == ReturnCode::OK {
            Outcome::Done
        } else if self.retry.contains(&rc) {
            Outcome::Retry(rc.0)
        } else {
            Outcome::Fatal(rc.0)
        };
        Some((packet.seq(), outcome))
    }
}

//! Authentication at the hello: a client's token, and a server's check of each connection
//! before it serves any call.
//!
//! ```
//! use volley_rpc::{Config, Endpoint};
//!
//! volley_rpc::service! {
//!     /// Nothing much.
//!     pub service Quiet {
//!         /// Pings.
//!         1 => fn ping();
//!     }
//! }
//!
//! // A server that admits only hellos carrying this token (compared by digest, in
//! // constant time)...
//! let server = Endpoint::<Quiet>::new(Config::default())?.require_token("s3cret")?;
//! // ...and a client that sends it.
//! let client = Endpoint::<Quiet>::new(Config::default())?.token("s3cret")?;
//! # let _ = (server, client);
//! # Ok::<(), volley_rpc::ConnectError>(())
//! ```

use core::net::IpAddr;
use core::time::Duration;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use futures::future::BoxFuture;
use volley_proto::rpc::MAX_TOKEN;

use crate::config::ConfigError;
use crate::error::ConnectError;
use crate::link::ConnectionInfo;

/// What a server's check sees of a connection before it admits it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AuthRequest {
    /// What the link knows of the connection (the peer's address).
    pub connection: ConnectionInfo,
    /// The token the client's hello carries, if any.
    pub token: Option<Bytes>,
}

/// A server's check, type-erased.
pub(crate) type Check = Arc<dyn Fn(AuthRequest) -> BoxFuture<'static, bool> + Send + Sync>;

/// A token as a hello may carry it: 1 to [`MAX_TOKEN`] bytes.
pub(crate) fn checked_token(token: Bytes) -> Result<Bytes, ConnectError> {
    if token.is_empty() || token.len() > MAX_TOKEN {
        return Err(ConnectError::Config(ConfigError::Token(token.len())));
    }
    Ok(token)
}

/// A token's SHA-256 digest: what tokens are compared by, so that the comparison takes
/// the same time whatever either token's length or contents.
pub(crate) fn digest(token: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token).into()
}

/// Whether `got` hashes to `want` (a [`digest`]), compared in a time that depends on
/// nothing in either: both are 32 bytes, and every byte is looked at.
pub(crate) fn same(got: &[u8], want: &[u8; 32]) -> bool {
    let got = digest(got);
    let diff = got.iter().zip(want).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    core::hint::black_box(diff) == 0
}

/// Failed checks an address may have before it is slowed.
pub const FREE_FAILURES: u32 = 3;

/// How long an address is refused after its first failure past [`FREE_FAILURES`];
/// each further one doubles it, up to [`MAX_PENALTY`].
const FIRST_PENALTY: Duration = Duration::from_secs(1);

/// The longest an address is refused for at once.
pub const MAX_PENALTY: Duration = Duration::from_secs(60);

/// Addresses remembered at once; past it the one that failed longest ago is forgotten.
const ADDRESSES: usize = 4096;

/// Failed authentications by address: a peer that keeps guessing is refused at once,
/// without its token being looked at, for a time that doubles with each failure.
#[derive(Default)]
pub(crate) struct Throttle {
    by_host: Mutex<HashMap<IpAddr, Failures>>,
}

#[derive(Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
    refused_until: Option<Instant>,
}

impl Throttle {
    /// Whether `host` is being refused now.
    pub(crate) fn refused(&self, host: IpAddr, now: Instant) -> bool {
        let table = self.by_host.lock().unwrap_or_else(PoisonError::into_inner);
        table
            .get(&host)
            .and_then(|f| f.refused_until)
            .is_some_and(|until| now < until)
    }

    /// Counts a failed check from `host`; returns how long it is refused for now, if it is.
    pub(crate) fn failed(&self, host: IpAddr, now: Instant) -> Option<Duration> {
        let mut table = self.by_host.lock().unwrap_or_else(PoisonError::into_inner);
        if table.len() >= ADDRESSES && !table.contains_key(&host) {
            let oldest = table.iter().min_by_key(|(_, f)| f.last).map(|(h, _)| *h);
            if let Some(oldest) = oldest {
                table.remove(&oldest);
            }
        }
        let entry = table.entry(host).or_insert(Failures {
            count: 0,
            last: now,
            refused_until: None,
        });
        entry.count = entry.count.saturating_add(1);
        entry.last = now;
        let past = entry.count.checked_sub(FREE_FAILURES + 1)?;
        let penalty = FIRST_PENALTY
            .saturating_mul(1 << past.min(16))
            .min(MAX_PENALTY);
        entry.refused_until = Some(now + penalty);
        Some(penalty)
    }

    /// Forgets `host`'s failures (it authenticated).
    pub(crate) fn passed(&self, host: IpAddr) {
        let mut table = self.by_host.lock().unwrap_or_else(PoisonError::into_inner);
        table.remove(&host);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole_and_are_bounded() {
        let want = digest(b"abc");
        assert!(same(b"abc", &want));
        assert!(!same(b"abd", &want));
        assert!(!same(b"abcd", &want));
        assert!(!same(b"", &want));
        assert!(checked_token(Bytes::new()).is_err());
        assert!(checked_token(Bytes::from(vec![1; MAX_TOKEN + 1])).is_err());
        assert!(checked_token(Bytes::from(vec![1; MAX_TOKEN])).is_ok());
    }

    #[test]
    fn an_address_that_keeps_failing_is_refused_for_longer_each_time() {
        let throttle = Throttle::default();
        let (host, other) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        let t0 = Instant::now();
        for _ in 0..FREE_FAILURES {
            assert_eq!(throttle.failed(host, t0), None);
            assert!(!throttle.refused(host, t0));
        }
        assert_eq!(throttle.failed(host, t0), Some(Duration::from_secs(1)));
        assert!(throttle.refused(host, t0 + Duration::from_millis(999)));
        assert!(!throttle.refused(host, t0 + Duration::from_secs(1)));
        assert!(
            !throttle.refused(other, t0),
            "another address is not slowed"
        );
        assert_eq!(throttle.failed(host, t0), Some(Duration::from_secs(2)));
        for _ in 0..40 {
            throttle.failed(host, t0);
        }
        assert_eq!(throttle.failed(host, t0), Some(MAX_PENALTY));
        throttle.passed(host);
        assert!(!throttle.refused(host, t0));
        // A bounded table: the oldest address goes first.
        for i in 0..ADDRESSES as u32 + 10 {
            throttle.failed(
                IpAddr::from(i.to_be_bytes()),
                t0 + Duration::from_nanos(u64::from(i)),
            );
        }
        assert_eq!(throttle.by_host.lock().unwrap().len(), ADDRESSES);
    }
}

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
//! // A server that admits only hellos carrying this token (compared in constant time)...
//! let server = Endpoint::<Quiet>::new(Config::default())?.require_token("s3cret")?;
//! // ...and a client that sends it.
//! let client = Endpoint::<Quiet>::new(Config::default())?.token("s3cret")?;
//! # let _ = (server, client);
//! # Ok::<(), volley_rpc::ConnectError>(())
//! ```

use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use volley_proto::wire::rpc::MAX_TOKEN;

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

/// Whether `a` and `b` are equal, in a time that depends on their lengths only.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    core::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole_and_are_bounded() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
        assert!(checked_token(Bytes::new()).is_err());
        assert!(checked_token(Bytes::from(vec![1; MAX_TOKEN + 1])).is_err());
        assert!(checked_token(Bytes::from(vec![1; MAX_TOKEN])).is_ok());
    }
}

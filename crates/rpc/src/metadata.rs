//! Per-call metadata: the pairs a request carries and the block they travel in.

use bytes::{Bytes, BytesMut};
use volley_proto::rpc::metadata as wire;

use crate::codec::Codec;
use crate::link::Payload;

/// Per-call metadata: a few key-value pairs that travel with one call (a W3C
/// `traceparent`, a tenant, a per-call token), set on the request and read from the
/// handler's [`Context::metadata`](crate::Context::metadata).
///
/// ```
/// use volley_rpc::{Context, HandlerError};
///
/// volley_rpc::service! {
///     /// Greets.
///     pub service Greeter {
///         /// Says hello to the caller's tenant.
///         1 => fn hello() -> String;
///     }
/// }
///
/// struct Here;
///
/// impl GreeterServer for Here {
///     async fn hello(&self, cx: Context<Greeter>) -> Result<String, HandlerError> {
///         let tenant = cx.metadata().get_str("tenant").unwrap_or("nobody");
///         Ok(format!("hello, {tenant}"))
///     }
/// }
///
/// # async fn f(client: GreeterClient) -> Result<(), volley_rpc::CallError> {
/// let greeting = client.hello().metadata("tenant", "blue").await?;
/// # Ok(())
/// # }
/// # let _ = Here.into_router();
/// ```
///
/// Keys are 1 to 64 bytes of lowercase ASCII letters, digits, `-`, `_` and `.`; values
/// any bytes; all pairs of a call together at most
/// [`MAX_METADATA`](volley_proto::rpc::metadata::MAX_METADATA) bytes (4 KiB),
/// checked by the caller before it sends and by the callee before it runs anything. A
/// call with metadata to a peer of a build that takes none fails with
/// [`CallError::Metadata`](crate::CallError::Metadata), unsent.
///
/// This is the metadata a call came with, as its handler reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metadata {
    /// The block as it came, its length field included (checked when the call arrived);
    /// empty for a call without metadata.
    block: Bytes,
}

impl Metadata {
    /// The value of the first pair with `key`.
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.view().get(key)
    }

    /// The value of the first pair with `key`, if it is UTF-8.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(|v| core::str::from_utf8(v).ok())
    }

    /// The pairs, in the order sent.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.view().iter()
    }

    /// Whether the call came with none.
    pub fn is_empty(&self) -> bool {
        self.view().is_empty()
    }

    fn view(&self) -> wire::Metadata<'_> {
        // Checked when the call arrived; a call without metadata has an empty block.
        wire::Metadata::split(&self.block)
            .map(|(m, _)| m)
            .unwrap_or_default()
    }
}

/// A call's arguments that begin with a metadata block: the metadata, and the arguments
/// proper. The block is checked whole first.
pub(crate) fn split(args: Payload) -> Result<(Metadata, Payload), volley_proto::wire::Error> {
    let args = args.into_bytes();
    let (_, rest) = wire::Metadata::split(&args)?;
    let at = args.len() - rest.len();
    Ok((
        Metadata {
            block: args.slice(..at),
        },
        Payload::from(args.slice(at..)),
    ))
}

/// Pairs a request carries to the peer.
pub(crate) type Pairs = Vec<(String, Bytes)>;

/// `pairs`' block followed by `args`' encoding, in one buffer.
pub(crate) fn encode_with<C: Codec, T: serde::Serialize + ?Sized>(
    pairs: &Pairs,
    args: &T,
) -> Result<Payload, String> {
    let iter = pairs.iter().map(|(k, v)| (k.as_bytes(), &v[..]));
    let len = wire::buffer_len(iter.clone()).map_err(|e| e.to_string())?;
    let mut out = BytesMut::zeroed(len);
    wire::emit(iter, &mut out).map_err(|e| e.to_string())?;
    C::encode(args, &mut out).map_err(|e| e.to_string())?;
    Ok(Payload::from(out.freeze()))
}

//! Services: one definition, shared by both ends, checked at compile time.
//!
//! A service is a set of methods; each method has an explicit id (never its position in
//! the list), a name, an argument type and a result type. [`service!`](crate::service)
//! declares one. Both ends name the same service type, so a call to a method of another
//! service does not compile. After the hello each end sends its service's method table
//! ([`Service::TABLE`]), and each call is checked against the peer's: two builds whose
//! method sets differ still connect, and only the calls the other end cannot take fail.

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
#[doc(hidden)]
pub use volley_proto::rpc::methods::MethodEntry;

/// One method of a service.
pub trait Method: Send + Sync + 'static {
    /// The service it belongs to.
    type Service: Service;
    /// Its arguments.
    type Args: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// Its result.
    type Output: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// Its id on the wire.
    const ID: u32;
    /// Its name, for errors and logs.
    const NAME: &'static str;
    /// Whether it is one-way (declared `oneway fn`): it sends no reply.
    const ONE_WAY: bool = false;
    /// A hash of its kind, argument type and result type (as written in the
    /// declaration): what must match at the two ends for a call of it to go.
    const TYPES: u64 = 0;
}

/// A set of methods, declared with [`service!`](crate::service).
pub trait Service: Send + Sync + 'static {
    /// The service's name.
    const NAME: &'static str;
    /// A hash of the service's name and every method's id, name, argument type and result
    /// type (as written in the declaration).
    const FINGERPRINT: u64;
    /// The methods: `(id, name)`.
    const METHODS: &'static [(u32, &'static str)];
    /// The methods as the method table after the hello lists them: id, kind and
    /// [`Method::TYPES`].
    const TABLE: &'static [MethodEntry] = &[];

    /// The name of the method with this id, if there is one.
    fn method_name(id: u32) -> Option<&'static str> {
        Self::METHODS
            .iter()
            .find(|(m, _)| *m == id)
            .map(|(_, name)| *name)
    }
}

/// FNV-1a over `parts`, each followed by a 0xff separator. `const`, so a service's
/// fingerprint is computed at compile time.
#[doc(hidden)]
pub const fn fingerprint(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < parts.len() {
        let bytes = parts[i].as_bytes();
        let mut j = 0;
        while j < bytes.len() {
            hash ^= bytes[j] as u64;
            hash = hash.wrapping_mul(0x0100_0000_01b3);
            j += 1;
        }
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

/// Declares a service: its methods, a client that calls them and a server trait that
/// serves them.
///
/// ```
/// // serde through volley-rpc, so the crate need not name it among its dependencies.
/// use volley_rpc::serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// #[serde(crate = "volley_rpc::serde")]
/// pub struct Point { pub x: i32, pub y: i32 }
///
/// volley_rpc::service! {
///     /// Geometry on the board.
///     pub service Geometry {
///         /// Adds two numbers.
///         1 => fn add(a: u32, b: u32) -> u64;
///         /// Mirrors a point.
///         7 => fn mirror(p: Point) -> Point;
///         /// Logs a line; nothing comes back.
///         8 => oneway fn log(line: String);
///     }
/// }
///
/// use volley_rpc::{Method, Service};
/// assert_eq!(<geometry::Mirror as Method>::ID, 7);
/// assert_eq!(Geometry::method_name(1), Some("add"));
/// ```
///
/// Each method has an explicit id, never its position; a `oneway` method sends no reply.
/// From the declaration come:
/// - `Geometry`, the service as a type ([`Service`]), with `Geometry::router(server)`;
/// - the module `geometry` (the service's name in snake case) with a type per method,
///   named in CamelCase (`geometry::Add`, `geometry::Mirror`, `geometry::Log`:
///   [`Method`]), whose arguments are the parameter's type, a tuple of them, or `()`. Each
///   service has its own module, so two services in one module may both have a `get`;
/// - `GeometryClient`, with a method per call taking the arguments by value and giving a
///   [`Request`](crate::Request) (or a [`OneWay`](crate::OneWay)): `.await` it, or first
///   set `.segments(..)`, `.deadline(..)` or `.reply()`. `GeometryClient::new(caller)`
///   (or `From`) takes a [`Peer`](crate::Peer) or a [`Reconnecting`](crate::Reconnecting)
///   client;
/// - `GeometryServer`, a trait with a method per call, each taking the call's
///   [`Context`](crate::Context) and the arguments, and `into_router()`: a server that
///   leaves a method out does not compile.
///
/// Methods may have any name a Rust method may have (`r#type` travels as `type`). A
/// method named `new`, `caller` or `into_router` takes that name from the helper: build
/// the client with `GeometryClient::from(peer)` and the router with
/// `Geometry::router(server)`. Two methods with one id or one name (or names that make one
/// type name, `put_file` and `put__file`), a one-way method with a result, a parameter
/// named `cx` (the handler's context), and a borrowed argument or result (`&str`, `&[u8]`:
/// they travel by value, so write `String`, or `Vec<u8>`, or send `bytes::Bytes` as a
/// segment) fail to compile, each error pointing at the method's declaration.
///
/// Arguments and results are anything serde can carry: derive `Serialize` and
/// `Deserialize` through [`volley_rpc::serde`](crate::serde) with
/// `#[serde(crate = "volley_rpc::serde")]`, or name `serde` yourself.
///
/// # What stays compatible
/// Two builds of a service connect whatever methods each has, as long as both name the
/// same service (its name is checked at the hello). Each call is then checked against
/// the other end's method table before it is sent:
/// - **Adding a method** is compatible: an older peer's calls never name it, and a call
///   of it to an older peer fails alone with [`CallError::Unimplemented`](crate::CallError::Unimplemented).
/// - **Removing a method** is compatible the same way; never reuse its id.
/// - **Reordering** methods, renaming one, or changing its docs is compatible: calls go
///   by id.
/// - **Changing a method's argument or result types, or its kind** (sync, one-way) makes
///   it a different method: calls of it fail alone with
///   [`CallError::TypesDiffer`](crate::CallError::TypesDiffer), naming both fingerprints.
///   Types are compared as written in the declaration (`u64`, `Point`): a change inside a
///   struct you declare elsewhere is not seen, so give a changed struct a new name, or
///   the method a new id.
///
/// A peer of a build from before method tables compares the whole service's
/// [fingerprint](Service::FINGERPRINT) (every id, kind, name and type) at the hello
/// instead, and refuses any difference.
#[macro_export]
macro_rules! service {
    ($($declaration:tt)*) => {
        $crate::__private::service! { $crate; $($declaration)* }
    };
}

#[cfg(test)]
#[allow(dead_code)]
mod tests {
    use super::*;

    crate::service! {
        /// A.
        pub(crate) service One {
            /// a.
            1 => fn a(x: u32) -> u32;
            /// b.
            2 => oneway fn b(s: String);
        }
    }

    mod other {
        crate::service! {
            /// The same names, one type changed.
            pub(crate) service One {
                /// a.
                1 => fn a(x: u64) -> u32;
                /// b.
                2 => oneway fn b(s: String);
            }
        }
    }

    #[test]
    fn fingerprints_see_types_and_ids() {
        assert_ne!(One::FINGERPRINT, other::One::FINGERPRINT);
        assert_eq!(One::method_name(2), Some("b"));
        assert_eq!(One::method_name(3), None);
        const { assert!(one::B::ONE_WAY && !one::A::ONE_WAY) };
        assert_ne!(fingerprint(&["ab", "c"]), fingerprint(&["a", "bc"]));
    }
}

/// A result and the bulk segments to send beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply<T> {
    /// The result.
    pub value: T,
    /// Bulk segments, sent uncopied.
    pub segments: Vec<Bytes>,
}

impl<T> Reply<T> {
    /// A result without segments.
    pub fn new(value: T) -> Self {
        Self {
            value,
            segments: Vec::new(),
        }
    }

    /// A result with bulk segments.
    pub fn with_segments(value: T, segments: Vec<Bytes>) -> Self {
        Self { value, segments }
    }
}

impl<T> From<T> for Reply<T> {
    fn from(value: T) -> Self {
        Self::new(value)
    }
}

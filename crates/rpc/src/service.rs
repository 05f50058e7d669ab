//! Services: one definition, shared by both ends, checked at compile time.
//!
//! A service is a set of methods; each method has an explicit id (never its position in
//! the list), a name, an argument type and a result type. [`service!`](crate::service)
//! declares one. Both ends name the same service type, so a call to a method of another
//! service does not compile, and the hello compares the service's
//! [`fingerprint`](Service::FINGERPRINT) so that two builds that disagree fail at once.

use serde::Serialize;
use serde::de::DeserializeOwned;

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

/// Whether every id in `ids` is distinct (checked at compile time by
/// [`service!`](crate::service)).
#[doc(hidden)]
pub const fn distinct(ids: &[u32]) -> bool {
    let mut i = 0;
    while i < ids.len() {
        let mut j = i + 1;
        while j < ids.len() {
            if ids[i] == ids[j] {
                return false;
            }
            j += 1;
        }
        i += 1;
    }
    true
}

/// Declares a service and its methods.
///
/// ```
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// pub struct Point { pub x: i32, pub y: i32 }
///
/// volley_rpc::service! {
///     /// Geometry on the board.
///     pub service Geometry {
///         /// Adds two numbers.
///         1 => Add((u32, u32)) -> u64;
///         /// Mirrors a point.
///         7 => Mirror(Point) -> Point;
///     }
/// }
///
/// use volley_rpc::{Method, Service};
/// assert_eq!(<Mirror as Method>::ID, 7);
/// assert_eq!(Geometry::method_name(1), Some("Add"));
/// ```
///
/// Each method becomes a unit struct implementing [`Method`]; the service, a unit struct
/// implementing [`Service`]. Two methods with one id fail to compile.
#[macro_export]
macro_rules! service {
    (
        $(#[$meta:meta])*
        $vis:vis service $service:ident {
            $(
                $(#[$mmeta:meta])*
                $id:literal => $method:ident ( $args:ty ) -> $output:ty ;
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default)]
        $vis struct $service;

        impl $crate::Service for $service {
            const NAME: &'static str = stringify!($service);
            const FINGERPRINT: u64 = $crate::service::fingerprint(&[
                stringify!($service),
                $( stringify!($id), stringify!($method), stringify!($args), stringify!($output), )*
            ]);
            const METHODS: &'static [(u32, &'static str)] = &[
                $( ($id, stringify!($method)), )*
            ];
        }

        const _: () = assert!(
            $crate::service::distinct(&[$($id),*]),
            concat!("two methods of ", stringify!($service), " share an id")
        );

        $(
            $(#[$mmeta])*
            #[derive(Clone, Copy, Debug, Default)]
            $vis struct $method;

            impl $crate::Method for $method {
                type Service = $service;
                type Args = $args;
                type Output = $output;
                const ID: u32 = $id;
                const NAME: &'static str = stringify!($method);
            }
        )*
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
            1 => A(u32) -> u32;
            /// b.
            2 => B(String) -> ();
        }
    }

    mod other {
        crate::service! {
            /// The same names, one type changed.
            pub(crate) service One {
                /// a.
                1 => A(u64) -> u32;
                /// b.
                2 => B(String) -> ();
            }
        }
    }

    #[test]
    fn fingerprints_see_types_and_ids() {
        assert_ne!(One::FINGERPRINT, other::One::FINGERPRINT);
        assert_eq!(One::method_name(2), Some("B"));
        assert_eq!(One::method_name(3), None);
        assert!(distinct(&[1, 2, 3]));
        assert!(!distinct(&[1, 2, 1]));
        assert_ne!(fingerprint(&["ab", "c"]), fingerprint(&["a", "bc"]));
    }
}

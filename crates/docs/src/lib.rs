//! The code blocks of volley's README and of its guides under `docs/`, compiled and run as
//! doctests (`cargo test -p volley-docs`) so that no example in the docs rots. A crate of
//! its own, so that no library dev-depends on the others for them; `cargo xtask test
//! tidy` fails if a Markdown file with Rust code blocks is not included here.

/// The README's examples.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct Readme;

/// The SpiNNaker guide's examples.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/spinnaker.md")]
pub struct SpinnakerGuide;

/// The Python guide's examples.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/python.md")]
pub struct PythonGuide;

/// The SFTP guide's examples.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/sftp.md")]
pub struct SftpGuide;

/// The RPC guide's examples.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/rpc.md")]
pub struct RpcGuide;

/// The bench guide's examples.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/bench.md")]
pub struct BenchGuide;

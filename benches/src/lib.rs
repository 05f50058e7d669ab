//! volley's benchmark suites as a library: `volley-bench` and `volley-bench-plain` (this
//! crate's binaries) run them, and the TLS rows (`benches/tls`, a crate outside the
//! workspace so that its peers build only for the bench) measure with the same harness
//! and the rpc suite's own workloads and peers.
//!
//! ```no_run
//! // What `volley-bench-plain` is: the suites, with no allocation counter.
//! fn main() -> std::process::ExitCode {
//!     volley_benches::cli::main()
//! }
//! ```

mod charts;
pub mod cli;
mod compare;
pub mod harness;
pub mod suites;

//! `volley` for Python: the native half of the `volley` package (`volley._volley`),
//! built by maturin from `crates/python`. The package's Python half
//! (`python/volley/__init__.py`) defines the exceptions; this half raises them.
//!
//! Every transfer runs on the board's own tokio runtime with the GIL released
//! (`Python::detach`); the caller waits in slices of at most [`SLICE`], checking for
//! signals between them, so other Python threads run during a transfer and Ctrl-C raises
//! `KeyboardInterrupt` within a slice (and the drain of what is in flight).
//!
//! # Example
//!
//! ```
//! // From Python (after `pip install ./crates/python`):
//! //     board = volley.Board("127.0.0.2")
//! //     board.write(0, 0, 0, 0x60000000, b"hello")
//! // The same calls from Rust go through `volley_transport_udp::ScpClient`.
//! assert_eq!(volley_python::SLICE.as_millis(), 100);
//! ```

mod args;
mod board;
mod buffer;
mod errors;
mod machine;
mod methods;
mod transfer;

use core::time::Duration;

use pyo3::prelude::*;

/// The longest a caller waits with the GIL released before it checks for signals.
pub const SLICE: Duration = Duration::from_millis(100);

/// The bytes written so far that could not be read in place (a strided view) and were
/// copied: the tests' hook for proving that a contiguous buffer is not.
#[pyfunction]
#[pyo3(name = "_copied_bytes")]
fn copied_bytes() -> u64 {
    transfer::copied_bytes()
}

/// The `volley._volley` module.
#[pymodule]
#[pyo3(name = "_volley")]
fn volley_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<board::Board>()?;
    m.add_class::<machine::Machine>()?;
    m.add_function(wrap_pyfunction!(copied_bytes, m)?)?;
    Ok(())
}

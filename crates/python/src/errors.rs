//! volley's errors as the package's exceptions (defined in `volley/__init__.py`):
//! timeouts as `volley.TimeoutError`, a closed port as `volley.ConnectionRefusedError`,
//! a board's error code as `volley.ScpError` with `.rc`, anything else as
//! `volley.VolleyError`; each message is the Rust error's.

use pyo3::call::PyCallArgs;
use pyo3::prelude::*;
use volley_transport_udp::{MachineError, NoReply, ScpError};

/// Raises the package exception `name` with `args`; if the package cannot be imported
/// (the native module loaded on its own), a `RuntimeError` with the message.
fn raise<'py>(py: Python<'py>, name: &str, args: impl PyCallArgs<'py>, message: &str) -> PyErr {
    let class = py.import("volley").and_then(|m| m.getattr(name));
    match class.and_then(|class| class.call1(args)) {
        Ok(error) => PyErr::from_value(error),
        Err(_) => pyo3::exceptions::PyRuntimeError::new_err(message.to_owned()),
    }
}

/// The exception for an SCP error.
pub(crate) fn scp(py: Python<'_>, error: &ScpError) -> PyErr {
    classify(py, error, error.to_string())
}

/// The exception for a machine's error: a board's SCP error as [`scp`] raises it, with
/// the board named in the message.
pub(crate) fn machine(py: Python<'_>, error: &MachineError) -> PyErr {
    let message = error.to_string();
    match error {
        MachineError::Board { source, .. } => classify(py, source, message),
        _ => raise(py, "VolleyError", (&message,), &message),
    }
}

/// The exception for `error`, with `message`.
fn classify(py: Python<'_>, error: &ScpError, message: String) -> PyErr {
    match error {
        ScpError::Timeout {
            why: NoReply::Refused { .. },
            ..
        }
        | ScpError::Refused { .. } => raise(py, "ConnectionRefusedError", (&message,), &message),
        ScpError::Timeout { .. } => raise(py, "TimeoutError", (&message,), &message),
        ScpError::Rc { rc, .. } => {
            let name = rc.name().unwrap_or("unknown");
            raise(py, "ScpError", (&message, (name, rc.0)), &message)
        }
        _ => raise(py, "VolleyError", (&message,), &message),
    }
}

/// A `volley.VolleyError` with `message` (an argument out of range, say).
pub(crate) fn volley(py: Python<'_>, message: &str) -> PyErr {
    raise(py, "VolleyError", (message,), message)
}

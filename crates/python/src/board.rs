//! `volley.Board`: one board over UDP through `ScpClient`, each call a transfer with the
//! GIL released.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use volley_transport_udp::{ScpClient, target};

use pyo3::exceptions::PyValueError;

use crate::args::{self, chip, int, word};
use crate::errors;
use crate::transfer::{Shared, options, run, runtime, stats_dict};

/// One SpiNNaker board (or `volley emulate`) over UDP, with many requests in flight.
///
/// Board(host, port=None, window="auto", timeout_ms=None, tries=8)
///
/// Args:
///     host: the board: a name or an address, with or without a port (`"10.0.0.2"`,
///         `"board-7:17893"`, `"[fe80::2]:17893"`).
///     port: the port, if `host` names none (default 17893, SC&MP's).
///     window: requests kept in flight, 1 to 1024, or `"auto"` to size it from the
///         board's tag pool.
///     timeout_ms: a fixed retransmit timeout in ms (1 to 3600000); None estimates it
///         from the round-trip time.
///     tries: sends per request before it fails, 1 to 1000.
///
/// Raises ValueError or TypeError for a bad argument, volley.ConnectionRefusedError if
/// nothing listens there. Use it as a context manager, or call close().
#[pyclass(module = "volley")]
pub(crate) struct Board {
    shared: Shared<ScpClient>,
    target: String,
}

/// `host`, with `port` if given (which must agree with a port in `host`), as one target.
pub(crate) fn target_of(host: &str, port: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
    // A port of 0 is never read from text: it means `host` names none.
    let (name, in_host) =
        target::split(host, 0).map_err(|why| PyValueError::new_err(format!("host: {why}")))?;
    let port = match (port, in_host) {
        (None, 0) => volley_proto::scp::PORT,
        (None, named) => named,
        (Some(port), named) => {
            let port = int(port, "port", 1, 65535)? as u16;
            if named != 0 && port != named {
                return Err(PyValueError::new_err(format!(
                    "host {host:?} names port {named}, and port is {port}"
                )));
            }
            port
        }
    };
    Ok(target::join(name, port))
}

crate::methods::shared_methods!(Board {
    #[new]
    #[pyo3(
        signature = (host, port = None, window = None, timeout_ms = None, tries = None),
        text_signature = "(host, port=None, window='auto', timeout_ms=None, tries=8)"
    )]
    fn new(
        py: Python<'_>,
        host: &str,
        port: Option<Bound<'_, PyAny>>,
        window: Option<Bound<'_, PyAny>>,
        timeout_ms: Option<Bound<'_, PyAny>>,
        tries: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let target = target_of(host, port.as_ref())?;
        let config = options(window.as_ref(), timeout_ms.as_ref(), tries.as_ref())?;
        let runtime = runtime(py)?;
        let connect = ScpClient::connect_host(&target, false, config);
        let client = run(py, &runtime, connect)?.map_err(|e| errors::scp(py, &e))?;
        Ok(Self {
            shared: Shared::new(runtime, client, format!("Board('{target}')")),
            target,
        })
    }

    /// stats() -> dict
    ///
    /// The client's counters: `sent`, `retransmits`, `timeouts`, `duplicates`, `window`,
    /// `srtt_us` (after any transfer another thread is running on this board).
    #[pyo3(text_signature = "(self)")]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (stats, window) = self.shared.with(py, |c| (c.stats(), c.window_size()))?;
        stats_dict(py, &stats, window)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.shared.with(py, ScpClient::window_size) {
            Ok(window) => format!("Board('{}', window={window})", self.target),
            Err(_) => format!("Board('{}', closed)", self.target),
        }
    }
});

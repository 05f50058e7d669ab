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
        (None, 0) => volley_proto::wire::scp::PORT,
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

#[pymethods]
impl Board {
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

    /// read(x, y, p, address, length) -> bytes
    ///
    /// Reads `length` bytes from `address` on core `p` of chip (`x`, `y`).
    #[pyo3(text_signature = "(self, x, y, p, address, length)")]
    fn read<'py>(
        &self,
        py: Python<'py>,
        x: Bound<'py, PyAny>,
        y: Bound<'py, PyAny>,
        p: Bound<'py, PyAny>,
        address: Bound<'py, PyAny>,
        length: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let chip = chip(&x, &y, &p)?;
        self.shared
            .read(py, chip, args::address(&address)?, args::length(&length)?)
    }

    /// write(x, y, p, address, data) -> None
    ///
    /// Writes `data` (bytes, bytearray, memoryview, array.array, a numpy array: anything
    /// with the buffer protocol) to `address` on core `p` of chip (`x`, `y`). Bytes and
    /// C-contiguous buffers are read in place; a strided view is copied first.
    #[pyo3(text_signature = "(self, x, y, p, address, data)")]
    fn write(
        &self,
        py: Python<'_>,
        x: Bound<'_, PyAny>,
        y: Bound<'_, PyAny>,
        p: Bound<'_, PyAny>,
        address: Bound<'_, PyAny>,
        data: Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let chip = chip(&x, &y, &p)?;
        self.shared.write(py, chip, args::address(&address)?, &data)
    }

    /// fill(x, y, p, address, value, length) -> None
    ///
    /// Fills `length` bytes (a multiple of 4) from `address` (word aligned) with the
    /// 32-bit word `value`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(text_signature = "(self, x, y, p, address, value, length)")]
    fn fill(
        &self,
        py: Python<'_>,
        x: Bound<'_, PyAny>,
        y: Bound<'_, PyAny>,
        p: Bound<'_, PyAny>,
        address: Bound<'_, PyAny>,
        value: Bound<'_, PyAny>,
        length: Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let chip = chip(&x, &y, &p)?;
        let length = int(&length, "length", 0, u64::from(u32::MAX))?;
        self.shared.fill(
            py,
            chip,
            args::address(&address)?,
            word(&value, "value")?,
            length,
        )
    }

    /// sver(x=0, y=0, p=0) -> dict
    ///
    /// The software version of core `p` of chip (`x`, `y`): a dict with `name`,
    /// `version`, `x`, `y`, `p`, `buffer_size`.
    #[pyo3(signature = (x = None, y = None, p = None), text_signature = "(self, x=0, y=0, p=0)")]
    fn sver<'py>(
        &self,
        py: Python<'py>,
        x: Option<Bound<'py, PyAny>>,
        y: Option<Bound<'py, PyAny>>,
        p: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let zero = 0u8.into_pyobject(py)?.into_any();
        let chip = chip(
            x.as_ref().unwrap_or(&zero),
            y.as_ref().unwrap_or(&zero),
            p.as_ref().unwrap_or(&zero),
        )?;
        self.shared.sver(py, chip)
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

    /// close() -> None
    ///
    /// Closes the board's socket, after any transfer another thread is running. Calls
    /// after it raise ValueError; closing twice is allowed.
    #[pyo3(text_signature = "(self)")]
    fn close(&self, py: Python<'_>) {
        self.shared.close(py);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.shared.close(py);
        false
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.shared.with(py, ScpClient::window_size) {
            Ok(window) => format!("Board('{}', window={window})", self.target),
            Err(_) => format!("Board('{}', closed)", self.target),
        }
    }
}

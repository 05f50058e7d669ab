//! `volley.Board`: one board over UDP through `ScpClient`, each call a transfer with the
//! GIL released.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use volley_proto::window::{MAX_TIMEOUT, MAX_WINDOW, Rto};
use volley_proto::wire::scp::Version;
use volley_transport_udp::{ScpClient, ScpConfig, WindowSize};

use crate::errors;
use crate::transfer::{Shared, chip, run, runtime};

/// One SpiNNaker board (or `volley emulate`) over UDP, with many requests in flight.
#[pyclass(module = "volley")]
pub(crate) struct Board {
    shared: Shared<ScpClient>,
}

#[pymethods]
impl Board {
    /// Connects to the board at `host` (a name or an address) and `port`. `window` is
    /// the requests kept in flight, 1 to 1024, or `"auto"` to size it from the board's
    /// tag pool; `timeout_ms` a fixed retransmit timeout (default: from the RTT);
    /// `tries` the sends per request before it fails.
    #[new]
    #[pyo3(signature = (host, port = 17893, window = None, timeout_ms = None, tries = 8))]
    fn new(
        py: Python<'_>,
        host: &str,
        port: u16,
        window: Option<Bound<'_, PyAny>>,
        timeout_ms: Option<u64>,
        tries: u32,
    ) -> PyResult<Self> {
        let window = match window {
            None => WindowSize::Auto,
            Some(w) if w.extract::<&str>().is_ok_and(|s| s == "auto") => WindowSize::Auto,
            Some(w) => match w.extract::<usize>() {
                Ok(n) if (1..=MAX_WINDOW).contains(&n) => WindowSize::Fixed(n),
                _ => {
                    return Err(errors::volley(
                        py,
                        &format!("window takes 1 to {MAX_WINDOW} or \"auto\", not {w}"),
                    ));
                }
            },
        };
        let mut config = ScpConfig {
            window,
            max_tries: tries,
            ..ScpConfig::default()
        };
        if let Some(ms) = timeout_ms {
            if ms == 0 || ms > MAX_TIMEOUT.as_millis() {
                return Err(errors::volley(
                    py,
                    &format!(
                        "timeout_ms takes 1 to {}, not {ms}",
                        MAX_TIMEOUT.as_millis()
                    ),
                ));
            }
            config.rto = Rto::Fixed(volley_proto::time::Duration::from_millis(ms));
        }
        let runtime = runtime(py)?;
        let target = format!("{host}:{port}");
        let connect = ScpClient::connect_host(&target, false, config);
        let client = run(py, &runtime, connect)?.map_err(|e| errors::scp(py, &e))?;
        Ok(Self {
            shared: Shared::new(runtime, client),
        })
    }

    /// Reads `length` bytes from `address` on core `p` of chip (`x`, `y`).
    fn read<'py>(
        &self,
        py: Python<'py>,
        x: u8,
        y: u8,
        p: u8,
        address: u32,
        length: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.shared.read(py, chip(py, x, y, p)?, address, length)
    }

    /// Writes `data` (any object with the buffer protocol: bytes, bytearray, memoryview,
    /// a numpy array) to `address` on core `p` of chip (`x`, `y`). Bytes and C-contiguous
    /// buffers are read in place (do not change them from another thread until this
    /// returns); a strided view is copied first.
    fn write(
        &self,
        py: Python<'_>,
        x: u8,
        y: u8,
        p: u8,
        address: u32,
        data: Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.shared.write(py, chip(py, x, y, p)?, address, &data)
    }

    /// Fills `length` bytes (a multiple of 4) from `address` (word aligned) with the
    /// word `value`.
    #[allow(clippy::too_many_arguments)]
    fn fill(
        &self,
        py: Python<'_>,
        x: u8,
        y: u8,
        p: u8,
        address: u32,
        value: u32,
        length: u32,
    ) -> PyResult<()> {
        let chip = chip(py, x, y, p)?;
        self.shared.call(py, move |mut client| async move {
            client.fill(chip, address, value, length).await
        })
    }

    /// The software version of core `p` of chip (`x`, `y`): a dict with `name`,
    /// `version`, `x`, `y`, `p`, `buffer_size`.
    #[pyo3(signature = (x = 0, y = 0, p = 0))]
    fn sver<'py>(&self, py: Python<'py>, x: u8, y: u8, p: u8) -> PyResult<Bound<'py, PyDict>> {
        let chip = chip(py, x, y, p)?;
        let version = self
            .shared
            .call(py, move |mut client| async move { client.sver(chip).await })?;
        let dict = PyDict::new(py);
        dict.set_item("name", &version.name)?;
        let text = match version.version {
            Version::Semantic {
                major,
                minor,
                patch,
            } => format!("{major}.{minor}.{patch}"),
            Version::Legacy(v) => format!("{}.{:02}", v / 100, v % 100),
        };
        dict.set_item("version", text)?;
        dict.set_item("x", version.core.x)?;
        dict.set_item("y", version.core.y)?;
        dict.set_item("p", version.core.cpu)?;
        dict.set_item("buffer_size", version.buffer_size)?;
        Ok(dict)
    }

    /// The client's counters: sent, retransmits, timeouts, duplicates, window, srtt_us
    /// (after any transfer another thread is running on this board).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let client = self.shared.client.clone();
        let client = py.detach(|| client.blocking_lock_owned());
        let s = client.stats();
        let dict = PyDict::new(py);
        dict.set_item("sent", s.sent)?;
        dict.set_item("retransmits", s.retransmits)?;
        dict.set_item("timeouts", s.timeouts)?;
        dict.set_item("duplicates", s.duplicates)?;
        dict.set_item("window", client.window_size())?;
        dict.set_item("srtt_us", s.srtt.map(|d| d.as_micros()))?;
        Ok(dict)
    }
}

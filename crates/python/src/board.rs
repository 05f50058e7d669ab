//! `volley.Board`: one board over UDP through `ScpClient`, each call a transfer with the
//! GIL released.

use core::future::Future;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict};
use tokio::runtime::Runtime;
use tokio::sync::Mutex;
use volley_proto::window::{MAX_TIMEOUT, MAX_WINDOW, Rto};
use volley_proto::wire::scp::Version;
use volley_proto::wire::sdp::Address;
use volley_transport_udp::{ScpClient, ScpConfig, ScpError, WindowSize, check_range};

use crate::{SLICE, errors};

/// One SpiNNaker board (or `volley emulate`) over UDP, with many requests in flight.
#[pyclass(module = "volley")]
pub(crate) struct Board {
    runtime: Runtime,
    /// Taken inside each transfer, with the GIL released, so a second Python thread
    /// using the same board waits for the first without holding the GIL.
    client: Arc<Mutex<ScpClient>>,
}

/// Runs `work` on `runtime` with the GIL released, in slices of at most [`SLICE`],
/// checking for signals between them (a signal's exception abandons the work).
pub(crate) fn run_any<T, E, F>(py: Python<'_>, runtime: &Runtime, work: F) -> PyResult<Result<T, E>>
where
    F: Future<Output = Result<T, E>> + Send,
    T: Send,
    E: Send,
{
    let mut work = core::pin::pin!(work);
    loop {
        let step = py.detach(|| {
            runtime.block_on(async { tokio::time::timeout(SLICE, work.as_mut()).await })
        });
        match step {
            Ok(done) => return Ok(done),
            Err(_) => py.check_signals()?,
        }
    }
}

pub(crate) fn chip(py: Python<'_>, x: u8, y: u8, p: u8) -> PyResult<Address> {
    if p > 31 {
        return Err(errors::volley(
            py,
            &format!("core {p} is out of range (0..=31)"),
        ));
    }
    Ok(Address::core(x, y, p))
}

/// The bytes of `data`: `bytes` and `bytearray` read directly, anything else with the
/// buffer protocol (memoryview, a numpy array) through `bytes(data)`. Each is copied
/// once, while the GIL is held, so nothing can change it during the transfer.
pub(crate) fn bytes_of(data: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = data.cast::<PyBytes>() {
        return Ok(bytes.as_bytes().to_vec());
    }
    if let Ok(array) = data.cast::<PyByteArray>() {
        return Ok(array.to_vec());
    }
    let builtins = data.py().import("builtins")?;
    let bytes = builtins.getattr("bytes")?.call1((data,))?;
    Ok(bytes.cast::<PyBytes>()?.as_bytes().to_vec())
}

/// A runtime for one board's or machine's transfers.
pub(crate) fn runtime(py: Python<'_>) -> PyResult<Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| errors::volley(py, &format!("cannot start a runtime: {e}")))
}

/// The result of a transfer, or volley's exception.
fn done<T>(py: Python<'_>, result: Result<T, ScpError>) -> PyResult<T> {
    result.map_err(|e| errors::scp(py, &e))
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
        let client = done(
            py,
            run_any(
                py,
                &runtime,
                ScpClient::connect_host(&target, false, config),
            )?,
        )?;
        Ok(Self {
            runtime,
            client: Arc::new(Mutex::new(client)),
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
        let chip = chip(py, x, y, p)?;
        check_range(address, length).map_err(|e| errors::scp(py, &e))?;
        let mut buf = vec![0u8; length];
        let client = self.client.clone();
        let work = async move {
            client
                .lock()
                .await
                .read(chip, address, &mut buf)
                .await
                .map(|()| buf)
        };
        let buf = done(py, run_any(py, &self.runtime, work)?)?;
        Ok(PyBytes::new(py, &buf))
    }

    /// Writes `data` (any object with the buffer protocol: bytes, bytearray, memoryview,
    /// a numpy array) to `address` on core `p` of chip (`x`, `y`).
    fn write(
        &self,
        py: Python<'_>,
        x: u8,
        y: u8,
        p: u8,
        address: u32,
        data: Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let chip = chip(py, x, y, p)?;
        let bytes = bytes_of(&data)?;
        check_range(address, bytes.len()).map_err(|e| errors::scp(py, &e))?;
        let client = self.client.clone();
        let work = async move { client.lock().await.write(chip, address, &bytes).await };
        done(py, run_any(py, &self.runtime, work)?)
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
        let client = self.client.clone();
        let work = async move { client.lock().await.fill(chip, address, value, length).await };
        done(py, run_any(py, &self.runtime, work)?)
    }

    /// The software version of core `p` of chip (`x`, `y`): a dict with `name`,
    /// `version`, `x`, `y`, `p`, `buffer_size`.
    #[pyo3(signature = (x = 0, y = 0, p = 0))]
    fn sver<'py>(&self, py: Python<'py>, x: u8, y: u8, p: u8) -> PyResult<Bound<'py, PyDict>> {
        let chip = chip(py, x, y, p)?;
        let client = self.client.clone();
        let work = async move { client.lock().await.sver(chip).await };
        let version = done(py, run_any(py, &self.runtime, work)?)?;
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
        let client = self.client.clone();
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

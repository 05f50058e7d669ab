//! What `volley.Board` and `volley.Machine` share: a runtime of their own, the client
//! behind an async mutex taken inside each transfer (so a second Python thread waits for
//! the first without holding the GIL), transfers run with the GIL released in slices of
//! at most [`SLICE`] with a signal check between them, and the reads and writes both
//! classes offer.

use core::future::Future;
use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use tokio::runtime::Runtime;
use tokio::sync::Mutex;
use volley_proto::scp::Version;
use volley_proto::scp::sdp::Address;
use volley_proto::scp::window::{MAX_TIMEOUT, MAX_WINDOW, Rto};
use volley_transport_udp::{
    ClientStats, Machine, MachineError, ScpClient, ScpConfig, ScpError, SoftwareVersion, WindowSize,
};

use crate::buffer::Exported;
use crate::{SLICE, errors};

/// A board's or a machine's client: what reads and writes go through, and how its
/// errors are raised.
pub(crate) trait Remote: Send + 'static {
    /// What its operations fail with.
    type Error: Send;

    /// Reads `buf.len()` bytes from `address` on `chip`.
    fn read(
        &mut self,
        chip: Address,
        address: u32,
        buf: &mut [u8],
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Writes `data` to `address` on `chip`.
    fn write(
        &mut self,
        chip: Address,
        address: u32,
        data: &[u8],
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Writes `len` bytes read from `source` to `address` on `chip`.
    fn write_from(
        &mut self,
        chip: Address,
        address: u32,
        len: u32,
        source: &mut (dyn std::io::Read + Send),
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Fills `len` bytes from `address` on `chip` with the word `value`.
    fn fill(
        &mut self,
        chip: Address,
        address: u32,
        value: u32,
        len: u32,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The software version of `chip`.
    fn sver(
        &mut self,
        chip: Address,
    ) -> impl Future<Output = Result<SoftwareVersion, Self::Error>> + Send;

    /// The package's exception for `error`.
    fn raise(py: Python<'_>, error: &Self::Error) -> PyErr;
}

/// [`Remote`] for a client whose own `read`/`write` have the trait's shape: they
/// forward, and `$raise` turns `$error` into the package's exception.
macro_rules! remote {
    ($client:ty, $error:ty, $raise:path) => {
        impl Remote for $client {
            type Error = $error;

            fn read(
                &mut self,
                chip: Address,
                address: u32,
                buf: &mut [u8],
            ) -> impl Future<Output = Result<(), $error>> + Send {
                Self::read(self, chip, address, buf)
            }

            fn write(
                &mut self,
                chip: Address,
                address: u32,
                data: &[u8],
            ) -> impl Future<Output = Result<(), $error>> + Send {
                Self::write(self, chip, address, data)
            }

            fn write_from(
                &mut self,
                chip: Address,
                address: u32,
                len: u32,
                source: &mut (dyn std::io::Read + Send),
            ) -> impl Future<Output = Result<(), $error>> + Send {
                Self::write_from(self, chip, address, len, source)
            }

            fn fill(
                &mut self,
                chip: Address,
                address: u32,
                value: u32,
                len: u32,
            ) -> impl Future<Output = Result<(), $error>> + Send {
                Self::fill(self, chip, address, value, len)
            }

            fn sver(
                &mut self,
                chip: Address,
            ) -> impl Future<Output = Result<SoftwareVersion, $error>> + Send {
                Self::sver(self, chip)
            }

            fn raise(py: Python<'_>, error: &$error) -> PyErr {
                $raise(py, error)
            }
        }
    };
}

remote!(ScpClient, ScpError, errors::scp);
remote!(Machine, MachineError, errors::machine);

/// A client, the runtime its transfers run on, and the lock that serialises them; the
/// client is gone once closed.
pub(crate) struct Shared<R> {
    runtime: Runtime,
    client: Arc<Mutex<Option<R>>>,
    /// What it is, for errors after it is closed (`Board('127.0.0.2:17893')`).
    what: String,
}

/// A runtime for one board's or machine's transfers.
pub(crate) fn runtime(py: Python<'_>) -> PyResult<Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| errors::volley(py, &format!("cannot start a runtime: {e}")))
}

/// Runs `work` on `runtime` with the GIL released, in slices of at most [`SLICE`],
/// checking for signals between them (a signal's exception abandons the work).
pub(crate) fn run<T, E, F>(py: Python<'_>, runtime: &Runtime, work: F) -> PyResult<Result<T, E>>
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

/// Bytes copied because a caller's buffer could not be read in place (a strided view):
/// what the tests' counting hook (`volley._volley._copied_bytes`) reports.
static COPIED: AtomicU64 = AtomicU64::new(0);

/// The bytes copied so far because a buffer could not be read in place.
pub(crate) fn copied_bytes() -> u64 {
    COPIED.load(Ordering::Relaxed)
}

/// A write's bytes, read in place wherever Python allows: `bytes` (immutable) through
/// PyO3's safe view, any C-contiguous buffer (`bytearray`, `memoryview`, a numpy array)
/// exported to us for the transfer; anything else with the buffer protocol copied once,
/// with the GIL held.
pub(crate) enum Data<'py> {
    /// A `bytes` object, the caller's or the copy.
    Bytes(Bound<'py, PyBytes>),
    /// A contiguous buffer, borrowed until this is dropped.
    Exported(Exported<'py>),
}

impl<'py> Data<'py> {
    /// `data`'s bytes; a `TypeError` if it has no buffer protocol.
    pub(crate) fn of(data: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(bytes) = data.cast::<PyBytes>() {
            return Ok(Self::Bytes(bytes.clone()));
        }
        if let Some(exported) = Exported::of(data) {
            return Ok(Self::Exported(exported));
        }
        // `memoryview` refuses what has no buffer (an int, which `bytes()` would take as
        // a length), and its `tobytes` reads a strided view in order.
        let view = data
            .py()
            .import("builtins")?
            .getattr("memoryview")?
            .call1((data,))?;
        let bytes = view.call_method0("tobytes")?.cast_into::<PyBytes>()?;
        COPIED.fetch_add(bytes.as_bytes().len() as u64, Ordering::Relaxed);
        Ok(Self::Bytes(bytes))
    }

    /// The bytes as an owned or immutable run, for a batch: a buffer Python could
    /// change is copied (by raw copies, counted), `bytes` is not.
    pub(crate) fn settled(self) -> Settled<'py> {
        match self {
            Self::Bytes(bytes) => Settled::Bytes(bytes),
            Self::Exported(exported) => {
                let copy = exported.to_vec();
                COPIED.fetch_add(copy.len() as u64, Ordering::Relaxed);
                Settled::Owned(copy)
            }
        }
    }
}

/// A batch item's bytes, which nothing else can change during the transfer.
pub(crate) enum Settled<'py> {
    /// Immutable `bytes`.
    Bytes(Bound<'py, PyBytes>),
    /// A copy of a mutable buffer.
    Owned(Vec<u8>),
}

impl Settled<'_> {
    /// The bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Self::Bytes(bytes) => bytes.as_bytes(),
            Self::Owned(bytes) => bytes,
        }
    }
}

impl<R: Remote> Shared<R> {
    pub(crate) fn new(runtime: Runtime, client: R, what: String) -> Self {
        Self {
            runtime,
            client: Arc::new(Mutex::new(Some(client))),
            what,
        }
    }

    /// Runs `op` on the client with the GIL released, raising the client's exception if
    /// it fails, or `ValueError` once it is closed.
    pub(crate) fn call<T, Fut>(
        &self,
        py: Python<'_>,
        op: impl FnOnce(tokio::sync::OwnedMappedMutexGuard<Option<R>, R>) -> Fut + Send,
    ) -> PyResult<T>
    where
        Fut: Future<Output = Result<T, R::Error>> + Send,
        T: Send,
    {
        let client = self.client.clone();
        // Err(()) when closed: the client's own error stays inside.
        let lock_then_op = async move {
            let guard = client.lock_owned().await;
            match tokio::sync::OwnedMutexGuard::try_map(guard, Option::as_mut) {
                Ok(client) => Ok(op(client).await),
                Err(_) => Err(()),
            }
        };
        match run(py, &self.runtime, lock_then_op)? {
            Ok(result) => result.map_err(|e| R::raise(py, &e)),
            Err(()) => Err(self.closed()),
        }
    }

    /// Runs `f` on the client with the GIL held (for its counters), after any transfer
    /// another thread is running.
    pub(crate) fn with<T>(&self, py: Python<'_>, f: impl FnOnce(&R) -> T) -> PyResult<T> {
        let client = self.client.clone();
        let guard = py.detach(|| client.blocking_lock_owned());
        guard.as_ref().map(f).ok_or_else(|| self.closed())
    }

    /// Closes the client (its socket), after any transfer another thread is running;
    /// closing twice is allowed.
    pub(crate) fn close(&self, py: Python<'_>) {
        let client = self.client.clone();
        let mut guard = py.detach(|| client.blocking_lock_owned());
        guard.take();
    }

    fn closed(&self) -> PyErr {
        PyValueError::new_err(format!("{} is closed", self.what))
    }

    /// Fills `length` bytes from `address` on `chip` with `value`; both must be multiples
    /// of 4, checked before anything is sent.
    pub(crate) fn fill(
        &self,
        py: Python<'_>,
        chip: Address,
        address: u32,
        value: u32,
        length: u64,
    ) -> PyResult<()> {
        if address % 4 != 0 {
            return Err(PyValueError::new_err(format!(
                "fill: address must be word aligned (a multiple of 4), not {address:#x}"
            )));
        }
        let len = u32::try_from(length)
            .ok()
            .filter(|len| len % 4 == 0)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "fill: length must be a multiple of 4 up to 0xfffffffc, not {length}"
                ))
            })?;
        crate::args::range(address, len as usize)?;
        self.call(py, move |mut client| async move {
            client.fill(chip, address, value, len).await
        })
    }

    /// The software version of `chip`, as a dict.
    pub(crate) fn sver<'py>(&self, py: Python<'py>, chip: Address) -> PyResult<Bound<'py, PyDict>> {
        let version = self.call(py, move |mut client| async move { client.sver(chip).await })?;
        version_dict(py, &version)
    }

    /// Reads `length` bytes from `address` on core `p` of chip (`x`, `y`) into a new
    /// `bytes`; the range is checked before anything is allocated.
    pub(crate) fn read<'py>(
        &self,
        py: Python<'py>,
        chip: Address,
        address: u32,
        length: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        crate::args::range(address, length)?;
        // Read straight into the `bytes` object handed back: no second copy.
        PyBytes::new_with(py, length, |buf| {
            self.call(py, move |mut client| async move {
                client.read(chip, address, buf).await
            })
        })
    }

    /// Writes `data` to `address` on `chip`: `bytes` as it is, any other buffer read
    /// in place by raw copies, a request at a time.
    pub(crate) fn write(
        &self,
        py: Python<'_>,
        chip: Address,
        address: u32,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        match Data::of(data)? {
            Data::Bytes(bytes) => {
                let bytes = bytes.as_bytes();
                crate::args::range(address, bytes.len())?;
                self.call(py, move |mut client| async move {
                    client.write(chip, address, bytes).await
                })
            }
            Data::Exported(exported) => {
                let len = exported.len();
                crate::args::range(address, len)?;
                let mut reader = exported.reader();
                let result = self.call(py, move |mut client| async move {
                    client
                        .write_from(chip, address, len as u32, &mut reader)
                        .await
                });
                // Released only now, after the transfer that read it has ended.
                drop(exported);
                result
            }
        }
    }
}
/// A software version as the dict `sver` returns: `name`, `version`, `x`, `y`, `p`,
/// `buffer_size`.
fn version_dict<'py>(py: Python<'py>, version: &SoftwareVersion) -> PyResult<Bound<'py, PyDict>> {
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

/// A client's counters as the dict `stats` returns.
pub(crate) fn stats_dict<'py>(
    py: Python<'py>,
    s: &ClientStats,
    window: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("sent", s.sent)?;
    dict.set_item("retransmits", s.retransmits)?;
    dict.set_item("timeouts", s.timeouts)?;
    dict.set_item("duplicates", s.duplicates)?;
    dict.set_item("window", window)?;
    dict.set_item("srtt_us", s.srtt.map(|d| d.as_micros()))?;
    Ok(dict)
}

/// The settings `Board` and `Machine` take, each checked: `window` 1 to 1024 or
/// `"auto"` (None), `timeout_ms` 1 to an hour or None (from the RTT), `tries` 1 to 1000.
pub(crate) fn options(
    window: Option<&Bound<'_, PyAny>>,
    timeout_ms: Option<&Bound<'_, PyAny>>,
    tries: Option<&Bound<'_, PyAny>>,
) -> PyResult<ScpConfig> {
    let window = match window {
        None => WindowSize::Auto,
        Some(w) if w.extract::<&str>().is_ok_and(|s| s == "auto") => WindowSize::Auto,
        Some(w) if w.extract::<&str>().is_ok() => {
            return Err(PyValueError::new_err(format!(
                "window must be 1 to {MAX_WINDOW} or \"auto\", not {}",
                w.repr()?
            )));
        }
        Some(w) => WindowSize::Fixed(crate::args::int(w, "window", 1, MAX_WINDOW as u64)? as usize),
    };
    let mut config = ScpConfig {
        window,
        ..ScpConfig::default()
    };
    if let Some(tries) = tries {
        config.max_tries = crate::args::int(tries, "tries", 1, 1000)? as u32;
    }
    if let Some(ms) = timeout_ms {
        let ms = crate::args::int(ms, "timeout_ms", 1, MAX_TIMEOUT.as_millis())?;
        config.rto = Rto::Fixed(volley_proto::time::Duration::from_millis(ms));
    }
    Ok(config)
}

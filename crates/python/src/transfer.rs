//! What `volley.Board` and `volley.Machine` share: a runtime of their own, the client
//! behind an async mutex taken inside each transfer (so a second Python thread waits for
//! the first without holding the GIL), transfers run with the GIL released in slices of
//! at most [`SLICE`] with a signal check between them, and the reads and writes both
//! classes offer.

use core::future::Future;
use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::runtime::Runtime;
use tokio::sync::Mutex;
use volley_proto::wire::sdp::Address;
use volley_transport_udp::{Machine, MachineError, ScpClient, ScpError, check_range};

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

            fn raise(py: Python<'_>, error: &$error) -> PyErr {
                $raise(py, error)
            }
        }
    };
}

remote!(ScpClient, ScpError, errors::scp);
remote!(Machine, MachineError, errors::machine);

/// A client, the runtime its transfers run on, and the lock that serialises them.
pub(crate) struct Shared<R> {
    runtime: Runtime,
    pub(crate) client: Arc<Mutex<R>>,
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

/// Core `p` of chip (`x`, `y`), the core checked.
pub(crate) fn chip(py: Python<'_>, x: u8, y: u8, p: u8) -> PyResult<Address> {
    if p > 31 {
        return Err(errors::volley(
            py,
            &format!("core {p} is out of range (0..=31)"),
        ));
    }
    Ok(Address::core(x, y, p))
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

    /// The bytes to write.
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Self::Bytes(bytes) => bytes.as_bytes(),
            Self::Exported(exported) => exported.as_slice(),
        }
    }
}

impl<R: Remote> Shared<R> {
    pub(crate) fn new(runtime: Runtime, client: R) -> Self {
        Self {
            runtime,
            client: Arc::new(Mutex::new(client)),
        }
    }

    /// Runs `op` on the client with the GIL released, raising the client's exception if
    /// it fails.
    pub(crate) fn call<T, Fut>(
        &self,
        py: Python<'_>,
        op: impl FnOnce(tokio::sync::OwnedMutexGuard<R>) -> Fut + Send,
    ) -> PyResult<T>
    where
        Fut: Future<Output = Result<T, R::Error>> + Send,
        T: Send,
    {
        let client = self.client.clone();
        let lock_then_op = async move { op(client.lock_owned().await).await };
        run(py, &self.runtime, lock_then_op)?.map_err(|e| R::raise(py, &e))
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
        check_range(address, length).map_err(|e| errors::scp(py, &e))?;
        // Read straight into the `bytes` object handed back: no second copy.
        PyBytes::new_with(py, length, |buf| {
            self.call(py, move |mut client| async move {
                client.read(chip, address, buf).await
            })
        })
    }

    /// Writes `data` to `address` on `chip`.
    pub(crate) fn write(
        &self,
        py: Python<'_>,
        chip: Address,
        address: u32,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let data = Data::of(data)?;
        let bytes = data.as_slice();
        check_range(address, bytes.len()).map_err(|e| errors::scp(py, &e))?;
        self.call(py, move |mut client| async move {
            client.write(chip, address, bytes).await
        })
    }
}

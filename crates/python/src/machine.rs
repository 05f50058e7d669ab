//! `volley.Machine`: a machine of many boards, discovered from its root board, every
//! board driven at once; each call a transfer with the GIL released.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use volley_proto::scp::sdp::Address;
use volley_transport_udp::{ClientStats, Machine as Client};

use crate::args::{self, chip, int, word};
use crate::board::target_of;
use crate::errors;
use crate::transfer::{Data, Shared, options, run, runtime, stats_dict};

/// A SpiNNaker machine of many boards, discovered from its root board; every board is
/// driven at once.
///
/// Machine(root, port=None, window="auto", timeout_ms=None, tries=8)
///
/// Args:
///     root: the root board (the one with chip (0, 0)), as `Board` takes its host.
///     port: the port, if `root` names none (default 17893).
///     window: requests kept in flight per board, 1 to 1024, or `"auto"` (each board's
///         tag pool).
///     timeout_ms: a fixed retransmit timeout in ms; None estimates it per board.
///     tries: sends per request before it fails, 1 to 1000.
///
/// Use it as a context manager, or call close().
#[pyclass(module = "volley")]
pub(crate) struct Machine {
    shared: Shared<Client>,
    target: String,
    chips: Vec<(u8, u8)>,
    boards: Vec<(usize, (u8, u8), String)>,
}

/// One item of a batch: (x, y, address, `last`) for core 0, or (x, y, p, address,
/// `last`); `op` and `last` name the batch and its last field in errors.
fn item<'py>(
    item: &Bound<'py, PyAny>,
    op: &str,
    last: &str,
) -> PyResult<(Address, u32, Bound<'py, PyAny>)> {
    let form = format!("(x, y, address, {last}) or (x, y, p, address, {last})");
    let tuple = item
        .cast::<PyTuple>()
        .map_err(|_| PyTypeError::new_err(format!("{op}: an item is a tuple {form}")))?;
    let get = |i: usize| tuple.get_item(i);
    let zero = 0u8.into_pyobject(item.py())?.into_any();
    let (x, y, p, address, last) = match tuple.len() {
        4 => (get(0)?, get(1)?, zero, get(2)?, get(3)?),
        5 => (get(0)?, get(1)?, get(2)?, get(3)?, get(4)?),
        n => {
            return Err(PyValueError::new_err(format!(
                "{op}: an item is {form}, not {n} values"
            )));
        }
    };
    Ok((chip(&x, &y, &p)?, args::address(&address)?, last))
}

crate::methods::shared_methods!(Machine {
    #[new]
    #[pyo3(
        signature = (root, port = None, window = None, timeout_ms = None, tries = None),
        text_signature = "(root, port=None, window='auto', timeout_ms=None, tries=8)"
    )]
    fn new(
        py: Python<'_>,
        root: &str,
        port: Option<Bound<'_, PyAny>>,
        window: Option<Bound<'_, PyAny>>,
        timeout_ms: Option<Bound<'_, PyAny>>,
        tries: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let target = target_of(root, port.as_ref())?;
        let config = options(window.as_ref(), timeout_ms.as_ref(), tries.as_ref())?;
        let runtime = runtime(py)?;
        let discover = Client::discover_host(&target, config);
        let client = run(py, &runtime, discover)?.map_err(|e| errors::machine(py, &e))?;
        let chips = client.chips().to_vec();
        let boards = client
            .boards()
            .iter()
            .map(|b| (b.index, b.ethernet, b.addr.to_string()))
            .collect();
        Ok(Self {
            shared: Shared::new(runtime, client, format!("Machine('{target}')")),
            target,
            chips,
            boards,
        })
    }

    /// Every live chip, as (x, y).
    #[getter]
    fn chips(&self) -> Vec<(u8, u8)> {
        self.chips.clone()
    }

    /// Every board, as (index, (ethernet x, ethernet y), address).
    #[getter]
    fn boards(&self) -> Vec<(usize, (u8, u8), String)> {
        self.boards.clone()
    }

    /// write_many(items) -> None
    ///
    /// Writes every item, (x, y, address, data) for core 0 or (x, y, p, address, data),
    /// every board at once.
    #[pyo3(text_signature = "(self, items)")]
    fn write_many(&self, py: Python<'_>, items: Bound<'_, PyAny>) -> PyResult<()> {
        // Each board's batch interleaves its items' pieces, so a buffer Python could
        // change is copied first (by raw copies); `bytes` is read in place.
        let mut held = Vec::new();
        for entry in items.try_iter()? {
            let (chip, address, data) = item(&entry?, "write_many", "data")?;
            held.push((chip, address, Data::of(&data)?.settled()));
        }
        let mut batch = Vec::with_capacity(held.len());
        for (chip, address, data) in &held {
            let bytes = data.as_slice();
            args::range(*address, bytes.len())?;
            batch.push((*chip, *address, bytes));
        }
        self.shared.call(py, move |mut client| async move {
            client.write_many(&batch).await
        })
    }

    /// read_many(items) -> list[bytes]
    ///
    /// Reads every item, (x, y, address, length) for core 0 or (x, y, p, address,
    /// length), every board at once; returns a list of bytes, in order.
    #[pyo3(text_signature = "(self, items)")]
    fn read_many<'py>(
        &self,
        py: Python<'py>,
        items: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut batch = Vec::new();
        for entry in items.try_iter()? {
            let (chip, address, length) = item(&entry?, "read_many", "length")?;
            let length = args::length(&length)?;
            args::range(address, length)?;
            batch.push((chip, address, vec![0u8; length]));
        }
        let batch = self.shared.call(py, move |mut client| async move {
            let mut items: Vec<_> = batch
                .iter_mut()
                .map(|(c, a, b)| (*c, *a, &mut b[..]))
                .collect();
            let result = client.read_many(&mut items).await;
            drop(items);
            result.map(|()| batch)
        })?;
        PyList::new(py, batch.iter().map(|(_, _, b)| PyBytes::new(py, b)))
    }

    /// info() -> dict
    ///
    /// The machine's size and discovery time: a dict with `width`, `height`, `boards`,
    /// `chips`, `discovery_secs`.
    #[pyo3(text_signature = "(self)")]
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (width, height, boards, chips, secs) = self.shared.with(py, |c| {
            (
                c.geometry().width(),
                c.geometry().height(),
                c.boards().len(),
                c.chips().len(),
                c.discovery_time().as_secs_f64(),
            )
        })?;
        let dict = PyDict::new(py);
        dict.set_item("width", width)?;
        dict.set_item("height", height)?;
        dict.set_item("boards", boards)?;
        dict.set_item("chips", chips)?;
        dict.set_item("discovery_secs", secs)?;
        Ok(dict)
    }

    /// stats() -> dict
    ///
    /// Every board's counters summed (`sent`, `retransmits`, `timeouts`, `duplicates`,
    /// `window` the sum of the windows), and `boards`: each board's own, as
    /// `Board.stats` gives them.
    #[pyo3(text_signature = "(self)")]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (stats, windows) = self.shared.with(py, |c| (c.stats(), c.windows()))?;
        let total = stats.iter().fold(ClientStats::default(), |mut t, s| {
            t.sent += s.sent;
            t.retransmits += s.retransmits;
            t.timeouts += s.timeouts;
            t.duplicates += s.duplicates;
            t
        });
        let dict = stats_dict(py, &total, windows.iter().sum())?;
        let per_board = stats
            .iter()
            .zip(&windows)
            .map(|(s, &w)| stats_dict(py, s, w))
            .collect::<PyResult<Vec<_>>>()?;
        dict.set_item("boards", per_board)?;
        Ok(dict)
    }

    fn __repr__(&self) -> String {
        format!(
            "Machine('{}', boards={}, chips={})",
            self.target,
            self.boards.len(),
            self.chips.len()
        )
    }
});

//! `volley.Machine`: a machine of many boards, discovered from its root board, every
//! board driven at once; each call a transfer with the GIL released.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use volley_proto::wire::sdp::Address;
use volley_transport_udp::{Machine as Client, ScpConfig, WindowSize};

use crate::errors;
use crate::transfer::{Data, Shared, chip, run, runtime};

/// A SpiNNaker machine of many boards, discovered from its root board.
#[pyclass(module = "volley")]
pub(crate) struct Machine {
    shared: Shared<Client>,
    chips: Vec<(u8, u8)>,
    boards: Vec<(usize, (u8, u8), String)>,
}

/// One item of a batch: (x, y, address, ...) for core 0, or (x, y, p, address, ...).
fn item<'py>(
    py: Python<'py>,
    item: &Bound<'py, PyAny>,
) -> PyResult<(Address, u32, Bound<'py, PyAny>)> {
    let tuple = item
        .cast::<PyTuple>()
        .map_err(|_| errors::volley(py, "each item is a tuple"))?;
    let get = |i: usize| tuple.get_item(i);
    let (x, y, p, address, last) = match tuple.len() {
        4 => (
            get(0)?.extract()?,
            get(1)?.extract()?,
            0,
            get(2)?.extract()?,
            get(3)?,
        ),
        5 => (
            get(0)?.extract()?,
            get(1)?.extract()?,
            get(2)?.extract()?,
            get(3)?.extract()?,
            get(4)?,
        ),
        n => {
            return Err(errors::volley(
                py,
                &format!(
                    "an item is (x, y, address, data) or (x, y, p, address, data), not {n} values"
                ),
            ));
        }
    };
    Ok((chip(py, x, y, p)?, address, last))
}

#[pymethods]
impl Machine {
    /// Discovers the machine whose root board listens at `root` (HOST or HOST:PORT, port
    /// 17893 by default) and opens a client per board, each window sized from its
    /// board's tag pool.
    #[new]
    fn new(py: Python<'_>, root: &str) -> PyResult<Self> {
        let runtime = runtime(py)?;
        let config = ScpConfig {
            window: WindowSize::Auto,
            ..ScpConfig::default()
        };
        let discover = Client::discover_host(root, config);
        let client = run(py, &runtime, discover)?.map_err(|e| errors::machine(py, &e))?;
        let chips = client.chips().to_vec();
        let boards = client
            .boards()
            .iter()
            .map(|b| (b.index, b.ethernet, b.addr.to_string()))
            .collect();
        Ok(Self {
            shared: Shared::new(runtime, client),
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

    /// Reads `length` bytes from `address` on core `p` of chip (`x`, `y`), through the
    /// chip's own board.
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

    /// Writes `data` (as `Board.write` takes it) to `address` on core `p` of chip (`x`,
    /// `y`).
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

    /// Writes every item, (x, y, address, data) for core 0 or (x, y, p, address, data),
    /// every board at once.
    fn write_many(&self, py: Python<'_>, items: Bound<'_, PyAny>) -> PyResult<()> {
        let mut held = Vec::new();
        for entry in items.try_iter()? {
            let (chip, address, data) = item(py, &entry?)?;
            held.push((chip, address, Data::of(&data)?));
        }
        let mut batch = Vec::with_capacity(held.len());
        for (chip, address, data) in &held {
            let bytes = data.as_slice();
            volley_transport_udp::check_range(*address, bytes.len())
                .map_err(|e| errors::scp(py, &e))?;
            batch.push((*chip, *address, bytes));
        }
        self.shared.call(py, move |mut client| async move {
            client.write_many(&batch).await
        })
    }

    /// Reads every item, (x, y, address, length) for core 0 or (x, y, p, address,
    /// length), every board at once; returns a list of bytes, in order.
    fn read_many<'py>(
        &self,
        py: Python<'py>,
        items: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut batch = Vec::new();
        for entry in items.try_iter()? {
            let (chip, address, length) = item(py, &entry?)?;
            let length: usize = length.extract()?;
            volley_transport_udp::check_range(address, length).map_err(|e| errors::scp(py, &e))?;
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

    /// The machine's size and discovery time: a dict with `width`, `height`, `boards`,
    /// `chips`, `discovery_secs`.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let client = self.shared.client.clone();
        let client = py.detach(|| client.blocking_lock_owned());
        let dict = PyDict::new(py);
        dict.set_item("width", client.geometry().width())?;
        dict.set_item("height", client.geometry().height())?;
        dict.set_item("boards", client.boards().len())?;
        dict.set_item("chips", client.chips().len())?;
        dict.set_item("discovery_secs", client.discovery_time().as_secs_f64())?;
        Ok(dict)
    }
}

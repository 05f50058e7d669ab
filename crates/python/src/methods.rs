//! The methods `volley.Board` and `volley.Machine` share, written once: each class's
//! `#[pymethods]` block is made by [`shared_methods!`] from these and the class's own.

/// `#[pymethods] impl $class { read, write, fill, sver, close, __enter__, __exit__, and
/// $own }`, for a class with a `shared: Shared<_>` field.
macro_rules! shared_methods {
    ($class:ident { $($own:tt)* }) => {
        #[::pyo3::pymethods]
        impl $class {
            /// read(x, y, p, address, length) -> bytes
            ///
            /// Reads `length` bytes from `address` on core `p` of chip (`x`, `y`) (on a machine,
            /// through the chip's own board).
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

            /// close() -> None
            ///
            /// Closes the sockets, after any transfer another thread is running. Calls
            /// after it raise ValueError; closing twice is allowed.
            #[pyo3(text_signature = "(self)")]
            fn close(&self, py: Python<'_>) {
                self.shared.close(py);
            }

            fn __enter__(slf: Py<Self>) -> Py<Self> {
                slf
            }

            #[pyo3(signature = (*_args))]
            fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, ::pyo3::types::PyTuple>) -> bool {
                self.shared.close(py);
                false
            }

            $($own)*
        }
    };
}

pub(crate) use shared_methods;

//! Arguments as Python's own functions check them: each number taken as any Python `int`
//! and range-checked here, so a bad one raises `ValueError` (or `TypeError` for what is
//! not an int) naming the argument, its value and the range, never PyO3's bare
//! `OverflowError`.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyInt;
use volley_proto::scp::sdp::Address;

/// `value` as an integer within `min..=max`, or the error naming `name`.
pub(crate) fn int(value: &Bound<'_, PyAny>, name: &str, min: u64, max: u64) -> PyResult<u64> {
    if !value.is_instance_of::<PyInt>() {
        let ty = value
            .get_type()
            .name()
            .map_or_else(|_| "?".to_owned(), |n| n.to_string());
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, not {ty}"
        )));
    }
    match value.extract::<i128>() {
        Ok(n) if (i128::from(min)..=i128::from(max)).contains(&n) => Ok(n as u64),
        _ => Err(PyValueError::new_err(format!(
            "{name} must be {} to {}, not {value}",
            show(min),
            show(max)
        ))),
    }
}

/// The address space's bounds in hex, others in decimal.
fn show(n: u64) -> String {
    if n >= u64::from(u32::MAX) {
        format!("{n:#x}")
    } else {
        n.to_string()
    }
}

/// Core `p` of chip (`x`, `y`), each checked.
pub(crate) fn chip(
    x: &Bound<'_, PyAny>,
    y: &Bound<'_, PyAny>,
    p: &Bound<'_, PyAny>,
) -> PyResult<Address> {
    Ok(Address::core(
        int(x, "x", 0, 255)? as u8,
        int(y, "y", 0, 255)? as u8,
        int(p, "p", 0, 31)? as u8,
    ))
}

/// A 32-bit address.
pub(crate) fn address(value: &Bound<'_, PyAny>) -> PyResult<u32> {
    Ok(int(value, "address", 0, u64::from(u32::MAX))? as u32)
}

/// A length of bytes: at most the 32-bit address space.
pub(crate) fn length(value: &Bound<'_, PyAny>) -> PyResult<usize> {
    Ok(int(value, "length", 0, 1 << 32)? as usize)
}

/// A 32-bit word.
pub(crate) fn word(value: &Bound<'_, PyAny>, name: &str) -> PyResult<u32> {
    Ok(int(value, name, 0, u64::from(u32::MAX))? as u32)
}

/// Checks that `len` bytes from `address` fit the 32-bit address space: a `ValueError`
/// saying so before anything is allocated or sent.
pub(crate) fn range(address: u32, len: usize) -> PyResult<()> {
    volley_transport_udp::check_range(address, len).map_err(|e| match e {
        volley_transport_udp::ScpError::InvalidArgument(why) => PyValueError::new_err(why),
        other => PyValueError::new_err(other.to_string()),
    })
}

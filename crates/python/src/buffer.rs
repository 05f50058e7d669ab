//! The one module of this crate with `unsafe`: borrowing a Python object's memory through
//! the buffer protocol, so that a write's bytes go from the caller's `bytearray`,
//! `memoryview` or numpy array into each datagram without a copy of the whole.
//!
//! While the GIL is released another Python thread may write that memory, so no Rust
//! reference (`&[u8]`) is ever made over it: a `&[u8]` promises the bytes do not change
//! while it lives, which Python does not promise. The bytes leave only by raw copies
//! ([`RawReader`] into each request's staging buffer, [`Exported::to_vec`]): a byte another
//! thread changes meanwhile arrives as its old or its new value, never anything else, and
//! nothing read steers control flow or memory safety.
//!
//! PyO3 offers the buffer protocol only from Python 3.11's limited API, and this package
//! is built for 3.10's; `PyObject_GetBuffer`, `PyBuffer_Release` and `Py_buffer` are
//! declared here as CPython declares them. Every CPython since 3.3 has the same layout,
//! which 3.11 made part of the stable ABI unchanged, and both functions are exported by
//! every libpython 3.x.
#![allow(unsafe_code)]

use core::ffi::{c_char, c_int, c_void};
use core::marker::PhantomData;

use pyo3::ffi::{Py_ssize_t, PyObject};
use pyo3::prelude::*;

/// CPython's `Py_buffer` (`Include/pybuffer.h`).
#[repr(C)]
struct RawBuffer {
    buf: *mut c_void,
    obj: *mut PyObject,
    len: Py_ssize_t,
    itemsize: Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut Py_ssize_t,
    strides: *mut Py_ssize_t,
    suboffsets: *mut Py_ssize_t,
    internal: *mut c_void,
}

/// `PyBUF_SIMPLE`: one C-contiguous run of bytes, or the exporter refuses.
const PYBUF_SIMPLE: c_int = 0;

unsafe extern "C" {
    fn PyObject_GetBuffer(obj: *mut PyObject, view: *mut RawBuffer, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut RawBuffer);
}

/// A Python object's memory, exported to us until this is dropped: while it lives, the
/// exporter keeps the memory where it is (a `bytearray` refuses to resize, a numpy array
/// to reallocate). It holds a `Python<'py>` marker, so it is neither `Send` nor `Sync`:
/// it is dropped, and the buffer released, on the thread that took it, with the GIL held.
pub(crate) struct Exported<'py> {
    /// Boxed so its address stays fixed from `PyObject_GetBuffer` to `PyBuffer_Release`,
    /// as exporters that keep state in `internal` may assume.
    view: Box<RawBuffer>,
    _gil: PhantomData<Python<'py>>,
}

impl<'py> Exported<'py> {
    /// Borrows `object`'s memory if it exports one C-contiguous run of bytes; `None` if it
    /// does not (a strided view, or no buffer protocol at all).
    pub(crate) fn of(object: &Bound<'py, PyAny>) -> Option<Self> {
        let mut view = Box::new(RawBuffer {
            buf: core::ptr::null_mut(),
            obj: core::ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: core::ptr::null_mut(),
            shape: core::ptr::null_mut(),
            strides: core::ptr::null_mut(),
            suboffsets: core::ptr::null_mut(),
            internal: core::ptr::null_mut(),
        });
        // SAFETY: `object` is a live reference and `object.py()` proves the GIL is held,
        // which `PyObject_GetBuffer` requires; `view` points to writable memory of
        // `Py_buffer`'s layout that outlives the call.
        let status = unsafe { PyObject_GetBuffer(object.as_ptr(), &mut *view, PYBUF_SIMPLE) };
        if status != 0 {
            // The exporter raised (BufferError for a strided view, TypeError for no
            // buffer at all): take that exception, the caller falls back to copying.
            drop(PyErr::take(object.py()));
            return None;
        }
        Some(Self {
            view,
            _gil: PhantomData,
        })
    }

    /// How many bytes are exported.
    pub(crate) fn len(&self) -> usize {
        if self.view.buf.is_null() {
            return 0;
        }
        usize::try_from(self.view.len).unwrap_or(0)
    }

    /// A reader of the exported bytes, in order, by raw copies. It must not outlive
    /// `self` (the export): the transfer that reads it ends before `self` is dropped.
    pub(crate) fn reader(&self) -> RawReader {
        RawReader {
            at: self.view.buf.cast::<u8>().cast_const(),
            left: self.len(),
        }
    }

    /// A copy of the exported bytes, made by a raw copy.
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        let len = self.len();
        let mut out = vec![0u8; len];
        let _ = std::io::Read::read(&mut self.reader(), &mut out);
        out
    }
}

/// The exported bytes, read in order by raw copies (see the module's docs).
pub(crate) struct RawReader {
    at: *const u8,
    left: usize,
}

// SAFETY: a `RawReader` is a pointer into memory the exporter keeps alive and in place
// until `PyBuffer_Release`; the transfer on the runtime's thread reads through it while
// the caller's thread holds the `Exported` (and waits for the transfer) on the other.
// It is only ever read through, by raw copies that make no reference over the memory.
unsafe impl Send for RawReader {}

impl std::io::Read for RawReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = out.len().min(self.left);
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: `at..at + left` lies within the export (made from its `buf` and `len`,
        // advanced by what was read); `out` is our own memory, which the export cannot
        // overlap. Another Python thread may write the source meanwhile: a plain copy of
        // bytes gives each as it was before or after, and no `&[u8]` is made over it.
        unsafe {
            core::ptr::copy_nonoverlapping(self.at, out.as_mut_ptr(), n);
            self.at = self.at.add(n);
        }
        self.left -= n;
        Ok(n)
    }
}

impl Drop for Exported<'_> {
    fn drop(&mut self) {
        // SAFETY: `view` was filled by a successful `PyObject_GetBuffer` and is released
        // exactly once, here. This type is neither `Send` nor `Sync` and lives only where
        // a `Python<'py>` token does, so it is dropped on the thread that holds the GIL,
        // outside any `Python::detach`, as `PyBuffer_Release` requires.
        unsafe { PyBuffer_Release(&mut *self.view) }
    }
}

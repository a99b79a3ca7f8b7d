//! An open file (`weftfs._native.RawFile`): positioned reads into the caller's buffer,
//! writes from it, seek, truncate, flush, fsync and close, each with the GIL released.
//! The Python side (`weftfs.FileIO`) makes it an `io.RawIOBase` and buffers it.
//!
//! Copies: a read copies once, from the client library's cache pages or reply buffers
//! into the caller's buffer (`readinto`) or into the new `bytes` (`read`); the library
//! hands out its buffers without joining them (`Parts`: cache pages and RPC replies) and
//! cannot receive into foreign memory. A write is
//! buffered by the library straight from the caller's buffer (its one copy).

use super::Fs;
use crate::errors::{OrOsError, raw_error};
use crate::proc;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Arc;
use weft_client::File;
use weft_client::io::Parts;

/// An open weftfs file.
#[pyclass(module = "weftfs._native")]
pub struct RawFile {
    /// The connection it was opened through (kept alive with the file).
    #[allow(dead_code)]
    fs: Py<Fs>,
    /// `None` once closed.
    file: Option<Arc<File>>,
    /// The process that opened it: its handle is useless in another one.
    pid: u32,
    path: String,
    pos: u64,
    readable: bool,
    writable: bool,
    append: bool,
}

/// A caller's buffer as an address and length, to be used with the GIL released: the
/// `PyBuffer` it came from is held (the export stays valid) until the call returns, as
/// CPython's own `FileIO.readinto` does while it reads.
#[derive(Clone, Copy)]
struct RawBuf {
    addr: usize,
    len: usize,
}

impl RawBuf {
    fn of(buf: &PyBuffer<u8>, writable: bool) -> PyResult<Self> {
        if writable && buf.readonly() {
            return Err(PyTypeError::new_err("readinto needs a writable buffer"));
        }
        if !buf.is_c_contiguous() {
            return Err(PyTypeError::new_err("the buffer is not contiguous"));
        }
        Ok(Self {
            addr: buf.buf_ptr() as usize,
            len: buf.len_bytes(),
        })
    }

    /// Copies `data` (at most `len` bytes) to the start of the buffer.
    fn fill(self, data: &Parts) -> usize {
        // SAFETY: the buffer is a writable, C-contiguous export of `len` bytes that the
        // caller's `PyBuffer` keeps alive for this whole call (see the type's doc); `data`
        // is the library's own memory, so the two cannot overlap.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) };
        data.copy_to(dst)
    }

    /// The buffer's bytes.
    ///
    /// # Safety
    /// The `PyBuffer` this came from must be held for as long as the slice is used.
    unsafe fn as_slice<'a>(self) -> &'a [u8] {
        // SAFETY: the caller keeps the export alive (see above); it is C-contiguous and
        // `len` bytes long. A Python thread changing it meanwhile changes what is written,
        // as with CPython's `FileIO.write`, but no memory outside it is read.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }
}

impl RawFile {
    pub(crate) fn new(
        fs: Py<Fs>,
        file: File,
        path: String,
        readable: bool,
        writable: bool,
        append: bool,
    ) -> Self {
        Self {
            fs,
            file: Some(Arc::new(file)),
            pid: proc::pid(),
            path,
            pos: 0,
            readable,
            writable,
            append,
        }
    }

    /// The open handle, or why it cannot be used.
    fn handle(&self) -> PyResult<Arc<File>> {
        let f = self
            .file
            .as_ref()
            .ok_or_else(|| PyValueError::new_err("I/O operation on closed file"))?;
        if self.pid != proc::pid() {
            return Err(raw_error(
                9,
                format!(
                    "{}: opened in another process (before a fork): open it again",
                    self.path
                ),
            ));
        }
        Ok(f.clone())
    }

    fn check_readable(&self) -> PyResult<()> {
        if self.readable {
            Ok(())
        } else {
            Err(unsupported("File not open for reading"))
        }
    }

    /// Reads up to `len` bytes at the current position, as the library's buffers (cache
    /// pages, RPC replies) that the caller copies out of once.
    fn read_some(&mut self, py: Python<'_>, len: u64) -> PyResult<Parts> {
        self.check_readable()?;
        let f = self.handle()?;
        let rt = proc::runtime()?;
        let pos = self.pos;
        // Cached pages in the handle's sequential stream: no GIL release, no wait.
        let cached = {
            let _in_rt = rt.enter();
            f.try_read_cached_parts(pos, len)
        };
        let data = match cached {
            Some(d) => d,
            None => py
                .detach(|| rt.block_on(f.read_parts(pos, len)))
                .or_os(&self.path)?,
        };
        self.pos += data.len();
        Ok(data)
    }
}

/// A new `bytes` holding `data`, copied into it once.
fn bytes_of<'py>(py: Python<'py>, data: &Parts) -> PyResult<Bound<'py, PyBytes>> {
    let len = usize::try_from(data.len()).map_err(|_| PyValueError::new_err("read too large"))?;
    PyBytes::new_with(py, len, |dst| {
        data.copy_to(dst);
        Ok(())
    })
}

pyo3::import_exception!(io, UnsupportedOperation);

/// `io.UnsupportedOperation(msg)`, as a file object raises for a read of a write-only file.
fn unsupported(msg: &str) -> PyErr {
    UnsupportedOperation::new_err(msg.to_string())
}

#[pymethods]
impl RawFile {
    /// Fills `buf` from the current position; returns the bytes read (0 at the end).
    fn readinto(&mut self, py: Python<'_>, buf: PyBuffer<u8>) -> PyResult<usize> {
        let raw = RawBuf::of(&buf, true)?;
        if raw.len == 0 {
            return Ok(0);
        }
        let data = self.read_some(py, raw.len as u64)?;
        // Large copies run without the GIL, as the read did.
        let n = if data.len() > 64 * 1024 {
            py.detach(|| raw.fill(&data))
        } else {
            raw.fill(&data)
        };
        drop(buf);
        Ok(n)
    }

    /// Reads up to `size` bytes (all to the end with -1).
    #[pyo3(signature = (size = -1))]
    fn read<'py>(&mut self, py: Python<'py>, size: i64) -> PyResult<Bound<'py, PyBytes>> {
        let len = match u64::try_from(size) {
            Ok(n) => n,
            Err(_) => self.remaining(py)?,
        };
        let data = self.read_some(py, len)?;
        bytes_of(py, &data)
    }

    /// Reads everything from the position to the end.
    fn readall<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let len = self.remaining(py)?;
        let data = self.read_some(py, len)?;
        bytes_of(py, &data)
    }

    /// Bytes from the position to the end of the file as this client knows it.
    fn remaining(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.size(py)?.saturating_sub(self.pos))
    }

    /// Reads up to `size` bytes at `offset`, leaving the position alone (`os.pread`).
    fn pread<'py>(&self, py: Python<'py>, size: u64, offset: u64) -> PyResult<Bound<'py, PyBytes>> {
        self.check_readable()?;
        let f = self.handle()?;
        let rt = proc::runtime()?;
        let data = py
            .detach(|| rt.block_on(f.read_parts(offset, size)))
            .or_os(&self.path)?;
        bytes_of(py, &data)
    }

    /// Writes all of `buf` at the position (at the end in append mode); returns its
    /// length.
    fn write(&mut self, py: Python<'_>, buf: PyBuffer<u8>) -> PyResult<usize> {
        if !self.writable {
            return Err(unsupported("File not open for writing"));
        }
        let raw = RawBuf::of(&buf, false)?;
        let f = self.handle()?;
        let rt = proc::runtime()?;
        let pos = self.pos;
        let at = py
            .detach(|| {
                // SAFETY: `buf` is held until after this call returns.
                let data = unsafe { raw.as_slice() };
                rt.block_on(f.write_at(pos, data))
            })
            .or_os(&self.path)?;
        drop(buf);
        self.pos = at + raw.len as u64;
        Ok(raw.len)
    }

    /// Moves the position (`whence`: 0 start, 1 current, 2 end); returns the new one.
    #[pyo3(signature = (offset, whence = 0))]
    fn seek(&mut self, py: Python<'_>, offset: i64, whence: i32) -> PyResult<u64> {
        self.handle()?;
        let base = match whence {
            0 => 0,
            1 => self.pos,
            2 => self.size(py)?,
            _ => return Err(PyValueError::new_err(format!("invalid whence ({whence})"))),
        };
        let to = i128::from(base) + i128::from(offset);
        let to = u64::try_from(to).map_err(|_| raw_error(22, "Invalid argument"))?;
        self.pos = to;
        Ok(to)
    }

    /// The position.
    fn tell(&self) -> PyResult<u64> {
        self.handle()?;
        Ok(self.pos)
    }

    /// Sets the size (to the position by default); returns it. The position stays.
    #[pyo3(signature = (size = None))]
    fn truncate(&mut self, py: Python<'_>, size: Option<u64>) -> PyResult<u64> {
        if !self.writable {
            return Err(unsupported("File not open for writing"));
        }
        let f = self.handle()?;
        let rt = proc::runtime()?;
        let size = size.unwrap_or(self.pos);
        py.detach(|| rt.block_on(f.truncate(size)))
            .or_os(&self.path)?;
        Ok(size)
    }

    /// The file's size as this client knows it.
    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        let f = self.handle()?;
        let rt = proc::runtime()?;
        Ok(py.detach(|| rt.block_on(f.size())))
    }

    /// Sends buffered writes to the OSTs (other clients see them from then on).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let Some(f) = self.file.as_ref() else {
            return Ok(());
        };
        if !self.writable || f.nothing_to_flush() {
            return Ok(());
        }
        let f = self.handle()?;
        let rt = proc::runtime()?;
        py.detach(|| rt.block_on(f.flush())).or_os(&self.path)
    }

    /// Writes everything and makes it durable on the servers.
    fn fsync(&self, py: Python<'_>) -> PyResult<()> {
        let f = self.handle()?;
        let rt = proc::runtime()?;
        py.detach(|| rt.block_on(f.fsync())).or_os(&self.path)
    }

    /// Closes the file; a write error not reported yet is raised here.
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.file.is_none() {
            return Ok(());
        }
        if self.pid != proc::pid() {
            // The parent's handle: leaked, the parent closes it.
            if let Some(f) = self.file.take() {
                std::mem::forget(f);
            }
            return Ok(());
        }
        let rt = proc::runtime()?;
        let Some(f) = self.file.take() else {
            return Ok(());
        };
        if !self.writable {
            // Nothing to report from a read-only handle's close: it is released in the
            // background, as the FUSE mount's release is (the kernel does not wait).
            rt.spawn(async move {
                let _ = f.close().await;
            });
            return Ok(());
        }
        py.detach(|| {
            let r = rt.block_on(f.close());
            let _in_rt = rt.enter();
            drop(f);
            r
        })
        .or_os(&self.path)
    }

    /// Whether the file is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.file.is_none()
    }

    /// Whether the file was opened for reading.
    #[getter]
    fn readable(&self) -> bool {
        self.readable
    }

    /// Whether the file was opened for writing.
    #[getter]
    fn writable(&self) -> bool {
        self.writable
    }

    /// Whether writes go to the end.
    #[getter]
    fn append(&self) -> bool {
        self.append
    }

    /// The path it was opened as.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }
}

impl Drop for RawFile {
    fn drop(&mut self) {
        let Some(f) = self.file.take() else { return };
        if self.pid != proc::pid() {
            std::mem::forget(f);
            return;
        }
        // Not closed: closed in the background (written data is sent first).
        if let Ok(rt) = proc::runtime() {
            rt.spawn(async move {
                let _ = f.close().await;
            });
        }
    }
}

//! weftfs for Python: the native half of the `weftfs` package (`weftfs._native`).
//!
//! The package reaches the file system through the client library in the Python process
//! itself, without FUSE: a [`fs::Fs`] is a connection (`weftfs.connect("HOST:PORT:/FSNAME")`)
//! with the namespace operations, a [`fs::file::RawFile`] an open file whose reads fill the
//! caller's buffer, and `fs::admin` holds the administrator's verbs (stripes, usage, HSM
//! state). Every blocking call releases the GIL; `proc` keeps one tokio runtime per process
//! and builds a new one in a child after `fork`. The pure-Python half (python/weftfs) adds
//! the `io` file objects, fsspec and PyTorch on top.

use pyo3::prelude::*;

mod dircache;
mod errors;
mod fs;
mod proc;
mod stat;

/// The `weftfs._native` module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<fs::Fs>()?;
    m.add_class::<fs::file::RawFile>()?;
    m.add_function(wrap_pyfunction!(fs::connect, m)?)?;
    Ok(())
}

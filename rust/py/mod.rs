//! Python bindings (`youmu._core`). Thin: conversions in, core call with the GIL
//! released, conversions out. Errors map to exceptions in `errors.rs` only.

mod convert;
mod errors;
mod index;
mod mixture;
mod permute;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::error::Result;

use crate::io::{BYTES_READ, READS};
use crate::runtime::{runtime, set_num_threads as set_threads};

pub(crate) use crate::error::catch_panics as guard;

/// `py.detach` (GIL released) with [`guard`].
pub(crate) fn detach<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    py.detach(move || guard(f))
}

/// Bytes and reads issued by this process, and dictionary-cache counters.
#[pyfunction]
fn io_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    use std::sync::atomic::Ordering;
    let d = PyDict::new(py);
    d.set_item("bytes_read", BYTES_READ.load(Ordering::Relaxed))?;
    d.set_item("reads", READS.load(Ordering::Relaxed))?;
    d.set_item("fast_decoded_pages", crate::tokens::FAST_DECODED_PAGES.load(Ordering::Relaxed))?;
    if let Ok(c) = runtime().dict_cache.lock() {
        d.set_item("dict_cache_hits", c.hits)?;
        d.set_item("dict_cache_misses", c.misses)?;
        d.set_item("dict_cache_bytes", c.used())?;
    }
    Ok(d)
}

/// Threads used for parallel page reads in this process (0 = default).
#[pyfunction]
fn set_num_threads(n: usize) {
    set_threads(n)
}

#[pyfunction]
fn num_threads() -> usize {
    runtime().num_threads()
}

/// Whether token columns (`list<int32|int64>`, PLAIN, no nulls) use youmu's direct
/// decoder; `False` sends every page through arrow-rs (for comparison and debugging).
#[pyfunction]
fn set_fast_decode(on: bool) {
    crate::tokens::set_enabled(on)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    crate::runtime::tune_allocator();
    if std::env::var("YOUMU_FAST_DECODE").is_ok_and(|v| v == "0") {
        crate::tokens::set_enabled(false);
    }
    m.add_class::<index::PyPageIndex>()?;
    m.add_class::<index::PendingPages>()?;
    m.add_class::<permute::PyPermutation>()?;
    m.add_class::<mixture::PyFlatMap>()?;
    m.add_class::<mixture::PyMixtureMap>()?;
    m.add_function(wrap_pyfunction!(permute::_permutation_from_key, m)?)?;
    m.add_function(wrap_pyfunction!(io_stats, m)?)?;
    m.add_function(wrap_pyfunction!(set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(set_fast_decode, m)?)?;
    Ok(())
}

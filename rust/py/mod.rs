//! Python bindings (`youmu._core`). Thin: conversions in, core call with the GIL
//! released, conversions out. Errors map to exceptions in `errors.rs` only.

mod convert;
mod errors;
mod index;
mod mixture;
mod permute;

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

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

/// Threads used for parallel page reads in this process (0 = default, at most 1024).
#[pyfunction]
fn set_num_threads(n: &Bound<'_, PyAny>) -> PyResult<()> {
    let max = crate::limits::MAX_THREADS;
    let Some(n) = convert::int_of(n) else {
        return Err(crate::error::Error::ArgumentType(format!(
            "set_num_threads(n): n must be an int, got {}",
            n.get_type().name()?
        ))
        .into());
    };
    let n = usize::try_from(n).ok().filter(|&v| v <= max).ok_or_else(|| {
        crate::error::Error::InvalidArgument(format!(
            "set_num_threads(n): n must be between 0 (default) and {max}, got {n}"
        ))
    })?;
    Ok(guard(|| set_threads(n))?)
}

/// Every top-level column of a Parquet file as the page column of an index (for
/// `youmu inspect`): a list of dicts, one per column, with its name and either its
/// pages (`page_num_rows`, `page_byte_sizes`, row-group counts by how pages were found)
/// or `error`, the message of the error reading it would raise.
#[pyfunction]
fn column_pages<'py>(py: Python<'py>, path: std::path::PathBuf) -> PyResult<Bound<'py, PyList>> {
    let columns = detach(py, move || crate::inspect::column_pages(&path))?;
    let out = PyList::empty(py);
    for (name, result) in columns {
        let d = PyDict::new(py);
        d.set_item("name", name)?;
        match result {
            Ok(c) => {
                let as_i64 = |v: Vec<u64>| v.into_iter().map(|x| x.min(i64::MAX as u64) as i64).collect::<Vec<_>>();
                d.set_item("num_pages", c.page_rows.len())?;
                d.set_item("page_num_rows", PyArray1::from_vec(py, as_i64(c.page_rows)))?;
                d.set_item("page_byte_sizes", PyArray1::from_vec(py, as_i64(c.page_bytes)))?;
                d.set_item("row_groups_with_offset_index", c.row_groups_with_offset_index)?;
                d.set_item("row_groups_header_scanned", c.row_groups_header_scanned)?;
                d.set_item("row_groups_merged_pages", c.row_groups_merged_pages)?;
                d.set_item("row_groups_page_granular", c.row_groups_page_granular)?;
            }
            Err(e) => d.set_item("error", e.to_string())?,
        }
        out.append(d)?;
    }
    Ok(out)
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
    m.add_function(wrap_pyfunction!(column_pages, m)?)?;
    Ok(())
}

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
    for (k, v) in crate::storage::stats() {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// Set youmu's process-wide I/O settings; keywords left out keep their value. None of
/// them changes what is read (saved indexes stay valid), only how:
/// `max_inflight` (object-store requests in flight), `coalesce_gap` (bytes: ranges of an
/// object this close are fetched with one GET), `max_open_files` (local handles kept),
/// `tail_bytes` (first GET of an index build), `retries`, `retry_timeout`,
/// `request_timeout`, `connect_timeout` (seconds), `io_threads`.
#[pyfunction]
#[pyo3(signature = (*, max_inflight=None, coalesce_gap=None, max_open_files=None, tail_bytes=None, retries=None,
    retry_timeout=None, request_timeout=None, connect_timeout=None, io_threads=None))]
#[allow(clippy::too_many_arguments)]
fn set_io_options(
    max_inflight: Option<usize>,
    coalesce_gap: Option<u64>,
    max_open_files: Option<usize>,
    tail_bytes: Option<u64>,
    retries: Option<usize>,
    retry_timeout: Option<f64>,
    request_timeout: Option<f64>,
    connect_timeout: Option<f64>,
    io_threads: Option<usize>,
) -> PyResult<()> {
    use std::time::Duration;
    let secs = |name: &str, v: f64| -> PyResult<Duration> {
        Duration::try_from_secs_f64(v).ok().filter(|d| !d.is_zero()).ok_or_else(|| {
            crate::error::Error::InvalidArgument(format!("{name} must be a positive number of seconds")).into()
        })
    };
    let mut o = crate::storage::io_options();
    if let Some(v) = max_inflight {
        o.max_inflight = v;
    }
    if let Some(v) = coalesce_gap {
        o.coalesce_gap = v;
    }
    if let Some(v) = max_open_files {
        o.max_open_files = v;
    }
    if let Some(v) = tail_bytes {
        o.tail_bytes = v;
    }
    if let Some(v) = retries {
        o.retries = v;
    }
    if let Some(v) = retry_timeout {
        o.retry_timeout = secs("retry_timeout", v)?;
    }
    if let Some(v) = request_timeout {
        o.request_timeout = secs("request_timeout", v)?;
    }
    if let Some(v) = connect_timeout {
        o.connect_timeout = secs("connect_timeout", v)?;
    }
    if let Some(v) = io_threads {
        o.io_threads = v;
    }
    Ok(crate::storage::set_io_options(o)?)
}

/// The current I/O settings (see `set_io_options`).
#[pyfunction]
fn io_options(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let o = crate::storage::io_options();
    let d = PyDict::new(py);
    d.set_item("max_inflight", o.max_inflight)?;
    d.set_item("coalesce_gap", o.coalesce_gap)?;
    d.set_item("max_open_files", o.max_open_files)?;
    d.set_item("tail_bytes", o.tail_bytes)?;
    d.set_item("retries", o.retries)?;
    d.set_item("retry_timeout", o.retry_timeout.as_secs_f64())?;
    d.set_item("request_timeout", o.request_timeout.as_secs_f64())?;
    d.set_item("connect_timeout", o.connect_timeout.as_secs_f64())?;
    d.set_item("io_threads", o.io_threads)?;
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
    m.add_function(wrap_pyfunction!(set_io_options, m)?)?;
    m.add_function(wrap_pyfunction!(io_options, m)?)?;
    Ok(())
}

//! Python bindings (`youmu._core`). Thin: conversions in, core call with the GIL
//! released, conversions out. Errors map to exceptions in `errors.rs` only.

mod convert;
mod dicts;
mod errors;
mod hub;
mod index;
mod mixture;
mod pending;
mod permute;

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::error::Result;

use crate::parquet::io::{BYTES_READ, READS};
use crate::runtime::{runtime, set_num_threads as set_threads};

pub(crate) use crate::error::catch_panics as guard;

/// `py.detach` (GIL released) with [`guard`].
pub(crate) fn detach<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    py.detach(move || guard(f))
}

thread_local! {
    /// The exception a signal handler raised during [`detach_interruptible`].
    static RAISED: std::cell::RefCell<Option<PyErr>> = const { std::cell::RefCell::new(None) };
}

/// The interrupt check of long core loops (`runtime::interrupted`): runs Python's
/// signal handlers, keeping what they raise (`KeyboardInterrupt` for Ctrl-C).
fn python_signals() -> bool {
    Python::attach(|py| match py.check_signals() {
        Ok(()) => false,
        Err(e) => {
            RAISED.with(|r| {
                r.borrow_mut().get_or_insert(e);
            });
            true
        }
    })
}

/// [`detach`] for work that can run long on this thread (directory walks, index
/// builds): signal handlers still run every ~50 ms, and what one raises (Ctrl-C's
/// `KeyboardInterrupt`) stops the work and is raised here as it was.
pub(crate) fn detach_interruptible<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T> + Send) -> PyResult<T> {
    RAISED.with(|r| r.borrow_mut().take());
    let out = py.detach(move || crate::runtime::with_interrupt_check(python_signals, || guard(f)));
    match RAISED.with(|r| r.borrow_mut().take()) {
        Some(e) => Err(e),
        None => Ok(out?),
    }
}

/// Bytes and reads issued by this process, and dictionary-cache counters.
#[pyfunction]
fn io_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    use std::sync::atomic::Ordering;
    let d = PyDict::new(py);
    d.set_item("bytes_read", BYTES_READ.load(Ordering::Relaxed))?;
    d.set_item("reads", READS.load(Ordering::Relaxed))?;
    d.set_item("fast_decoded_pages", crate::parquet::tokens::FAST_DECODED_PAGES.load(Ordering::Relaxed))?;
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
/// them changes what is read (saved indexes stay valid), only how. Integers (not bools)
/// in these ranges:
/// `max_inflight` (object-store requests in flight, 1 to 16384), `coalesce_gap` (bytes:
/// ranges of an object this close are fetched with one GET, 0 to 2**30), `max_open_files`
/// (local handles kept, 1 to the soft descriptor limit), `tail_bytes` (first GET of an
/// index build, 8 to 2**30), `retries` (0 to 100), `io_threads` (1 to 256; read when the
/// process first reaches an object store); seconds (int or float, above 0 and at most a
/// week): `retry_timeout`, `request_timeout`, `connect_timeout`, `read_timeout`. Anything else is an
/// `ArgumentTypeError` or `InvalidArgumentError` naming the keyword. The `YOUMU_*`
/// variables (`YOUMU_MAX_INFLIGHT`, `YOUMU_COALESCE_GAP`, `YOUMU_MAX_OPEN_FILES`,
/// `YOUMU_RETRIES`) take the same ranges.
#[pyfunction]
#[pyo3(signature = (*, max_inflight=None, coalesce_gap=None, max_open_files=None, tail_bytes=None, retries=None,
    retry_timeout=None, request_timeout=None, connect_timeout=None, read_timeout=None, io_threads=None))]
#[allow(clippy::too_many_arguments)]
fn set_io_options(
    max_inflight: Option<&Bound<'_, PyAny>>,
    coalesce_gap: Option<&Bound<'_, PyAny>>,
    max_open_files: Option<&Bound<'_, PyAny>>,
    tail_bytes: Option<&Bound<'_, PyAny>>,
    retries: Option<&Bound<'_, PyAny>>,
    retry_timeout: Option<&Bound<'_, PyAny>>,
    request_timeout: Option<&Bound<'_, PyAny>>,
    connect_timeout: Option<&Bound<'_, PyAny>>,
    read_timeout: Option<&Bound<'_, PyAny>>,
    io_threads: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    use std::time::Duration;
    crate::storage::check_env()?;
    let int = |name: &str, v: Option<&Bound<'_, PyAny>>| -> PyResult<Option<u64>> {
        let (lo, hi) = crate::storage::io_option_range(name).unwrap_or((0, 0));
        v.filter(|v| !v.is_none()).map(|v| convert::int_arg(v, &format!("set_io_options({name})"), lo, hi)).transpose()
    };
    let secs = |name: &str, v: Option<&Bound<'_, PyAny>>| -> PyResult<Option<Duration>> {
        v.filter(|v| !v.is_none())
            .map(|v| {
                let s = convert::seconds_arg(v, &format!("set_io_options({name})"), crate::storage::MAX_TIMEOUT_SECS)?;
                Ok(Duration::from_secs_f64(s))
            })
            .transpose()
    };
    let mut o = crate::storage::io_options();
    if let Some(v) = int("max_inflight", max_inflight)? {
        o.max_inflight = v as usize;
    }
    if let Some(v) = int("coalesce_gap", coalesce_gap)? {
        o.coalesce_gap = v;
    }
    if let Some(v) = int("max_open_files", max_open_files)? {
        o.max_open_files = v as usize;
    }
    if let Some(v) = int("tail_bytes", tail_bytes)? {
        o.tail_bytes = v;
    }
    if let Some(v) = int("retries", retries)? {
        o.retries = v as usize;
    }
    if let Some(v) = secs("retry_timeout", retry_timeout)? {
        o.retry_timeout = v;
    }
    if let Some(v) = secs("request_timeout", request_timeout)? {
        o.request_timeout = v;
    }
    if let Some(v) = secs("connect_timeout", connect_timeout)? {
        o.connect_timeout = v;
    }
    if let Some(v) = secs("read_timeout", read_timeout)? {
        o.read_timeout = v;
    }
    if let Some(v) = int("io_threads", io_threads)? {
        o.io_threads = v as usize;
    }
    Ok(guard(|| crate::storage::set_io_options(o))?)
}

/// `text` with credentials blanked out (user info in URLs, signature and token query
/// parameters, secret `storage_options` values seen by this process): the one
/// redaction every message naming a URL goes through.
#[pyfunction]
fn redact(text: &str) -> String {
    crate::redact::redact(text)
}

/// Whether a `storage_options` key names a secret (its value is never shown): the rule
/// [`redact`] applies, for Python's reprs and descriptions of options.
#[pyfunction]
fn is_secret_key(key: &str) -> bool {
    crate::redact::is_secret_key(key)
}

/// The current I/O settings (see `set_io_options`).
#[pyfunction]
fn io_options(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    crate::storage::check_env()?;
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
    d.set_item("read_timeout", o.read_timeout.as_secs_f64())?;
    d.set_item("io_threads", o.io_threads)?;
    Ok(d)
}

/// Threads used for parallel page reads in this process (0 = default, at most 1024).
#[pyfunction]
fn set_num_threads(n: &Bound<'_, PyAny>) -> PyResult<()> {
    crate::storage::check_env()?;
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

/// `youmu inspect` in one pass per file: for a path, directory, glob, object URL or prefix
/// (found by the rules of `PageIndex` paths; `storage_options` configure the stores), a
/// list of dicts, one per file or object: `path` and either `error` (the message of the
/// error reading it would raise), `skipped` (why discovery passed it over), or its
/// footer facts (`size`, `etag`, `version`, `num_rows`, `num_row_groups`,
/// `num_columns` (leaf columns), `created_by`, `requests`: GETs sent for it) and
/// `columns`: per top-level column its `name`, `codecs`, `encodings`,
/// `chunks_with_offset_index` and either its pages as the page column of an index
/// (`num_pages`, `page_num_rows`, `page_byte_sizes`, row-group counts by how pages were
/// found) or `error`.
#[pyfunction]
#[pyo3(signature = (path, storage_options=None))]
fn column_pages<'py>(
    py: Python<'py>,
    path: &Bound<'py, PyAny>,
    storage_options: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    let spec = convert::paths_from(path, "column_pages() argument 'path'")?;
    let [spec] = <[String; 1]>::try_from(spec).map_err(|v| {
        crate::error::Error::InvalidArgument(format!(
            "column_pages() argument 'path' must be one path or URL, got {}",
            v.len()
        ))
    })?;
    let options = convert::storage_options_from(storage_options)?;
    let (specs, options) = hub::resolve(vec![spec], options)?;
    let found = detach(py, move || {
        let mut found = crate::index::inspect::inspect(&specs[0], &options)?;
        for spec in &specs[1..] {
            let more = crate::index::inspect::inspect(spec, &options)?;
            found.files.extend(more.files);
            found.skipped.extend(more.skipped);
        }
        Ok::<_, crate::error::Error>(found)
    })?;
    let out = PyList::empty(py);
    for (name, result) in found.files {
        let d = PyDict::new(py);
        d.set_item("path", name)?;
        match result {
            Err(e) => d.set_item("error", e.message())?,
            Ok(r) => {
                d.set_item("size", r.size)?;
                d.set_item("etag", r.etag)?;
                d.set_item("version", r.version)?;
                d.set_item("num_rows", r.num_rows)?;
                d.set_item("num_row_groups", r.num_row_groups)?;
                d.set_item("num_columns", r.num_leaf_columns)?;
                d.set_item("created_by", r.created_by)?;
                d.set_item("requests", r.requests)?;
                let columns = PyList::empty(py);
                for c in r.columns {
                    let cd = PyDict::new(py);
                    cd.set_item("name", c.name)?;
                    cd.set_item("codecs", c.codecs)?;
                    cd.set_item("encodings", c.encodings)?;
                    cd.set_item("chunks_with_offset_index", c.chunks_with_offset_index)?;
                    match c.pages {
                        Ok(p) => {
                            let as_i64 =
                                |v: Vec<u64>| v.into_iter().map(|x| x.min(i64::MAX as u64) as i64).collect::<Vec<_>>();
                            cd.set_item("num_pages", p.page_rows.len())?;
                            cd.set_item("page_num_rows", PyArray1::from_vec(py, as_i64(p.page_rows)))?;
                            cd.set_item("page_byte_sizes", PyArray1::from_vec(py, as_i64(p.page_bytes)))?;
                            dicts::put_row_group_sources(&cd, &p.row_groups)?;
                        }
                        Err(e) => cd.set_item("error", e.message())?,
                    }
                    columns.append(cd)?;
                }
                d.set_item("columns", columns)?;
            }
        }
        out.append(d)?;
    }
    for (name, why) in found.skipped {
        let d = PyDict::new(py);
        d.set_item("path", name)?;
        d.set_item("skipped", why)?;
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
fn set_fast_decode(on: &Bound<'_, PyAny>) -> PyResult<()> {
    crate::parquet::tokens::set_enabled(convert::bool_arg(on, "set_fast_decode(on)")?);
    Ok(())
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    crate::runtime::tune_allocator();
    hub::install();
    if let Ok(Some(on)) = crate::runtime::env_fast_decode() {
        crate::parquet::tokens::set_enabled(on); // a bad value: storage::check_env names it at first use
    }
    m.add_class::<index::PyPageIndex>()?;
    m.add_class::<pending::PendingPages>()?;
    m.add_class::<permute::PyPermutation>()?;
    m.add_class::<mixture::PyFlatMap>()?;
    m.add_class::<mixture::PyMixtureMap>()?;
    m.add_function(wrap_pyfunction!(permute::_permutation_from_key, m)?)?;
    m.add_function(wrap_pyfunction!(io_stats, m)?)?;
    m.add_function(wrap_pyfunction!(set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(set_fast_decode, m)?)?;
    m.add_function(wrap_pyfunction!(column_pages, m)?)?;
    m.add_function(wrap_pyfunction!(set_io_options, m)?)?;
    m.add_function(wrap_pyfunction!(io_options, m)?)?;
    m.add_function(wrap_pyfunction!(redact, m)?)?;
    m.add_function(wrap_pyfunction!(is_secret_key, m)?)?;
    m.add_function(wrap_pyfunction!(hub::listing_prefix, m)?)?;
    m.add_function(wrap_pyfunction!(hub::listed_data, m)?)?;
    Ok(())
}

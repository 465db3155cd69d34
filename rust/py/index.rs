//! `youmu.PageIndex`: a thin wrapper; all work happens in `crate::index` with the GIL
//! released (pages read in the background are `pending.rs`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arrow_pyarrow::ToPyArrow;
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyList};

use super::convert::{batches_to_py, columns_from, ids_from, index_from, paths_from, storage_options_from};
use super::dicts::{options_dict, put_row_group_sources};
use super::pending::{PendingPages, background};
use crate::error::Result;
use crate::index::PageIndex;

/// Two numpy int64 arrays of equal length (pages and offsets of rows).
type ArrayPair<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i64>>);

#[pyclass(name = "PageIndex", module = "youmu._core", frozen)]
pub struct PyPageIndex {
    pub inner: Arc<PageIndex>,
}

#[pymethods]
impl PyPageIndex {
    /// Index the Parquet files under `paths` (file, directory, glob, object-store URL or
    /// prefix, or a list of these); `storage_options` configure the object stores.
    #[new]
    #[pyo3(signature = (paths, columns=None, progress=None, coerce_int96_timestamp_unit=None, storage_options=None))]
    fn new(
        py: Python<'_>,
        paths: &Bound<'_, PyAny>,
        columns: Option<&Bound<'_, PyAny>>,
        progress: Option<Py<PyAny>>,
        coerce_int96_timestamp_unit: Option<&Bound<'_, PyAny>>,
        storage_options: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        crate::storage::check_env()?;
        let specs = paths_from(paths, "PageIndex() argument 'paths'")?;
        let columns = columns_from(columns, "PageIndex() argument 'columns'")?;
        let unit = match coerce_int96_timestamp_unit.filter(|u| !u.is_none()) {
            Some(u) => {
                Some(crate::parquet::int96::parse_unit(&super::convert::str_arg(u, "coerce_int96_timestamp_unit")?)?)
            }
            None => None,
        };
        let options = storage_options_from(storage_options)?;
        let (specs, options) = super::hub::resolve(specs, options)?;
        let progress = progress.filter(|p| !p.is_none(py));
        if let Some(p) = &progress
            && !p.bind(py).is_callable()
        {
            return Err(crate::error::Error::ArgumentType(format!(
                "PageIndex() argument 'progress' must be callable as progress(done, total), got {}",
                p.bind(py).get_type().name()?
            ))
            .into());
        }
        // The callback runs on youmu's threads (or, for objects, on the thread waiting
        // on the I/O runtime); the first exception it raises (a
        // KeyboardInterrupt included) stops the build and is raised here as it was.
        let raised: Mutex<Option<PyErr>> = Mutex::new(None);
        let built = super::detach_interruptible(py, || {
            let cb = |done: usize, total: usize| -> bool {
                let Some(p) = &progress else { return true };
                Python::attach(|py| match p.call1(py, (done, total)) {
                    Ok(_) => true,
                    Err(e) => {
                        if let Ok(mut slot) = raised.lock() {
                            slot.get_or_insert(e);
                        }
                        false
                    }
                })
            };
            PageIndex::build_with(&specs, columns, unit, &options, Some(&cb))
        });
        if let Some(e) = raised.into_inner().ok().flatten() {
            return Err(e);
        }
        let idx = built?;
        warn_skipped(py, &idx)?;
        Ok(PyPageIndex { inner: Arc::new(idx) })
    }

    /// Load an index written by `save`; raises `StaleIndexError` if a file changed.
    #[staticmethod]
    #[pyo3(signature = (path, storage_options=None))]
    fn load(py: Python<'_>, path: &Bound<'_, PyAny>, storage_options: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        crate::storage::check_env()?;
        let path = super::convert::path_arg(path, "PageIndex.load() argument 'path'")?;
        let options = storage_options_from(storage_options)?;
        let idx = super::hub::recover(super::detach(py, || PageIndex::load_with(&path, &options)))?;
        Ok(PyPageIndex { inner: Arc::new(idx) })
    }

    /// One index over the pages of several (files shared, nothing re-read). Used by
    /// `FlatMixture` to shuffle the pages of many sources as one dataset.
    #[staticmethod]
    fn concat(py: Python<'_>, parts: &Bound<'_, PyAny>) -> PyResult<Self> {
        let want = "PageIndex.concat(parts) takes a list of PageIndex";
        let type_name = |o: &Bound<'_, PyAny>| o.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        if parts.is_instance_of::<pyo3::types::PyString>() || parts.is_instance_of::<PyBytes>() {
            return Err(crate::error::Error::ArgumentType(format!("{want}, got {}", type_name(parts))).into());
        }
        let iter = parts
            .try_iter()
            .map_err(|_| crate::error::Error::ArgumentType(format!("{want}, got {}", type_name(parts))))?;
        let mut arcs: Vec<Arc<PageIndex>> = Vec::new();
        for (i, item) in iter.enumerate() {
            let item = item?;
            let part = item.cast::<PyPageIndex>().map_err(|_| {
                crate::error::Error::ArgumentType(format!("{want}, but item {i} is {}", type_name(&item)))
            })?;
            arcs.push(part.get().inner.clone());
        }
        let idx = super::detach(py, move || {
            let refs: Vec<&PageIndex> = arcs.iter().map(|a| a.as_ref()).collect();
            PageIndex::concat(&refs)
        })?;
        Ok(PyPageIndex { inner: Arc::new(idx) })
    }

    fn save(&self, py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<()> {
        let path = super::convert::path_arg(path, "PageIndex.save() argument 'path'")?;
        let inner = self.inner.clone();
        Ok(super::detach(py, move || inner.save(&path))?)
    }

    /// Serialized form (used for pickling into spawned DataLoader workers).
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let inner = self.inner.clone();
        let b = super::detach(py, move || inner.to_bytes())?;
        Ok(PyBytes::new(py, &b))
    }

    /// Rebuild from `to_bytes`. `verify=False` skips checking the objects of a remote
    /// index now (pickles: the sender checked them; reads still refuse a replaced object).
    #[staticmethod]
    #[pyo3(signature = (data, storage_options=None, verify=None))]
    fn from_bytes(
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        storage_options: Option<&Bound<'_, PyAny>>,
        verify: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        crate::storage::check_env()?;
        let data: PyBackedBytes = data.extract().map_err(|_| {
            crate::error::Error::ArgumentType(format!(
                "PageIndex.from_bytes(data) takes the bytes of PageIndex.to_bytes(), got {}",
                data.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        })?;
        let verify = verify.map_or(Ok(true), |v| super::convert::bool_arg(v, "PageIndex.from_bytes(verify)"))?;
        let options = storage_options_from(storage_options)?;
        let idx = super::detach(py, || {
            PageIndex::from_bytes_with(&data, std::path::Path::new("<pickled index>"), &options, verify)
        })?;
        Ok(PyPageIndex { inner: Arc::new(idx) })
    }

    /// Pickles carry the storage options (a spawned worker has no other way to get
    /// credentials passed as arguments), never a saved index file.
    #[allow(clippy::type_complexity)]
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>, Bound<'py, PyDict>, bool))> {
        let py = slf.py();
        let ctor = py.get_type::<PyPageIndex>().getattr("from_bytes")?;
        let opts = options_dict(py, slf.get().inner.storage_options())?;
        Ok((ctor, (slf.get().to_bytes(py)?, opts, false)))
    }

    fn __len__(&self) -> usize {
        self.inner.len() as usize
    }

    #[getter]
    fn num_rows(&self) -> u64 {
        self.inner.num_rows()
    }

    #[getter]
    fn num_files(&self) -> usize {
        self.inner.num_files()
    }

    #[getter]
    fn files(&self) -> Vec<std::ffi::OsString> {
        // as `os.fsdecode` gives them: a name that is not UTF-8 comes back as it is on disk
        self.inner.files().into_iter().map(PathBuf::into_os_string).collect()
    }

    #[getter]
    fn columns(&self) -> Vec<String> {
        self.inner.columns()
    }

    /// The `coerce_int96_timestamp_unit` the index reads with (`None`: as each file's
    /// Arrow schema says, else "ns").
    #[getter]
    fn coerce_int96_timestamp_unit(&self) -> Option<&'static str> {
        self.inner.int96_unit().map(crate::parquet::int96::unit_name)
    }

    /// Whether any file is an object in a store (reads then go over the network).
    #[getter]
    fn is_remote(&self) -> bool {
        crate::storage::any_remote(self.inner.sources())
    }

    /// Windows of ``window_pages`` pages a stream should read ahead of the one being
    /// consumed, as the files' storage suggests: 1 for local files (the next window is
    /// read while the current one is consumed); for objects in a store enough windows
    /// to fill the I/O runtime's ``max_inflight`` requests (``⌈max_inflight /
    /// window_pages⌉``, between 4 and 8).
    fn suggested_read_ahead(&self, window_pages: &Bound<'_, PyAny>) -> PyResult<usize> {
        let wp = index_from(window_pages, u64::MAX, "window_pages", "suggested_read_ahead() argument 'window_pages'")?;
        Ok(self.inner.suggested_read_ahead(usize::try_from(wp).unwrap_or(usize::MAX)))
    }

    /// Entries discovery skipped, as `(path, reason)`: named like Parquet files but not
    /// regular files (a FIFO, a socket, a broken link), or a directory or file reached
    /// again through a link (a symlink loop: each is walked and read once).
    #[getter]
    fn skipped(&self) -> Vec<(String, String)> {
        self.inner.skipped().to_vec()
    }

    /// The projected schema (a `pyarrow.Schema`).
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.schema().as_ref().to_pyarrow(py)
    }

    /// Bytes held by the page tables (locations, page starts, search arrays), footers excluded.
    #[getter]
    fn table_bytes(&self) -> usize {
        self.inner.table_bytes()
    }

    /// `{"file", "row_group", "page", "first_row", "num_rows", "global_first_row"}` of page `i`.
    fn page_info<'py>(&self, py: Python<'py>, i: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let id = index_from(i, self.inner.len(), "page", "page_info() argument 'i'")?;
        let u = self.inner.page_info(id)?;
        let d = PyDict::new(py);
        d.set_item("file", self.inner.file(u.file).path.as_os_str())?;
        d.set_item("file_index", u.file)?;
        d.set_item("row_group", u.row_group)?;
        d.set_item("page", u.page)?;
        d.set_item("first_row", u.first_row)?;
        d.set_item("num_rows", u.num_rows)?;
        d.set_item("global_first_row", u.global_first_row)?;
        Ok(d)
    }

    /// Rows of every page, in global page order (numpy int64).
    fn page_num_rows<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        let v: Vec<i64> = self.inner.page_num_rows().into_iter().map(|x| x as i64).collect();
        PyArray1::from_vec(py, v)
    }

    /// Compressed bytes of every page of the page column (numpy int64).
    fn page_byte_sizes<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        let v: Vec<i64> = self.inner.page_byte_sizes().into_iter().map(|x| x as i64).collect();
        PyArray1::from_vec(py, v)
    }

    /// Estimated decoded bytes of every page, selected columns (numpy int64): the row
    /// group's uncompressed bytes shared out by rows (metadata only).
    fn page_decoded_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        let v: Vec<i64> = self.inner.page_decoded_bytes().into_iter().map(|x| x.min(i64::MAX as u64) as i64).collect();
        PyArray1::from_vec(py, v)
    }

    /// First page id of every file (length `num_files + 1`, numpy int64).
    fn file_page_starts<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        let v: Vec<i64> = self.inner.file_page_starts().iter().map(|&x| x as i64).collect();
        PyArray1::from_vec(py, v)
    }

    /// For global rows, the page holding each and the offset within that page.
    fn locate_rows<'py>(&self, py: Python<'py>, rows: &Bound<'py, PyAny>) -> PyResult<ArrayPair<'py>> {
        let rows = ids_from(rows, self.inner.num_rows(), "row", "locate_rows() argument 'rows'", 24)?;
        let inner = self.inner.clone();
        let (pages, offs): (Vec<i64>, Vec<i64>) = super::detach(py, move || -> Result<_> {
            let mut p = Vec::with_capacity(rows.len());
            let mut o = Vec::with_capacity(rows.len());
            for r in rows {
                let (u, off) = inner.locate_row(r)?;
                p.push(u as i64);
                o.push(off as i64);
            }
            Ok((p, o))
        })?;
        Ok((PyArray1::from_vec(py, pages), PyArray1::from_vec(py, offs)))
    }

    /// Page `i` as a `pyarrow.RecordBatch` of exactly its rows.
    fn read_page<'py>(&self, py: Python<'py>, i: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let id = index_from(i, self.inner.len(), "page", "read_page() argument 'i'")?;
        let inner = self.inner.clone();
        let b = super::detach(py, move || inner.read_page(id))?;
        b.to_pyarrow(py)
    }

    /// Many pages, read and decoded in parallel with the GIL released; list in `ids` order.
    fn read_pages<'py>(&self, py: Python<'py>, ids: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let ids = ids_from(ids, self.inner.len(), "page", "read_pages() argument 'ids'", 8)?;
        let inner = self.inner.clone();
        let batches = super::detach(py, move || inner.read_pages(&ids))?;
        batches_to_py(py, batches)
    }

    /// Start reading pages in the background; `.result()` returns what `read_pages` would.
    fn prefetch(&self, ids: &Bound<'_, PyAny>) -> PyResult<PendingPages> {
        let ids = ids_from(ids, self.inner.len(), "page", "prefetch() argument 'ids'", 8)?;
        self.inner.check_pages_fit(&ids, "prefetch")?;
        let inner = self.inner.clone();
        background(&self.inner, "PageIndex.prefetch", move || inner.read_pages(&ids))
    }

    /// Rows by global row id (in the given order) as one RecordBatch; each row is read
    /// with a one-row selection inside its page (no page-sized decode).
    fn read_rows<'py>(&self, py: Python<'py>, rows: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let rows = ids_from(rows, self.inner.num_rows(), "row", "read_rows() argument 'rows'", 8)?;
        let inner = self.inner.clone();
        let b = super::detach(py, move || inner.read_rows(&rows))?;
        b.to_pyarrow(py)
    }

    /// Pages `ids` as one RecordBatch, rows optionally reordered by `take` (indices into
    /// the concatenated rows): a shuffle window assembled in Rust.
    #[pyo3(signature = (ids, take=None))]
    fn read_window<'py>(
        &self,
        py: Python<'py>,
        ids: &Bound<'py, PyAny>,
        take: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ids = ids_from(ids, self.inner.len(), "page", "read_window() argument 'ids'", 8)?;
        let take = take
            .filter(|t| !t.is_none())
            .map(|t| ids_from(t, u64::MAX, "window row", "read_window() argument 'take'", 16))
            .transpose()?;
        let inner = self.inner.clone();
        let b = super::detach(py, move || inner.read_window(&ids, take.as_deref()))?;
        b.to_pyarrow(py)
    }

    /// `read_window` in the background; `.result()` returns the window as a list of
    /// consecutive batches (the pages, or the reordered rows in a few parts: joining
    /// them would cost a copy that a table of several chunks does not need).
    #[pyo3(signature = (ids, take=None))]
    fn prefetch_window(&self, ids: &Bound<'_, PyAny>, take: Option<&Bound<'_, PyAny>>) -> PyResult<PendingPages> {
        let ids = ids_from(ids, self.inner.len(), "page", "prefetch_window() argument 'ids'", 8)?;
        let take = take
            .filter(|t| !t.is_none())
            .map(|t| ids_from(t, u64::MAX, "window row", "prefetch_window() argument 'take'", 16))
            .transpose()?;
        self.inner.check_window_fits(&ids, take.as_deref())?;
        let inner = self.inner.clone();
        background(&self.inner, "PageIndex.prefetch_window", move || inner.read_window_parts(&ids, take.as_deref()))
    }

    /// Per-file details for `youmu inspect`.
    fn file_info<'py>(&self, py: Python<'py>, i: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let i = index_from(i, self.inner.num_files() as u64, "file", "file_info() argument 'i'")?;
        let f = self.inner.file(i as usize);
        let d = PyDict::new(py);
        d.set_item("path", f.path.as_os_str())?;
        d.set_item("size", f.size)?;
        if let Some(o) = crate::storage::Storage::object_version(&f.source) {
            d.set_item("etag", o.etag)?;
            d.set_item("version", o.version)?;
        }
        d.set_item("num_rows", f.num_rows())?;
        d.set_item("created_by", f.meta.metadata().file_metadata().created_by().map(str::to_string))?;
        d.set_item("num_row_groups", f.num_row_groups())?;
        d.set_item("num_pages", f.num_pages())?;
        put_row_group_sources(&d, &f.row_group_sources())?;
        Ok(d)
    }

    /// Every column chunk of file `i` (all columns, not only the selected ones), from the
    /// footer youmu holds: `{"column", "path", "row_group", "codec", "encodings",
    /// "offset_index", "compressed_bytes"}`. What `youmu inspect` reports for objects.
    fn column_chunks<'py>(&self, py: Python<'py>, i: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let i = index_from(i, self.inner.num_files() as u64, "file", "column_chunks() argument 'i'")?;
        let md = self.inner.file(i as usize).meta.metadata();
        let out = PyList::empty(py);
        for (rg, meta) in md.row_groups().iter().enumerate() {
            for col in meta.columns() {
                let d = PyDict::new(py);
                let path = col.column_path();
                d.set_item("column", path.parts().first().cloned().unwrap_or_default())?;
                d.set_item("path", path.string())?;
                d.set_item("row_group", rg)?;
                d.set_item("codec", format!("{:?}", col.compression()).split('(').next().unwrap_or("").to_string())?;
                let encodings: Vec<String> = col.encodings().map(|e| format!("{e:?}")).collect();
                d.set_item("encodings", encodings)?;
                d.set_item("offset_index", col.offset_index_offset().is_some())?;
                d.set_item("compressed_bytes", col.compressed_size())?;
                out.append(d)?;
            }
        }
        Ok(out)
    }

    fn __repr__(&self) -> String {
        format!(
            "PageIndex({} files, {} pages, {} rows, columns={:?})",
            self.inner.num_files(),
            self.inner.len(),
            self.inner.num_rows(),
            self.inner.columns()
        )
    }
}

/// `UserWarning` naming what discovery skipped (also in `PageIndex.skipped`).
fn warn_skipped(py: Python<'_>, idx: &PageIndex) -> PyResult<()> {
    if idx.skipped().is_empty() {
        return Ok(());
    }
    let list: Vec<String> = idx.skipped().iter().take(5).map(|(p, why)| format!("{p} ({why})")).collect();
    let more = idx.skipped().len().saturating_sub(5);
    let msg = format!(
        "youmu skipped {} entr{} (not regular files, or reached again through a link): {}{}",
        idx.skipped().len(),
        if idx.skipped().len() == 1 { "y" } else { "ies" },
        list.join(", "),
        if more > 0 { format!(" and {more} more (see PageIndex.skipped)") } else { String::new() }
    );
    let cat = py.get_type::<pyo3::exceptions::PyUserWarning>();
    let cmsg = std::ffi::CString::new(msg).unwrap_or_default();
    PyErr::warn(py, &cat, &cmsg, 1)
}

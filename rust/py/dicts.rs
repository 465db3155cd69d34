//! Python dicts that more than one binding returns or passes on, each built in one
//! place so the keys cannot drift apart.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::parquet::file::RowGroupSources;

/// `storage_options` as the `dict[str, str]` Python code takes (pickles, hub calls).
pub(super) fn options_dict<'py>(py: Python<'py>, options: &[(String, String)]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in options {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// The `row_groups_*` keys: row groups of a page column by how their pages were found,
/// and how many are read page by page (`youmu inspect` per column, `file_info` per file).
pub(super) fn put_row_group_sources(d: &Bound<'_, PyDict>, s: &RowGroupSources) -> PyResult<()> {
    d.set_item("row_groups_with_offset_index", s.with_offset_index)?;
    d.set_item("row_groups_header_scanned", s.header_scanned)?;
    d.set_item("row_groups_merged_pages", s.merged_pages)?;
    d.set_item("row_groups_page_granular", s.page_granular)
}

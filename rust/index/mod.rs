//! The global page index over many files: global page id → (file, row group, page) by
//! layered binary search on cumulative counts, and global row → page the same way.
//! A page here is a read unit of the index (see `file.rs`): usually one data page,
//! several merged where a data page does not start on a row.
//!
//! The folder is the index and what surrounds it: discovery of its files (`paths.rs`),
//! saving and loading it (`persist.rs`, sealed by `checksum.rs`), describing a file's
//! pages for `youmu inspect` (`inspect.rs`) and reading one page of it (`read.rs`). One
//! Parquet file's model and decoding sit below it, in `crate::parquet`.

pub mod checksum;
mod columns;
pub mod inspect;
pub mod paths;
pub mod persist;
pub mod read;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arrow_schema::{Field, Schema, SchemaRef, TimeUnit};

use crate::error::{Error, Result};
use crate::parquet::file::FileEntry;
use crate::storage::Fetched;

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// Where a page lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageInfo {
    pub file: usize,
    pub row_group: usize,
    /// Page number within its row group.
    pub page: usize,
    /// First row within the row group.
    pub first_row: u64,
    pub num_rows: u64,
    /// Global row id of the page's first row.
    pub global_first_row: u64,
}

pub struct PageIndex {
    pub(crate) uid: u64,
    pub(crate) columns: Option<Vec<String>>,
    /// Unit INT96 timestamps are read in (`None`: as each file's Arrow schema says).
    pub(crate) int96_unit: Option<TimeUnit>,
    pub(crate) files: Vec<Arc<FileEntry>>,
    /// How the stores were configured (kept to rebuild them in another process; never saved).
    pub(crate) storage_options: Vec<(String, String)>,
    /// Entries discovery skipped (not regular files), with the reason.
    pub(crate) skipped: Vec<(String, String)>,
    /// Cumulative pages at each file start (len = files + 1).
    file_page_start: Vec<u64>,
    /// Cumulative rows at each file start (len = files + 1).
    file_row_start: Vec<u64>,
    schema: SchemaRef,
}

/// Report of index-building progress: called with (files done, files total); returning
/// `false` stops the build (files not yet started are skipped) with [`Error::Cancelled`].
pub type Progress<'a> = &'a (dyn Fn(usize, usize) -> bool + Sync);

impl PageIndex {
    /// Build an index over `paths` (files, directories, globs), reading every footer
    /// (and OffsetIndex, or page headers where there is none) once, files in parallel.
    /// INT96 columns are read in `int96_unit` (`None`: as each file's Arrow schema says,
    /// else nanoseconds).
    pub fn build(
        paths: &[String],
        columns: Option<Vec<String>>,
        int96_unit: Option<TimeUnit>,
        progress: Option<Progress>,
    ) -> Result<PageIndex> {
        Self::build_with(paths, columns, int96_unit, &[], progress)
    }

    /// [`PageIndex::build`] over paths and object-store URLs; `storage_options`
    /// configure the stores (over the environment). Local files are indexed on the
    /// pool; objects with many requests in flight (a tail GET each, a second only when
    /// the tail was too short, column chunks when there is no OffsetIndex). A progress
    /// callback that returns `false` stops the build (`Error::Cancelled`).
    pub fn build_with(
        paths: &[String],
        columns: Option<Vec<String>>,
        int96_unit: Option<TimeUnit>,
        storage_options: &[(String, String)],
        progress: Option<Progress>,
    ) -> Result<PageIndex> {
        let found = paths::discover(paths, storage_options)?;
        let total = found.found.len();
        let done = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        // Once the callback asked to stop it is not called again (it may have raised:
        // that first exception is the one reported).
        let tick = || {
            let d = done.fetch_add(1, Ordering::Relaxed) + 1;
            if let Some(cb) = progress
                && !stop.load(Ordering::Relaxed)
                && !cb(d as usize, total)
            {
                stop.store(true, Ordering::Relaxed);
            }
        };
        let cancelled = || Error::Cancelled("index build stopped by its progress callback".into());
        let cols = columns.clone();
        let work = move |reader: Fetched| FileEntry::build_from(reader, cols.as_deref(), int96_unit);
        let entries = crate::storage::open_each(&found.found, work, &tick, &stop)?;
        if stop.load(Ordering::Relaxed) {
            return Err(cancelled());
        }
        let entries = entries
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(Error::Internal("a file was not indexed".into()))).map(|(e, _)| Arc::new(e))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut idx = Self::from_entries(entries, columns, int96_unit)?;
        idx.storage_options = storage_options.to_vec();
        idx.skipped = found.skipped;
        Ok(idx)
    }

    /// One index over the pages of several: files in order of `parts`, then each
    /// part's own order. Nothing is re-read or copied (files are shared).
    pub fn concat(parts: &[&PageIndex]) -> Result<PageIndex> {
        let files: Vec<Arc<FileEntry>> = parts.iter().flat_map(|p| p.files.iter().cloned()).collect();
        let mut seen = std::collections::HashSet::new();
        for f in &files {
            if !seen.insert(std::fs::canonicalize(&f.path).unwrap_or_else(|_| f.path.clone())) {
                return Err(Error::InvalidArgument(format!("{} belongs to more than one source", f.path.display())));
            }
        }
        let columns = parts.first().and_then(|p| p.columns.clone());
        let unit = parts.first().and_then(|p| p.int96_unit);
        if let Some(other) = parts.iter().find(|p| p.int96_unit != unit) {
            return Err(Error::InvalidArgument(format!(
                "cannot concatenate indexes that read INT96 timestamps in different units ({} and {})",
                unit.map_or("the files' own", crate::parquet::int96::unit_name),
                other.int96_unit.map_or("the files' own", crate::parquet::int96::unit_name)
            )));
        }
        let mut idx = Self::from_entries(files, columns, unit)?;
        for p in parts {
            for (k, v) in &p.storage_options {
                if !idx.storage_options.iter().any(|(k2, _)| k2 == k) {
                    idx.storage_options.push((k.clone(), v.clone()));
                }
            }
            idx.skipped.extend(p.skipped.iter().cloned());
        }
        Ok(idx)
    }

    pub(crate) fn from_entries(
        files: Vec<Arc<FileEntry>>,
        columns: Option<Vec<String>>,
        int96_unit: Option<TimeUnit>,
    ) -> Result<PageIndex> {
        let first = files.first().ok_or_else(|| Error::InvalidArgument("no Parquet files to index".into()))?;
        let fields = first.fields.clone();
        for f in &files[1..] {
            check_same_schema(&first.path, &fields, &f.path, &f.fields)?;
        }
        // Nullability may differ between writers; the index reports the looser one.
        let merged: Vec<Field> = fields
            .iter()
            .enumerate()
            .map(|(i, fd)| {
                let nullable = files.iter().any(|f| f.fields[i].is_nullable());
                fd.as_ref().clone().with_nullable(nullable)
            })
            .collect();
        let schema = SchemaRef::new(Schema::new(merged));
        let mut file_page_start = vec![0u64];
        let mut file_row_start = vec![0u64];
        for f in &files {
            file_page_start.push(file_page_start.last().copied().unwrap_or(0) + f.num_pages());
            file_row_start.push(file_row_start.last().copied().unwrap_or(0) + f.num_rows());
        }
        Ok(PageIndex {
            uid: NEXT_UID.fetch_add(1, Ordering::Relaxed),
            columns,
            int96_unit,
            storage_options: Vec::new(),
            skipped: Vec::new(),
            files,
            file_page_start,
            file_row_start,
            schema,
        })
    }

    pub fn len(&self) -> u64 {
        *self.file_page_start.last().unwrap_or(&0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn num_rows(&self) -> u64 {
        *self.file_row_start.last().unwrap_or(&0)
    }

    pub fn num_files(&self) -> usize {
        self.files.len()
    }

    pub fn files(&self) -> Vec<PathBuf> {
        self.files.iter().map(|f| f.path.clone()).collect()
    }

    /// Where each file's bytes come from.
    pub fn sources(&self) -> impl Iterator<Item = &crate::storage::Source> {
        self.files.iter().map(|f| &f.source)
    }

    /// Windows of `window_pages` pages a stream should read ahead of the one being
    /// consumed, as the files' storage suggests ([`crate::storage::suggested_read_ahead`]):
    /// the stream asks this instead of where the files are.
    pub fn suggested_read_ahead(&self, window_pages: usize) -> usize {
        crate::storage::suggested_read_ahead(self.sources(), window_pages)
    }

    /// The `storage_options` the index was built or loaded with.
    pub fn storage_options(&self) -> &[(String, String)] {
        &self.storage_options
    }

    /// Entries discovery skipped (path, reason): not regular files.
    pub fn skipped(&self) -> &[(String, String)] {
        &self.skipped
    }

    pub fn file(&self, i: usize) -> &FileEntry {
        &self.files[i]
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    pub fn columns(&self) -> Vec<String> {
        self.schema.fields().iter().map(|f| f.name().clone()).collect()
    }

    /// Unit INT96 timestamps are read in (`None`: as each file's Arrow schema says).
    pub fn int96_unit(&self) -> Option<TimeUnit> {
        self.int96_unit
    }

    /// Estimated decoded bytes of one page (see `page_decoded_bytes`), from the footer.
    pub(crate) fn page_estimate(&self, id: u64) -> Result<(u128, u64)> {
        let info = self.page_info(id)?;
        let f = &self.files[info.file];
        let meta = f.meta.metadata().row_group(info.row_group);
        let bytes: u128 = f.leaves.iter().map(|&l| meta.column(l).uncompressed_size().max(0) as u128).sum();
        let rows = f.rg_rows(info.row_group).max(1) as u128;
        Ok((bytes * info.num_rows as u128 / rows, info.num_rows))
    }

    /// Refuse reading pages `ids` (repeats count again) if their decoded size, estimated
    /// from the footers, exceeds the memory available (see `limits.rs`).
    pub fn check_pages_fit(&self, ids: &[u64], what: &str) -> Result<()> {
        let mut total = 0u128;
        for &id in ids {
            total += self.page_estimate(id)?.0;
        }
        crate::limits::check_fits(|| format!("{what} ({} pages)", ids.len()), total)
    }

    /// Same for single rows: each row counted as its page's bytes per row.
    pub fn check_rows_fit(&self, rows: &[u64], what: &str) -> Result<()> {
        let mut total = 0u128;
        for &r in rows {
            let (page, _) = self.locate_row(r)?;
            let (bytes, n) = self.page_estimate(page)?;
            total += bytes / n.max(1) as u128 + 1;
        }
        crate::limits::check_fits(|| format!("{what} ({} rows)", rows.len()), total)
    }
    /// Layered binary search: file, then row group, then page.
    pub fn page_info(&self, id: u64) -> Result<PageInfo> {
        if id >= self.len() {
            return Err(Error::OutOfRange { what: "page", id: id as i128, len: self.len() });
        }
        let file = self.file_page_start.partition_point(|&s| s <= id) - 1;
        let f = &self.files[file];
        let local = id - self.file_page_start[file];
        let (rg, first, n) = f.page_rows(local);
        let page = (local - f.rg_page_start[rg]) as usize;
        Ok(PageInfo {
            file,
            row_group: rg,
            page,
            first_row: first,
            num_rows: n,
            global_first_row: self.file_row_start[file] + f.rg_row_start[rg] + first,
        })
    }

    /// The page holding global row `row`, and the row's offset within it.
    pub fn locate_row(&self, row: u64) -> Result<(u64, u64)> {
        if row >= self.num_rows() {
            return Err(Error::OutOfRange { what: "row", id: row as i128, len: self.num_rows() });
        }
        let file = self.file_row_start.partition_point(|&s| s <= row) - 1;
        let f = &self.files[file];
        let in_file = row - self.file_row_start[file];
        let rg = f.rg_row_start.partition_point(|&s| s <= in_file) - 1;
        let in_rg = in_file - f.rg_row_start[rg];
        let (lo, hi) = (f.rg_page_start[rg] as usize, f.rg_page_start[rg + 1] as usize);
        let u = lo + f.page_first_row[lo..hi].partition_point(|&s| s as u64 <= in_rg) - 1;
        let page = self.file_page_start[file] + u as u64;
        Ok((page, in_rg - f.page_first_row[u] as u64))
    }

    /// Rows of every page, in global order.
    pub fn page_num_rows(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.len() as usize);
        for f in &self.files {
            for rg in 0..f.num_row_groups() {
                let (lo, hi) = (f.rg_page_start[rg] as usize, f.rg_page_start[rg + 1] as usize);
                for u in lo..hi {
                    let end = if u + 1 < hi { f.page_first_row[u + 1] as u64 } else { f.rg_rows(rg) };
                    out.push(end - f.page_first_row[u] as u64);
                }
            }
        }
        out
    }

    /// Compressed bytes of every page's page-column data pages (header included), in global
    /// order. Row groups read by walking whole chunks report their chunk size shared
    /// out by rows.
    pub fn page_byte_sizes(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.len() as usize);
        for f in &self.files {
            let md = f.meta.metadata();
            let oi = md.offset_index();
            for rg in 0..f.num_row_groups() {
                let (lo, hi) = (f.rg_page_start[rg] as usize, f.rg_page_start[rg + 1] as usize);
                let rows = f.rg_rows(rg).max(1);
                let locs = oi.filter(|o| !o[rg].is_empty()).map(|o| &o[rg][f.page_leaf].page_locations);
                for u in lo..hi {
                    let first = f.page_first_row[u] as u64;
                    let end = if u + 1 < hi { f.page_first_row[u + 1] as u64 } else { f.rg_rows(rg) };
                    let size = match locs {
                        Some(l) => l
                            .iter()
                            .filter(|p| (p.first_row_index as u64) >= first && (p.first_row_index as u64) < end)
                            .map(|p| p.compressed_page_size as u64)
                            .sum(),
                        None => md.row_group(rg).column(f.page_leaf).compressed_size() as u64 * (end - first) / rows,
                    };
                    out.push(size);
                }
            }
        }
        out
    }

    /// Estimated decoded bytes of every page (all selected columns), in global order:
    /// the row group's uncompressed bytes of the selected leaves, shared out by rows.
    /// Metadata only (no page is read), so window sizes derived from it stay a pure
    /// function of the files. An estimate: Arrow adds offsets and validity, dictionary
    /// pages expand, so callers keep a margin.
    pub fn page_decoded_bytes(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.len() as usize);
        for f in &self.files {
            let md = f.meta.metadata();
            for rg in 0..f.num_row_groups() {
                let rows = f.rg_rows(rg).max(1) as u128;
                let meta = md.row_group(rg);
                let bytes: u128 = f.leaves.iter().map(|&l| meta.column(l).uncompressed_size().max(0) as u128).sum();
                let (lo, hi) = (f.rg_page_start[rg] as usize, f.rg_page_start[rg + 1] as usize);
                for u in lo..hi {
                    let end = if u + 1 < hi { f.page_first_row[u + 1] as u64 } else { f.rg_rows(rg) };
                    let n = (end - f.page_first_row[u] as u64) as u128;
                    out.push(u64::try_from(bytes * n / rows).unwrap_or(u64::MAX));
                }
            }
        }
        out
    }

    /// First page id of every file (len = files + 1).
    pub fn file_page_starts(&self) -> &[u64] {
        &self.file_page_start
    }

    /// Approximate bytes held by the index (footers excluded): page tables, page
    /// locations of the projected leaves and search arrays.
    pub fn table_bytes(&self) -> usize {
        let mut b = (self.file_page_start.len() + self.file_row_start.len()) * 8;
        for f in &self.files {
            b += f.page_first_row.len() * 4 + (f.rg_row_start.len() + f.rg_page_start.len()) * 8;
            if let Some(oi) = f.meta.metadata().offset_index() {
                for rg in oi {
                    for leaf in &f.leaves {
                        if let Some(c) = rg.get(*leaf) {
                            b += c.page_locations.len()
                                * std::mem::size_of::<parquet::file::page_index::offset_index::PageLocation>();
                        }
                    }
                }
            }
        }
        b
    }
}

impl PageIndex {
    /// `batch` (decoded from `path` with that file's own schema) under the index's
    /// schema: files may differ in top-level nullability (the index takes the looser),
    /// and every batch carries the one schema `PageIndex.schema` reports.
    pub(crate) fn conform(&self, batch: arrow_array::RecordBatch, path: &Path) -> Result<arrow_array::RecordBatch> {
        let fields_match = batch.schema().fields().len() == self.schema.fields().len()
            && batch.schema().fields().iter().zip(self.schema.fields()).all(|(a, b)| a == b);
        if fields_match {
            return Ok(batch);
        }
        // nested field names may differ between writers ("item", "element"): types and
        // nullability are what `check_same_schema` made equal
        let options =
            arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())).with_match_field_names(false);
        arrow_array::RecordBatch::try_new_with_options(self.schema.clone(), batch.columns().to_vec(), &options).map_err(
            |e| Error::SchemaMismatch {
                first: self.files.first().map(|f| f.path.display().to_string()).unwrap_or_default(),
                other: path.display().to_string(),
                detail: format!("a batch does not fit the index schema: {e}"),
            },
        )
    }
}

fn check_same_schema(a: &Path, fa: &[arrow_schema::FieldRef], b: &Path, fb: &[arrow_schema::FieldRef]) -> Result<()> {
    let mismatch = |detail: String| Error::SchemaMismatch {
        first: a.display().to_string(),
        other: b.display().to_string(),
        detail,
    };
    if fa.len() != fb.len() {
        return Err(mismatch(format!("{} vs {} selected columns", fa.len(), fb.len())));
    }
    for (x, y) in fa.iter().zip(fb) {
        if x.name() != y.name() {
            return Err(mismatch(format!("column {:?} vs {:?}", x.name(), y.name())));
        }
        if !x.data_type().equals_datatype(y.data_type()) {
            return Err(mismatch(format!("column {:?}: {} vs {}", x.name(), x.data_type(), y.data_type())));
        }
    }
    Ok(())
}

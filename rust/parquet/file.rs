//! One Parquet file of an index: its parsed footer (`file/footer.rs`), the projection of
//! the selected columns (`file/projection.rs`), and its page table (where each of the
//! index's pages starts, per row group: `file/pagetable.rs`), put together and checked
//! here.
//!
//! A *page* of the index is the finest row range that can be read on its own: a data
//! page of the page column (the first leaf of the first selected column), or several
//! data pages merged when one does not start on a row (it continues its predecessor's
//! last record), or the whole column chunk when nothing finer is known. Every page of
//! the index therefore starts on a row. Pages are stored as one `u32` (first row within
//! the row group) each; the byte locations live in the (possibly synthesized)
//! OffsetIndex of the footer, so a page costs ~28 bytes in all (24 for its location, 4
//! for its page-table entry).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_schema::{FieldRef, TimeUnit};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataBuilder, ParquetOffsetIndex};
use parquet::file::page_index::offset_index::{OffsetIndexMetaData, PageLocation};

use crate::error::{Error, Result};
use crate::storage::{Fetched, Source, Storage};

/// The first bytes of a saved index (`persist` writes and checks them): kept here, below
/// `persist`, so opening an index file as data can say what it is.
pub(crate) const INDEX_MAGIC: &[u8; 8] = b"YOUMUIDX";

mod footer;
mod pagetable;
mod projection;

pub use footer::read_metadata;
pub(crate) use footer::{arrow_metadata, check_footer_thrift};
pub(crate) use pagetable::{SavedTables, Tables, build_tables, scan_ranges};
use pagetable::{check_locations, saved_within_chunks};
use projection::{Projection, resolve_projection};

/// How the pages of a row group were found (reported by `youmu inspect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageSource {
    /// The file's own OffsetIndex.
    OffsetIndex,
    /// Page headers scanned; every page starts on a row.
    HeaderScan,
    /// Page headers scanned; some pages continue a row and were merged.
    HeaderScanMerged,
}

/// Row groups of a page column counted by how their pages were found, and those read
/// page by page (the rest are read whole): what `youmu inspect` reports per column and
/// `PageIndex.file_info` per file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowGroupSources {
    pub with_offset_index: usize,
    pub header_scanned: usize,
    pub merged_pages: usize,
    pub page_granular: usize,
}

impl RowGroupSources {
    /// Count one row group (`None`: no pages found for it).
    pub fn add(&mut self, source: Option<PageSource>, page_granular: bool) {
        match source {
            Some(PageSource::OffsetIndex) => self.with_offset_index += 1,
            Some(PageSource::HeaderScan) => self.header_scanned += 1,
            Some(PageSource::HeaderScanMerged) => self.merged_pages += 1,
            None => {}
        }
        self.page_granular += usize::from(page_granular);
    }
}

pub struct FileEntry {
    /// The file's path, or the object's URL.
    pub path: PathBuf,
    pub size: u64,
    pub mtime_ns: i64,
    /// Where the bytes come from (with what the file looked like when indexed).
    pub source: Source,
    pub meta: ArrowReaderMetadata,
    pub mask: ProjectionMask,
    /// Leaf column indices of the projection (file order).
    pub leaves: Vec<usize>,
    /// The leaf whose data pages define the index's pages.
    pub page_leaf: usize,
    /// Columns of a read batch, in the user's order (`None`: already in order).
    pub reorder: Option<Vec<usize>>,
    /// Projected fields in the user's order.
    pub fields: Vec<FieldRef>,
    /// Cumulative rows at each row group start (len = row groups + 1).
    pub rg_row_start: Vec<u64>,
    /// Cumulative pages at each row group start (len = row groups + 1).
    pub rg_page_start: Vec<u64>,
    /// First row (within its row group) of every page, row groups concatenated. `u32`
    /// because it is per page; row groups of more than 2^32 rows are refused.
    pub page_first_row: Vec<u32>,
    pub page_source: Vec<PageSource>,
    /// Row groups whose projected leaves have page locations (page-granular reads).
    pub rg_has_locations: Vec<bool>,
    /// Projected INT96 columns read in a unit that can wrap, and how to check them.
    pub int96_check: Option<Int96Check>,
}

/// The overflow check of INT96 columns (see `int96.rs`): the same rows decoded again with
/// the INT96 leaves in seconds.
pub struct Int96Check {
    pub meta: ArrowReaderMetadata,
    /// The projected top-level columns that hold INT96 leaves.
    pub mask: ProjectionMask,
    /// Per such column: its position in a decoded batch (file order), and its name.
    pub columns: Vec<(usize, String)>,
}

impl FileEntry {
    /// Parse and index one file or object read through `reader` (for a remote object,
    /// a strict [`Fetched`]: a missing range is an `Error::NeedData` the caller fetches);
    /// INT96 columns are read in `int96_unit` (`None`: as the file's Arrow schema says,
    /// else nanoseconds).
    pub fn build_from(reader: Fetched, columns: Option<&[String]>, int96_unit: Option<TimeUnit>) -> Result<FileEntry> {
        // the path itself, not its display form (a name need not be UTF-8)
        let path = reader.source.path();
        let size = reader.source.len();
        if size < 12 {
            return Err(Error::corrupt(&path, format!("file is {size} bytes, too small to be Parquet")));
        }
        let parsed = read_metadata(&path, &reader)
            .and_then(|md| Self::from_metadata(&path, reader.clone(), md, columns, int96_unit, None));
        match parsed {
            Err(e @ (Error::Corrupt { .. } | Error::Unsupported { .. })) => {
                // a saved index passed where data goes: say so, not "corrupt footer"
                // (where its first bytes are at hand: a strict reader fetches nothing)
                let head = reader.read_range(0, 8.min(size as usize)).unwrap_or_default();
                if head.as_ref() == INDEX_MAGIC.as_slice() {
                    Err(Error::corrupt(
                        &path,
                        "this is a saved youmu index, not a Parquet file: open it with PageIndex.load(path)",
                    ))
                } else {
                    Err(e)
                }
            }
            other => other,
        }
    }

    /// Build from parsed metadata. `saved` carries page locations and page starts from a
    /// persisted index, which skips the header scan (and every read of `reader`).
    pub(crate) fn from_metadata(
        path: &Path,
        reader: Fetched,
        md: ParquetMetaData,
        columns: Option<&[String]>,
        int96_unit: Option<TimeUnit>,
        saved: Option<SavedTables>,
    ) -> Result<FileEntry> {
        let size = reader.source.len();
        let mtime_ns = reader.source.mtime_ns();
        let plain = arrow_metadata(path, Arc::new(md.clone()), ArrowReaderOptions::new())?;
        let plan = crate::parquet::int96::plan(md.file_metadata().schema_descr(), plain.schema(), int96_unit)
            .map_err(|why| Error::Unsupported { path: path.display().to_string(), detail: why })?;
        let options = match &plan.read {
            Some(schema) => ArrowReaderOptions::new().with_schema(Arc::new(schema.clone())),
            None => ArrowReaderOptions::new(),
        };
        let hinted =
            if plan.read.is_some() { arrow_metadata(path, Arc::new(md.clone()), options.clone())? } else { plain };
        let Projection { mask, leaves, page_leaf, reorder, fields } = resolve_projection(path, &hinted, columns)?;
        drop(hinted);
        let descr = md.file_metadata().schema_descr_ptr();
        let num_rgs = md.num_row_groups();
        let num_cols = descr.num_columns();

        let mut rg_row_start = Vec::with_capacity(num_rgs + 1);
        rg_row_start.push(0u64);
        for (i, rg) in md.row_groups().iter().enumerate() {
            let n = u64::try_from(rg.num_rows())
                .map_err(|_| Error::corrupt(path, format!("row group {i} has {} rows", rg.num_rows())))?;
            let last = *rg_row_start.last().unwrap_or(&0);
            rg_row_start.push(last + n);
        }

        let from_saved = saved.is_some();
        let (locations, page_starts, sources) = match saved {
            Some(s) => (s.locations, s.page_starts, s.sources),
            None => build_tables(path, &reader, size, &md, &leaves, page_leaf, &rg_row_start)?,
        };
        if page_starts.len() != num_rgs || locations.len() != num_rgs || sources.len() != num_rgs {
            return Err(Error::corrupt(path, "page table does not match the row groups"));
        }
        // Saved tables come from a file on disk: check them like any other input.
        for (rg, u) in page_starts.iter().enumerate() {
            let rows = rg_row_start[rg + 1] - rg_row_start[rg];
            let ok = if rows == 0 {
                u.len() <= 1 && u.iter().all(|&r| r == 0)
            } else {
                u.first() == Some(&0) && u.windows(2).all(|w| w[0] < w[1]) && u.iter().all(|&r| r < rows)
            };
            if !ok {
                return Err(Error::corrupt(path, format!("row group {rg}: page table does not fit its {rows} rows")));
            }
        }
        for (rg, loc) in locations.iter().enumerate() {
            let Some(per_leaf) = loc else { continue };
            let rows = rg_row_start[rg + 1] - rg_row_start[rg];
            check_locations(per_leaf, rows).map_err(|why| Error::corrupt(path, format!("row group {rg}: {why}")))?;
            if from_saved {
                let chunks: Vec<_> = leaves.iter().map(|&l| md.row_group(rg).column(l)).collect();
                saved_within_chunks(per_leaf, &chunks)
                    .map_err(|why| Error::corrupt(path, format!("row group {rg}: {why}")))?;
            }
            // index pages are the page leaf's data pages (see `build_tables`)
            let pos = leaves.iter().position(|&l| l == page_leaf).unwrap_or(0);
            let firsts = per_leaf.get(pos).map(|locs| locs.iter().map(|l| l.first_row_index as u64));
            if !firsts.is_some_and(|f| f.eq(page_starts[rg].iter().copied())) {
                return Err(Error::corrupt(
                    path,
                    format!("row group {rg}: its page table does not match the page locations of its data pages"),
                ));
            }
            if per_leaf.len() != leaves.len() {
                return Err(Error::corrupt(
                    path,
                    format!("row group {rg}: page locations for {} columns, expected {}", per_leaf.len(), leaves.len()),
                ));
            }
            for p in per_leaf.iter().flatten() {
                let end = u64::try_from(p.offset)
                    .ok()
                    .zip(u64::try_from(p.compressed_page_size).ok())
                    .and_then(|(o, n)| o.checked_add(n));
                if end.is_none_or(|e| e > size) {
                    return Err(Error::corrupt(
                        path,
                        format!(
                            "row group {rg}: a page at offset {} ({} bytes) lies outside the file ({size} bytes)",
                            p.offset, p.compressed_page_size
                        ),
                    ));
                }
            }
        }

        let mut rg_page_start = Vec::with_capacity(num_rgs + 1);
        rg_page_start.push(0u64);
        let mut page_first_row = Vec::new();
        let mut rg_has_locations = Vec::with_capacity(num_rgs);
        for (rg, u) in page_starts.iter().enumerate() {
            if rg_row_start[rg + 1] - rg_row_start[rg] > u32::MAX as u64 {
                return Err(Error::Unsupported {
                    path: path.display().to_string(),
                    detail: format!("row group {rg} has more than 2^32 rows"),
                });
            }
            page_first_row.extend(u.iter().map(|&r| r as u32));
            rg_page_start.push(page_first_row.len() as u64);
            rg_has_locations.push(locations[rg].is_some());
            let _ = rg;
        }

        // Keep page locations only for the projected leaves: the footer's index for other
        // columns would be memory spent on nothing.
        let empty = OffsetIndexMetaData { page_locations: vec![], unencoded_byte_array_data_bytes: None };
        let mut oi: ParquetOffsetIndex = Vec::with_capacity(num_rgs);
        for loc in locations {
            match loc {
                None => oi.push(vec![]),
                Some(per_leaf) => {
                    let mut row = vec![empty.clone(); num_cols];
                    for (leaf, locs) in leaves.iter().zip(per_leaf) {
                        row[*leaf] =
                            OffsetIndexMetaData { page_locations: locs, unencoded_byte_array_data_bytes: None };
                    }
                    oi.push(row);
                }
            }
        }
        let md = Arc::new(
            ParquetMetaDataBuilder::new_from_metadata(md).set_column_index(None).set_offset_index(Some(oi)).build(),
        );
        let meta = arrow_metadata(path, md.clone(), options)?;
        // projected top-level columns in file order, and those holding INT96 leaves
        let mut roots: Vec<usize> = leaves.iter().map(|&l| descr.get_column_root_idx(l)).collect();
        roots.dedup();
        let int96_check = match &plan.seconds {
            Some(seconds) if roots.iter().any(|r| plan.roots.contains(r)) => {
                let check_roots: Vec<usize> = roots.iter().copied().filter(|r| plan.roots.contains(r)).collect();
                let names = descr.root_schema().get_fields();
                Some(Int96Check {
                    meta: arrow_metadata(path, md, ArrowReaderOptions::new().with_schema(Arc::new(seconds.clone())))?,
                    mask: ProjectionMask::roots(&descr, check_roots.iter().copied()),
                    columns: check_roots
                        .iter()
                        .map(|r| {
                            let pos = roots.iter().position(|x| x == r).unwrap_or(0);
                            (pos, names.get(*r).map(|f| f.name().to_string()).unwrap_or_default())
                        })
                        .collect(),
                })
            }
            _ => None,
        };

        Ok(FileEntry {
            path: path.to_path_buf(),
            size,
            mtime_ns,
            source: reader.source,
            meta,
            mask,
            leaves,
            page_leaf,
            reorder,
            fields,
            rg_row_start,
            rg_page_start,
            page_first_row,
            page_source: sources,
            rg_has_locations,
            int96_check,
        })
    }

    pub fn num_row_groups(&self) -> usize {
        self.rg_row_start.len() - 1
    }

    pub fn num_rows(&self) -> u64 {
        *self.rg_row_start.last().unwrap_or(&0)
    }

    pub fn num_pages(&self) -> u64 {
        self.page_first_row.len() as u64
    }

    /// The row groups of the index's page column by how their pages were found.
    pub fn row_group_sources(&self) -> RowGroupSources {
        let mut out = RowGroupSources::default();
        for rg in 0..self.page_source.len().max(self.rg_has_locations.len()) {
            out.add(self.page_source.get(rg).copied(), self.rg_has_locations.get(rg) == Some(&true));
        }
        out
    }

    pub fn rg_rows(&self, rg: usize) -> u64 {
        self.rg_row_start[rg + 1] - self.rg_row_start[rg]
    }

    /// (row group, page within row group) of a file-local page id.
    pub fn locate_page(&self, u: u64) -> (usize, usize) {
        let rg = self.rg_page_start.partition_point(|&s| s <= u) - 1;
        (rg, (u - self.rg_page_start[rg]) as usize)
    }

    /// First row within the row group and row count of a file-local page id.
    pub fn page_rows(&self, u: u64) -> (usize, u64, u64) {
        let (rg, _) = self.locate_page(u);
        let first = self.page_first_row[u as usize] as u64;
        let end_in_rg = u + 1 < self.rg_page_start[rg + 1];
        let end = if end_in_rg { self.page_first_row[u as usize + 1] as u64 } else { self.rg_rows(rg) };
        (rg, first, end - first)
    }

    /// Page locations of the projected leaves for a row group (empty if none).
    pub fn locations(&self, rg: usize) -> Vec<Vec<PageLocation>> {
        match self.meta.metadata().offset_index() {
            Some(oi) if !oi[rg].is_empty() => self.leaves.iter().map(|&l| oi[rg][l].page_locations.clone()).collect(),
            _ => vec![],
        }
    }

    /// The most a page of a row group's projected columns may claim to decompress to:
    /// its largest column chunk's uncompressed size per the footer, but at least 16 MiB
    /// (some writers under-report chunk sizes; a claim beyond both is corrupt).
    pub fn max_chunk_bytes(&self, rg: usize) -> u64 {
        let meta = self.meta.metadata().row_group(rg);
        let chunk = self.leaves.iter().map(|&l| meta.column(l).uncompressed_size().max(0) as u64).max().unwrap_or(0);
        chunk.max(16 << 20)
    }

    /// Dictionary page ranges of the projected leaves of a row group, for the cache.
    pub fn dict_ranges(&self, rg: usize) -> Vec<(u64, u32)> {
        let md = self.meta.metadata();
        let Some(oi) = md.offset_index() else { return vec![] };
        if oi[rg].is_empty() {
            return vec![];
        }
        let mut out = Vec::new();
        for &leaf in &self.leaves {
            let (start, _) = md.row_group(rg).column(leaf).byte_range();
            if let Some(first) = oi[rg][leaf].page_locations.first() {
                let f = first.offset as u64;
                if f > start && f - start <= u32::MAX as u64 {
                    out.push((start, (f - start) as u32));
                }
            }
        }
        out
    }
}

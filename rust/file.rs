//! One Parquet file of an index: its parsed footer, the projection of the selected
//! columns, and its page table (where each of the index's pages starts, per row group).
//!
//! A *page* of the index is the finest row range that can be read on its own: a data
//! page of the page column (the first leaf of the first selected column), or several
//! data pages merged when one does not start on a row (it continues its predecessor's
//! last record), or the whole column chunk when nothing finer is known. Every page of
//! the index therefore starts on a row. Pages are stored as one `u32` (first row within
//! the row group) each; the
//! byte locations live in the (possibly synthesized) OffsetIndex of the footer, so a
//! page costs ~28 bytes in all (24 for its location, 4 for its page-table entry).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_schema::{FieldRef, SchemaRef, TimeUnit};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::file::metadata::{
    PageIndexPolicy, ParquetMetaData, ParquetMetaDataBuilder, ParquetMetaDataOptions, ParquetMetaDataReader,
    ParquetOffsetIndex, ParquetStatisticsPolicy,
};
use parquet::file::page_index::offset_index::{OffsetIndexMetaData, PageLocation};

use crate::error::{Error, Result};
use crate::scan::scan_chunk;
use crate::storage::{Fetched, Source, Storage};

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

/// Arrow reader metadata of a file. The Arrow schema a writer embeds (`ARROW:schema`,
/// base64 of an Arrow IPC message) is decoded here by arrow-ipc, which panics on some
/// malformed messages instead of returning an error: either way the file is corrupt.
pub(crate) fn arrow_metadata(
    path: &Path,
    md: Arc<ParquetMetaData>,
    options: ArrowReaderOptions,
) -> Result<ArrowReaderMetadata> {
    match crate::error::catch_quietly(|| ArrowReaderMetadata::try_new(md, options)) {
        Ok(r) => r.map_err(|e| Error::from_parquet(path, "schema", e)),
        Err(panic) => Err(Error::corrupt(
            path,
            format!("the embedded Arrow schema (ARROW:schema key-value metadata) is malformed: {panic}"),
        )),
    }
}

fn metadata_options() -> ParquetMetaDataOptions {
    // Statistics are the bulk of a footer and youmu never uses them.
    ParquetMetaDataOptions::new()
        .with_column_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_size_stats_policy(ParquetStatisticsPolicy::SkipAll)
}

/// Parse the footer (and the OffsetIndex when present and sound).
pub fn read_metadata(path: &Path, reader: &Fetched) -> Result<ParquetMetaData> {
    let parse = |policy| {
        ParquetMetaDataReader::new()
            .with_offset_index_policy(policy)
            .with_column_index_policy(PageIndexPolicy::Skip)
            .with_metadata_options(Some(metadata_options()))
            .parse_and_finish(reader)
    };
    // arrow-rs sizes its vectors from the footer's counts before reading the elements:
    // walk the Thrift first so a corrupt count is an error, not an aborting allocation.
    check_footer_thrift(path, reader)?;
    let footer = parse(PageIndexPolicy::Skip).map_err(|e| Error::from_parquet(path, "footer", e))?;
    if !has_offset_index(&footer) {
        return Ok(footer);
    }
    // A damaged OffsetIndex should not make a readable file unreadable: keep the footer
    // alone and scan page headers instead.
    if !offset_indexes_well_formed(reader, &footer)? {
        return Ok(footer);
    }
    Ok(parse(PageIndexPolicy::Optional).unwrap_or(footer))
}

/// Check the footer's Thrift (see `read_metadata`); `reader` is the file, or a saved
/// copy of its tail.
pub(crate) fn check_footer_thrift<R: parquet::file::reader::ChunkReader>(path: &Path, reader: &R) -> Result<()> {
    let len = reader.len();
    if len < 12 {
        return Err(Error::corrupt(path, format!("{len} bytes is too small for a Parquet file")));
    }
    let tail = reader.get_bytes(len - 8, 8).map_err(|e| Error::from_parquet(path, "footer", e))?;
    if &tail[4..] != b"PAR1" {
        return Ok(()); // encrypted footer ("PARE") or not Parquet: arrow-rs says which
    }
    let meta_len = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]) as u64;
    if meta_len + 8 > len {
        return Err(Error::corrupt(path, format!("footer length {meta_len} exceeds the file ({len} bytes)")));
    }
    let bytes =
        reader.get_bytes(len - 8 - meta_len, meta_len as usize).map_err(|e| Error::from_parquet(path, "footer", e))?;
    crate::thrift::check_struct(&bytes).map(|_| ()).map_err(|e| {
        let why = match e {
            crate::thrift::ThriftError::NeedMore => "a count or length runs past the end of the footer".to_string(),
            crate::thrift::ThriftError::Invalid(s) => s,
        };
        Error::corrupt(path, format!("footer metadata is malformed: {why}"))
    })
}

fn has_offset_index(md: &ParquetMetaData) -> bool {
    md.row_groups().iter().any(|rg| rg.columns().iter().any(|c| c.offset_index_offset().is_some()))
}

/// Whether every column chunk's OffsetIndex bytes lie in the file and hold one
/// well-formed struct (read in one range: writers put them together). Errors only when
/// the bytes are not at hand (a remote build fetches them and asks again).
fn offset_indexes_well_formed(reader: &Fetched, md: &ParquetMetaData) -> Result<bool> {
    use parquet::file::reader::Length;
    let ranges: Vec<(u64, u64)> = md
        .row_groups()
        .iter()
        .flat_map(|rg| rg.columns().iter())
        .filter_map(|c| {
            Some((u64::try_from(c.offset_index_offset()?).ok()?, u64::try_from(c.offset_index_length()?).ok()?))
        })
        .collect();
    let (Some(lo), Some(hi)) = (
        ranges.iter().map(|r| r.0).min(),
        ranges.iter().map(|r| r.0.checked_add(r.1)).collect::<Option<Vec<_>>>().and_then(|v| v.into_iter().max()),
    ) else {
        return Ok(false);
    };
    if hi > reader.len() || hi - lo > (1 << 30) {
        return Ok(false);
    }
    let bytes = match reader.read_range(lo, (hi - lo) as usize) {
        Ok(b) => b,
        Err(e @ Error::NeedData(_)) => return Err(e),
        Err(_) => return Ok(false),
    };
    Ok(ranges.iter().all(|&(off, n)| {
        let start = (off - lo) as usize;
        bytes.get(start..start + n as usize).is_some_and(|b| crate::thrift::check_struct(b).is_ok())
    }))
}

/// The selected columns of one file, resolved against its schema.
struct Projection {
    mask: ProjectionMask,
    /// Leaf column indices of the projection (file order).
    leaves: Vec<usize>,
    /// The leaf whose data pages define the index's pages.
    page_leaf: usize,
    /// Columns of a read batch, in the user's order (`None`: already in order).
    reorder: Option<Vec<usize>>,
    /// Projected fields in the user's order.
    fields: Vec<FieldRef>,
}

/// Resolve `columns` (top-level names; None = all) against a file.
fn resolve_projection(path: &Path, meta: &ArrowReaderMetadata, columns: Option<&[String]>) -> Result<Projection> {
    let descr = meta.parquet_schema();
    let roots = descr.root_schema().get_fields();
    let root_names: Vec<&str> = roots.iter().map(|f| f.name()).collect();
    let chosen: Vec<usize> = match columns {
        None => (0..roots.len()).collect(),
        Some(cols) => {
            if cols.is_empty() {
                return Err(Error::InvalidArgument("columns must name at least one column".into()));
            }
            let mut out = Vec::with_capacity(cols.len());
            for c in cols {
                let i = root_names.iter().position(|n| n == c).ok_or_else(|| Error::ColumnNotFound {
                    path: path.display().to_string(),
                    column: c.clone(),
                    available: root_names.join(", "),
                })?;
                // pyarrow refuses such a name too ("Multiple matches"); taking the first
                // would read a column the user may not have meant
                let count = root_names.iter().filter(|n| *n == c).count();
                if count > 1 {
                    return Err(Error::AmbiguousColumn { path: path.display().to_string(), column: c.clone(), count });
                }
                if out.contains(&i) {
                    return Err(Error::InvalidArgument(format!("column {c:?} selected twice")));
                }
                out.push(i);
            }
            out
        }
    };
    if chosen.is_empty() {
        return Err(Error::corrupt(path, "schema has no columns"));
    }
    let leaves: Vec<usize> =
        (0..descr.num_columns()).filter(|&l| chosen.contains(&descr.get_column_root_idx(l))).collect();
    let page_leaf = (0..descr.num_columns()).find(|&l| descr.get_column_root_idx(l) == chosen[0]).ok_or_else(|| {
        Error::Unsupported {
            path: path.display().to_string(),
            detail: format!("column {:?} has no leaf columns", root_names[chosen[0]]),
        }
    })?;
    let mask = ProjectionMask::roots(descr, chosen.iter().copied());
    // A projected batch lists the chosen roots in file order; map to the user's order.
    let mut file_order = chosen.clone();
    file_order.sort_unstable();
    let reorder: Vec<usize> = chosen.iter().map(|c| file_order.iter().position(|x| x == c).unwrap_or(0)).collect();
    let reorder = if reorder.iter().enumerate().all(|(i, &r)| i == r) { None } else { Some(reorder) };
    let schema: &SchemaRef = meta.schema();
    if schema.fields().len() != roots.len() {
        return Err(Error::Unsupported {
            path: path.display().to_string(),
            detail: "Arrow schema and Parquet schema disagree on the number of top-level columns".into(),
        });
    }
    let fields = chosen.iter().map(|&i| schema.fields()[i].clone()).collect();
    Ok(Projection { mask, leaves, page_leaf, reorder, fields })
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
                if head.as_ref() == crate::persist::MAGIC.as_slice() {
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
        let plan = crate::int96::plan(md.file_metadata().schema_descr(), plain.schema(), int96_unit)
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

/// Page locations (per row group: None, or per projected leaf) and page starts, as persisted.
pub(crate) struct SavedTables {
    pub locations: Vec<Option<Vec<Vec<PageLocation>>>>,
    pub page_starts: Vec<Vec<u64>>,
    pub sources: Vec<PageSource>,
}

pub(crate) type Tables = (Vec<Option<Vec<Vec<PageLocation>>>>, Vec<Vec<u64>>, Vec<PageSource>);

/// The page locations of a row group of `rows` rows, per leaf, as youmu lists them:
/// every leaf's pages in file order without overlapping, the first starting row 0,
/// each later one a later row within the row group (a saved index must hold what a
/// build would have made).
fn check_locations(per_leaf: &[Vec<PageLocation>], rows: u64) -> std::result::Result<(), String> {
    if rows == 0 {
        return Err("page locations for a row group of 0 rows".into());
    }
    for (leaf, locs) in per_leaf.iter().enumerate() {
        let mut end = 0i64;
        for (k, l) in locs.iter().enumerate() {
            let row_ok = if k == 0 {
                l.first_row_index == 0
            } else {
                l.first_row_index > locs[k - 1].first_row_index && (l.first_row_index as u64) < rows
            };
            if !row_ok || l.compressed_page_size <= 0 || l.offset < end {
                return Err(format!(
                    "page locations of column {leaf} of the projection: page {k} (offset {}, {} bytes, first row {}) \
                     is not after the page before it within the row group's {rows} rows",
                    l.offset, l.compressed_page_size, l.first_row_index
                ));
            }
            end = l.offset.saturating_add(l.compressed_page_size as i64);
        }
        if locs.is_empty() {
            return Err(format!("no page locations for column {leaf} of the projection"));
        }
    }
    Ok(())
}

/// Saved page locations against the footer saved with them: every page within its
/// column chunk. The chunk's start is taken leniently (writers disagree on whether a
/// dictionary page moves `data_page_offset`), its end from its compressed size.
fn saved_within_chunks(
    per_leaf: &[Vec<PageLocation>],
    chunks: &[&parquet::file::metadata::ColumnChunkMetaData],
) -> std::result::Result<(), String> {
    for (leaf, (locs, chunk)) in per_leaf.iter().zip(chunks).enumerate() {
        let data = chunk.data_page_offset();
        let lo = chunk.dictionary_page_offset().filter(|&d| d > 0).map_or(data, |d| d.min(data));
        let hi = lo.max(data).saturating_add(chunk.compressed_size());
        for (k, l) in locs.iter().enumerate() {
            let end = l.offset.saturating_add(l.compressed_page_size as i64);
            if l.offset < lo || end > hi {
                return Err(format!(
                    "page {k} of column {leaf} of the projection ([{}, {end})) lies outside its column chunk \
                     ([{lo}, {hi}) per the saved footer)",
                    l.offset
                ));
            }
        }
    }
    Ok(())
}

/// Check a native OffsetIndex for one leaf chunk; None if it cannot be trusted.
pub(crate) fn native_locations(
    md: &ParquetMetaData,
    rg: usize,
    leaf: usize,
    rows: u64,
    file_len: u64,
) -> Option<Vec<PageLocation>> {
    let oi = md.offset_index()?;
    let locs = &oi.get(rg)?.get(leaf)?.page_locations;
    if locs.is_empty() {
        return None;
    }
    let mut prev_row = -1i64;
    for (i, l) in locs.iter().enumerate() {
        let ok_row = if i == 0 { l.first_row_index == 0 } else { l.first_row_index > prev_row };
        let ok_pos = l.offset >= 0
            && l.compressed_page_size > 0
            && (l.offset as u64).checked_add(l.compressed_page_size as u64).is_some_and(|e| e <= file_len);
        if !ok_row || !ok_pos || l.first_row_index as u64 >= rows {
            return None;
        }
        prev_row = l.first_row_index;
    }
    Some(locs.clone())
}

/// The column chunks `build_tables` walks page by page for the projection `leaves`: every
/// leaf's chunk in the row groups where some leaf has no usable OffsetIndex.
pub(crate) fn scan_ranges(
    md: &ParquetMetaData,
    size: u64,
    leaves: &[usize],
    rg_row_start: &[u64],
) -> Vec<std::ops::Range<u64>> {
    let mut scans = Vec::new();
    for rg in 0..md.num_row_groups() {
        let rows = rg_row_start[rg + 1] - rg_row_start[rg];
        if rows > 0 && leaves.iter().any(|&l| native_locations(md, rg, l, rows, size).is_none()) {
            for &leaf in leaves {
                let (start, len) = md.row_group(rg).column(leaf).byte_range();
                if let Some(end) = start.checked_add(len).filter(|&e| e <= size) {
                    scans.push(start..end);
                }
            }
        }
    }
    scans
}

pub(crate) fn build_tables(
    path: &Path,
    reader: &Fetched,
    size: u64,
    md: &ParquetMetaData,
    leaves: &[usize],
    page_leaf: usize,
    rg_row_start: &[u64],
) -> Result<Tables> {
    let descr = md.file_metadata().schema_descr();
    let n = md.num_row_groups();
    // The column chunks a header scan will walk, asked for at once: a remote build
    // fetches them in one round of concurrent GETs instead of one header at a time.
    reader.require(&scan_ranges(md, size, leaves, rg_row_start))?;
    let (mut locations, mut page_starts, mut sources) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    for rg in 0..n {
        let rows = rg_row_start[rg + 1] - rg_row_start[rg];
        if rows == 0 {
            locations.push(None);
            page_starts.push(vec![]);
            sources.push(PageSource::OffsetIndex);
            continue;
        }
        let native: Option<Vec<Vec<PageLocation>>> =
            leaves.iter().map(|&l| native_locations(md, rg, l, rows, size)).collect();
        if let Some(per_leaf) = native {
            let pos = leaves.iter().position(|&l| l == page_leaf).unwrap_or(0);
            page_starts.push(per_leaf[pos].iter().map(|l| l.first_row_index as u64).collect());
            locations.push(Some(per_leaf));
            sources.push(PageSource::OffsetIndex);
            continue;
        }
        // Header scan of every projected leaf of this row group.
        let mut per_leaf = Vec::with_capacity(leaves.len());
        let mut all_aligned = true;
        let mut key_pages = vec![];
        let mut merged = false;
        for &leaf in leaves {
            let col = md.row_group(rg).column(leaf);
            let ctx = format!("row group {rg}, column {}", col.column_path());
            let chunk = scan_chunk(path, reader, size, col, descr.column(leaf).max_rep_level(), &ctx)?;
            let total: u64 = chunk.pages.iter().map(|p| p.rows).sum();
            if total != rows {
                return Err(Error::corrupt(
                    path,
                    format!("{ctx}: pages hold {total} rows but the row group has {rows}"),
                ));
            }
            if let Some(first) = chunk.pages.first()
                && !first.starts_on_boundary
            {
                return Err(Error::corrupt(path, format!("{ctx}: first page does not start a row")));
            }
            let (leaf_pages, locs, aligned) = row_aligned_pages(&chunk.pages);
            if !aligned {
                all_aligned = false;
                merged |= leaf == page_leaf;
            }
            if leaf == page_leaf {
                key_pages = leaf_pages;
            }
            per_leaf.push(locs);
        }
        if all_aligned {
            locations.push(Some(per_leaf));
            sources.push(PageSource::HeaderScan);
        } else {
            // Pages that continue a row cannot be listed as page locations, so this row
            // group is read by walking its column chunks (correct, coarser I/O).
            locations.push(None);
            sources.push(if merged { PageSource::HeaderScanMerged } else { PageSource::HeaderScan });
        }
        page_starts.push(key_pages);
    }
    Ok((locations, page_starts, sources))
}

/// Pages of a scanned column chunk: the first row of every index page, the data-page locations
/// (first row = rows started before the page), and whether every page starts a row. A
/// data page that continues its predecessor's last row starts no index page: it joins the
/// index page of the data page before it, so every index page starts on a row.
pub(crate) fn row_aligned_pages(pages: &[crate::scan::ScannedPage]) -> (Vec<u64>, Vec<PageLocation>, bool) {
    let mut page_starts = vec![];
    let mut locs = Vec::with_capacity(pages.len());
    let mut aligned = true;
    let mut row = 0u64;
    for p in pages {
        if p.starts_on_boundary {
            page_starts.push(row);
        } else {
            aligned = false;
        }
        locs.push(PageLocation {
            offset: p.offset as i64,
            compressed_page_size: p.total_len as i32,
            first_row_index: row as i64,
        });
        row += p.rows;
    }
    (page_starts, locs, aligned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::ScannedPage;

    fn page(rows: u64, starts_on_boundary: bool) -> ScannedPage {
        ScannedPage { offset: 0, total_len: 10, rows, starts_on_boundary }
    }

    #[test]
    fn a_page_continuing_a_row_joins_the_page_before_it() {
        // rows 0-2 in page 0; page 1 finishes row 2 and starts rows 3-4; page 2 only
        // continues row 4; page 3 starts rows 5-9
        let pages = [page(3, true), page(2, false), page(0, false), page(5, true)];
        let (page_starts, locs, aligned) = row_aligned_pages(&pages);
        assert!(!aligned);
        assert_eq!(page_starts, vec![0, 5]); // data pages 0-2 are one index page (rows 0-4), data page 3 the next
        assert_eq!(locs.iter().map(|l| l.first_row_index).collect::<Vec<_>>(), vec![0, 3, 5, 5]);
    }

    #[test]
    fn aligned_pages_are_their_own_pages() {
        let (page_starts, _, aligned) = row_aligned_pages(&[page(4, true), page(4, true), page(1, true)]);
        assert!(aligned);
        assert_eq!(page_starts, vec![0, 4, 8]);
    }
}

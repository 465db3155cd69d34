//! `youmu inspect`: the pages every top-level column of a file would have as the page
//! column of an index, from one footer read and one pass over the column chunks.
//!
//! An index per column would do the same work once per column and re-derive the whole
//! file's schema each time — quadratic in the number of columns (a 10,000-column file
//! did not finish in a minute). Here the footer and schema are read once and every leaf
//! chunk is looked at once, with the same rules an index uses (`file::build_tables`).
//!
//! Files and objects are found and read through the same storage layer as an index
//! build: local files with `pread`, objects with a tail GET and then one round of
//! concurrent GETs for every column chunk a header scan needs (none where the file has
//! an OffsetIndex).

use std::path::PathBuf;
use std::sync::Arc;

use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::file::metadata::ParquetMetaData;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::index::paths;
use crate::parquet::file::{RowGroupSources, Tables, build_tables, read_metadata, scan_ranges};
use crate::runtime::runtime;
use crate::storage::{self, Fetched, Storage};

/// One column as the page column of an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnPages {
    /// Rows of every page, in order.
    pub page_rows: Vec<u64>,
    /// Compressed bytes of every page (header included); row groups without page
    /// locations report their chunk size shared out by rows, as `PageIndex` does.
    pub page_bytes: Vec<u64>,
    pub row_groups: RowGroupSources,
}

/// One top-level column of a file: what its footer says, and its pages as youmu would
/// index them (or why it cannot).
#[derive(Debug)]
pub struct ColumnReport {
    pub name: String,
    /// Codecs of its column chunks (distinct, sorted).
    pub codecs: Vec<String>,
    /// Encodings of its column chunks (distinct, sorted).
    pub encodings: Vec<String>,
    /// Column chunks (leaf chunks of all row groups) that have an OffsetIndex.
    pub chunks_with_offset_index: usize,
    pub pages: Result<ColumnPages>,
}

/// One file or object.
#[derive(Debug)]
pub struct FileReport {
    /// The path, or the object's URL.
    pub path: String,
    pub size: u64,
    /// An object's ETag and version (`None` for local files and stores without them).
    pub etag: Option<String>,
    pub version: Option<String>,
    pub num_rows: u64,
    pub num_row_groups: usize,
    /// Leaf columns (what Parquet tools call the number of columns).
    pub num_leaf_columns: usize,
    pub created_by: Option<String>,
    /// GETs sent for this object, its tail included (0 for a local file).
    pub requests: u64,
    pub columns: Vec<ColumnReport>,
}

/// What inspecting one path or URL found: per file or object its report or why it
/// cannot be read, in discovery order, and the entries discovery skipped (rule 1 of
/// `paths.rs`) with the reason.
#[derive(Debug, Default)]
pub struct Inspection {
    pub files: Vec<(String, Result<FileReport>)>,
    pub skipped: Vec<(String, String)>,
}

/// Inspect `spec`: a file, directory, glob, object URL or prefix (found by the same rules
/// as an index's paths). `storage_options` configure the object stores. An error for
/// `spec` as a whole (nothing there, a bucket that does not exist) is the outer `Err`.
pub fn inspect(spec: &str, storage_options: &[(String, String)]) -> Result<Inspection> {
    let found = paths::discover(&[spec.to_string()], storage_options)?;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let read = storage::open_each(&found.found, report, &|| {}, &stop)?;
    let files = found
        .found
        .iter()
        .zip(read)
        .map(|(f, r)| {
            let r = r.ok_or_else(|| Error::Internal("a file was not inspected".into()))?;
            let r = r.map(|(mut rep, requests)| {
                rep.requests = requests;
                rep
            });
            Ok((f.name(), r))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Inspection { files, skipped: found.skipped })
}

/// The report of one file read through `reader` (a strict remote reader: every range
/// it needs is one `Error::NeedData`, so a driver fetches them in one round).
fn report(reader: Fetched) -> Result<FileReport> {
    let path = PathBuf::from(reader.source.name());
    let size = reader.source.len();
    if size < 12 {
        return Err(Error::corrupt(&path, format!("file is {size} bytes, too small to be Parquet")));
    }
    let md = read_metadata(&path, &reader)?;
    // the schema youmu reads with: a file it cannot derive one for is unreadable as a whole
    crate::parquet::file::arrow_metadata(&path, Arc::new(md.clone()), ArrowReaderOptions::new())?;
    let descr = md.file_metadata().schema_descr();
    let mut rg_row_start = vec![0u64];
    for (i, rg) in md.row_groups().iter().enumerate() {
        let n = u64::try_from(rg.num_rows())
            .map_err(|_| Error::corrupt(&path, format!("row group {i} has {} rows", rg.num_rows())))?;
        let last = rg_row_start.last().copied().unwrap_or(0);
        rg_row_start.push(last.checked_add(n).ok_or_else(|| Error::corrupt(&path, "row counts overflow"))?);
    }
    let roots = descr.root_schema().get_fields();
    let mut leaves_of: Vec<Vec<usize>> = vec![vec![]; roots.len()];
    for leaf in 0..descr.num_columns() {
        if let Some(v) = leaves_of.get_mut(descr.get_column_root_idx(leaf)) {
            v.push(leaf);
        }
    }
    // Every chunk any column's header scan walks, asked for at once (one round of GETs
    // for an object, not one per column).
    let scans: Vec<std::ops::Range<u64>> =
        leaves_of.iter().flat_map(|leaves| scan_ranges(&md, size, leaves, &rg_row_start)).collect();
    reader.require(&scans)?;
    let one = |root: usize| -> Result<ColumnPages> {
        let leaves = &leaves_of[root];
        let Some(&page_leaf) = leaves.first() else {
            return Err(Error::Unsupported {
                path: path.display().to_string(),
                detail: format!("column {:?} has no leaf columns", roots[root].name()),
            });
        };
        let tables = build_tables(&path, &reader, size, &md, leaves, page_leaf, &rg_row_start);
        pages_of(&md, &rg_row_start, page_leaf, tables.map_err(|e| reader.source.recheck(e))?)
    };
    let pages: Vec<Result<ColumnPages>> =
        runtime().pool().install(|| (0..roots.len()).into_par_iter().map(one).collect());
    // a range still missing is the driver's to fetch, not a column's error
    let missing: Vec<(u64, u64)> = pages
        .iter()
        .filter_map(|p| if let Err(Error::NeedData(r)) = p { Some(r.iter().copied()) } else { None })
        .flatten()
        .collect();
    if !missing.is_empty() {
        return Err(Error::NeedData(missing));
    }
    let columns = roots
        .iter()
        .zip(&leaves_of)
        .zip(pages)
        .map(|((field, leaves), pages)| {
            let (mut codecs, mut encodings, mut chunks_with_offset_index) = (Vec::new(), Vec::new(), 0);
            for rg in md.row_groups() {
                for &leaf in leaves {
                    let col = rg.column(leaf);
                    // `ZSTD(ZstdLevel(1))` -> `ZSTD`, as Parquet tools name codecs
                    let codec = format!("{:?}", col.compression());
                    codecs.push(codec.split('(').next().unwrap_or_default().to_string());
                    encodings.extend(col.encodings().map(|e| format!("{e:?}")));
                    chunks_with_offset_index += usize::from(col.offset_index_offset().is_some());
                }
            }
            codecs.sort();
            codecs.dedup();
            encodings.sort();
            encodings.dedup();
            ColumnReport { name: field.name().to_string(), codecs, encodings, chunks_with_offset_index, pages }
        })
        .collect();
    let (etag, version) = reader.source.object_version().map_or((None, None), |v| (v.etag, v.version));
    Ok(FileReport {
        path: path.display().to_string(),
        size,
        etag,
        version,
        num_rows: rg_row_start.last().copied().unwrap_or(0),
        num_row_groups: md.num_row_groups(),
        num_leaf_columns: descr.num_columns(),
        created_by: md.file_metadata().created_by().map(str::to_string),
        requests: 0,
        columns,
    })
}

/// A column's pages from its tables (see `file::build_tables`).
fn pages_of(md: &ParquetMetaData, rg_row_start: &[u64], page_leaf: usize, tables: Tables) -> Result<ColumnPages> {
    let (locations, page_starts, sources) = tables;
    let mut out = ColumnPages { page_rows: vec![], page_bytes: vec![], row_groups: RowGroupSources::default() };
    for (rg, starts) in page_starts.iter().enumerate() {
        let rows = rg_row_start[rg + 1] - rg_row_start[rg];
        // the page leaf is the first of the column's leaves
        let locs = locations.get(rg).and_then(|l| l.as_ref()).and_then(|per_leaf| per_leaf.first());
        out.row_groups.add(sources.get(rg).copied(), locs.is_some());
        let chunk = md.row_group(rg).column(page_leaf).compressed_size().max(0) as u128;
        for (k, &first) in starts.iter().enumerate() {
            let end = starts.get(k + 1).copied().unwrap_or(rows);
            let n = end.saturating_sub(first);
            out.page_rows.push(n);
            out.page_bytes.push(match locs {
                Some(l) => l
                    .iter()
                    .filter(|p| (p.first_row_index as u64) >= first && (p.first_row_index as u64) < end)
                    .map(|p| p.compressed_page_size.max(0) as u64)
                    .sum(),
                None => u64::try_from(chunk * n as u128 / rows.max(1) as u128).unwrap_or(u64::MAX),
            });
        }
    }
    Ok(out)
}

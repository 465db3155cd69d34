//! `youmu inspect`: the pages every top-level column of a file would have as the page
//! column of an index, from one footer read and one pass over the column chunks.
//!
//! An index per column would do the same work once per column and re-derive the whole
//! file's schema each time — quadratic in the number of columns (a 10,000-column file
//! did not finish in a minute). Here the footer and schema are read once and every leaf
//! chunk is looked at once, with the same rules an index uses (`file::build_tables`).

use std::path::Path;

use parquet::arrow::arrow_reader::ArrowReaderOptions;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::file::{PageSource, build_tables, open_file, read_metadata};
use crate::runtime::runtime;

/// One column as the page column of an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnPages {
    /// Rows of every page, in order.
    pub page_rows: Vec<u64>,
    /// Compressed bytes of every page (header included); row groups without page
    /// locations report their chunk size shared out by rows, as `PageIndex` does.
    pub page_bytes: Vec<u64>,
    pub row_groups_with_offset_index: usize,
    pub row_groups_header_scanned: usize,
    pub row_groups_merged_pages: usize,
    pub row_groups_page_granular: usize,
}

/// Every top-level column of `path` with its pages, or why youmu cannot read it. An
/// error for the file as a whole (unreadable footer, malformed embedded Arrow schema)
/// is the outer `Err`.
pub fn column_pages(path: &Path) -> Result<Vec<(String, Result<ColumnPages>)>> {
    let (reader, size, _) = open_file(path)?;
    let md = read_metadata(path, &reader)?;
    // the schema youmu reads with: a file it cannot derive one for is unreadable as a whole
    crate::file::arrow_metadata(path, std::sync::Arc::new(md.clone()), ArrowReaderOptions::new())?;
    let descr = md.file_metadata().schema_descr();
    let mut rg_row_start = vec![0u64];
    for (i, rg) in md.row_groups().iter().enumerate() {
        let n = u64::try_from(rg.num_rows())
            .map_err(|_| Error::corrupt(path, format!("row group {i} has {} rows", rg.num_rows())))?;
        let last = rg_row_start.last().copied().unwrap_or(0);
        rg_row_start.push(last.checked_add(n).ok_or_else(|| Error::corrupt(path, "row counts overflow"))?);
    }
    let roots = descr.root_schema().get_fields();
    let mut leaves_of: Vec<Vec<usize>> = vec![vec![]; roots.len()];
    for leaf in 0..descr.num_columns() {
        if let Some(v) = leaves_of.get_mut(descr.get_column_root_idx(leaf)) {
            v.push(leaf);
        }
    }
    let one = |root: usize| -> Result<ColumnPages> {
        let leaves = &leaves_of[root];
        let Some(&page_leaf) = leaves.first() else {
            return Err(Error::Unsupported {
                path: path.display().to_string(),
                detail: format!("column {:?} has no leaf columns", roots[root].name()),
            });
        };
        let (locations, page_starts, sources) =
            build_tables(path, &reader, size, &md, leaves, page_leaf, &rg_row_start)?;
        let mut out = ColumnPages {
            page_rows: vec![],
            page_bytes: vec![],
            row_groups_with_offset_index: 0,
            row_groups_header_scanned: 0,
            row_groups_merged_pages: 0,
            row_groups_page_granular: 0,
        };
        for (rg, starts) in page_starts.iter().enumerate() {
            let rows = rg_row_start[rg + 1] - rg_row_start[rg];
            match sources.get(rg) {
                Some(PageSource::OffsetIndex) => out.row_groups_with_offset_index += 1,
                Some(PageSource::HeaderScan) => out.row_groups_header_scanned += 1,
                Some(PageSource::HeaderScanMerged) => out.row_groups_merged_pages += 1,
                None => {}
            }
            // the page leaf is the first of `leaves`
            let locs = locations.get(rg).and_then(|l| l.as_ref()).and_then(|per_leaf| per_leaf.first());
            out.row_groups_page_granular += usize::from(locs.is_some());
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
    };
    let results: Vec<Result<ColumnPages>> =
        runtime().pool().install(|| (0..roots.len()).into_par_iter().map(one).collect());
    Ok(roots.iter().map(|f| f.name().to_string()).zip(results).collect())
}

//! A file's page table: where each of the index's pages starts, per row group, from the
//! file's own OffsetIndex where it can be trusted, else from a scan of the page headers
//! (data pages that continue a row merged into the page before them); and the checks a
//! page table saved with an index must pass.

use std::path::Path;

use parquet::file::metadata::ParquetMetaData;
use parquet::file::page_index::offset_index::PageLocation;

use super::PageSource;
use crate::error::{Error, Result};
use crate::parquet::scan::scan_chunk;
use crate::storage::Fetched;

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
pub(super) fn check_locations(per_leaf: &[Vec<PageLocation>], rows: u64) -> std::result::Result<(), String> {
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
pub(super) fn saved_within_chunks(
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
pub(crate) fn row_aligned_pages(pages: &[crate::parquet::scan::ScannedPage]) -> (Vec<u64>, Vec<PageLocation>, bool) {
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
    use crate::parquet::scan::ScannedPage;

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

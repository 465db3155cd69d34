//! Reading one page of the index: a positioned read of its data page(s) per projected leaf (plus
//! the chunk's dictionary page, cached), decoded to one Arrow `RecordBatch`.
//!
//! The decode uses only the documented arrow-rs reader API: the file's metadata (with
//! the OffsetIndex youmu kept or synthesized) plus a row selection of exactly the
//! page's rows. With page locations present, the reader skips every other page without
//! I/O, so a page costs one `pread` per overlapping data page.
//!
//! One read path for every file: the byte ranges each page of a batch needs are named
//! from the page locations (the same pages the reader would ask for) and storage brings
//! them in ([`crate::storage::fetch_reads`]) — a local file is read in place by the
//! decode's positioned reads, an object's ranges are fetched concurrently on the I/O
//! runtime — and each page is decoded on the pool as soon as its bytes are in.

use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use arrow_array::RecordBatch;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ParquetRecordBatchReaderBuilder, RowSelection, RowSelectionPolicy, RowSelector,
};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::index::PageIndex;
use crate::parquet::io::CachingReader;
use crate::runtime::runtime;
use crate::storage::{Fetched, Source, Storage};

/// A window's reordered rows are gathered in parts of at least this many rows (smaller
/// parts cost more in per-batch overhead than a thread saves).
const WINDOW_PART_MIN_ROWS: usize = 1024;

/// Rows `[first, first + n)` of row group `rg` of file `file`: what one decode reads.
#[derive(Debug, Clone, Copy)]
struct Unit {
    file: usize,
    rg: usize,
    first: u64,
    n: u64,
}

impl PageIndex {
    /// Rows `[first, first + n)` of row group `rg` of file `file`, selected columns.
    pub fn read_rows_in_row_group(&self, file: usize, rg: usize, first: u64, n: u64) -> Result<RecordBatch> {
        self.read_units(&[Unit { file, rg, first, n }], &|_| String::new())?
            .pop()
            .ok_or_else(|| Error::Internal("no batch decoded".into()))
    }

    /// Decode a unit from `src` (a local file, or the unit's fetched ranges).
    fn decode(&self, u: Unit, src: Fetched) -> Result<RecordBatch> {
        let Unit { file, rg, first, n } = u;
        let f = &self.files[file];
        let ctx = format!("row group {rg}, rows {first}..{}", first + n);
        let failure = Arc::new(Mutex::new(None));
        let result = crate::error::catch_quietly(|| -> Result<RecordBatch> {
            // token-list columns decoded directly (the token decoder checks its pages
            // itself); what arrow-rs decodes is checked here
            let split = super::columns::split(f, &src, rg, first, n)
                .map_err(|detail| Error::corrupt(&f.path, format!("{ctx}: {detail}")))?;
            let (rest_mask, rest_leaves) =
                if split.none_direct() { (f.mask.clone(), f.leaves.clone()) } else { split.rest(f) };
            let pages = Arc::new(crate::parquet::pagecheck::PageChecks::new(
                f.meta.metadata().clone(),
                rg,
                &rest_leaves,
                f.rg_rows(rg),
            ));
            let decode = |meta: &ArrowReaderMetadata, mask: &ProjectionMask| -> Result<RecordBatch> {
                let reader = CachingReader {
                    inner: src.clone(),
                    index_uid: self.uid,
                    file_id: file as u32,
                    dict_ranges: Arc::new(f.dict_ranges(rg)),
                    max_page_bytes: f.max_chunk_bytes(rg),
                    failure: failure.clone(),
                    pages: Some(pages.clone()),
                };
                let selection =
                    RowSelection::from(vec![RowSelector::skip(first as usize), RowSelector::select(n as usize)]);
                let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(reader, meta.clone())
                    .with_row_groups(vec![rg])
                    .with_projection(mask.clone())
                    .with_row_selection(selection)
                    .with_row_selection_policy(RowSelectionPolicy::Selectors)
                    .with_batch_size((n as usize).max(1))
                    .build()
                    .map_err(|e| Error::from_parquet(&f.path, &ctx, e))?;
                let mut batches = Vec::with_capacity(1);
                for b in reader {
                    batches.push(b.map_err(|e| Error::from_parquet(&f.path, &ctx, e.into()))?);
                }
                let batch = match batches.len() {
                    1 => batches.pop().unwrap_or_else(|| unreachable!()),
                    0 => RecordBatch::new_empty(Arc::new(arrow_schema::Schema::new(
                        f.fields.iter().map(|x| x.as_ref().clone()).collect::<Vec<_>>(),
                    ))),
                    _ => arrow_select::concat::concat_batches(&batches[0].schema(), &batches)
                        .map_err(|e| Error::corrupt(&f.path, format!("{ctx}: {e}")))?,
                };
                if batch.num_rows() as u64 != n {
                    return Err(Error::corrupt(
                        &f.path,
                        format!("{ctx}: decoded {} rows, the page index promised {n}", batch.num_rows()),
                    ));
                }
                // arrow-rs assembles nested and variable-length arrays unchecked in
                // release builds; a corrupt page must not become an array whose offsets
                // point outside its values (pyarrow reads past the buffer)
                crate::parquet::validate::validate_batch(&batch)
                    .map_err(|e| Error::corrupt(&f.path, format!("{ctx}: decoded data is inconsistent: {e}")))?;
                Ok(batch)
            };
            if !split.none_direct() {
                // the direct columns exclude INT96 ones; the batch is put in the user's order here
                let rest = if rest_leaves.is_empty() { None } else { Some(decode(&f.meta, &rest_mask)?) };
                return split
                    .assemble(f, rest.as_ref())
                    .map_err(|detail| Error::corrupt(&f.path, format!("{ctx}: {detail}")));
            }
            let batch = decode(&f.meta, &f.mask)?;
            if let Some(check) = &f.int96_check {
                let seconds = decode(&check.meta, &check.mask)?;
                for (k, (col, name)) in check.columns.iter().enumerate() {
                    let (Some(read), Some(secs)) = (batch.columns().get(*col), seconds.columns().get(k)) else {
                        continue;
                    };
                    if let Some(w) = crate::parquet::int96::first_wrapped(read, secs) {
                        let at = if w.top_level { format!("row {}", first + w.index as u64) } else { ctx.clone() };
                        let rg_at = if w.top_level { format!("row group {rg}, ") } else { String::new() };
                        return Err(Error::Overflow {
                            path: f.path.display().to_string(),
                            detail: format!("column {name:?}, {rg_at}{at}: {}", w.describe()),
                        });
                    }
                }
            }
            match &f.reorder {
                None => Ok(batch),
                Some(order) => batch.project(order).map_err(|e| Error::corrupt(&f.path, format!("{ctx}: {e}"))),
            }
        });
        let result = match result {
            Ok(r) => r,
            Err(panic) => Err(Error::corrupt(&f.path, format!("{ctx}: decoder failed: {panic}"))),
        };
        // A storage error the parquet crate flattened to text is reported as itself; a
        // decode failure of a local file that changed since indexing is a stale index.
        result
            .map_err(|e| f.source.recheck(failure.lock().ok().and_then(|mut s| s.take()).unwrap_or(e)))
            .and_then(|b| self.conform(b, &f.path))
    }

    /// The byte ranges decoding `u` reads: per projected leaf, the data pages
    /// overlapping its rows and the chunk's dictionary page (unless cached), or the
    /// whole column chunk where the row group has no page locations.
    fn unit_ranges(&self, u: &Unit) -> Vec<Range<u64>> {
        let f = &self.files[u.file];
        let md = f.meta.metadata();
        let end = u.first + u.n;
        let mut out = Vec::new();
        match md.offset_index() {
            Some(oi) if oi.get(u.rg).is_some_and(|r| !r.is_empty()) => {
                let rg_rows = f.rg_rows(u.rg);
                for &leaf in &f.leaves {
                    let locs = &oi[u.rg][leaf].page_locations;
                    for (k, l) in locs.iter().enumerate() {
                        let s = l.first_row_index as u64;
                        let e = locs.get(k + 1).map_or(rg_rows, |x| x.first_row_index as u64);
                        if s < end && e > u.first {
                            out.push(l.offset as u64..l.offset as u64 + l.compressed_page_size as u64);
                        }
                    }
                }
                let cache = runtime().dict_cache.lock().ok();
                for (s, len) in f.dict_ranges(u.rg) {
                    if !cache.as_ref().is_some_and(|c| c.contains(&(self.uid, u.file as u32, s, len))) {
                        out.push(s..s + len as u64);
                    }
                }
            }
            _ => {
                for &leaf in &f.leaves {
                    let (s, len) = md.row_group(u.rg).column(leaf).byte_range();
                    out.push(s..s + len);
                }
            }
        }
        out
    }

    /// Decode `units`, in order (`ctx(i)` names unit `i` in decode errors): storage
    /// brings in each unit's byte ranges ([`crate::storage::fetch_reads`]) and each unit
    /// is decoded on the pool as soon as its bytes can be read.
    fn read_units(&self, units: &[Unit], ctx: &(dyn Fn(usize) -> String + Sync)) -> Result<Vec<RecordBatch>> {
        let with_ctx = |i: usize, r: Result<RecordBatch>| {
            r.map_err(|e| {
                let c = ctx(i);
                if c.is_empty() { e } else { e.context(&c) }
            })
        };
        if let [u] = units {
            // one unit: decoded here, without a hop to the pool
            let src = self.files[u.file].source.fetch(|| self.unit_ranges(u))?;
            return Ok(vec![with_ctx(0, self.decode(*u, src))?]);
        }
        let reads: Vec<(usize, &Source)> = units.iter().map(|u| (u.file, &self.files[u.file].source)).collect();
        let slots: Vec<OnceLock<Result<RecordBatch>>> = (0..units.len()).map(|_| OnceLock::new()).collect();
        let mut failed: Option<Error> = None;
        runtime().pool().in_place_scope(|scope| {
            let fetched = crate::storage::fetch_reads(&reads, &|i| self.unit_ranges(&units[i]), |i, src| {
                let (u, slot, with_ctx) = (units[i], &slots[i], &with_ctx);
                scope.spawn(move |_| {
                    let _ = slot.set(with_ctx(i, crate::error::catch_panics(|| self.decode(u, src))));
                });
            });
            if let Err(e) = fetched {
                failed = Some(e);
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        slots
            .into_iter()
            .map(|s| s.into_inner().unwrap_or_else(|| Err(Error::Internal("a page was not decoded".into()))))
            .collect()
    }

    /// One page as a record batch.
    pub fn read_page(&self, id: u64) -> Result<RecordBatch> {
        let info = self.page_info(id)?;
        self.read_rows_in_row_group(info.file, info.row_group, info.first_row, info.num_rows)
            .map_err(|e| e.context(&format!("page {id}")))
    }

    /// The pages `ids` as one batch (in `ids` order), optionally reordered by `take`
    /// (indices into the concatenated rows). This is a shuffle window: assembling it
    /// here keeps the copy in Rust (one concat, one take, freed straight back to the
    /// OS) and lets a prefetch thread do it off the consumer's path.
    pub fn read_window(&self, ids: &[u64], take: Option<&[u64]>) -> Result<RecordBatch> {
        let parts = self.read_window_parts(ids, take)?;
        self.concat_window(&parts)
    }

    /// The window of [`read_window`](Self::read_window) as consecutive batches, without
    /// the copy that joining them would cost: the pages themselves when there is no
    /// `take`; otherwise the reordered rows gathered straight from the decoded pages
    /// (one copy of the values, not a concatenation and then a take), in a few parts
    /// gathered in parallel on the pool — the copy is memory-bound, and a window's
    /// assembly would otherwise leave all but one thread idle between windows.
    pub fn read_window_parts(&self, ids: &[u64], take: Option<&[u64]>) -> Result<Vec<RecordBatch>> {
        self.check_window_fits(ids, take)?;
        let batches = self.read_pages(ids)?;
        let Some(take) = take else { return Ok(batches) };
        let mut starts = Vec::with_capacity(batches.len() + 1);
        starts.push(0u64);
        for b in &batches {
            starts.push(starts[starts.len() - 1] + b.num_rows() as u64);
        }
        let n = starts[starts.len() - 1];
        let mut at = Vec::with_capacity(take.len());
        for &t in take {
            if t >= n {
                return Err(Error::OutOfRange { what: "window row", id: t as i128, len: n });
            }
            let b = starts.partition_point(|&s| s <= t) - 1;
            at.push((b, (t - starts[b]) as usize));
        }
        let refs: Vec<&RecordBatch> = batches.iter().collect();
        let gather = |part: &[(usize, usize)]| -> Result<RecordBatch> {
            arrow_select::interleave::interleave_record_batch(&refs, part).map_err(|e| Error::SchemaMismatch {
                first: self.files[0].path.display().to_string(),
                other: "another file of this window".into(),
                detail: format!("pages cannot be combined into one window: {e}"),
            })
        };
        let threads = runtime().num_threads().max(1);
        let per_part = at.len().div_ceil(threads).max(WINDOW_PART_MIN_ROWS);
        if at.len() <= per_part {
            return Ok(vec![gather(&at)?]);
        }
        runtime().pool().install(|| at.par_chunks(per_part).map(gather).collect())
    }

    /// One batch of a window's parts (the single-batch API's join).
    fn concat_window(&self, parts: &[RecordBatch]) -> Result<RecordBatch> {
        if parts.len() == 1 {
            return Ok(parts[0].clone());
        }
        let schema = self.schema();
        arrow_select::concat::concat_batches(&schema, parts).map_err(|e| Error::SchemaMismatch {
            first: self.files[0].path.display().to_string(),
            other: "another file of this window".into(),
            detail: format!("pages cannot be combined into one batch: {e}"),
        })
    }

    /// Single rows by global row id, in `rows` order, as one batch. Each row is read
    /// with a one-row selection inside its page, so the decoder skips the page's other
    /// rows instead of materialising them (random access without page-sized work).
    pub fn read_rows(&self, rows: &[u64]) -> Result<RecordBatch> {
        self.check_rows_fit(rows, "read_rows")?;
        let mut units = Vec::with_capacity(rows.len());
        for &r in rows {
            if r >= self.num_rows() {
                return Err(Error::OutOfRange { what: "row", id: r as i128, len: self.num_rows() });
            }
            let (page, off) = self.locate_row(r)?;
            let info = self.page_info(page)?;
            units.push(Unit { file: info.file, rg: info.row_group, first: info.first_row + off, n: 1 });
        }
        let batches = self.read_units(&units, &|i| format!("row {}", rows[i]))?;
        self.concat_rows(batches, "another file of this request")
    }

    /// Refuse a window whose pages, or rows reordered by `take` (which may repeat rows),
    /// cannot fit in memory.
    pub fn check_window_fits(&self, ids: &[u64], take: Option<&[u64]>) -> Result<()> {
        self.check_pages_fit(ids, "read_window")?;
        if let Some(take) = take {
            let (mut bytes, mut rows) = (0u128, 0u128);
            for &id in ids {
                let info = self.page_info(id)?;
                rows += info.num_rows as u128;
                bytes += self.page_estimate(id)?.0;
            }
            let per_row = bytes / rows.max(1) + 1;
            crate::limits::check_fits(
                || format!("read_window reordered by take ({} rows)", take.len()),
                per_row * take.len() as u128,
            )?;
        }
        Ok(())
    }

    /// Many pages, read and decoded in parallel on youmu's pool; output in `ids` order.
    pub fn read_pages(&self, ids: &[u64]) -> Result<Vec<RecordBatch>> {
        for &id in ids {
            if id >= self.len() {
                return Err(Error::OutOfRange { what: "page", id: id as i128, len: self.len() });
            }
        }
        self.check_pages_fit(ids, "reading pages")?;
        let units = ids
            .iter()
            .map(|&id| {
                let info = self.page_info(id)?;
                Ok(Unit { file: info.file, rg: info.row_group, first: info.first_row, n: info.num_rows })
            })
            .collect::<Result<Vec<_>>>()?;
        self.read_units(&units, &|i| format!("page {}", ids[i]))
    }

    fn concat_rows(&self, batches: Vec<RecordBatch>, what: &str) -> Result<RecordBatch> {
        arrow_select::concat::concat_batches(&self.schema(), &batches).map_err(|e| Error::SchemaMismatch {
            first: self.files[0].path.display().to_string(),
            other: what.into(),
            detail: format!("rows cannot be combined into one batch: {e}"),
        })
    }
}

//! Reading one page of the index: a positioned read of its data page(s) per projected leaf (plus
//! the chunk's dictionary page, cached), decoded to one Arrow `RecordBatch`.
//!
//! The decode uses only the documented arrow-rs reader API: the file's metadata (with
//! the OffsetIndex youmu kept or synthesized) plus a row selection of exactly the
//! page's rows. With page locations present, the reader skips every other page without
//! I/O, so a page costs one `pread` per overlapping data page.

use std::sync::Arc;

use arrow_array::RecordBatch;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ParquetRecordBatchReaderBuilder, RowSelection, RowSelectionPolicy, RowSelector,
};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::index::PageIndex;
use crate::io::CachingReader;
use crate::runtime::runtime;

impl PageIndex {
    /// Rows `[first, first + n)` of row group `rg` of file `file`, selected columns.
    pub fn read_rows_in_row_group(&self, file: usize, rg: usize, first: u64, n: u64) -> Result<RecordBatch> {
        let f = &self.files[file];
        let ctx = format!("row group {rg}, rows {first}..{}", first + n);
        let result = crate::error::catch_quietly(|| -> Result<RecordBatch> {
            if let Some(batch) = crate::tokens::try_read(f, rg, first, n) {
                return batch.map_err(|detail| Error::corrupt(&f.path, format!("{ctx}: {detail}")));
            }
            let decode = |meta: &ArrowReaderMetadata, mask: &ProjectionMask| -> Result<RecordBatch> {
                let reader = CachingReader {
                    inner: f.reader.clone(),
                    index_uid: self.uid,
                    file_id: file as u32,
                    dict_ranges: Arc::new(f.dict_ranges(rg)),
                    max_page_bytes: f.max_chunk_bytes(rg),
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
                crate::validate::validate_batch(&batch)
                    .map_err(|e| Error::corrupt(&f.path, format!("{ctx}: decoded data is inconsistent: {e}")))?;
                Ok(batch)
            };
            let batch = decode(&f.meta, &f.mask)?;
            if let Some(check) = &f.int96_check {
                let seconds = decode(&check.meta, &check.mask)?;
                for (k, (col, name)) in check.columns.iter().enumerate() {
                    let (Some(read), Some(secs)) = (batch.columns().get(*col), seconds.columns().get(k)) else {
                        continue;
                    };
                    if let Some(w) = crate::int96::first_wrapped(read, secs) {
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
        match result {
            Ok(r) => r,
            Err(panic) => Err(Error::corrupt(&f.path, format!("{ctx}: decoder failed: {panic}"))),
        }
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
        self.check_window_fits(ids, take)?;
        let batches = self.read_pages(ids)?;
        let schema = self.schema();
        let batch = arrow_select::concat::concat_batches(&schema, &batches).map_err(|e| Error::SchemaMismatch {
            first: self.files[0].path.display().to_string(),
            other: "another file of this window".into(),
            detail: format!("pages cannot be combined into one batch: {e}"),
        })?;
        drop(batches);
        let Some(take) = take else { return Ok(batch) };
        let n = batch.num_rows() as u64;
        if let Some(&bad) = take.iter().find(|&&t| t >= n) {
            return Err(Error::OutOfRange { what: "window row", id: bad as i128, len: n });
        }
        let idx = arrow_array::UInt64Array::from(take.to_vec());
        arrow_select::take::take_record_batch(&batch, &idx)
            .map_err(|e| Error::InvalidArgument(format!("cannot reorder window: {e}")))
    }

    /// Single rows by global row id, in `rows` order, as one batch. Each row is read
    /// with a one-row selection inside its page, so the decoder skips the page's other
    /// rows instead of materialising them (random access without page-sized work).
    pub fn read_rows(&self, rows: &[u64]) -> Result<RecordBatch> {
        self.check_rows_fit(rows, "read_rows")?;
        let one = |r: u64| -> Result<RecordBatch> {
            if r >= self.num_rows() {
                return Err(Error::OutOfRange { what: "row", id: r as i128, len: self.num_rows() });
            }
            let (page, off) = self.locate_row(r)?;
            let info = self.page_info(page)?;
            self.read_rows_in_row_group(info.file, info.row_group, info.first_row + off, 1)
                .map_err(|e| e.context(&format!("row {r}")))
        };
        let batches: Vec<RecordBatch> = if rows.len() <= 1 {
            rows.iter().map(|&r| one(r)).collect::<Result<_>>()?
        } else {
            runtime().pool().install(|| rows.par_iter().map(|&r| one(r)).collect::<Result<_>>())?
        };
        let schema = self.schema();
        arrow_select::concat::concat_batches(&schema, &batches).map_err(|e| Error::SchemaMismatch {
            first: self.files[0].path.display().to_string(),
            other: "another file of this request".into(),
            detail: format!("rows cannot be combined into one batch: {e}"),
        })
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
        if ids.len() <= 1 {
            return ids.iter().map(|&i| self.read_page(i)).collect();
        }
        runtime().pool().install(|| ids.par_iter().map(|&i| self.read_page(i)).collect())
    }
}

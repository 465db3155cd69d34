//! A unit's columns split between the two decoders: token-list columns that the direct
//! decoder reads whole ([`crate::parquet::tokens`]) and the rest, read by arrow-rs with a
//! projection of just those columns; the two put back together in the user's order.
//!
//! A training set is rarely one column: token ids travel with a document id, a source,
//! a loss mask. Reading them all through arrow-rs sends the token column — nearly all of
//! the bytes — through its general nested-level path (a validity bitmap built per value
//! from the definition levels), which profiled at ~35 % of a shuffled epoch's CPU over
//! `input_ids` + `doc_id`.

use arrow_array::{ArrayRef, RecordBatch};
use parquet::arrow::ProjectionMask;

use crate::parquet::file::FileEntry;
use crate::storage::Fetched;

/// The projected columns of one unit: per column in the user's order, the token decoder's
/// array where it read it (`None`: arrow-rs reads it).
pub(super) struct Split {
    pub direct: Vec<Option<ArrayRef>>,
    /// Each projected column's top-level index in the file (the user's order).
    roots: Vec<usize>,
}

/// Read the token-list columns of rows `[first, first + n)` of row group `rg` directly;
/// `Err(why)` where such a column's page is corrupt.
pub(super) fn split(f: &FileEntry, src: &Fetched, rg: usize, first: u64, n: u64) -> Result<Split, String> {
    let descr = f.meta.parquet_schema();
    let mut file_roots: Vec<usize> = f.leaves.iter().map(|&l| descr.get_column_root_idx(l)).collect();
    file_roots.dedup(); // leaves are in file order, so a root's leaves are adjacent
    let roots: Vec<usize> = (0..f.fields.len())
        .map(|i| file_roots.get(f.reorder.as_ref().map_or(i, |r| r[i])).copied().unwrap_or(usize::MAX))
        .collect();
    let mut direct = Vec::with_capacity(roots.len());
    for (field, &root) in f.fields.iter().zip(&roots) {
        let mut leaves = f.leaves.iter().filter(|&&l| descr.get_column_root_idx(l) == root);
        // INT96 columns are checked against a second decode of the same batch (arrow-rs's)
        let col = match (leaves.next(), leaves.next()) {
            (Some(&leaf), None) if f.int96_check.is_none() => {
                crate::parquet::tokens::try_read_column(f, src, rg, (leaf, field), first, n).transpose()?
            }
            _ => None,
        };
        direct.push(col);
    }
    Ok(Split { direct, roots })
}

impl Split {
    /// Whether arrow-rs reads every column (the token decoder took none).
    pub fn none_direct(&self) -> bool {
        self.direct.iter().all(Option::is_none)
    }

    /// The projection and the leaves (file order) of the columns arrow-rs reads.
    pub fn rest(&self, f: &FileEntry) -> (ProjectionMask, Vec<usize>) {
        let descr = f.meta.parquet_schema();
        let roots = self.rest_roots();
        let leaves = f.leaves.iter().copied().filter(|&l| roots.contains(&descr.get_column_root_idx(l))).collect();
        (ProjectionMask::roots(descr, roots.iter().copied()), leaves)
    }

    /// The top-level columns arrow-rs reads, in file order (its batch's order).
    fn rest_roots(&self) -> Vec<usize> {
        let mut r: Vec<usize> =
            self.roots.iter().zip(&self.direct).filter(|(_, d)| d.is_none()).map(|(&r, _)| r).collect();
        r.sort_unstable();
        r
    }

    /// The unit's batch in the user's order: the direct columns and `rest` (arrow-rs's
    /// batch of the other columns, `None` where there are none).
    pub fn assemble(self, f: &FileEntry, rest: Option<&RecordBatch>) -> Result<RecordBatch, String> {
        let rest_roots = self.rest_roots();
        let mut columns = Vec::with_capacity(self.direct.len());
        for (d, root) in self.direct.into_iter().zip(&self.roots) {
            let col = match d {
                Some(a) => a,
                None => {
                    let at = rest_roots.iter().position(|r| r == root);
                    at.and_then(|k| rest.and_then(|b| b.columns().get(k)).cloned())
                        .ok_or_else(|| format!("column {root} of the file was not decoded"))?
                }
            };
            columns.push(col);
        }
        let schema = arrow_schema::Schema::new(f.fields.to_vec());
        RecordBatch::try_new(std::sync::Arc::new(schema), columns).map_err(|e| e.to_string())
    }
}

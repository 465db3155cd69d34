//! The columns a user selected, resolved against one file's schema: which top-level
//! columns (by name, each once, refusing names the file holds twice), their leaves, the
//! leaf whose pages are the index's pages, and the order a read batch is put back in.

use std::path::Path;

use arrow_schema::{FieldRef, SchemaRef};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;

use crate::error::{Error, Result};

/// The selected columns of one file, resolved against its schema.
pub(super) struct Projection {
    pub mask: ProjectionMask,
    /// Leaf column indices of the projection (file order).
    pub leaves: Vec<usize>,
    /// The leaf whose data pages define the index's pages.
    pub page_leaf: usize,
    /// Columns of a read batch, in the user's order (`None`: already in order).
    pub reorder: Option<Vec<usize>>,
    /// Projected fields in the user's order.
    pub fields: Vec<FieldRef>,
}

/// Resolve `columns` (top-level names; None = all) against a file.
pub(super) fn resolve_projection(
    path: &Path,
    meta: &ArrowReaderMetadata,
    columns: Option<&[String]>,
) -> Result<Projection> {
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

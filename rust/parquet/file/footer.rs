//! A file's footer: the Thrift walked before arrow-rs parses it (a corrupt count is an
//! error, not an aborting allocation), the OffsetIndex kept only when its bytes are
//! sound, and the Arrow reader metadata (a malformed embedded Arrow schema is an error).

use std::path::Path;
use std::sync::Arc;

use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::file::metadata::{
    PageIndexPolicy, ParquetMetaData, ParquetMetaDataOptions, ParquetMetaDataReader, ParquetStatisticsPolicy,
};

use crate::error::{Error, Result};
use crate::storage::Fetched;

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
    crate::parquet::thrift::check_struct(&bytes).map(|_| ()).map_err(|e| {
        let why = match e {
            crate::parquet::thrift::ThriftError::NeedMore => {
                "a count or length runs past the end of the footer".to_string()
            }
            crate::parquet::thrift::ThriftError::Invalid(s) => s,
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
        bytes.get(start..start + n as usize).is_some_and(|b| crate::parquet::thrift::check_struct(b).is_ok())
    }))
}

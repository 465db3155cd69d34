//! Checking a data page's structure before arrow-rs decodes it.
//!
//! arrow-rs trusts a page's levels more than pyarrow does: a level above the column's
//! maximum, levels that end before the header's value count, a values section with
//! fewer or more values than the definition levels promise, or a page that starts more
//! or fewer rows than its page location says are decoded into other rows without an
//! error, where pyarrow (Apache Arrow C++) refuses the file ("Malformed levels",
//! "Number of decoded rep / def levels do not match num_values in page header",
//! "Length spanned by list offsets larger than values array"). Every data page the
//! general path reads through the page locations passes this check first; what it
//! cannot check (encodings without a cheap size rule, codecs the token decoder does not
//! link) is left to arrow-rs as before.
//!
//! The cost is one pass over the levels (run headers; bit-packed levels a byte at a
//! time where they are one bit wide) and, for a compressed v1 page, decompressing what
//! holds its levels (they are inside the compressed body): the blocks up to the levels'
//! end of a zstd page whose values need no reading, the whole page otherwise.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use parquet::basic::{Compression, Repetition, Type as PhysicalType};
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};
use parquet::schema::types::ColumnDescriptor;

use crate::parquet::decompress::{decompress, v1_level_prefix};
use crate::parquet::levels::{LevelCounts, bit_width, count_levels, decode_levels};
use crate::parquet::thrift::{PageHeader, PageType, parse_page_header};
use crate::parquet::varint::{VarintError, uleb128};

pub(crate) const ENCODING_PLAIN: i32 = 0;
const ENCODING_PLAIN_DICTIONARY: i32 = 2;
pub(crate) const ENCODING_RLE: i32 = 3;
const ENCODING_RLE_DICTIONARY: i32 = 8;
const ENCODING_BYTE_STREAM_SPLIT: i32 = 9;

/// Page header bytes to parse before giving up (headers with statistics are small).
pub(crate) const MAX_HEADER_BYTES: usize = 64 << 10;

/// The data pages of one row group's projected leaves, found by their page locations.
///
/// A row group without page locations is read by arrow-rs a page header at a time
/// (`get_read`), then the page's body (`get_bytes`): the header offsets are noted, and a
/// body is checked with the header before it (its rows are not known page by page).
pub struct PageChecks {
    meta: Arc<ParquetMetaData>,
    rg: usize,
    leaves: Vec<usize>,
    rg_rows: u64,
    /// Where arrow-rs read page headers from (row groups without page locations).
    headers: Mutex<Vec<u64>>,
    /// Per leaf, [`repeated_def_levels`].
    nesting: Vec<Vec<u16>>,
}

impl PageChecks {
    pub fn new(meta: Arc<ParquetMetaData>, rg: usize, leaves: &[usize], rg_rows: u64) -> Self {
        let nesting = leaves.iter().map(|&l| repeated_def_levels(&meta, l)).collect();
        PageChecks { meta, rg, leaves: leaves.to_vec(), rg_rows, headers: Mutex::new(Vec::new()), nesting }
    }

    /// arrow-rs is about to read a page header at `offset`.
    pub fn note_header(&self, offset: u64) {
        if let Ok(mut h) = self.headers.lock() {
            h.push(offset);
        }
    }

    /// Check the bytes `[start, start + bytes.len())` if they are one of the data pages
    /// of the page locations, or the body of a page whose header was read at a noted
    /// offset (`read` gives the header's bytes); other ranges pass unchecked.
    pub fn check(&self, start: u64, bytes: &[u8], read: impl Fn(u64, usize) -> Option<Bytes>) -> Result<(), String> {
        let located = self.meta.offset_index().and_then(|oi| oi.get(self.rg)).filter(|c| !c.is_empty());
        let Some(cols) = located else { return self.check_body(start, bytes, read) };
        for (pos, &leaf) in self.leaves.iter().enumerate() {
            let Some(locs) = cols.get(leaf).map(|c| &c.page_locations) else { continue };
            let k = locs.partition_point(|l| (l.offset as u64) < start);
            let Some(loc) = locs.get(k) else { continue };
            if loc.offset as u64 != start || loc.compressed_page_size as i64 != bytes.len() as i64 {
                continue;
            }
            let end = locs.get(k + 1).map_or(self.rg_rows, |n| n.first_row_index as u64);
            let rows = end.checked_sub(loc.first_row_index as u64);
            let chunk = self.meta.row_group(self.rg).column(leaf);
            return check_page(bytes, chunk, rows, &self.nesting[pos])
                .map_err(|why| format!("column {}, data page {k} (at byte {start}): {why}", chunk.column_path()));
        }
        Ok(())
    }

    /// A page body read after its header (a row group read without page locations).
    fn check_body(&self, start: u64, body: &[u8], read: impl Fn(u64, usize) -> Option<Bytes>) -> Result<(), String> {
        let noted = self
            .headers
            .lock()
            .ok()
            .and_then(|h| h.iter().rev().copied().find(|&o| o < start && start - o <= MAX_HEADER_BYTES as u64));
        let Some(at) = noted else { return Ok(()) };
        let rg = self.meta.row_group(self.rg);
        let found = self.leaves.iter().map(|&l| rg.column(l)).enumerate().find(|(_, c)| {
            let (s, len) = c.byte_range();
            s <= at && start < s.saturating_add(len)
        });
        let Some((pos, chunk)) = found else { return Ok(()) };
        let Some(head) = read(at, (start - at) as usize) else { return Ok(()) };
        match parse_page_header(&head) {
            Ok((h, len)) if len as u64 == start - at => check_parsed(&h, body, chunk, None, &self.nesting[pos])
                .map_err(|why| format!("column {}, the page at byte {at}: {why}", chunk.column_path())),
            _ => Ok(()),
        }
    }
}

/// Check one data page (header and body) of `chunk` that its page location says holds
/// `rows` rows. `Ok` when it adds up or is not something this can check.
pub fn check_page(bytes: &[u8], chunk: &ColumnChunkMetaData, rows: Option<u64>, nesting: &[u16]) -> Result<(), String> {
    let Ok((h, header_len)) = parse_page_header(&bytes[..bytes.len().min(MAX_HEADER_BYTES)]) else {
        return Ok(()); // arrow-rs says what is wrong with the header
    };
    let Ok(compressed) = usize::try_from(h.compressed_size) else { return Ok(()) };
    let Some(body) = header_len.checked_add(compressed).and_then(|end| bytes.get(header_len..end)) else {
        return Err(format!(
            "its header claims {compressed} bytes but its page location holds {}",
            bytes.len().saturating_sub(header_len)
        ));
    };
    check_parsed(&h, body, chunk, rows, nesting)
}

/// [`check_page`] of a parsed header and the page's body.
fn check_parsed(
    h: &PageHeader,
    body: &[u8],
    chunk: &ColumnChunkMetaData,
    rows: Option<u64>,
    nesting: &[u16],
) -> Result<(), String> {
    let (Ok(uncompressed), Ok(num_values)) = (usize::try_from(h.uncompressed_size), usize::try_from(h.num_values))
    else {
        return Ok(());
    };
    if body.len() != usize::try_from(h.compressed_size).unwrap_or(usize::MAX) {
        return Ok(()); // arrow-rs reads what the header says, and reports a short read
    }
    let descr = chunk.column_descr();
    let (max_rep, max_def) = (descr.max_rep_level(), descr.max_def_level());
    let codec = chunk.compression();
    let decompressible = matches!(codec, Compression::UNCOMPRESSED | Compression::ZSTD(_) | Compression::SNAPPY);
    let (owned, prefix_buf);
    // (repetition levels, definition levels, values section when at hand, its length)
    let (rep, def, vals, vals_len): (&[u8], &[u8], Option<&[u8]>, usize) = match h.page_type {
        PageType::Data => {
            if !decompressible {
                return Ok(());
            }
            if matches!(codec, Compression::ZSTD(_)) && !values_needed(descr, h.encoding) {
                // the levels lead the page: decompress the blocks that hold them, not the
                // whole page arrow-rs decompresses again to decode it (that second
                // decompression cost a shuffled epoch of token lists ~29 %); arrow-rs
                // checks the page's decompressed size against its header
                let Some((prefix, rep, def)) = v1_level_prefix(body, uncompressed, max_rep, max_def, h)? else {
                    return Ok(());
                };
                prefix_buf = prefix;
                let buf = &prefix_buf[..];
                let levels_end = def.end.max(rep.end);
                (&buf[rep], &buf[def], None, uncompressed - levels_end)
            } else {
                owned = decompress(codec, body, uncompressed)?;
                let mut rest: &[u8] = owned.as_deref().unwrap_or(body);
                let Some(rep) = v1_levels(&mut rest, max_rep, h.rep_level_encoding, "repetition")? else {
                    return Ok(());
                };
                let Some(def) = v1_levels(&mut rest, max_def, h.def_level_encoding, "definition")? else {
                    return Ok(());
                };
                (rep, def, Some(rest), rest.len())
            }
        }
        PageType::DataV2 => {
            let (Some(rl), Some(dl)) = (h.rep_levels_byte_len, h.def_levels_byte_len) else { return Ok(()) };
            let (Ok(rl), Ok(dl)) = (usize::try_from(rl), usize::try_from(dl)) else {
                return Err("negative level lengths".into());
            };
            let levels = rl.checked_add(dl).filter(|&l| l <= body.len() && l <= uncompressed);
            let Some(levels) = levels else { return Err("level lengths exceed the page".into()) };
            if let (Some(page_rows), Some(rows)) = (h.num_rows, rows)
                && page_rows as i64 != rows as i64
            {
                return Err(format!("its header says {page_rows} rows, its page location {rows}"));
            }
            let (rep, def, rest) = (&body[..rl], &body[rl..levels], &body[levels..]);
            let vals_len = uncompressed - levels;
            let compressed = h.is_compressed.unwrap_or(true) && codec != Compression::UNCOMPRESSED;
            // the values are only decompressed where their size alone says too little
            let needs_values = values_needed(descr, h.encoding);
            owned =
                if compressed && needs_values && decompressible { decompress(codec, rest, vals_len)? } else { None };
            let vals = if compressed { owned.as_deref() } else { Some(rest) };
            (rep, def, vals, vals_len)
        }
        _ => return Ok(()),
    };
    let levels = |buf: &[u8], max: i16, what: &str| -> Result<LevelCounts, String> {
        count_levels(buf, bit_width(max), num_values, max as u64).map_err(|why| format!("{what} levels: {why}"))
    };
    let rep_counts = levels(rep, max_rep, "repetition")?;
    let def_counts = levels(def, max_def, "definition")?;
    if max_rep > 0 {
        check_nesting(rep, def, num_values, descr, nesting)?;
    }
    let rep = rep_counts;
    if let Some(rows) = rows {
        if !rep.first_zero && num_values > 0 {
            return Err("its first value continues a row, its page location says it starts one".into());
        }
        if rep.zeros as u64 != rows {
            return Err(format!("its levels start {} rows, its page location says {rows}", rep.zeros));
        }
    }
    let present = def_counts.at_max;
    check_values(descr.physical_type(), descr.type_length(), h.encoding, present, vals, vals_len)
}

/// Repetition and definition levels together: a value that continues a list at
/// repetition level `r` must have that list present (its definition level at least the
/// list's), or the levels describe no valid nesting (Arrow C++ then finds list offsets
/// past its values; arrow-rs would build other rows).
fn check_nesting(
    rep: &[u8],
    def: &[u8],
    num_values: usize,
    descr: &ColumnDescriptor,
    min_def: &[u16],
) -> Result<(), String> {
    if min_def.len() != descr.max_rep_level() as usize + 1 {
        return Ok(()); // a schema this cannot follow
    }
    let (mut r, mut d) = (Vec::with_capacity(num_values), Vec::with_capacity(num_values));
    decode_levels(rep, bit_width(descr.max_rep_level()), num_values, &mut r);
    decode_levels(def, bit_width(descr.max_def_level()), num_values, &mut d);
    for (i, (&r, &d)) in r.iter().zip(&d).enumerate() {
        if r > 0 && min_def.get(r as usize).is_none_or(|&m| d < m) {
            return Err(format!(
                "value {i} continues a list at repetition level {r} with definition level {d}, below the list's {}",
                min_def.get(r as usize).copied().unwrap_or(0)
            ));
        }
    }
    Ok(())
}

/// Per repetition level `r` (index), the definition level of the `r`-th repeated field
/// on leaf `leaf`'s path (index 0 unused); empty if the path cannot be followed.
pub fn repeated_def_levels(meta: &ParquetMetaData, leaf: usize) -> Vec<u16> {
    let schema = meta.file_metadata().schema_descr();
    let mut node = schema.root_schema();
    let (mut out, mut def) = (vec![0u16], 0u16);
    for name in schema.column(leaf).path().parts() {
        let Some(child) = node.get_fields().iter().find(|f| f.name() == name) else { return Vec::new() };
        node = child;
        let info = node.get_basic_info();
        if info.has_repetition() {
            match info.repetition() {
                Repetition::OPTIONAL => def += 1,
                Repetition::REPEATED => {
                    def += 1;
                    out.push(def);
                }
                Repetition::REQUIRED => {}
            }
        }
    }
    out
}

/// A v1 page's levels of a column with maximum level `max`, taken off the front of
/// `rest`; `None` for the deprecated BIT_PACKED encoding (left to arrow-rs).
fn v1_levels<'a>(rest: &mut &'a [u8], max: i16, encoding: Option<i32>, what: &str) -> Result<Option<&'a [u8]>, String> {
    if max == 0 {
        return Ok(Some(&[]));
    }
    if encoding != Some(ENCODING_RLE) {
        return Ok(None);
    }
    let (levels, after) = length_prefixed(rest).ok_or(format!("{what} levels run past the page"))?;
    *rest = after;
    Ok(Some(levels))
}

/// Bytes per PLAIN value of a fixed-width physical type.
fn fixed_width(t: PhysicalType, type_length: i32) -> Option<usize> {
    match t {
        PhysicalType::INT32 | PhysicalType::FLOAT => Some(4),
        PhysicalType::INT64 | PhysicalType::DOUBLE => Some(8),
        PhysicalType::INT96 => Some(12),
        PhysicalType::FIXED_LEN_BYTE_ARRAY => usize::try_from(type_length).ok().filter(|&w| w > 0),
        PhysicalType::BOOLEAN | PhysicalType::BYTE_ARRAY => None,
    }
}

/// The values section against the `present` values the definition levels promise.
fn check_values(
    t: PhysicalType,
    type_length: i32,
    encoding: Option<i32>,
    present: usize,
    vals: Option<&[u8]>,
    vals_len: usize,
) -> Result<(), String> {
    let mismatch = |holds: String| Err(format!("its definition levels promise {present} values, {holds}"));
    match (encoding, fixed_width(t, type_length), t) {
        // PLAIN and BYTE_STREAM_SPLIT values of a fixed width: one per present level, as
        // every writer lays them out
        (Some(ENCODING_PLAIN | ENCODING_BYTE_STREAM_SPLIT), Some(width), _) if vals_len / width != present => {
            return mismatch(format!("its values section holds {vals_len} bytes ({} values)", vals_len / width));
        }
        (Some(ENCODING_PLAIN), None, PhysicalType::BOOLEAN) if vals_len < present.div_ceil(8) => {
            return mismatch(format!("its values section holds {vals_len} bytes of bits"));
        }
        (Some(ENCODING_PLAIN), None, PhysicalType::BYTE_ARRAY) => {
            let Some(vals) = vals else { return Ok(()) };
            let mut pos = 0usize;
            for i in 0..present {
                let len = vals.get(pos..pos + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
                let end = len.and_then(|l| (pos + 4).checked_add(l)).filter(|&e| e <= vals.len());
                let Some(end) = end else {
                    return mismatch(format!("its values section ({} bytes) ends inside value {i}", vals.len()));
                };
                pos = end;
            }
            if pos != vals.len() {
                return mismatch(format!("its values section holds {} bytes more", vals.len() - pos));
            }
        }
        (Some(ENCODING_RLE_DICTIONARY | ENCODING_PLAIN_DICTIONARY), _, _) => {
            let Some(vals) = vals else { return Ok(()) };
            if present == 0 {
                return Ok(());
            }
            let Some((&width, runs)) = vals.split_first() else {
                return mismatch("its dictionary indices are empty".into());
            };
            if width > 32 {
                return Err(format!("its dictionary indices are {width} bits wide"));
            }
            if width > 0 {
                dictionary_runs(runs, width, present).map_err(|why| {
                    format!("its definition levels promise {present} values, its dictionary indices {why}")
                })?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Walk the RLE / bit-packed runs of `count` dictionary indices of `width` bits.
fn dictionary_runs(buf: &[u8], width: u8, count: usize) -> Result<(), String> {
    let (mut pos, mut seen) = (0usize, 0usize);
    let vbytes = (width as usize).div_ceil(8);
    while seen < count {
        let header = uleb128(buf, &mut pos).map_err(|e| match e {
            VarintError::End => "end early",
            VarintError::TooLong => "hold a run header too long",
        })?;
        let (n, bytes) = if header & 1 == 1 {
            let groups = usize::try_from(header >> 1).map_err(|_| "hold a run too long")?;
            (groups.saturating_mul(8), groups.checked_mul(width as usize).ok_or("hold a run too long")?)
        } else {
            (usize::try_from(header >> 1).unwrap_or(usize::MAX), vbytes)
        };
        if n == 0 {
            return Err("hold a run of length 0".into());
        }
        pos = pos.checked_add(bytes).filter(|&p| p <= buf.len()).ok_or("end early")?;
        seen = seen.saturating_add(n);
    }
    Ok(())
}

/// Whether checking a page's values takes their bytes, not only their size: all but
/// fixed-width PLAIN and BYTE_STREAM_SPLIT values.
fn values_needed(descr: &ColumnDescriptor, encoding: Option<i32>) -> bool {
    fixed_width(descr.physical_type(), descr.type_length()).is_none()
        || encoding != Some(ENCODING_PLAIN) && encoding != Some(ENCODING_BYTE_STREAM_SPLIT)
}

/// v1 levels: a 4-byte little-endian length, then that many bytes.
pub(crate) fn length_prefixed(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(buf.get(..4)?.try_into().ok()?) as usize;
    let end = 4usize.checked_add(len)?;
    Some((buf.get(4..end)?, buf.get(end..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_width_values_match_the_levels() {
        assert!(check_values(PhysicalType::INT64, 0, Some(ENCODING_PLAIN), 3, None, 24).is_ok());
        assert!(check_values(PhysicalType::INT64, 0, Some(ENCODING_PLAIN), 3, None, 16).is_err());
        assert!(check_values(PhysicalType::INT64, 0, Some(ENCODING_PLAIN), 3, None, 32).is_err());
        assert!(check_values(PhysicalType::FIXED_LEN_BYTE_ARRAY, 5, Some(ENCODING_PLAIN), 2, None, 10).is_ok());
    }

    #[test]
    fn byte_array_values_are_walked() {
        let vals = [1u8, 0, 0, 0, b'a', 0, 0, 0, 0];
        assert!(check_values(PhysicalType::BYTE_ARRAY, 0, Some(ENCODING_PLAIN), 2, Some(&vals), 9).is_ok());
        assert!(check_values(PhysicalType::BYTE_ARRAY, 0, Some(ENCODING_PLAIN), 3, Some(&vals), 9).is_err());
        assert!(check_values(PhysicalType::BYTE_ARRAY, 0, Some(ENCODING_PLAIN), 1, Some(&vals), 9).is_err());
    }

    #[test]
    fn a_value_continuing_an_absent_list_is_refused() {
        let schema = parquet::schema::parser::parse_message_type(
            "message m { optional group ids (LIST) { repeated group list { optional int64 element; } } }",
        )
        .expect("schema");
        let descr = parquet::schema::types::SchemaDescriptor::new(Arc::new(schema));
        let col = descr.column(0);
        // repetition levels 0, 1 (one row of two values): the second continues the list
        let rep = [1 << 1, 0, 1 << 1, 1];
        assert!(check_nesting(&rep, &[2 << 1, 3], 2, &col, &[0, 2]).is_ok());
        assert!(check_nesting(&rep, &[1 << 1, 3, 1 << 1, 2], 2, &col, &[0, 2]).is_ok());
        // definition level 1 (an empty list) cannot continue a list
        assert!(check_nesting(&rep, &[1 << 1, 3, 1 << 1, 1], 2, &col, &[0, 2]).is_err());
    }

    #[test]
    fn dictionary_indices_cover_the_values() {
        // width 3, one RLE run of 5
        let ok = [3u8, 5 << 1, 2];
        assert!(check_values(PhysicalType::INT32, 0, Some(ENCODING_RLE_DICTIONARY), 5, Some(&ok), 3).is_ok());
        assert!(check_values(PhysicalType::INT32, 0, Some(ENCODING_RLE_DICTIONARY), 6, Some(&ok), 3).is_err());
        assert!(
            check_values(PhysicalType::INT32, 0, Some(ENCODING_RLE_DICTIONARY), 1, Some(&[40u8, 2, 0]), 3).is_err()
        );
    }
}

//! A direct decoder for the column LLM data is made of: token ids as `list<int32>` or
//! `list<int64>`, PLAIN-encoded, without nulls (one such column of a projection; the
//! others go through arrow-rs, `crate::index::columns`).
//!
//! arrow-rs decodes such a column through its general nested-level machinery (a
//! validity bitmap built from definition levels, offsets from repetition levels, one
//! value at a time); profiling a 1 MiB zstd page put ~40% of the time there. Here a
//! page's repetition levels become list offsets directly (runs of "continue the row"
//! bits skipped a byte at a time), the definition levels are only checked to be all
//! "present", and the values are one copy out of the decompressed page.
//!
//! Anything this decoder does not recognise (dictionary pages, nulls or empty lists,
//! other codecs, a unit that is not whole data pages) makes it return `None`: the column
//! goes through arrow-rs. A page it recognises whose bytes do not add up is corrupt, and
//! reported as such rather than handed to arrow-rs, which decodes truncated levels
//! without complaint (shifting rows between pages) where pyarrow says "Number of decoded
//! rep / def levels do not match num_values in page header": a page CRC that does not
//! match, levels ending before the header's value count, fewer value bytes than values,
//! rows that do not match the page index.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arrow_array::{ArrayRef, Int32Array, Int64Array, ListArray};
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, FieldRef};
use parquet::basic::{Compression, Type as PhysicalType};

use crate::parquet::pagecheck::{ENCODING_PLAIN, ENCODING_RLE, MAX_HEADER_BYTES, length_prefixed};
use crate::parquet::{
    decompress::decompress, file::FileEntry, levels::bit_width, levels::count_levels, pagebuf::PageBuf,
};
use crate::parquet::{thrift::PageType, thrift::parse_page_header, varint::uleb128};
use crate::storage::Fetched;

static ENABLED: AtomicBool = AtomicBool::new(true);
/// Pages this decoder produced (the rest went through arrow-rs), for `io_stats()`.
pub static FAST_DECODED_PAGES: AtomicU64 = AtomicU64::new(0);

/// Turn the fast path on or off (tests compare both; `YOUMU_FAST_DECODE=0` at import
/// turns it off for a process).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Pages bigger than this (decompressed) are left to the general path.
const MAX_PAGE_BYTES: usize = 256 << 20;
#[derive(Clone, Copy)]
enum Width {
    I32,
    I64,
}

/// What every data page of a column chunk shares.
#[derive(Clone, Copy)]
struct ChunkInfo {
    codec: Compression,
    max_def: i16,
    /// The chunk's uncompressed bytes (per the footer): no page holds more.
    bytes: usize,
    width: Width,
}

/// What one data page turned out to be.
type Decoded = Result<Option<PageValues>, String>;

/// Rows `[first, first + n)` of leaf `leaf` (the whole of top-level column `field`) in row
/// group `rg`, if they are whole pages of a token column this decoder handles; `None`
/// otherwise, `Some(Err(why))` if such a page is corrupt. Bytes come from `src` (the local
/// file, or a remote unit's fetched ranges).
pub fn try_read_column(
    f: &FileEntry,
    src: &Fetched,
    rg: usize,
    (leaf, field): (usize, &FieldRef),
    first: u64,
    n: u64,
) -> Option<Result<ArrayRef, String>> {
    if !enabled() || n == 0 {
        return None;
    }
    let DataType::List(child) = field.data_type() else { return None };
    let md = f.meta.metadata();
    let chunk = md.row_group(rg).column(leaf);
    let descr = chunk.column_descr();
    if descr.max_rep_level() != 1 || descr.max_def_level() < 1 {
        return None;
    }
    let width = match (child.data_type(), descr.physical_type()) {
        (DataType::Int32, PhysicalType::INT32) => Width::I32,
        (DataType::Int64, PhysicalType::INT64) => Width::I64,
        _ => return None,
    };
    let codec = chunk.compression();
    if !matches!(codec, Compression::UNCOMPRESSED | Compression::ZSTD(_) | Compression::SNAPPY) {
        return None;
    }
    let oi = md.offset_index()?;
    let locs = &oi.get(rg)?.get(leaf)?.page_locations;
    let lo = locs.iter().position(|p| p.first_row_index as u64 == first)?;
    let rg_rows = f.rg_rows(rg);
    let end = first + n;
    let max_def = descr.max_def_level();
    // sized from what is read, not from the footer's row count
    let mut offsets: Vec<i32> = vec![0];
    let mut values = match width {
        Width::I32 => Values::I32(Vec::new()),
        Width::I64 => Values::I64(Vec::new()),
    };
    let chunk_bytes = usize::try_from(chunk.uncompressed_size()).unwrap_or(0);
    let info = ChunkInfo { codec, max_def, bytes: chunk_bytes, width };
    let mut whole: Option<ArrayRef> = None;
    let mut k = lo;
    loop {
        let page = locs.get(k)?;
        let page_end = locs.get(k + 1).map(|p| p.first_row_index as u64).unwrap_or(rg_rows);
        if page_end > end {
            return None; // the index page ends inside this data page
        }
        let rows = page_end.checked_sub(page.first_row_index as u64)?;
        // a read that fails is left to the arrow-rs path, which reports it typed
        let bytes = src.read_range(page.offset as u64, usize::try_from(page.compressed_page_size).ok()?).ok()?;
        let vals = match decode_page(&bytes, &info, rows, values.len(), &mut offsets) {
            Ok(Some(v)) => v,
            Ok(None) => return None,
            Err(why) => return Some(Err(format!("data page at byte {} (page {k} of the chunk): {why}", page.offset))),
        };
        if k == lo && page_end == end {
            // the unit is this one page: its decompressed buffer becomes the values
            // buffer as it is, no second copy
            match vals.into_array(width) {
                Ok(array) => {
                    whole = Some(array);
                    break;
                }
                Err(vals) => values.extend_le(vals.slice(&bytes)),
            }
        } else {
            values.extend_le(vals.slice(&bytes));
        }
        k += 1;
        if page_end == end {
            break;
        }
    }
    let values_len = whole.as_ref().map_or(values.len(), |a| a.len());
    // by construction; checked because a wrong list array is read out of bounds by pyarrow
    if offsets.len() as u64 != n + 1 || offsets.last().is_none_or(|&o| o as usize != values_len) {
        return Some(Err(format!("{} rows and {values_len} values decoded for {n} rows", offsets.len() - 1)));
    }
    let array: ArrayRef = match (whole, values) {
        (Some(array), _) => array,
        (None, Values::I32(v)) => Arc::new(Int32Array::from(v)),
        (None, Values::I64(v)) => Arc::new(Int64Array::from(v)),
    };
    let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
    let list = match ListArray::try_new(child.clone(), offsets, array, None) {
        Ok(l) => l,
        Err(e) => return Some(Err(e.to_string())),
    };
    FAST_DECODED_PAGES.fetch_add(1, Ordering::Relaxed);
    Some(Ok(Arc::new(list)))
}

/// The values decoded so far, typed (one copy out of the decompressed page).
enum Values {
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl Values {
    fn len(&self) -> usize {
        match self {
            Values::I32(v) => v.len(),
            Values::I64(v) => v.len(),
        }
    }

    fn extend_le(&mut self, bytes: &[u8]) {
        match self {
            Values::I32(v) => v.extend(bytes.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
            Values::I64(v) => v.extend(
                bytes.chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])),
            ),
        }
    }
}

/// Where one data page's PLAIN values are: in the page decompressed (`owned`), or in the bytes read.
struct PageValues {
    owned: Option<PageBuf>,
    start: usize,
    len: usize,
}

impl PageValues {
    fn slice<'a>(&'a self, read: &'a [u8]) -> &'a [u8] {
        let all = self.owned.as_deref().unwrap_or(read);
        &all[self.start..self.start + self.len]
    }

    /// The values as an Arrow array over the decompressed buffer itself (moved down by at most
    /// `width - 1` bytes where the levels leave them unaligned); `Err(self)` where there is no
    /// such buffer (stored uncompressed) or the machine is not little-endian (PLAIN is).
    fn into_array(self, width: Width) -> Result<ArrayRef, PageValues> {
        let w = match width {
            Width::I32 => 4,
            Width::I64 => 8,
        };
        let Some(mut buf) = self.owned else { return Err(self) };
        let misaligned = (buf.as_ptr() as usize).wrapping_add(self.start) % w;
        if cfg!(target_endian = "big") || misaligned > self.start {
            return Err(PageValues { owned: Some(buf), ..self });
        }
        let at = self.start - misaligned;
        if misaligned != 0 {
            buf.vec_mut().copy_within(self.start..self.start + self.len, at);
        }
        let values = buf.into_arrow(at, self.len);
        let n = self.len / w;
        Ok(match width {
            Width::I32 => Arc::new(Int32Array::new(ScalarBuffer::new(values, 0, n), None)),
            Width::I64 => Arc::new(Int64Array::new(ScalarBuffer::new(values, 0, n), None)),
        })
    }
}

/// One data page's rows: `rows` new offsets (after `base` values so far) and where its
/// values are. `Ok(None)` when the page is not one this decoder handles, `Err` when it
/// is but its bytes do not add up.
fn decode_page(bytes: &[u8], chunk: &ChunkInfo, rows: u64, base: usize, offsets: &mut Vec<i32>) -> Decoded {
    let ChunkInfo { codec, max_def, bytes: chunk_bytes, width } = *chunk;
    let Ok((h, header_len)) = parse_page_header(&bytes[..bytes.len().min(MAX_HEADER_BYTES)]) else {
        return Ok(None); // arrow-rs says what is wrong with the header
    };
    let (Ok(compressed), Ok(uncompressed), Ok(num_values)) =
        (usize::try_from(h.compressed_size), usize::try_from(h.uncompressed_size), usize::try_from(h.num_values))
    else {
        return Ok(None);
    };
    let Some(body) = header_len.checked_add(compressed).and_then(|end| bytes.get(header_len..end)) else {
        return Err(format!(
            "its header claims {compressed} bytes but the page location holds {}",
            bytes.len().saturating_sub(header_len)
        ));
    };
    if let Some(stored) = h.crc {
        let computed = crc32fast::hash(body);
        if computed != stored {
            return Err(format!(
                "page CRC32 checksum mismatch (stored {stored:08x}, computed {computed:08x}): its bytes changed after they were written"
            ));
        }
    }
    // a page cannot hold more than its column chunk (per the footer); a header that
    // claims more is left to the general path's checks instead of being allocated
    if uncompressed > MAX_PAGE_BYTES || uncompressed > chunk_bytes || h.encoding != Some(ENCODING_PLAIN) {
        return Ok(None);
    }
    let rep_width = bit_width(1);
    let def_width = bit_width(max_def);
    let owned;
    let (rep, def, vals): (&[u8], &[u8], &[u8]) = match h.page_type {
        PageType::Data => {
            if h.rep_level_encoding != Some(ENCODING_RLE) || h.def_level_encoding != Some(ENCODING_RLE) {
                return Ok(None);
            }
            owned = decompress(codec, body, uncompressed)?;
            let page: &[u8] = owned.as_deref().unwrap_or(body);
            let (rep, rest) = length_prefixed(page).ok_or("repetition levels run past the page")?;
            let (def, vals) = length_prefixed(rest).ok_or("definition levels run past the page")?;
            (rep, def, vals)
        }
        PageType::DataV2 => {
            if h.num_nulls.unwrap_or(0) != 0 {
                return Ok(None);
            }
            let (Some(rl), Some(dl)) = (h.rep_levels_byte_len, h.def_levels_byte_len) else { return Ok(None) };
            let (Ok(rl), Ok(dl)) = (usize::try_from(rl), usize::try_from(dl)) else { return Ok(None) };
            let levels = rl.checked_add(dl).filter(|&l| l <= body.len() && l <= uncompressed);
            let Some(levels) = levels else { return Err("level lengths exceed the page".into()) };
            let (rep, def, rest) = (&body[..rl], &body[rl..levels], &body[levels..]);
            let vals_len = uncompressed - levels;
            owned = if h.is_compressed.unwrap_or(true) { decompress(codec, rest, vals_len)? } else { None };
            (rep, def, owned.as_deref().unwrap_or(rest))
        }
        _ => return Ok(None),
    };
    // PLAIN values of a fixed width: exactly one per present level (def == max), as
    // every writer lays them out; more or fewer bytes mean the levels or the values
    // were damaged (pyarrow: "list offsets larger than values array")
    let present = present_levels(def, def_width, num_values, max_def as u64)
        .map_err(|why| format!("definition levels: {why}"))?;
    let width = match width {
        Width::I32 => 4,
        Width::I64 => 8,
    };
    if vals.len() / width != present {
        return Err(format!(
            "its definition levels account for {present} values, its values section holds {} bytes ({} values)",
            vals.len(),
            vals.len() / width
        ));
    }
    if present != num_values {
        return Ok(None); // nulls or empty lists: the general path
    }
    let len = present * width;
    let start = (vals.as_ptr() as usize).wrapping_sub(owned.as_deref().unwrap_or(bytes).as_ptr() as usize);
    let Ok(base) = i32::try_from(base) else { return Ok(None) };
    let Some(end) = i32::try_from(num_values).ok().and_then(|n| base.checked_add(n)) else { return Ok(None) };
    let before = offsets.len();
    // the previous row ends where this page's first row starts: drop its provisional end
    offsets.pop();
    match row_starts(rep, rep_width, num_values, base, offsets) {
        Err(why) => return Err(format!("repetition levels: {why}")),
        Ok(false) => return Ok(None), // continues a row: an index page of several
        Ok(true) => {}
    }
    offsets.push(end);
    let got = (offsets.len() - before) as u64;
    if got != rows {
        return Err(format!("its repetition levels start {got} rows, the page index says {rows}"));
    }
    Ok(Some(PageValues { owned, start, len }))
}

/// One run of RLE / bit-packed-hybrid data.
enum Run<'a> {
    Repeat {
        value: u64,
        count: usize,
    },
    /// `count` values of `width` bits, least significant bit first.
    Packed {
        data: &'a [u8],
        count: usize,
    },
}

/// Split hybrid-encoded levels into runs covering exactly `num_values` values.
fn runs(buf: &[u8], width: u8, num_values: usize) -> Option<Vec<Run<'_>>> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    let mut seen = 0usize;
    let vbytes = (width as usize).div_ceil(8);
    while seen < num_values {
        let header = uleb128(buf, &mut pos).ok()?;
        if header & 1 == 1 {
            let groups = usize::try_from(header >> 1).ok()?;
            let nbytes = groups.checked_mul(width as usize)?;
            let data = buf.get(pos..pos.checked_add(nbytes)?)?;
            pos += nbytes;
            let count = groups.checked_mul(8)?.min(num_values - seen);
            if count == 0 {
                return None;
            }
            out.push(Run::Packed { data, count });
            seen += count;
        } else {
            let count = usize::try_from(header >> 1).ok()?.min(num_values - seen);
            if count == 0 {
                return None;
            }
            let mut value = 0u64;
            for (i, b) in buf.get(pos..pos + vbytes)?.iter().enumerate() {
                value |= (*b as u64) << (8 * i);
            }
            pos += vbytes;
            out.push(Run::Repeat { value, count });
            seen += count;
        }
    }
    Some(out)
}

fn bit_at(data: &[u8], bit: usize, width: u8) -> u64 {
    let mut v = 0u64;
    for b in 0..width as usize {
        let p = bit + b;
        v |= (((data[p / 8] >> (p % 8)) & 1) as u64) << b;
    }
    v
}

fn levels_short(num_values: usize) -> String {
    format!("they end before the page header's {num_values} values (or hold a run of length 0)")
}

/// How many of the `num_values` levels equal `max`; `Err` if the levels end early or
/// one exceeds `max` (pyarrow: "Malformed levels").
fn present_levels(buf: &[u8], width: u8, num_values: usize, max: u64) -> Result<usize, String> {
    count_levels(buf, width, num_values, max).map(|c| c.at_max)
}

/// Push `base + i` for every value `i` whose repetition level is 0 (a row starts);
/// `Ok(false)` if the first value does not start a row. The caller checked that
/// `base + num_values` fits an `i32`. Levels are 0 or 1 (one level of lists).
fn row_starts(buf: &[u8], width: u8, num_values: usize, base: i32, offsets: &mut Vec<i32>) -> Result<bool, String> {
    let at = |i: usize| base.wrapping_add(i as i32);
    let mut i = 0usize;
    let mut first = true;
    for run in runs(buf, width, num_values).ok_or_else(|| levels_short(num_values))? {
        match run {
            Run::Repeat { value, count } => {
                if value > 1 {
                    return Err(format!("level {value} above the column's maximum 1"));
                }
                if first && value != 0 {
                    return Ok(false);
                }
                if value == 0 {
                    offsets.extend((i..i + count).map(at));
                }
                i += count;
            }
            Run::Packed { data, count } => {
                if width > 1 && (0..count).any(|j| bit_at(data, j * width as usize, width) > 1) {
                    return Err("level above the column's maximum 1".into());
                }
                if first && bit_at(data, 0, width) != 0 {
                    return Ok(false);
                }
                if width == 1 {
                    // rows are long: most bytes are all "continue" (0xff); skip them whole
                    for (k, &byte) in data.iter().enumerate() {
                        if byte == 0xff {
                            continue;
                        }
                        let mut zeros = !byte;
                        while zeros != 0 {
                            let bit = zeros.trailing_zeros() as usize;
                            zeros &= zeros - 1;
                            let j = k * 8 + bit;
                            if j < count {
                                offsets.push(at(i + j));
                            }
                        }
                    }
                } else {
                    for j in 0..count {
                        if bit_at(data, j * width as usize, width) == 0 {
                            offsets.push(at(i + j));
                        }
                    }
                }
                i += count;
            }
        }
        first = false;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_starts_from_packed_and_repeated_runs() {
        // 16 values bit-packed (2 groups): rows start at 0, 3 and 9
        let bits: u16 = !((1 << 0) | (1 << 3) | (1 << 9));
        let mut buf = vec![(2 << 1) | 1];
        buf.extend_from_slice(&bits.to_le_bytes());
        // then an RLE run of 4 zeros (4 one-value rows)
        buf.extend_from_slice(&[4 << 1, 0]);
        let mut out = vec![];
        assert_eq!(row_starts(&buf, 1, 20, 100, &mut out), Ok(true));
        assert_eq!(out, vec![100, 103, 109, 116, 117, 118, 119]);
    }

    #[test]
    fn a_page_continuing_a_row_is_refused() {
        let buf = [(1 << 1) | 1, 0xffu8]; // first value continues a row
        let mut out = vec![];
        assert_eq!(row_starts(&buf, 1, 8, 0, &mut out), Ok(false));
    }

    #[test]
    fn definition_levels_all_present_or_not() {
        assert_eq!(present_levels(&[10 << 1, 3], 2, 10, 3), Ok(10));
        assert_eq!(present_levels(&[10 << 1, 1], 2, 10, 3), Ok(0));
        assert!(present_levels(&[10 << 1], 2, 10, 3).is_err()); // truncated
        assert!(present_levels(&[10 << 1, 7], 3, 10, 3).is_err()); // a level above the maximum
        assert!(present_levels(&[0, 3, 10 << 1, 3], 2, 10, 3).is_err()); // a run of length 0
    }

    #[test]
    fn truncated_levels_are_not_decoded() {
        let mut out = vec![];
        assert!(row_starts(&[(2 << 1) | 1, 0xfe], 1, 16, 0, &mut out).is_err());
        // a repeated run of level 3 where levels are 0 or 1
        assert!(row_starts(&[(4 << 1), 0, (4 << 1), 3], 1, 8, 0, &mut out).is_err());
    }
}

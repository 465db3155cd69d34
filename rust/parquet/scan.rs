//! Header-scan fallback: the page table of a column chunk for files without an
//! OffsetIndex (most files in the wild). Page headers are walked once; for repeated
//! columns the repetition levels are decoded to find where rows start, because a v1
//! page's header counts level values, not rows.

use std::path::Path;
use std::sync::Arc;

use parquet::column::page::{Page, PageReader};
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::serialized_reader::SerializedPageReader;

use crate::error::{Error, Result};
use crate::parquet::levels::{RowStarts, bit_width, scan_bit_packed, scan_rle_hybrid};
use crate::parquet::thrift::{PageType, ThriftError, parse_page_header};
use crate::storage::Fetched;

/// One data page found by the scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedPage {
    /// Offset of the page header in the file.
    pub offset: u64,
    /// Header + body, in bytes.
    pub total_len: u32,
    /// Rows starting in this page.
    pub rows: u64,
    /// First value of the page starts a row.
    pub starts_on_boundary: bool,
}

#[derive(Debug, Clone, Default)]
pub struct ScannedChunk {
    pub pages: Vec<ScannedPage>,
}

const FIRST_HEADER_READ: usize = 256;

/// Walk the page headers of one column chunk.
pub fn scan_chunk(
    path: &Path,
    file: &Fetched,
    file_len: u64,
    col: &ColumnChunkMetaData,
    max_rep_level: i16,
    ctx: &str,
) -> Result<ScannedChunk> {
    let (start, len) = col.byte_range();
    let end = start.checked_add(len).filter(|&e| e <= file_len).ok_or_else(|| {
        Error::corrupt(path, format!("{ctx}: column chunk [{start}, +{len}) lies outside the file ({file_len} bytes)"))
    })?;
    let mut pos = start;
    let mut pages = Vec::new();
    let mut headers = Vec::new();
    while pos < end {
        let remaining = end - pos;
        let (header, header_len) = read_header(path, file, pos, remaining, ctx)?;
        let body = header.compressed_size as u64;
        let total = header_len as u64 + body;
        if total > remaining {
            return Err(Error::corrupt(
                path,
                format!(
                    "{ctx}: page at offset {pos} claims {body} bytes but only {} remain in its column chunk",
                    remaining - header_len as u64
                ),
            ));
        }
        match header.page_type {
            PageType::Data | PageType::DataV2 => {
                let total_len = u32::try_from(total)
                    .map_err(|_| Error::corrupt(path, format!("{ctx}: page at offset {pos} larger than 4 GiB")))?;
                pages.push(ScannedPage { offset: pos, total_len, rows: 0, starts_on_boundary: true });
                headers.push((header, header_len));
            }
            PageType::Dictionary | PageType::Index => {}
            PageType::Unknown(t) => {
                return Err(Error::corrupt(path, format!("{ctx}: unknown page type {t} at offset {pos}")));
            }
        }
        pos += total;
    }

    if max_rep_level == 0 {
        for (p, (h, _)) in pages.iter_mut().zip(&headers) {
            p.rows = h.num_rows.map(|r| r as u64).unwrap_or(h.num_values as u64);
        }
        return Ok(ScannedChunk { pages });
    }

    let width = bit_width(max_rep_level);
    let all_v2 = headers.iter().all(|(h, _)| h.page_type == PageType::DataV2);
    if all_v2 {
        // v2 repetition levels sit uncompressed right after the header: read just them.
        for (p, (h, hl)) in pages.iter_mut().zip(&headers) {
            let rep_len = h.rep_levels_byte_len.unwrap_or(0).max(0) as usize;
            let levels = file.read_range(p.offset + *hl as u64, rep_len).map_err(|e| e.context(ctx))?;
            let rs = scan_rle_hybrid(&levels, width, h.num_values as usize)
                .map_err(|e| Error::corrupt(path, format!("{ctx}: page at offset {}: {e}", p.offset)))?;
            apply(p, rs);
        }
        return Ok(ScannedChunk { pages });
    }

    // v1 (or mixed) pages compress levels with values: let the parquet crate
    // decompress each page, walking the chunk in the same order as our scan.
    let total_rows = usize::MAX; // unused in Values mode
    let mut reader = SerializedPageReader::new(Arc::new(file.clone()), col, total_rows, None)
        .map_err(|e| Error::from_parquet(path, ctx, e))?;
    let mut i = 0usize;
    while let Some(page) = reader.get_next_page().map_err(|e| Error::from_parquet(path, ctx, e))? {
        let rs = match &page {
            Page::DictionaryPage { .. } => continue,
            Page::DataPage { buf, num_values, rep_level_encoding, .. } => {
                let n = *num_values as usize;
                match rep_level_encoding {
                    parquet::basic::Encoding::RLE => {
                        let len_bytes: [u8; 4] = buf.get(..4).and_then(|b| b.try_into().ok()).ok_or_else(|| {
                            Error::corrupt(path, format!("{ctx}: data page {i} too short for its levels"))
                        })?;
                        let l = u32::from_le_bytes(len_bytes) as usize;
                        let lv = buf.get(4..4 + l).ok_or_else(|| {
                            Error::corrupt(path, format!("{ctx}: data page {i}: repetition levels run past the page"))
                        })?;
                        scan_rle_hybrid(lv, width, n)
                    }
                    #[allow(deprecated)]
                    parquet::basic::Encoding::BIT_PACKED => scan_bit_packed(buf, width, n),
                    other => Err(format!("unsupported repetition level encoding {other:?}")),
                }
            }
            Page::DataPageV2 { buf, num_values, rep_levels_byte_len, .. } => {
                let lv = buf.get(..*rep_levels_byte_len as usize).ok_or_else(|| {
                    Error::corrupt(path, format!("{ctx}: data page {i}: repetition levels run past the page"))
                })?;
                scan_rle_hybrid(lv, width, *num_values as usize)
            }
        }
        .map_err(|e| Error::corrupt(path, format!("{ctx}: data page {i}: {e}")))?;
        let p = pages
            .get_mut(i)
            .ok_or_else(|| Error::corrupt(path, format!("{ctx}: more data pages decoded than page headers found")))?;
        apply(p, rs);
        i += 1;
    }
    if i != pages.len() {
        return Err(Error::corrupt(path, format!("{ctx}: found {} page headers but decoded {i} pages", pages.len())));
    }
    Ok(ScannedChunk { pages })
}

fn apply(p: &mut ScannedPage, rs: RowStarts) {
    p.rows = rs.rows;
    p.starts_on_boundary = rs.starts_on_boundary;
}

fn read_header(
    path: &Path,
    file: &Fetched,
    pos: u64,
    remaining: u64,
    ctx: &str,
) -> Result<(crate::parquet::thrift::PageHeader, usize)> {
    let mut want = FIRST_HEADER_READ;
    loop {
        let n = (want as u64).min(remaining) as usize;
        let buf = file.read_range(pos, n).map_err(|e| e.context(ctx))?;
        match parse_page_header(&buf) {
            Ok(h) => return Ok(h),
            Err(ThriftError::NeedMore) if (n as u64) < remaining && want < (64 << 20) => want *= 8,
            Err(ThriftError::NeedMore) => {
                return Err(Error::corrupt(path, format!("{ctx}: page header at offset {pos} is truncated")));
            }
            Err(ThriftError::Invalid(msg)) => {
                return Err(Error::corrupt(path, format!("{ctx}: invalid page header at offset {pos}: {msg}")));
            }
        }
    }
}

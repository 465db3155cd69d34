//! Counting record starts in repetition levels.
//!
//! A row starts wherever the repetition level is 0. For files without an OffsetIndex
//! we need, per page, how many rows start in it and whether its first value starts a
//! row (otherwise the page continues its predecessor's last row and cannot start an index page
//! on its own). This decodes just enough of the level encodings to answer that.

use crate::parquet::varint::{VarintError, uleb128};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowStarts {
    /// Number of level values equal to 0 (rows starting in this page).
    pub rows: u64,
    /// Whether the first level is 0 (the page starts on a record boundary).
    pub starts_on_boundary: bool,
}

pub fn bit_width(max_level: i16) -> u8 {
    if max_level <= 0 { 0 } else { (16 - (max_level as u16).leading_zeros()) as u8 }
}

fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, String> {
    uleb128(buf, pos).map_err(|e| match e {
        VarintError::End => "level data ends inside a run header".into(),
        VarintError::TooLong => "level run header varint too long".into(),
    })
}

/// Scan RLE / bit-packed-hybrid levels (no length prefix) for `num_values` values.
pub fn scan_rle_hybrid(buf: &[u8], width: u8, num_values: usize) -> Result<RowStarts, String> {
    if width > 16 {
        return Err(format!("level bit width {width} is impossible"));
    }
    if width == 0 {
        // every level is 0
        return Ok(RowStarts { rows: num_values as u64, starts_on_boundary: num_values > 0 });
    }
    let mut pos = 0usize;
    let mut seen = 0usize;
    let mut zeros = 0u64;
    let mut first_zero = None;
    let vbytes = (width as usize).div_ceil(8);
    while seen < num_values {
        let header = varint(buf, &mut pos)?;
        if header & 1 == 1 {
            let groups = (header >> 1) as usize;
            let nbytes = groups.checked_mul(width as usize).ok_or("bit-packed run too long")?;
            let data = buf
                .get(pos..pos.checked_add(nbytes).ok_or("bit-packed run too long")?)
                .ok_or("bit-packed run runs past the level data")?;
            pos += nbytes;
            let n = (groups * 8).min(num_values - seen);
            for i in 0..n {
                let v = read_lsb(data, i * width as usize, width);
                if first_zero.is_none() {
                    first_zero = Some(v == 0);
                }
                if v == 0 {
                    zeros += 1;
                }
            }
            seen += n;
            if groups == 0 {
                return Err("empty bit-packed run".into());
            }
        } else {
            let count = (header >> 1) as usize;
            if count == 0 {
                return Err("empty RLE run".into());
            }
            let vb = buf.get(pos..pos + vbytes).ok_or("RLE run value runs past the level data")?;
            pos += vbytes;
            let mut v = 0u64;
            for (i, b) in vb.iter().enumerate() {
                v |= (*b as u64) << (8 * i);
            }
            let n = count.min(num_values - seen);
            if first_zero.is_none() {
                first_zero = Some(v == 0);
            }
            if v == 0 {
                zeros += n as u64;
            }
            seen += n;
        }
    }
    Ok(RowStarts { rows: zeros, starts_on_boundary: first_zero.unwrap_or(false) })
}

/// Scan the deprecated BIT_PACKED level encoding (MSB-first, no runs).
pub fn scan_bit_packed(buf: &[u8], width: u8, num_values: usize) -> Result<RowStarts, String> {
    if width == 0 {
        return Ok(RowStarts { rows: num_values as u64, starts_on_boundary: num_values > 0 });
    }
    let need = (num_values * width as usize).div_ceil(8);
    if buf.len() < need {
        return Err("BIT_PACKED levels run past the page".into());
    }
    let mut zeros = 0u64;
    let mut first = false;
    for i in 0..num_values {
        let mut v = 0u32;
        for b in 0..width as usize {
            let bit = i * width as usize + b;
            let byte = buf[bit / 8];
            v = (v << 1) | ((byte >> (7 - bit % 8)) & 1) as u32;
        }
        if i == 0 {
            first = v == 0;
        }
        if v == 0 {
            zeros += 1;
        }
    }
    Ok(RowStarts { rows: zeros, starts_on_boundary: first })
}

/// What a page's levels hold, counted while checking them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LevelCounts {
    /// Levels equal to the column's maximum (for definition levels: values present).
    pub at_max: usize,
    /// Levels equal to 0 (for repetition levels: rows starting).
    pub zeros: usize,
    /// Whether the first level is 0.
    pub first_zero: bool,
}

/// Count RLE / bit-packed-hybrid levels (no length prefix): exactly `num_values` of
/// them, each at most `max`. `Err` if they end early, hold a run of length 0 or a level
/// above `max` (pyarrow: "Malformed levels", "Number of decoded rep / def levels do not
/// match num_values in page header").
pub fn count_levels(buf: &[u8], width: u8, num_values: usize, max: u64) -> Result<LevelCounts, String> {
    if width > 16 {
        return Err(format!("level bit width {width} is impossible"));
    }
    let mut c = LevelCounts { first_zero: num_values > 0, ..Default::default() };
    if width == 0 {
        c.zeros = num_values;
        c.at_max = if max == 0 { num_values } else { 0 };
        return Ok(c);
    }
    let short = || format!("they end before the page header's {num_values} values");
    let mut pos = 0usize;
    let mut seen = 0usize;
    let vbytes = (width as usize).div_ceil(8);
    while seen < num_values {
        let header = varint(buf, &mut pos).map_err(|_| short())?;
        let (at_max, zeros, first, n) = if header & 1 == 1 {
            let groups = usize::try_from(header >> 1).map_err(|_| "bit-packed run too long")?;
            let nbytes = groups.checked_mul(width as usize).ok_or("bit-packed run too long")?;
            let data = pos.checked_add(nbytes).and_then(|end| buf.get(pos..end)).ok_or_else(short)?;
            pos += nbytes;
            let n = groups.saturating_mul(8).min(num_values - seen);
            if n == 0 {
                return Err("a bit-packed run of length 0".into());
            }
            packed_counts(data, width, n, max)?
        } else {
            let n = usize::try_from(header >> 1).unwrap_or(usize::MAX).min(num_values - seen);
            if n == 0 {
                return Err("a run of length 0".into());
            }
            let vb = pos.checked_add(vbytes).and_then(|end| buf.get(pos..end)).ok_or_else(short)?;
            pos += vbytes;
            let v = vb.iter().enumerate().fold(0u64, |v, (i, b)| v | (*b as u64) << (8 * i));
            if v > max {
                return Err(format!("level {v} above the column's maximum {max}"));
            }
            (if v == max { n } else { 0 }, if v == 0 { n } else { 0 }, v == 0, n)
        };
        if seen == 0 {
            c.first_zero = first;
        }
        c.at_max += at_max;
        c.zeros += zeros;
        seen += n;
    }
    Ok(c)
}

/// Decode `num_values` RLE / bit-packed-hybrid levels into `out` (after
/// [`count_levels`] accepted them: runs that end early stop the decode).
pub fn decode_levels(buf: &[u8], width: u8, num_values: usize, out: &mut Vec<u16>) {
    out.clear();
    if width == 0 || width > 16 {
        out.resize(num_values, 0);
        return;
    }
    let mut pos = 0usize;
    let vbytes = (width as usize).div_ceil(8);
    while out.len() < num_values {
        let Ok(header) = varint(buf, &mut pos) else { return };
        let left = num_values - out.len();
        if header & 1 == 1 {
            let groups = usize::try_from(header >> 1).unwrap_or(usize::MAX);
            let nbytes = groups.saturating_mul(width as usize);
            let Some(data) = pos.checked_add(nbytes).and_then(|end| buf.get(pos..end)) else { return };
            pos += nbytes;
            let n = groups.saturating_mul(8).min(left);
            out.extend((0..n).map(|i| read_lsb(data, i * width as usize, width) as u16));
        } else {
            let n = usize::try_from(header >> 1).unwrap_or(usize::MAX).min(left);
            let Some(vb) = pos.checked_add(vbytes).and_then(|end| buf.get(pos..end)) else { return };
            pos += vbytes;
            let v = vb.iter().enumerate().fold(0u64, |v, (i, b)| v | (*b as u64) << (8 * i));
            out.extend(std::iter::repeat_n(v as u16, n));
        }
        if out.len() == num_values - left {
            return; // a run of length 0
        }
    }
}

/// (levels at `max`, zeros, first is zero, n) of the first `n` values of a bit-packed run.
fn packed_counts(data: &[u8], width: u8, n: usize, max: u64) -> Result<(usize, usize, bool, usize), String> {
    if width == 1 {
        // one bit a level: count whole bytes, then the last one's bits
        let (full, rest) = (n / 8, n % 8);
        let mut ones = data[..full].iter().map(|b| b.count_ones() as usize).sum::<usize>();
        if rest > 0 {
            ones += (data[full] & ((1u8 << rest) - 1)).count_ones() as usize;
        }
        let at_max = if max == 1 { ones } else { 0 };
        return Ok((at_max, n - ones, data[0] & 1 == 0, n));
    }
    let (mut at_max, mut zeros) = (0, 0);
    for i in 0..n {
        let v = read_lsb(data, i * width as usize, width);
        if v > max {
            return Err(format!("level {v} above the column's maximum {max}"));
        }
        at_max += usize::from(v == max);
        zeros += usize::from(v == 0);
    }
    Ok((at_max, zeros, read_lsb(data, 0, width) == 0, n))
}

fn read_lsb(data: &[u8], bit: usize, width: u8) -> u64 {
    let mut v = 0u64;
    for b in 0..width as usize {
        let p = bit + b;
        v |= (((data[p / 8] >> (p % 8)) & 1) as u64) << b;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rle_run_of_zeros_then_ones() {
        // RLE: 3 zeros, then RLE: 2 ones (width 1 -> 1 value byte)
        let buf = [3 << 1, 0, 2 << 1, 1];
        let r = scan_rle_hybrid(&buf, 1, 5).unwrap();
        assert_eq!(r, RowStarts { rows: 3, starts_on_boundary: true });
    }

    #[test]
    fn bit_packed_run_lsb_first() {
        // one group of 8 values, width 1: bits 0b0000_0110 -> values 0,1,1,0,0,0,0,0
        let buf = [(1 << 1) | 1, 0b0000_0110];
        let r = scan_rle_hybrid(&buf, 1, 8).unwrap();
        assert_eq!(r, RowStarts { rows: 6, starts_on_boundary: true });
        // only the first 3 values belong to the page
        let r = scan_rle_hybrid(&buf, 1, 3).unwrap();
        assert_eq!(r, RowStarts { rows: 1, starts_on_boundary: true });
    }

    #[test]
    fn page_continuing_a_record() {
        let buf = [2 << 1, 1, 1 << 1, 0];
        let r = scan_rle_hybrid(&buf, 1, 3).unwrap();
        assert_eq!(r, RowStarts { rows: 1, starts_on_boundary: false });
    }

    #[test]
    fn deprecated_bit_packed_is_msb_first() {
        // width 1, values 1,0,0,1 -> 0b1001_0000
        let r = scan_bit_packed(&[0b1001_0000], 1, 4).unwrap();
        assert_eq!(r, RowStarts { rows: 2, starts_on_boundary: false });
    }

    #[test]
    fn truncated_levels_are_errors() {
        assert!(scan_rle_hybrid(&[(4 << 1) | 1, 0], 2, 32).is_err());
        assert!(scan_rle_hybrid(&[], 1, 1).is_err());
    }

    #[test]
    fn a_run_header_wider_than_64_bits_is_an_error_not_truncated() {
        // read modulo 2^64 it would be a valid RLE run of one 0 (one row)
        let header = [0x82, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7e];
        let e = scan_rle_hybrid(&[header.as_slice(), &[0]].concat(), 1, 1).unwrap_err();
        assert!(e.contains("too long"), "{e}");
    }

    #[test]
    fn level_counts_check_every_level() {
        // RLE: 3 zeros; bit-packed (1 group, width 1): 0,1,1,0,1,1,1,1 of which 5 (0,1,1,0,1) are used
        let buf = [3 << 1, 0, (1 << 1) | 1, 0b1111_0110];
        let c = count_levels(&buf, 1, 8, 1).unwrap();
        assert_eq!(c, LevelCounts { at_max: 3, zeros: 5, first_zero: true });
        // truncated, a level above the maximum, a run of length 0
        assert!(count_levels(&buf, 1, 12, 1).is_err());
        assert!(count_levels(&[3 << 1, 3], 2, 3, 2).is_err());
        assert!(count_levels(&[(1 << 1) | 1, 0b0000_0111, 0, 0], 3, 8, 4).is_err());
        assert!(count_levels(&[0, 1, 3 << 1, 1], 1, 3, 1).is_err());
        // width 2 bit-packed: 2,1,0,2 then 4 padding values past the count
        let c = count_levels(&[(1 << 1) | 1, 0b1000_0110, 0xff], 2, 4, 2).unwrap();
        assert_eq!(c, LevelCounts { at_max: 2, zeros: 1, first_zero: false });
    }

    #[test]
    fn widths() {
        assert_eq!(bit_width(0), 0);
        assert_eq!(bit_width(1), 1);
        assert_eq!(bit_width(2), 2);
        assert_eq!(bit_width(3), 2);
        assert_eq!(bit_width(4), 3);
    }
}

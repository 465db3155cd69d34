//! A minimal Thrift compact-protocol reader for Parquet `PageHeader`s.
//!
//! The parquet crate's own page-header type is crate-private, and the header-scan
//! fallback (files without an OffsetIndex) needs page offsets, sizes and row counts
//! without decompressing pages. This reads exactly the fields we need, skips the rest,
//! and bounds every length and nesting depth so corrupt bytes produce an error.

use crate::parquet::varint::{VarintError, uleb128};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageType {
    Data,
    Index,
    Dictionary,
    DataV2,
    Unknown(i32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageHeader {
    pub page_type: PageType,
    pub uncompressed_size: i32,
    pub compressed_size: i32,
    /// Number of level values (v1 and v2) or dictionary entries.
    pub num_values: i32,
    /// v2 only: number of rows in the page.
    pub num_rows: Option<i32>,
    /// v2 only: byte length of the (uncompressed) repetition levels at the page start.
    pub rep_levels_byte_len: Option<i32>,
    /// v1 only: encoding of the repetition levels (3 = RLE, 4 = BIT_PACKED).
    pub rep_level_encoding: Option<i32>,
    /// v1 only: encoding of the definition levels.
    pub def_level_encoding: Option<i32>,
    /// Data pages: encoding of the values (0 = PLAIN).
    pub encoding: Option<i32>,
    /// v2 only: byte length of the (uncompressed) definition levels after the repetition levels.
    pub def_levels_byte_len: Option<i32>,
    /// v2 only: number of nulls.
    pub num_nulls: Option<i32>,
    /// v2 only: whether the values section is compressed (default true).
    pub is_compressed: Option<bool>,
    /// CRC32 of the page body as written (after the header), if the writer stored one.
    pub crc: Option<u32>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum ThriftError {
    /// The buffer ended before the header did: read more bytes and retry.
    NeedMore,
    Invalid(String),
}

const MAX_DEPTH: u32 = 32;
/// Statistics can hold min/max values; anything larger than this is not a real header.
const MAX_BINARY: u64 = 64 << 20;

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn byte(&mut self) -> Result<u8, ThriftError> {
        let b = *self.buf.get(self.pos).ok_or(ThriftError::NeedMore)?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, ThriftError> {
        uleb128(self.buf, &mut self.pos).map_err(|e| match e {
            VarintError::End => ThriftError::NeedMore,
            VarintError::TooLong => ThriftError::Invalid("varint longer than 64 bits".into()),
        })
    }

    fn zigzag(&mut self) -> Result<i64, ThriftError> {
        let v = self.varint()?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    fn i32(&mut self) -> Result<i32, ThriftError> {
        let v = self.zigzag()?;
        i32::try_from(v).map_err(|_| ThriftError::Invalid(format!("i32 field out of range: {v}")))
    }

    fn skip_bytes(&mut self, n: u64) -> Result<(), ThriftError> {
        if n > MAX_BINARY {
            return Err(ThriftError::Invalid(format!("binary field of {n} bytes")));
        }
        let end = self.pos.checked_add(n as usize).ok_or(ThriftError::NeedMore)?;
        if end > self.buf.len() {
            return Err(ThriftError::NeedMore);
        }
        self.pos = end;
        Ok(())
    }

    fn skip(&mut self, ty: u8, depth: u32) -> Result<(), ThriftError> {
        if depth > MAX_DEPTH {
            return Err(ThriftError::Invalid("thrift nesting too deep".into()));
        }
        match ty {
            1 | 2 => Ok(()),
            3 => self.byte().map(|_| ()),
            4..=6 => self.varint().map(|_| ()),
            7 => self.skip_bytes(8),
            8 => {
                let n = self.varint()?;
                self.skip_bytes(n)
            }
            9 | 10 => {
                let h = self.byte()?;
                let elem = h & 0x0f;
                let mut n = (h >> 4) as u64;
                if n == 15 {
                    n = self.varint()?;
                }
                self.check_count(n)?;
                for _ in 0..n {
                    // booleans inside containers take one byte each
                    if elem == 1 || elem == 2 {
                        self.byte()?;
                    } else {
                        self.skip(elem, depth + 1)?;
                    }
                }
                Ok(())
            }
            11 => {
                let n = self.varint()?;
                self.check_count(n)?;
                if n == 0 {
                    return Ok(());
                }
                let kv = self.byte()?;
                for _ in 0..n {
                    self.skip(kv >> 4, depth + 1)?;
                    self.skip(kv & 0x0f, depth + 1)?;
                }
                Ok(())
            }
            12 => self.skip_struct(depth + 1),
            other => Err(ThriftError::Invalid(format!("unknown thrift type {other}"))),
        }
    }

    fn check_count(&self, n: u64) -> Result<(), ThriftError> {
        // every element takes at least one byte
        if n > (self.buf.len() - self.pos) as u64 { Err(ThriftError::NeedMore) } else { Ok(()) }
    }

    fn skip_struct(&mut self, depth: u32) -> Result<(), ThriftError> {
        let mut last = 0i16;
        while let Some((id, ty)) = self.field(&mut last)? {
            let _ = id;
            self.skip(ty, depth)?;
        }
        Ok(())
    }

    /// Next field header of a struct: None at STOP.
    fn field(&mut self, last: &mut i16) -> Result<Option<(i16, u8)>, ThriftError> {
        let b = self.byte()?;
        if b == 0 {
            return Ok(None);
        }
        let ty = b & 0x0f;
        let delta = (b >> 4) as i16;
        let id = if delta == 0 {
            let v = self.zigzag()?;
            i16::try_from(v).map_err(|_| ThriftError::Invalid("field id out of range".into()))?
        } else {
            last.checked_add(delta).ok_or_else(|| ThriftError::Invalid("field id overflow".into()))?
        };
        *last = id;
        Ok(Some((id, ty)))
    }

    fn bool_field(&mut self, ty: u8) -> Result<bool, ThriftError> {
        match ty {
            1 => Ok(true),
            2 => Ok(false),
            _ => Err(ThriftError::Invalid(format!("expected bool, got type {ty}"))),
        }
    }
}

fn expect(ty: u8, want: u8, what: &str) -> Result<(), ThriftError> {
    if ty == want { Ok(()) } else { Err(ThriftError::Invalid(format!("{what}: thrift type {ty}, expected {want}"))) }
}

/// Parse a page header at the start of `buf`; returns the header and its length in bytes.
/// Walk one Thrift compact-protocol struct at the start of `buf` without building it,
/// returning its length. Every container count must fit in the bytes left and every
/// binary in [`MAX_BINARY`], so a flipped count is an error here instead of a
/// multi-gigabyte allocation in a decoder that trusts it.
pub fn check_struct(buf: &[u8]) -> Result<usize, ThriftError> {
    let mut c = Cursor { buf, pos: 0 };
    c.skip_struct(0)?;
    Ok(c.pos)
}

pub fn parse_page_header(buf: &[u8]) -> Result<(PageHeader, usize), ThriftError> {
    let mut c = Cursor { buf, pos: 0 };
    let mut h = PageHeader {
        page_type: PageType::Unknown(-1),
        uncompressed_size: -1,
        compressed_size: -1,
        num_values: 0,
        num_rows: None,
        rep_levels_byte_len: None,
        rep_level_encoding: None,
        def_level_encoding: None,
        encoding: None,
        def_levels_byte_len: None,
        num_nulls: None,
        is_compressed: None,
        crc: None,
    };
    let (mut seen_type, mut seen_u, mut seen_c) = (false, false, false);
    let mut last = 0i16;
    while let Some((id, ty)) = c.field(&mut last)? {
        match id {
            1 => {
                expect(ty, 5, "page type")?;
                h.page_type = match c.i32()? {
                    0 => PageType::Data,
                    1 => PageType::Index,
                    2 => PageType::Dictionary,
                    3 => PageType::DataV2,
                    other => PageType::Unknown(other),
                };
                seen_type = true;
            }
            2 => {
                expect(ty, 5, "uncompressed_page_size")?;
                h.uncompressed_size = c.i32()?;
                seen_u = true;
            }
            3 => {
                expect(ty, 5, "compressed_page_size")?;
                h.compressed_size = c.i32()?;
                seen_c = true;
            }
            4 => {
                expect(ty, 5, "crc")?;
                // an i32 in Thrift, the 32 bits of the CRC
                h.crc = Some(c.i32()? as u32);
            }
            5 => {
                expect(ty, 12, "data_page_header")?;
                let mut l = 0i16;
                while let Some((fid, fty)) = c.field(&mut l)? {
                    match (fid, fty) {
                        (1, 5) => h.num_values = c.i32()?,
                        (2, 5) => h.encoding = Some(c.i32()?),
                        (3, 5) => h.def_level_encoding = Some(c.i32()?),
                        (4, 5) => h.rep_level_encoding = Some(c.i32()?),
                        _ => c.skip(fty, 1)?,
                    }
                }
            }
            7 => {
                expect(ty, 12, "dictionary_page_header")?;
                let mut l = 0i16;
                while let Some((fid, fty)) = c.field(&mut l)? {
                    match (fid, fty) {
                        (1, 5) => h.num_values = c.i32()?,
                        _ => c.skip(fty, 1)?,
                    }
                }
            }
            8 => {
                expect(ty, 12, "data_page_header_v2")?;
                let mut l = 0i16;
                while let Some((fid, fty)) = c.field(&mut l)? {
                    match (fid, fty) {
                        (1, 5) => h.num_values = c.i32()?,
                        (2, 5) => h.num_nulls = Some(c.i32()?),
                        (3, 5) => h.num_rows = Some(c.i32()?),
                        (4, 5) => h.encoding = Some(c.i32()?),
                        (5, 5) => h.def_levels_byte_len = Some(c.i32()?),
                        (6, 5) => h.rep_levels_byte_len = Some(c.i32()?),
                        (7, 1 | 2) => h.is_compressed = Some(c.bool_field(fty)?),
                        _ => c.skip(fty, 1)?,
                    }
                }
            }
            _ => c.skip(ty, 0)?,
        }
    }
    if !(seen_type && seen_u && seen_c) {
        return Err(ThriftError::Invalid("page header lacks type or sizes".into()));
    }
    if h.compressed_size < 0 || h.uncompressed_size < 0 || h.num_values < 0 {
        return Err(ThriftError::Invalid(format!(
            "negative size in page header (compressed {}, uncompressed {}, values {})",
            h.compressed_size, h.uncompressed_size, h.num_values
        )));
    }
    if let Some(r) = h.num_rows
        && r < 0
    {
        return Err(ThriftError::Invalid(format!("negative num_rows {r} in page header")));
    }
    Ok((h, c.pos))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zz(v: i64) -> Vec<u8> {
        let mut u = ((v << 1) ^ (v >> 63)) as u64;
        let mut out = vec![];
        loop {
            let b = (u & 0x7f) as u8;
            u >>= 7;
            if u == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    /// type=DATA_PAGE_V2, sizes, v2 header with num_values/num_rows/rep len/is_compressed.
    fn v2_header() -> Vec<u8> {
        let mut b = vec![0x15];
        b.extend(zz(3));
        b.push(0x15);
        b.extend(zz(100));
        b.push(0x15);
        b.extend(zz(60));
        b.push(0x5c); // field 8 (delta 5 from 3), struct
        b.push(0x15);
        b.extend(zz(10)); // num_values
        b.push(0x15);
        b.extend(zz(1)); // num_nulls
        b.push(0x15);
        b.extend(zz(4)); // num_rows
        b.push(0x15);
        b.extend(zz(0)); // encoding
        b.push(0x15);
        b.extend(zz(2)); // def len
        b.push(0x15);
        b.extend(zz(3)); // rep len
        b.push(0x12); // is_compressed false
        b.push(0x00); // end v2 struct
        b.push(0x00); // end header
        b
    }

    #[test]
    fn parses_v2_header() {
        let b = v2_header();
        let (h, n) = parse_page_header(&b).unwrap();
        assert_eq!(n, b.len());
        assert_eq!(h.page_type, PageType::DataV2);
        assert_eq!((h.uncompressed_size, h.compressed_size), (100, 60));
        assert_eq!((h.num_values, h.num_rows, h.rep_levels_byte_len), (10, Some(4), Some(3)));
    }

    #[test]
    fn a_list_count_larger_than_the_bytes_left_is_refused() {
        // struct { 1: list<i32> with 2^31-1 elements } followed by 3 bytes
        let b = [0x19, 0xf5, 0xff, 0xff, 0xff, 0xff, 0x07, 1, 2, 3];
        assert!(check_struct(&b).is_err());
        // the same list with 3 elements is fine
        let ok = [0x19, 0x35, 2, 4, 6, 0x00];
        assert_eq!(check_struct(&ok), Ok(ok.len()));
    }

    #[test]
    fn truncated_header_asks_for_more() {
        let b = v2_header();
        for cut in 0..b.len() {
            assert_eq!(parse_page_header(&b[..cut]), Err(ThriftError::NeedMore), "cut at {cut}");
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut state = 0x9e3779b97f4a7c15u64;
        for _ in 0..20_000 {
            let mut buf = vec![0u8; 64];
            for x in buf.iter_mut() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *x = state as u8;
            }
            let _ = parse_page_header(&buf);
        }
    }
}

//! ULEB128 varints: the one encoding behind Thrift compact-protocol integers (page
//! headers) and the run headers of Parquet's RLE / bit-packed hybrid (levels,
//! dictionary indices). One reader with one limit, so the decoders and the checks
//! that vouch for them agree on which bytes are a header.

/// Why a varint could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum VarintError {
    /// The bytes end inside the varint (a caller with more to fetch may retry).
    End,
    /// Longer than 10 bytes, or a 10th byte that does not fit 64 bits.
    TooLong,
}

/// The varint at `buf[*pos..]`, advancing `pos` past it: 7 bits a byte, least
/// significant first, a set high bit meaning more follow; at most 10 bytes, whose value
/// fits a `u64` (a wider one is an error, not silently truncated).
pub fn uleb128(buf: &[u8], pos: &mut usize) -> Result<u64, VarintError> {
    let mut out = 0u64;
    for shift in (0..70).step_by(7) {
        let b = *buf.get(*pos).ok_or(VarintError::End)?;
        *pos += 1;
        if shift == 63 && b > 1 {
            return Err(VarintError::TooLong);
        }
        out |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Ok(out);
        }
    }
    Err(VarintError::TooLong)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8]) -> Result<(u64, usize), VarintError> {
        let mut pos = 0;
        uleb128(bytes, &mut pos).map(|v| (v, pos))
    }

    #[test]
    fn reads_the_values_parquet_writes() {
        assert_eq!(read(&[0x00]), Ok((0, 1)));
        assert_eq!(read(&[0x7f, 0xff]), Ok((127, 1)));
        assert_eq!(read(&[0x80, 0x01]), Ok((128, 2)));
        assert_eq!(read(&[0xe5, 0x8e, 0x26]), Ok((624_485, 3)));
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(read(&max), Ok((u64::MAX, 10)));
    }

    #[test]
    fn an_end_inside_is_told_from_a_varint_too_wide() {
        assert_eq!(read(&[]), Err(VarintError::End));
        assert_eq!(read(&[0x80, 0x80]), Err(VarintError::End));
        let wide = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert_eq!(read(&wide), Err(VarintError::TooLong));
        assert_eq!(read(&[0x80; 11]), Err(VarintError::TooLong));
    }
}

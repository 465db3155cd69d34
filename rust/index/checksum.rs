//! The checksum trailer of saved indexes: the payload, then its CRC32 (little endian)
//! and the 8 bytes `YOUMUCRC`. A CRC32 detects every error of up to 3 flipped bits in
//! payloads this size (and every burst up to 32 bits), and any other damage with
//! probability 1 - 2^-32: a flipped byte in a page table would otherwise load and read
//! other rows than the index promises. `crc32fast` is the CRC the parquet crate uses for
//! page checksums (hardware-accelerated, several GB/s).

const TRAILER_MAGIC: &[u8; 8] = b"YOUMUCRC";
pub const TRAILER_LEN: usize = 12;

/// `payload` with its trailer appended.
pub fn seal(mut payload: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast::hash(&payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    payload.extend_from_slice(TRAILER_MAGIC);
    payload
}

/// The payload of sealed bytes, or why they are not intact.
pub fn unseal(bytes: &[u8]) -> Result<&[u8], String> {
    let Some(split) = bytes.len().checked_sub(TRAILER_LEN) else {
        return Err(format!("{} bytes is too short to hold an index and its checksum", bytes.len()));
    };
    let (payload, trailer) = bytes.split_at(split);
    if &trailer[4..] != TRAILER_MAGIC {
        return Err("the checksum trailer is missing (truncated, or not written by this youmu)".into());
    }
    let stored = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
    let computed = crc32fast::hash(payload);
    if stored != computed {
        return Err(format!(
            "checksum mismatch (stored {stored:08x}, computed {computed:08x}): the bytes were damaged"
        ));
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_single_bit_flip_is_caught() {
        let payload: Vec<u8> = (0..300u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let sealed = seal(payload.clone());
        assert_eq!(unseal(&sealed), Ok(payload.as_slice()));
        for bit in 0..sealed.len() * 8 {
            let mut b = sealed.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(unseal(&b).is_err(), "flip of bit {bit} went unnoticed");
        }
    }

    #[test]
    fn truncation_is_caught() {
        let sealed = seal(vec![1, 2, 3]);
        for n in 0..sealed.len() {
            assert!(unseal(&sealed[..n]).is_err());
        }
    }
}

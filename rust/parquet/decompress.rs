//! Decompressing a page for the checks and the token decoder: whole, into a buffer of
//! the page's size, with one reused context per thread; or, for a zstd v1 page, only as
//! far as its leading level sections reach, by a streaming context (the page check's
//! levels without decompressing the values arrow-rs decompresses again to decode).

use parquet::basic::Compression;

use crate::parquet::pagebuf::PageBuf;
use crate::parquet::pagecheck::ENCODING_RLE;
use crate::parquet::thrift::PageHeader;

/// The decompressed page (`Ok(None)`: it was not compressed, use the input), in a
/// reused buffer ([`PageBuf`]).
pub(crate) fn decompress(codec: Compression, input: &[u8], size: usize) -> Result<Option<PageBuf>, String> {
    match codec {
        Compression::UNCOMPRESSED => Ok(None),
        Compression::ZSTD(_) => {
            let mut out = PageBuf::with_capacity(size);
            let n = zstd_decompress(input, out.vec_mut())?;
            if n != size {
                return Err(format!("decompressed to {n} bytes, the header says {size}"));
            }
            Ok(Some(out))
        }
        Compression::SNAPPY => {
            let claimed = snap::raw::decompress_len(input).map_err(|e| format!("snappy: {e}"))?;
            if claimed != size {
                return Err(format!("snappy data holds {claimed} bytes, the header says {size}"));
            }
            let mut out = PageBuf::with_capacity(size);
            out.vec_mut().resize(size, 0);
            let n = snap::raw::Decoder::new().decompress(input, out.vec_mut()).map_err(|e| format!("snappy: {e}"))?;
            if n != size {
                return Err(format!("decompressed to {n} bytes, the header says {size}"));
            }
            Ok(Some(out))
        }
        _ => Err(format!("codec {codec:?} reached the page check")),
    }
}

thread_local! {
    /// One zstd decompression context per thread, reused: creating one per page (a
    /// ~100 KB context, allocated and initialised) cost as much as decompressing a
    /// small page.
    static ZSTD: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { std::cell::RefCell::new(None) };
}

/// Decompress one zstd frame into `out`'s spare capacity with this thread's context.
fn zstd_decompress(input: &[u8], out: &mut Vec<u8>) -> Result<usize, String> {
    ZSTD.with(|cell| {
        let mut slot = cell.try_borrow_mut().map_err(|_| "zstd: context in use".to_string())?;
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new().map_err(|e| format!("zstd: {e}"))?);
        }
        let d = slot.as_mut().ok_or_else(|| "zstd: no context".to_string())?;
        let n = d.decompress_to_buffer(input, out);
        if n.is_err() {
            *slot = None; // a context left mid-frame by an error is not reused
        }
        n.map_err(|e| format!("zstd: {e}"))
    })
}

/// A zstd frame decompressed as far as asked, by a streaming context: a frame's blocks
/// are decompressed in order, so asking for its first bytes decompresses its first
/// blocks only.
struct Prefix<'a, 'd> {
    dec: &'d mut zstd::stream::raw::Decoder<'static>,
    input: &'a [u8],
    read: usize,
    out: Vec<u8>,
    filled: usize,
    /// The most bytes the frame may hold (the page header's uncompressed size).
    limit: usize,
}

impl<'a, 'd> Prefix<'a, 'd> {
    /// A frame `input` that may decompress to at most `limit` bytes, read by `dec`.
    fn new(dec: &'d mut zstd::stream::raw::Decoder<'static>, input: &'a [u8], limit: usize) -> Self {
        Prefix { dec, input, read: 0, out: Vec::new(), filled: 0, limit }
    }

    /// The bytes decompressed so far.
    fn bytes(&self) -> &[u8] {
        &self.out[..self.filled]
    }

    /// The bytes decompressed so far, owned.
    fn into_bytes(mut self) -> Vec<u8> {
        self.out.truncate(self.filled);
        self.out
    }

    /// Decompress until `n` bytes are out: `false` when `n` is past the limit or the
    /// frame ends (or its input runs out) first.
    fn ensure(&mut self, n: usize) -> Result<bool, String> {
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
        if n > self.limit {
            return Ok(false);
        }
        if self.out.len() < n {
            // a block's worth more at a time (zstd blocks are at most 128 KiB)
            self.out.resize(n.max(self.out.len() + (128 << 10)).min(self.limit), 0);
        }
        while self.filled < n {
            let input = self.input.get(self.read..).unwrap_or_default();
            let mut inb = InBuffer::around(input);
            let mut outb = OutBuffer::around_pos(&mut self.out[..], self.filled);
            let hint = self.dec.run(&mut inb, &mut outb).map_err(|e| format!("zstd: {e}"))?;
            let (read, written) = (inb.pos(), outb.pos() - self.filled);
            self.read += read;
            self.filled += written;
            if self.filled < n && (hint == 0 || read == 0 && written == 0) {
                return Ok(false); // the frame ended, or its input did
            }
        }
        Ok(true)
    }
}

thread_local! {
    /// One streaming zstd context per thread, reused ([`Prefix`]).
    static ZSTD_STREAM: std::cell::RefCell<Option<zstd::stream::raw::Decoder<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// `f` with this thread's streaming zstd context, reset for a new frame.
fn zstd_stream<T>(f: impl FnOnce(&mut zstd::stream::raw::Decoder<'static>) -> Result<T, String>) -> Result<T, String> {
    use zstd::stream::raw::Operation;
    ZSTD_STREAM.with(|cell| {
        let mut slot = cell.try_borrow_mut().map_err(|_| "zstd: context in use".to_string())?;
        if slot.is_none() {
            *slot = Some(zstd::stream::raw::Decoder::new().map_err(|e| format!("zstd: {e}"))?);
        }
        let d = slot.as_mut().ok_or_else(|| "zstd: no context".to_string())?;
        d.reinit().map_err(|e| format!("zstd: {e}"))?;
        f(d)
    })
}

/// The first decompressed bytes of a zstd-compressed v1 page, up to the end of its level
/// sections, and where in them the repetition and definition levels lie; `None` when a
/// level section is not RLE (nothing to check). Levels that run past the page's
/// `uncompressed` size (or past the frame's end) are an error, as they are when the
/// whole page is decompressed.
#[allow(clippy::type_complexity)]
pub(crate) fn v1_level_prefix(
    body: &[u8],
    uncompressed: usize,
    max_rep: i16,
    max_def: i16,
    h: &PageHeader,
) -> Result<Option<(Vec<u8>, std::ops::Range<usize>, std::ops::Range<usize>)>, String> {
    zstd_stream(|dec| {
        let mut p = Prefix::new(dec, body, uncompressed);
        let mut pos = 0usize;
        let mut section = |p: &mut Prefix<'_, '_>, max: i16, encoding: Option<i32>, what: &str| {
            if max == 0 {
                return Ok(Some(pos..pos));
            }
            if encoding != Some(ENCODING_RLE) {
                return Ok(None);
            }
            let past = || format!("{what} levels run past the page");
            if !p.ensure(pos + 4)? {
                return Err(past());
            }
            let b = p.bytes();
            let len = u32::from_le_bytes([b[pos], b[pos + 1], b[pos + 2], b[pos + 3]]) as usize;
            let end = (pos + 4).checked_add(len).ok_or_else(past)?;
            if !p.ensure(end)? {
                return Err(past());
            }
            let range = pos + 4..end;
            pos = end;
            Ok(Some(range))
        };
        let Some(rep) = section(&mut p, max_rep, h.rep_level_encoding, "repetition")? else { return Ok(None) };
        let Some(def) = section(&mut p, max_def, h.def_level_encoding, "definition")? else { return Ok(None) };
        Ok(Some((p.into_bytes(), rep, def)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parquet::pagecheck::ENCODING_PLAIN;
    use crate::parquet::thrift::PageType;

    fn v1_header(uncompressed: usize, rep: Option<i32>, def: Option<i32>) -> PageHeader {
        PageHeader {
            page_type: PageType::Data,
            uncompressed_size: uncompressed as i32,
            compressed_size: 0,
            num_values: 0,
            num_rows: None,
            rep_levels_byte_len: None,
            rep_level_encoding: rep,
            def_level_encoding: def,
            encoding: Some(ENCODING_PLAIN),
            def_levels_byte_len: None,
            num_nulls: None,
            is_compressed: None,
            crc: None,
        }
    }

    /// A v1 page body: length-prefixed repetition and definition levels, then values.
    fn v1_body(rep: &[u8], def: &[u8], values: usize) -> Vec<u8> {
        let mut body = Vec::new();
        for levels in [rep, def] {
            body.extend_from_slice(&(levels.len() as u32).to_le_bytes());
            body.extend_from_slice(levels);
        }
        body.extend((0..values).map(|i| (i * 7 % 251) as u8));
        body
    }

    #[test]
    fn the_level_prefix_of_a_zstd_page_holds_the_levels_whole_decompression_finds() {
        let (rep, def): (Vec<u8>, Vec<u8>) = ((0..70_000).map(|i| i as u8).collect(), vec![9u8; 300_000]);
        let body = v1_body(&rep, &def, 1 << 20);
        let frame = zstd::bulk::compress(&body, 3).expect("compress");
        for _ in 0..2 {
            // the thread's context is reset between pages
            let (prefix, r, d) = v1_level_prefix(&frame, body.len(), 1, 1, &v1_header(body.len(), Some(3), Some(3)))
                .expect("levels")
                .expect("RLE levels");
            assert_eq!((&prefix[r.clone()], &prefix[d.clone()]), (&rep[..], &def[..]));
            assert!(prefix.len() < body.len(), "the values were decompressed too: {}", prefix.len());
        }
        // no repetition levels (max 0): only the definition section
        let flat = v1_body(&[], &def, 1000);
        let frame = zstd::bulk::compress(&flat[4..], 3).expect("compress");
        let (prefix, r, d) = v1_level_prefix(&frame, flat.len() - 4, 0, 1, &v1_header(flat.len() - 4, None, Some(3)))
            .expect("levels")
            .expect("RLE levels");
        assert_eq!((r, &prefix[d]), (0..0, &def[..]));
    }

    #[test]
    fn levels_past_the_page_or_its_frame_are_refused_and_other_encodings_pass() {
        let body = v1_body(&[1, 2, 3], &[4; 10], 100);
        let frame = zstd::bulk::compress(&body, 3).expect("compress");
        let header = v1_header(body.len(), Some(3), Some(3));
        // the header's size ends inside the definition levels
        let err = v1_level_prefix(&frame, 12, 1, 1, &header).expect_err("past the page");
        assert!(err.contains("definition levels run past the page"), "{err}");
        // a definition section longer than the frame
        let mut long = body.clone();
        long[7..11].copy_from_slice(&(1_000_000u32).to_le_bytes());
        let frame_long = zstd::bulk::compress(&long, 3).expect("compress");
        let err = v1_level_prefix(&frame_long, 2_000_000, 1, 1, &header).expect_err("past the frame");
        assert!(err.contains("definition levels run past the page"), "{err}");
        // a truncated frame ends before the levels it promises
        let err = v1_level_prefix(&frame[..frame.len().min(6)], body.len(), 1, 1, &header).expect_err("truncated");
        assert!(err.contains("levels run past the page"), "{err}");
        // BIT_PACKED levels: nothing to check
        let bits = v1_level_prefix(&frame, body.len(), 1, 1, &v1_header(body.len(), Some(4), Some(3)));
        assert_eq!(bits, Ok(None));
    }
}

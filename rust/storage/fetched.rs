//! [`Fetched`]: a [`Source`] with some of its byte ranges already in memory, the view
//! every decode and footer parse reads through (the parquet crate's `ChunkReader`).

use std::io::Read;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use parquet::errors::{ParquetError, Result as PqResult};
use parquet::file::reader::{ChunkReader, Length};

use super::counters::UNPLANNED_READS;
use super::local;
use super::source::{Source, Storage};
use crate::error::{Error, Result};

/// A youmu error carried through the parquet crate's error type, so it can be
/// recovered with its kind (see `Error::from_parquet`).
pub(crate) fn to_parquet(e: Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

/// A [`Source`] with some of its byte ranges already in memory (fetched by a plan).
///
/// Reads inside a fetched range are served from memory. Others go to the source:
/// a `pread` for local files; for remote objects a blocking GET counted in
/// [`UNPLANNED_READS`], or, in *strict* mode (index builds), an [`Error::NeedData`]
/// naming the missing range so the driver can fetch it asynchronously and retry.
#[derive(Clone)]
pub struct Fetched {
    pub source: Source,
    /// Disjoint, sorted by start.
    ranges: Arc<Vec<(u64, Bytes)>>,
    strict: bool,
}

impl Fetched {
    /// Nothing fetched: every read goes to the source.
    pub fn direct(source: Source) -> Self {
        Fetched { source, ranges: Arc::new(Vec::new()), strict: false }
    }

    pub fn new(source: Source, mut ranges: Vec<(u64, Bytes)>, strict: bool) -> Self {
        ranges.sort_by_key(|r| r.0);
        Fetched { source, ranges: Arc::new(ranges), strict }
    }

    fn find(&self, start: u64, len: usize) -> Option<Bytes> {
        let i = self.ranges.partition_point(|r| r.0 <= start).checked_sub(1)?;
        let (s, b) = &self.ranges[i];
        let off = (start - s) as usize;
        (off.checked_add(len)? <= b.len()).then(|| b.slice(off..off + len))
    }

    /// Bytes `[start, start + len)`.
    pub fn read_range(&self, start: u64, len: usize) -> Result<Bytes> {
        if let Some(b) = self.find(start, len) {
            return Ok(b);
        }
        if !self.source.reads_in_place() {
            if self.strict {
                return Err(Error::NeedData(vec![(start, start.saturating_add(len as u64))]));
            }
            UNPLANNED_READS.fetch_add(1, Ordering::Relaxed);
        }
        self.source.read_range(start, len)
    }

    /// Make sure `ranges` are in memory (strict mode: [`Error::NeedData`] for the missing
    /// ones, all at once, so a driver fetches them in one round).
    pub fn require(&self, ranges: &[Range<u64>]) -> Result<()> {
        if !self.strict {
            return Ok(());
        }
        let missing: Vec<(u64, u64)> = ranges
            .iter()
            .filter(|r| r.end > r.start && self.find(r.start, (r.end - r.start) as usize).is_none())
            .map(|r| (r.start, r.end))
            .collect();
        if missing.is_empty() { Ok(()) } else { Err(Error::NeedData(missing)) }
    }
}

impl Length for Fetched {
    fn len(&self) -> u64 {
        self.source.len()
    }
}

/// Sequential reader over a [`Fetched`] (the parquet crate walks page headers with it,
/// a few bytes per `read`). Local reads keep their handle for the cursor's life and read
/// small requests 8 KiB ahead, so a header costs one `pread`, not one per Thrift field.
pub struct FetchedCursor {
    inner: Fetched,
    pos: u64,
    file: Option<Arc<std::fs::File>>,
    ahead: Vec<u8>,
    ahead_start: u64,
}

const READ_AHEAD: usize = 8 << 10;

impl FetchedCursor {
    /// A read of a source read in place: from the bytes read ahead, else through the
    /// source's open file (kept for the cursor's life), else one read of the source.
    fn read_in_place(&mut self, want: usize, buf: &mut [u8]) -> std::io::Result<usize> {
        let ahead_end = self.ahead_start + self.ahead.len() as u64;
        if self.pos >= self.ahead_start && self.pos < ahead_end {
            let off = (self.pos - self.ahead_start) as usize;
            let n = want.min(self.ahead.len() - off);
            buf[..n].copy_from_slice(&self.ahead[off..off + n]);
            return Ok(n);
        }
        if self.file.is_none() {
            match self.inner.source.file_handle() {
                Some(handle) => self.file = Some(handle.map_err(std::io::Error::other)?),
                None => {
                    let b = self.inner.read_range(self.pos, want).map_err(std::io::Error::other)?;
                    buf[..b.len()].copy_from_slice(&b);
                    return Ok(b.len());
                }
            }
        }
        let file = self.file.as_ref().ok_or_else(|| std::io::Error::other("no handle"))?;
        if want >= READ_AHEAD {
            return local::pread(file, self.pos, &mut buf[..want]);
        }
        let n = (READ_AHEAD as u64).min(self.inner.source.len().saturating_sub(self.pos)) as usize;
        self.ahead.resize(n, 0);
        let got = local::pread(file, self.pos, &mut self.ahead)?;
        self.ahead.truncate(got);
        self.ahead_start = self.pos;
        let n = want.min(got);
        buf[..n].copy_from_slice(&self.ahead[..n]);
        Ok(n)
    }
}

impl Read for FetchedCursor {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let remaining = self.inner.len().saturating_sub(self.pos);
        let want = (buf.len() as u64).min(remaining) as usize;
        if want == 0 {
            return Ok(0);
        }
        // Serve what a fetched range holds; past it, read the source.
        let i = self.inner.ranges.partition_point(|r| r.0 <= self.pos);
        let got = match i.checked_sub(1).map(|i| &self.inner.ranges[i]) {
            Some((s, b)) if self.pos < s + b.len() as u64 => {
                let off = (self.pos - s) as usize;
                let n = want.min(b.len() - off);
                buf[..n].copy_from_slice(&b[off..off + n]);
                n
            }
            _ if self.inner.source.reads_in_place() => self.read_in_place(want, buf)?,
            _ => {
                let b = self.inner.read_range(self.pos, want).map_err(std::io::Error::other)?;
                buf[..b.len()].copy_from_slice(&b);
                b.len()
            }
        };
        self.pos += got as u64;
        Ok(got)
    }
}

impl ChunkReader for Fetched {
    type T = FetchedCursor;

    fn get_read(&self, start: u64) -> PqResult<FetchedCursor> {
        Ok(FetchedCursor { inner: self.clone(), pos: start, file: None, ahead: Vec::new(), ahead_start: 0 })
    }

    fn get_bytes(&self, start: u64, length: usize) -> PqResult<Bytes> {
        self.read_range(start, length).map_err(to_parquet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetched_serves_contained_ranges_and_reports_missing_ones_in_strict_mode() {
        let obj = crate::storage::remote::RemoteObject::for_tests("s3://b/k.parquet", 100);
        let f = Fetched::new(Source::new(Arc::new(obj)), vec![(10, Bytes::from(vec![7u8; 20]))], true);
        assert_eq!(f.read_range(12, 5).unwrap().as_ref(), &[7u8; 5]);
        assert!(matches!(f.read_range(25, 10), Err(Error::NeedData(ref r)) if r == &vec![(25, 35)]));
        assert!(f.require(&[10..30, 12..14]).is_ok());
        assert!(matches!(f.require(&[10..30, 40..50, 0..5]), Err(Error::NeedData(ref r)) if r.len() == 2));
        let mut cur = f.get_read(28).unwrap();
        let mut two = [0u8; 2];
        cur.read_exact(&mut two).unwrap();
        assert_eq!(two, [7, 7]);
    }
}

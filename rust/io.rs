//! Positioned reads. `ChunkReader` for `File` in the parquet crate clones the fd and
//! seeks, which races when threads share a file; `pread` has no shared offset, so one
//! open file serves every thread.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parquet::errors::{ParquetError, Result as PqResult};
use parquet::file::reader::{ChunkReader, Length};

use crate::runtime::runtime;

/// Bytes read from disk by this process (all files, all indexes): lets benchmarks
/// report I/O amplification without OS counters.
pub static BYTES_READ: AtomicU64 = AtomicU64::new(0);
/// Number of positioned reads issued.
pub static READS: AtomicU64 = AtomicU64::new(0);

fn pread_exact(file: &File, len: u64, start: u64, buf: &mut [u8]) -> PqResult<()> {
    let end = start.checked_add(buf.len() as u64).ok_or_else(|| eof(start, buf.len(), len))?;
    if end > len {
        return Err(eof(start, buf.len(), len));
    }
    file.read_exact_at(buf, start).map_err(|e| ParquetError::External(Box::new(e)))?;
    BYTES_READ.fetch_add(buf.len() as u64, Ordering::Relaxed);
    READS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

fn eof(start: u64, n: usize, len: u64) -> ParquetError {
    ParquetError::EOF(format!("read of {n} bytes at offset {start} runs past the end of the file ({len} bytes)"))
}

/// An open Parquet file read with `pread`.
#[derive(Clone)]
pub struct PreadFile {
    file: Arc<File>,
    len: u64,
}

impl PreadFile {
    pub fn new(file: File, len: u64) -> Self {
        PreadFile { file: Arc::new(file), len }
    }

    pub fn read_range(&self, start: u64, len: usize) -> PqResult<Bytes> {
        let mut v = vec![0u8; len];
        pread_exact(&self.file, self.len, start, &mut v)?;
        Ok(Bytes::from(v))
    }
}

impl Length for PreadFile {
    fn len(&self) -> u64 {
        self.len
    }
}

/// Sequential reader used by the parquet crate when it walks page headers.
pub struct PreadCursor {
    file: Arc<File>,
    len: u64,
    pos: u64,
}

impl Read for PreadCursor {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let remaining = self.len.saturating_sub(self.pos);
        let n = (buf.len() as u64).min(remaining) as usize;
        if n == 0 {
            return Ok(0);
        }
        let got = self.file.read_at(&mut buf[..n], self.pos)?;
        self.pos += got as u64;
        BYTES_READ.fetch_add(got as u64, Ordering::Relaxed);
        READS.fetch_add(1, Ordering::Relaxed);
        Ok(got)
    }
}

impl ChunkReader for PreadFile {
    type T = PreadCursor;

    fn get_read(&self, start: u64) -> PqResult<PreadCursor> {
        Ok(PreadCursor { file: self.file.clone(), len: self.len, pos: start })
    }

    fn get_bytes(&self, start: u64, length: usize) -> PqResult<Bytes> {
        self.read_range(start, length)
    }
}

/// A `PreadFile` that serves dictionary pages from the process-wide cache. The
/// dictionary ranges of the column chunks being read are passed in, so only those
/// (never data pages) enter the cache.
#[derive(Clone)]
pub struct CachingReader {
    pub inner: PreadFile,
    pub index_uid: u64,
    pub file_id: u32,
    /// (start, len) of dictionary pages that may be requested.
    pub dict_ranges: Arc<Vec<(u64, u32)>>,
    /// The largest uncompressed size a page of these column chunks can have (the
    /// largest chunk's, per the footer). A page header claiming more is corrupt, and
    /// is refused here, before a decoder allocates what it claims.
    pub max_page_bytes: u64,
}

impl CachingReader {
    fn check_page(&self, start: u64, bytes: &Bytes) -> PqResult<()> {
        if let Ok((h, _)) = crate::thrift::parse_page_header(&bytes[..bytes.len().min(64 << 10)]) {
            let claimed = h.uncompressed_size.max(0) as u64;
            if claimed > self.max_page_bytes {
                return Err(ParquetError::General(format!(
                    "the page at offset {start} claims {claimed} bytes uncompressed, more than its column chunk can hold ({} bytes)",
                    self.max_page_bytes
                )));
            }
        }
        Ok(())
    }
}

impl Length for CachingReader {
    fn len(&self) -> u64 {
        self.inner.len
    }
}

impl ChunkReader for CachingReader {
    type T = PreadCursor;

    fn get_read(&self, start: u64) -> PqResult<PreadCursor> {
        self.inner.get_read(start)
    }

    fn get_bytes(&self, start: u64, length: usize) -> PqResult<Bytes> {
        let is_dict = self.dict_ranges.iter().any(|&(s, l)| s == start && l as usize == length);
        if !is_dict {
            let bytes = self.inner.read_range(start, length)?;
            self.check_page(start, &bytes)?;
            return Ok(bytes);
        }
        let key = (self.index_uid, self.file_id, start, length as u32);
        let rt = runtime();
        if let Some(hit) = rt.dict_cache.lock().map_err(|_| poisoned())?.get(&key) {
            return Ok(hit);
        }
        let bytes = self.inner.read_range(start, length)?;
        self.check_page(start, &bytes)?;
        rt.dict_cache.lock().map_err(|_| poisoned())?.insert(key, bytes.clone());
        Ok(bytes)
    }
}

fn poisoned() -> ParquetError {
    ParquetError::General("youmu dictionary cache lock poisoned by an earlier panic".into())
}

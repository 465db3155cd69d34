//! The reader the parquet crate decodes pages through: a [`Fetched`] source (a local
//! file read with `pread`, or an object whose planned ranges are already in memory)
//! with the process-wide dictionary-page cache in front.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use parquet::errors::{ParquetError, Result as PqResult};
use parquet::file::reader::{ChunkReader, Length};

use crate::error::Error;
use crate::runtime::runtime;
pub use crate::storage::local::{BYTES_READ, READS};
use crate::storage::{Fetched, FetchedCursor};

/// A [`Fetched`] source that serves dictionary pages from the process-wide cache. The
/// dictionary ranges of the column chunks being read are passed in, so only those
/// (never data pages) enter the cache.
#[derive(Clone)]
pub struct CachingReader {
    pub inner: Fetched,
    pub index_uid: u64,
    pub file_id: u32,
    /// (start, len) of dictionary pages that may be requested.
    pub dict_ranges: Arc<Vec<(u64, u32)>>,
    /// The largest uncompressed size a page of these column chunks can have (the
    /// largest chunk's, per the footer). A page header claiming more is corrupt, and
    /// is refused here, before a decoder allocates what it claims.
    pub max_page_bytes: u64,
    /// The first storage error a read hit: the parquet crate turns errors into text on
    /// their way out of its batch iterator, so the decoder's caller takes the typed one
    /// from here (a stale file must stay a `StaleIndexError`, not a "corrupt" one).
    pub failure: Arc<Mutex<Option<Error>>>,
    /// The structure check of the data pages read through page locations (levels,
    /// rows, values against the levels), before arrow-rs decodes them.
    pub pages: Option<Arc<crate::parquet::pagecheck::PageChecks>>,
}

impl CachingReader {
    fn check_page(&self, start: u64, bytes: &Bytes) -> PqResult<()> {
        if let Ok((h, _)) = crate::parquet::thrift::parse_page_header(&bytes[..bytes.len().min(64 << 10)]) {
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

    fn read(&self, start: u64, length: usize) -> PqResult<Bytes> {
        self.inner.read_range(start, length).map_err(|e| {
            let text = ParquetError::General(e.to_string());
            if let Ok(mut slot) = self.failure.lock()
                && slot.is_none()
            {
                *slot = Some(e);
            }
            text
        })
    }

    /// The storage error stashed by a failed read, if any.
    pub fn take_failure(&self) -> Option<Error> {
        self.failure.lock().ok().and_then(|mut s| s.take())
    }
}

impl Length for CachingReader {
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

impl ChunkReader for CachingReader {
    type T = FetchedCursor;

    fn get_read(&self, start: u64) -> PqResult<FetchedCursor> {
        if let Some(pages) = &self.pages {
            pages.note_header(start);
        }
        self.inner.get_read(start)
    }

    fn get_bytes(&self, start: u64, length: usize) -> PqResult<Bytes> {
        let is_dict = self.dict_ranges.iter().any(|&(s, l)| s == start && l as usize == length);
        if !is_dict {
            let bytes = self.read(start, length)?;
            self.check_page(start, &bytes)?;
            if let Some(pages) = &self.pages {
                pages.check(start, &bytes, |at, n| self.inner.read_range(at, n).ok()).map_err(ParquetError::General)?;
            }
            return Ok(bytes);
        }
        let key = (self.index_uid, self.file_id, start, length as u32);
        let rt = runtime();
        if let Some(hit) = rt.dict_cache.lock().map_err(|_| poisoned())?.get(&key) {
            return Ok(hit);
        }
        let bytes = self.read(start, length)?;
        self.check_page(start, &bytes)?;
        rt.dict_cache.lock().map_err(|_| poisoned())?.insert(key, bytes.clone());
        Ok(bytes)
    }
}

fn poisoned() -> ParquetError {
    ParquetError::General("youmu dictionary cache lock poisoned by an earlier panic".into())
}

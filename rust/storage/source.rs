//! The one storage abstraction: [`Storage`], what every place an indexed file's bytes
//! come from offers (byte ranges, size and identity, and the check that it is still the
//! file that was indexed), implemented by local files ([`LocalFile`]) and objects in
//! stores ([`RemoteObject`]). Everything holds a [`Source`], a shared handle on one
//! `dyn Storage` (as `object_store` callers hold an `Arc<dyn ObjectStore>`): nothing
//! matches on which backend it is, a new backend is one more `impl Storage`.

use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;

use super::aio::block_on;
use super::local::LocalFile;
use super::remote::RemoteObject;
use crate::error::{Error, Result};

/// An object's version as its store reported it when it was indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectVersion {
    pub etag: Option<String>,
    pub version: Option<String>,
}

/// What youmu reads from: a file or an object, and what it looked like when indexed.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// The file's path or the object's URL, for messages.
    fn name(&self) -> String;
    /// The path an index records: a local file's own (its bytes as they are, a name
    /// need not be UTF-8), an object's URL.
    fn path(&self) -> PathBuf;
    /// Size in bytes when indexed.
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Last modification when indexed, in ns since the epoch (0: unknown).
    fn mtime_ns(&self) -> i64;
    /// An object's ETag and version (`None`: a local file, which has neither).
    fn object_version(&self) -> Option<ObjectVersion>;
    /// What a saved index records to find it again: a local file's absolute path, an
    /// object's URL.
    fn saved_name(&self) -> Result<Vec<u8>>;
    /// Bytes `[start, start + len)`, which the caller checked lie inside (blocking:
    /// never call it from an I/O runtime thread).
    fn read_at(&self, start: u64, len: usize) -> Result<Bytes>;
    /// After a read or decode failed: if the file changed since it was indexed, that is
    /// the real error (a file rewritten in place under an open handle decodes as
    /// garbage or reads short, not as "changed").
    fn recheck(&self, err: Error) -> Error;
    /// Whether reads are best made in place, as a decode asks for them (a local
    /// `pread`), rather than fetched ahead in planned, concurrent requests. Only storage
    /// asks: callers hand it the ranges a read needs ([`Source::fetch`],
    /// `storage::fetch_reads`) and it decides.
    fn reads_in_place(&self) -> bool;
    /// Bytes `range` from async code (a plan's fetch), which the caller checked lie inside.
    fn get(&self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes>>;
    /// Windows of `window_pages` pages a stream over this file should read ahead of the
    /// one being consumed (see [`Source::read_ahead`]).
    fn read_ahead(&self, _window_pages: usize) -> usize {
        1
    }
    /// The open file holding the bytes, where there is one: a cursor walking page headers
    /// keeps it for its life and reads ahead through it instead of looking a handle up
    /// per read.
    fn file_handle(&self) -> Option<Result<Arc<std::fs::File>>> {
        None
    }
}

impl Storage for LocalFile {
    fn name(&self) -> String {
        self.path.display().to_string()
    }
    fn path(&self) -> PathBuf {
        self.path.clone()
    }
    fn len(&self) -> u64 {
        self.size
    }
    fn mtime_ns(&self) -> i64 {
        self.mtime_ns
    }
    fn object_version(&self) -> Option<ObjectVersion> {
        None
    }
    fn saved_name(&self) -> Result<Vec<u8>> {
        let abs = std::fs::canonicalize(&self.path).map_err(|e| Error::io(&self.path, e))?;
        Ok(abs.as_os_str().as_bytes().to_vec())
    }
    fn read_at(&self, start: u64, len: usize) -> Result<Bytes> {
        self.read_range(start, len)
    }
    fn recheck(&self, err: Error) -> Error {
        match &err {
            Error::Corrupt { .. } | Error::Unsupported { .. } | Error::Io { .. } => match self.check_unchanged() {
                Err(changed) => changed,
                Ok(()) => err,
            },
            _ => err,
        }
    }
    fn reads_in_place(&self) -> bool {
        true
    }
    fn get(&self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes>> {
        Box::pin(async move {
            let len = usize::try_from(range.end.saturating_sub(range.start))
                .map_err(|_| Error::Internal("a read larger than memory".into()))?;
            self.read_range(range.start, len)
        })
    }
    fn file_handle(&self) -> Option<Result<Arc<std::fs::File>>> {
        Some(self.handle())
    }
}

impl Storage for RemoteObject {
    fn name(&self) -> String {
        self.url.clone()
    }
    fn path(&self) -> PathBuf {
        PathBuf::from(&self.url)
    }
    fn len(&self) -> u64 {
        self.size
    }
    fn mtime_ns(&self) -> i64 {
        self.mtime_ns
    }
    fn object_version(&self) -> Option<ObjectVersion> {
        Some(ObjectVersion { etag: self.etag.clone(), version: self.version.clone() })
    }
    fn saved_name(&self) -> Result<Vec<u8>> {
        Ok(self.url.as_bytes().to_vec())
    }
    fn read_at(&self, start: u64, len: usize) -> Result<Bytes> {
        let end = start.saturating_add(len as u64);
        block_on(self.get_range(start..end))?
    }
    fn recheck(&self, err: Error) -> Error {
        // every GET is already conditional on the indexed ETag: a change is its own error
        err
    }
    fn reads_in_place(&self) -> bool {
        false
    }
    fn get(&self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes>> {
        Box::pin(self.get_range(range))
    }
    /// Enough windows that their page requests fill the I/O runtime's `max_inflight`
    /// slots (`⌈max_inflight / window_pages⌉`, between 4 and 8): with 20–50 ms to a
    /// first byte one window ahead leaves the store idle between windows (measured at
    /// 20 ms: 0.46× of local throughput with 1 window ahead, 0.64× with 2, 0.74× with 4;
    /// `benches/RESULTS.md`).
    fn read_ahead(&self, window_pages: usize) -> usize {
        let inflight = super::options::io_options().max_inflight.max(1);
        inflight.div_ceil(window_pages.max(1)).clamp(MIN_REMOTE_READ_AHEAD, MAX_REMOTE_READ_AHEAD)
    }
}

/// Objects: at least this many windows read ahead ...
const MIN_REMOTE_READ_AHEAD: usize = 4;
/// ... and at most this many (each holds a window of decoded pages).
const MAX_REMOTE_READ_AHEAD: usize = 8;

/// Where an indexed file's bytes come from: a shared handle on one [`Storage`].
#[derive(Clone, Debug)]
pub struct Source(Arc<dyn Storage>);

impl Source {
    /// A handle on `storage`: any backend, local or not.
    pub fn new(storage: Arc<dyn Storage>) -> Source {
        Source(storage)
    }

    /// Bytes `[start, start + len)`, one positioned read or one ranged GET (blocking:
    /// never call it from an I/O runtime thread); a range past the end is corrupt data.
    pub fn read_range(&self, start: u64, len: usize) -> Result<Bytes> {
        start.checked_add(len as u64).filter(|&e| e <= self.len()).ok_or_else(|| {
            Error::corrupt(
                self.name(),
                format!("read of {len} bytes at offset {start} runs past the end of the file ({} bytes)", self.len()),
            )
        })?;
        self.read_at(start, len)
    }
}

impl Storage for Source {
    fn name(&self) -> String {
        self.0.name()
    }
    fn path(&self) -> PathBuf {
        self.0.path()
    }
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn mtime_ns(&self) -> i64 {
        self.0.mtime_ns()
    }
    fn object_version(&self) -> Option<ObjectVersion> {
        self.0.object_version()
    }
    fn saved_name(&self) -> Result<Vec<u8>> {
        self.0.saved_name()
    }
    fn read_at(&self, start: u64, len: usize) -> Result<Bytes> {
        self.0.read_at(start, len)
    }
    fn recheck(&self, err: Error) -> Error {
        self.0.recheck(err)
    }
    fn reads_in_place(&self) -> bool {
        self.0.reads_in_place()
    }
    fn get(&self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes>> {
        self.0.get(range)
    }
    fn read_ahead(&self, window_pages: usize) -> usize {
        self.0.read_ahead(window_pages)
    }
    fn file_handle(&self) -> Option<Result<Arc<std::fs::File>>> {
        self.0.file_handle()
    }
}

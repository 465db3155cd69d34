//! The one storage abstraction: [`Storage`], what every place an indexed file's bytes
//! come from offers (byte ranges, size and identity, and the check that it is still the
//! file that was indexed), implemented by local files ([`LocalFile`]) and objects in
//! stores ([`RemoteObject`]). Code outside `storage/` holds a [`Source`], which
//! implements it by dispatching to its backend in one place ([`Source::backend`]).

use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

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
}

/// Where an indexed file's bytes come from: a handle on one [`Storage`] backend.
#[derive(Clone, Debug)]
pub struct Source(pub(super) Backend);

/// The backends; only `storage/` sees which one a [`Source`] is.
#[derive(Clone, Debug)]
pub(super) enum Backend {
    Local(Arc<LocalFile>),
    Remote(Arc<RemoteObject>),
}

impl Source {
    pub(super) fn local(f: Arc<LocalFile>) -> Source {
        Source(Backend::Local(f))
    }

    pub(super) fn remote(o: Arc<RemoteObject>) -> Source {
        Source(Backend::Remote(o))
    }

    /// The one place a source dispatches on its backend.
    fn backend(&self) -> &dyn Storage {
        match &self.0 {
            Backend::Local(f) => f.as_ref(),
            Backend::Remote(o) => o.as_ref(),
        }
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

    /// Whether this source's bytes are best read in place, as a decode asks for them (a
    /// local `pread`), rather than fetched ahead in planned, concurrent requests. Only
    /// storage asks: callers hand it the ranges a read needs ([`Source::fetch`],
    /// `storage::fetch_reads`) and it decides.
    pub(super) fn reads_in_place(&self) -> bool {
        matches!(self.0, Backend::Local(_))
    }

    /// Bytes `range` from async code (a plan's fetch): a conditional GET, or a `pread`.
    pub(super) async fn get(&self, range: Range<u64>) -> Result<Bytes> {
        match &self.0 {
            Backend::Remote(o) => o.get_range(range).await,
            Backend::Local(f) => {
                let len = usize::try_from(range.end.saturating_sub(range.start))
                    .map_err(|_| Error::Internal("a read larger than memory".into()))?;
                f.read_range(range.start, len)
            }
        }
    }
}

impl Storage for Source {
    fn name(&self) -> String {
        self.backend().name()
    }
    fn path(&self) -> PathBuf {
        self.backend().path()
    }
    fn len(&self) -> u64 {
        self.backend().len()
    }
    fn mtime_ns(&self) -> i64 {
        self.backend().mtime_ns()
    }
    fn object_version(&self) -> Option<ObjectVersion> {
        self.backend().object_version()
    }
    fn saved_name(&self) -> Result<Vec<u8>> {
        self.backend().saved_name()
    }
    fn read_at(&self, start: u64, len: usize) -> Result<Bytes> {
        self.backend().read_at(start, len)
    }
    fn recheck(&self, err: Error) -> Error {
        self.backend().recheck(err)
    }
}

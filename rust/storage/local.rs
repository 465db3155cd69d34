//! Local files: `pread` through a bounded LRU of open handles.
//!
//! An index over many files must not hold one descriptor per file: the usual soft limit
//! is 1,024 (often 256), and a corpus is tens of thousands of shards. Handles are opened
//! on demand, kept in a least-recently-used cache of at most `max_open_files`, and
//! closed when evicted (a read in progress keeps its handle alive until it returns).
//!
//! Every (re)open checks the file's size and mtime against what the index recorded, so a
//! file rewritten after indexing is a `StaleIndexError` naming it, not garbage decoded.
//! A cached handle is checked too, each time it is taken for a read: one `stat` of the
//! path (size, mtime, device and inode) against what the handle was opened on, so a file
//! rewritten in place with the same size (a new mtime) or replaced by a rename (a new
//! inode: the old handle would keep reading the deleted original) is refused the same
//! way. A `stat` costs about a microsecond, next to tens of microseconds to read and
//! decode a page (`benches/bench_pages.py` measures it); object stores get the same
//! guarantee from conditional GETs on the ETag.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::runtime::perprocess::PerProcess;

/// Bytes read from local files by this process: lets benchmarks report I/O
/// amplification without OS counters.
pub static BYTES_READ: AtomicU64 = AtomicU64::new(0);
/// Number of positioned reads issued.
pub static READS: AtomicU64 = AtomicU64::new(0);
static OPENS: AtomicU64 = AtomicU64::new(0);

/// One indexed local file: where it is and what it looked like when indexed.
#[derive(Debug)]
pub struct LocalFile {
    pub path: PathBuf,
    pub size: u64,
    pub mtime_ns: i64,
}

fn mtime_ns(m: &std::fs::Metadata) -> i64 {
    m.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

/// The size and mtime of the file at `path` now (what an index records of it).
pub fn stamp(path: &Path) -> Result<(u64, i64)> {
    let m = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    Ok((m.len(), mtime_ns(&m)))
}

fn is_fd_exhaustion(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// Open a regular file for reading. `O_NONBLOCK` keeps `open` itself from blocking on a
/// FIFO (which would wait for a writer forever, uninterruptibly); the type check then
/// refuses anything that is not a regular file.
fn open_regular(path: &Path) -> Result<(File, Stamp)> {
    let open = || std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path);
    let file = match open() {
        Err(e) if is_fd_exhaustion(&e) => {
            // Other code holds descriptors too: give back half of ours and try once more.
            shrink_to(handles().lock().map(|c| c.map.len() / 2).unwrap_or(0));
            open().map_err(|e| Error::io(path, e))?
        }
        other => other.map_err(|e| Error::io(path, e))?,
    };
    OPENS.fetch_add(1, Ordering::Relaxed);
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.file_type().is_file() {
        return Err(Error::InvalidArgument(format!("{} is not a regular file", path.display())));
    }
    Ok((file, Stamp::of(&meta)))
}

/// What a file looked like: size and mtime (what an index records) and where it lives
/// (device and inode: what tells a replaced file from the one a handle has open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: u64,
    mtime: i64,
    dev: u64,
    ino: u64,
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Stamp {
        Stamp { size: m.len(), mtime: mtime_ns(m), dev: m.dev(), ino: m.ino() }
    }
}

impl LocalFile {
    /// Open `path`, record its size and mtime, and keep the handle in the cache.
    pub fn open(path: &Path) -> Result<LocalFile> {
        let (file, stamp) = open_regular(path)?;
        let f = LocalFile { path: path.to_path_buf(), size: stamp.size, mtime_ns: stamp.mtime };
        insert(&f, Arc::new(file), stamp);
        Ok(f)
    }

    /// A file known from a saved index; nothing is opened until it is read.
    pub fn known(path: PathBuf, size: u64, mtime_ns: i64) -> LocalFile {
        LocalFile { path, size, mtime_ns }
    }

    fn changed(&self, size: u64, mtime: i64) -> Error {
        Error::Changed {
            path: self.path.display().to_string(),
            detail: format!("size {} -> {size}, mtime {} -> {mtime} ns", self.size, self.mtime_ns),
        }
    }

    /// The size and mtime on disk now, compared with the indexed ones.
    pub fn check_unchanged(&self) -> Result<()> {
        let m = std::fs::metadata(&self.path).map_err(|e| Error::Changed {
            path: self.path.display().to_string(),
            detail: format!("gone or unreadable: {e}"),
        })?;
        let (size, mtime) = (m.len(), mtime_ns(&m));
        if (size, mtime) != (self.size, self.mtime_ns) { Err(self.changed(size, mtime)) } else { Ok(()) }
    }

    pub(crate) fn handle(&self) -> Result<Arc<File>> {
        if let Some((f, opened)) = handles().lock().ok().and_then(|mut c| c.get(&self.path, self.size, self.mtime_ns)) {
            // Outside the lock: other threads' cache hits need not wait for a syscall.
            return match std::fs::metadata(&self.path) {
                Ok(m) if Stamp::of(&m) == opened => Ok(f),
                found => {
                    forget(&self.path);
                    Err(match found {
                        Ok(m) if (m.len(), mtime_ns(&m)) == (self.size, self.mtime_ns) => Error::Changed {
                            path: self.path.display().to_string(),
                            detail: format!("replaced by another file (inode {} -> {})", opened.ino, m.ino()),
                        },
                        Ok(m) => self.changed(m.len(), mtime_ns(&m)),
                        Err(e) => Error::Changed {
                            path: self.path.display().to_string(),
                            detail: format!("gone or unreadable: {e}"),
                        },
                    })
                }
            };
        }
        let (file, stamp) = open_regular(&self.path)?;
        if (stamp.size, stamp.mtime) != (self.size, self.mtime_ns) {
            return Err(self.changed(stamp.size, stamp.mtime));
        }
        let file = Arc::new(file);
        insert(self, file.clone(), stamp);
        Ok(file)
    }

    /// Bytes `[start, start + len)` with one `pread` (the caller checked the range).
    pub fn read_range(&self, start: u64, len: usize) -> Result<Bytes> {
        let file = self.handle()?;
        let mut v = vec![0u8; len];
        file.read_exact_at(&mut v, start).map_err(|e| Error::io(&self.path, e))?;
        BYTES_READ.fetch_add(len as u64, Ordering::Relaxed);
        READS.fetch_add(1, Ordering::Relaxed);
        Ok(Bytes::from(v))
    }

    /// One `pread` into `buf` (short at the end of the file).
    pub fn read_at(&self, pos: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let file = self.handle().map_err(std::io::Error::other)?;
        pread(&file, pos, buf)
    }
}

/// One counted `pread`.
pub(crate) fn pread(file: &File, pos: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    let got = file.read_at(buf, pos)?;
    BYTES_READ.fetch_add(got as u64, Ordering::Relaxed);
    READS.fetch_add(1, Ordering::Relaxed);
    Ok(got)
}

struct Entry {
    file: Arc<File>,
    /// The indexed size and mtime this handle serves.
    size: u64,
    mtime: i64,
    /// The file as it was when the handle was opened.
    opened: Stamp,
    tick: u64,
}

/// LRU of open handles keyed by path: a map plus a tick-ordered index, O(log n) per
/// access and eviction, so a cache of thousands of handles costs nothing per read.
struct HandleCache {
    capacity: usize,
    tick: u64,
    map: HashMap<PathBuf, Entry>,
    order: BTreeMap<u64, PathBuf>,
}

impl HandleCache {
    fn get(&mut self, path: &Path, size: u64, mtime: i64) -> Option<(Arc<File>, Stamp)> {
        self.tick += 1;
        let tick = self.tick;
        let e = self.map.get_mut(path)?;
        if (e.size, e.mtime) != (size, mtime) {
            // opened for another index of a different age: reopen and check
            return None;
        }
        self.order.remove(&e.tick);
        e.tick = tick;
        self.order.insert(tick, path.to_path_buf());
        Some((e.file.clone(), e.opened))
    }

    fn insert(&mut self, path: &Path, file: Arc<File>, size: u64, mtime: i64, opened: Stamp) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(old) = self.map.insert(path.to_path_buf(), Entry { file, size, mtime, opened, tick }) {
            self.order.remove(&old.tick);
        }
        self.order.insert(tick, path.to_path_buf());
        self.evict_to(self.capacity);
    }

    fn remove(&mut self, path: &Path) {
        if let Some(old) = self.map.remove(path) {
            self.order.remove(&old.tick);
        }
    }

    fn evict_to(&mut self, n: usize) {
        while self.map.len() > n {
            let Some((_, victim)) = self.order.pop_first() else { break };
            self.map.remove(&victim);
        }
    }
}

static HANDLES: PerProcess<Mutex<HandleCache>> = PerProcess::new();

fn handles() -> &'static Mutex<HandleCache> {
    HANDLES.get(
        || {
            Mutex::new(HandleCache {
                capacity: super::options::io_options().max_open_files,
                tick: 0,
                map: HashMap::new(),
                order: BTreeMap::new(),
            })
        },
        |parent| {
            // A forked child inherits the parent's descriptors: close them unless the
            // cache was locked at the fork (then its owner thread is gone; leak them).
            if let Ok(mut c) = parent.try_lock() {
                c.map.clear();
                c.order.clear();
            }
        },
    )
}

fn insert(f: &LocalFile, file: Arc<File>, opened: Stamp) {
    if let Ok(mut c) = handles().lock() {
        c.insert(&f.path, file, f.size, f.mtime_ns, opened);
    }
}

/// Close the cached handle of a file that changed (the next open checks it afresh).
fn forget(path: &Path) {
    if let Ok(mut c) = handles().lock() {
        c.remove(path);
    }
}

fn shrink_to(n: usize) {
    if let Ok(mut c) = handles().lock() {
        c.evict_to(n);
    }
}

pub(crate) fn set_capacity(n: usize) {
    if let Ok(mut c) = handles().lock() {
        c.capacity = n.max(1);
        let cap = c.capacity;
        c.evict_to(cap);
    }
}

/// (handles opened so far, handles open now).
pub(crate) fn stats() -> (u64, u64) {
    let now = HANDLES.peek().and_then(|m| m.lock().ok().map(|c| c.map.len() as u64)).unwrap_or(0);
    (OPENS.load(Ordering::Relaxed), now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_evicts_least_recently_used_handles() {
        let d = tempfile::tempdir().unwrap();
        let mut c = HandleCache { capacity: 2, tick: 0, map: HashMap::new(), order: BTreeMap::new() };
        let paths: Vec<PathBuf> = (0..3).map(|i| d.path().join(format!("{i}"))).collect();
        for p in &paths {
            std::fs::write(p, b"x").unwrap();
        }
        let f = |p: &Path| Arc::new(File::open(p).unwrap());
        let st = Stamp { size: 1, mtime: 0, dev: 0, ino: 0 };
        c.insert(&paths[0], f(&paths[0]), 1, 0, st);
        c.insert(&paths[1], f(&paths[1]), 1, 0, st);
        assert!(c.get(&paths[0], 1, 0).is_some()); // 0 is now more recent than 1
        c.insert(&paths[2], f(&paths[2]), 1, 0, st);
        assert!(c.get(&paths[1], 1, 0).is_none());
        assert!(c.get(&paths[0], 1, 0).is_some());
        assert!(c.get(&paths[0], 2, 0).is_none(), "another stamp is another file");
        assert_eq!(c.map.len(), 2);
        assert_eq!(c.order.len(), 2);
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.parquet");
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        assert!(matches!(LocalFile::open(&p), Err(Error::InvalidArgument(m)) if m.contains("not a regular file")));
    }

    #[test]
    fn a_rewritten_file_is_reported_as_changed() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.parquet");
        std::fs::write(&p, b"0123456789abcdef").unwrap();
        let f = LocalFile::open(&p).unwrap();
        assert_eq!(f.read_range(2, 3).unwrap().as_ref(), b"234");
        std::fs::write(&p, b"0123456789abcdefgh").unwrap();
        assert!(matches!(f.check_unchanged(), Err(Error::Changed { .. })));
        shrink_to(0);
        assert!(matches!(f.read_range(2, 3), Err(Error::Changed { .. })));
    }

    #[test]
    fn a_cached_handle_of_a_replaced_or_rewritten_file_is_not_read() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("b.parquet");
        std::fs::write(&p, b"0123456789").unwrap();
        let f = LocalFile::open(&p).unwrap();
        assert_eq!(f.read_range(0, 3).unwrap().as_ref(), b"012");
        // replaced by a rename, same size and mtime: only the inode tells
        let q = d.path().join("c.tmp");
        std::fs::write(&q, b"abcdefghij").unwrap();
        let m = std::fs::metadata(&p).unwrap();
        std::fs::File::options().write(true).open(&q).unwrap().set_modified(m.modified().unwrap()).unwrap();
        std::fs::rename(&q, &p).unwrap();
        assert!(matches!(f.read_range(0, 3), Err(Error::Changed { ref detail, .. }) if detail.contains("replaced")));
        // rewritten in place, same size: the mtime tells
        let g = LocalFile::open(&p).unwrap();
        assert_eq!(g.read_range(0, 3).unwrap().as_ref(), b"abc");
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&p, b"ABCDEFGHIJ").unwrap();
        assert!(matches!(g.read_range(0, 3), Err(Error::Changed { .. })));
    }
}

//! Storage: where the bytes of an indexed file come from.
//!
//! One abstraction, [`Source`], used by index builds, header scans, page reads and the
//! dictionary cache alike:
//!
//! * [`Source::Local`]: a file on a local filesystem, read with `pread` through a bounded
//!   LRU of open handles ([`local`]), so an index over 100,000 files needs no more file
//!   descriptors than the limit allows.
//! * [`Source::Remote`]: an object in an object store (S3, GCS, Azure, HTTP), read with
//!   ranged GETs through the `object_store` crate ([`remote`]) on youmu's own async
//!   runtime ([`aio`]), conditional on the ETag recorded when it was indexed.
//!
//! Remote reads are planned before they are made: a batch of pages (or an index build
//! step) names the byte ranges it needs, [`fetch`] issues them concurrently (bounded by
//! `max_inflight`, adjacent ranges optionally coalesced) and the decoder then runs, on
//! youmu's CPU pool, over a [`Fetched`] view of those bytes. Decoding never runs on an
//! I/O thread and an I/O thread never waits on a decode.
//!
//! I/O knobs ([`IoOptions`]) are process-wide and change nothing about the data: a saved
//! index stays valid whatever they are set to.

pub mod aio;
pub mod fetch;
pub mod local;
pub mod redact;
pub mod remote;
pub mod retry;

use std::io::Read;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use parquet::errors::{ParquetError, Result as PqResult};
use parquet::file::reader::{ChunkReader, Length};

use crate::error::{Error, Result};
pub use local::LocalFile;
pub use remote::RemoteObject;

/// Requests sent to object stores by this process, retries included
/// (`retry::REMOTE_RETRIES` counts those).
pub static REMOTE_REQUESTS: AtomicU64 = AtomicU64::new(0);
/// Bytes received from object stores.
pub static REMOTE_BYTES: AtomicU64 = AtomicU64::new(0);
/// Remote reads a decode asked for that its plan had not fetched (each one a blocking
/// GET on a pool thread): zero unless a plan is wrong. Tests assert it stays zero.
pub static UNPLANNED_READS: AtomicU64 = AtomicU64::new(0);

/// Time to the response headers of recent GETs (an exponentially weighted mean, in
/// microseconds; 0 before the first): what a stream needs to size its read-ahead.
pub static FIRST_BYTE_US: AtomicU64 = AtomicU64::new(0);

pub(crate) fn record_first_byte(d: Duration) {
    let us = d.as_micros().min(u64::MAX as u128) as u64;
    // weight 1/16: a few dozen requests settle it, one slow request does not
    let _ = FIRST_BYTE_US.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
        Some(if old == 0 { us } else { old - old / 16 + us / 16 })
    });
}

/// Process-wide I/O settings. None of them changes what is read, only how.
#[derive(Debug, Clone, PartialEq)]
pub struct IoOptions {
    /// Object-store requests in flight at once, over all indexes of the process.
    pub max_inflight: usize,
    /// Ranges of one object at most this many bytes apart are fetched with one GET
    /// (0: only touching ranges merge).
    pub coalesce_gap: u64,
    /// Merged requests are not grown beyond this many bytes.
    pub coalesce_max: u64,
    /// Open local file handles kept (least recently used closed first).
    pub max_open_files: usize,
    /// Bytes of an object's tail read by the first GET of an index build (footer and,
    /// where writers put it, the OffsetIndex).
    pub tail_bytes: u64,
    /// Retries of a failed request (transient errors only: 5xx, 429, dropped
    /// connections, truncated bodies; a request that got no answer in time is retried
    /// once). Their backoff grows exponentially, with jitter, so they span `retry_timeout`.
    pub retries: usize,
    /// No retry starts after this long since the first attempt.
    pub retry_timeout: Duration,
    /// Whole-request timeout (connect to last byte); `storage_options["timeout"]` overrides it per index.
    pub request_timeout: Duration,
    /// Connect timeout; `storage_options["connect_timeout"]` overrides it per index.
    pub connect_timeout: Duration,
    /// No byte for this long (the first of a response, or the next) fails the attempt:
    /// a hung endpoint fails within about `connect_timeout + 2 * read_timeout`;
    /// `storage_options["read_timeout"]` overrides it per index.
    pub read_timeout: Duration,
    /// Worker threads of the I/O runtime (they only move bytes).
    pub io_threads: usize,
}

impl Default for IoOptions {
    fn default() -> Self {
        IoOptions {
            // Durner et al. (VLDB 2023): small S3 requests are dominated by first-byte
            // latency; ~1 MiB pages need tens to hundreds of requests in flight.
            max_inflight: 64,
            // A page or dictionary is tens of KiB to a few MiB; a 64 KiB hole costs
            // about a millisecond of transfer, a request tens of milliseconds.
            coalesce_gap: 64 << 10,
            coalesce_max: 16 << 20,
            max_open_files: local::default_max_open_files(),
            tail_bytes: 256 << 10,
            retries: 10,
            retry_timeout: Duration::from_secs(180),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            // S3's first byte comes in tens of milliseconds, its p99.9 within a second or
            // two (Durner et al., VLDB 2023): ten seconds of silence is a hung endpoint.
            read_timeout: Duration::from_secs(10),
            io_threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(2, 8),
        }
    }
}

static OPTIONS: RwLock<Option<IoOptions>> = RwLock::new(None);

/// The range of every integer setting, shared by `set_io_options` and the `YOUMU_*`
/// variables: (name, environment variable, lowest, highest). Bounded by what the
/// machine and the libraries take: tokio's semaphore holds at most 2^61 permits and
/// each request in flight holds a socket; every I/O thread is a real thread; handles
/// beyond the descriptor limit cannot be opened; a gap or tail beyond 1 GiB is a
/// buffer of that size.
pub fn io_option_range(name: &str) -> Option<(u64, u64)> {
    Some(match name {
        "max_inflight" => (1, MAX_INFLIGHT),
        "coalesce_gap" => (0, 1 << 30),
        "max_open_files" => (1, max_open_files_limit()),
        "tail_bytes" => (8, 1 << 30),
        "retries" => (0, 100),
        "io_threads" => (1, MAX_IO_THREADS),
        _ => return None,
    })
}

/// Most object-store requests in flight at once.
pub const MAX_INFLIGHT: u64 = 16384;
/// Most I/O runtime threads (they only move bytes: a few per core are plenty).
pub const MAX_IO_THREADS: u64 = 256;
/// Longest timeout, in seconds (a week): longer ones overflow clocks in the HTTP stack.
pub const MAX_TIMEOUT_SECS: f64 = 7.0 * 86400.0;

/// The soft `RLIMIT_NOFILE` (at least 16): more handles than this cannot be open.
pub fn max_open_files_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we pass.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 { lim.rlim_cur } else { 1024 };
    soft.clamp(16, 1 << 20)
}

/// `value` checked against [`io_option_range`]; `what` names it in the error.
pub fn check_io_option(name: &str, what: &str, value: u64) -> Result<u64> {
    let (lo, hi) = io_option_range(name).ok_or_else(|| Error::Internal(format!("no I/O setting {name}")))?;
    if (lo..=hi).contains(&value) {
        Ok(value)
    } else {
        Err(Error::InvalidArgument(format!("{what} must be an integer between {lo} and {hi}, got {value}")))
    }
}

/// The I/O settings the `YOUMU_*` variables ask for, or an error naming the first
/// variable that is not an integer in its range.
fn env_options() -> Result<IoOptions> {
    let mut o = IoOptions::default();
    let num = |name: &str, var: &str| -> Result<Option<u64>> {
        let Some(raw) = std::env::var_os(var) else { return Ok(None) };
        let text = raw.to_string_lossy();
        let what = format!("environment variable {var}={text:?}");
        let v = text.trim().parse::<u64>().map_err(|_| {
            let (lo, hi) = io_option_range(name).unwrap_or((0, u64::MAX));
            Error::InvalidArgument(format!("{what} must be an integer between {lo} and {hi}"))
        })?;
        check_io_option(name, &what, v).map(Some)
    };
    if let Some(v) = num("max_inflight", "YOUMU_MAX_INFLIGHT")? {
        o.max_inflight = v as usize;
    }
    if let Some(v) = num("coalesce_gap", "YOUMU_COALESCE_GAP")? {
        o.coalesce_gap = v;
    }
    if let Some(v) = num("max_open_files", "YOUMU_MAX_OPEN_FILES")? {
        o.max_open_files = v as usize;
    }
    if let Some(v) = num("retries", "YOUMU_RETRIES")? {
        o.retries = v as usize;
    }
    Ok(o)
}

/// `Err` naming the first `YOUMU_*` variable that is malformed or out of range (the
/// settings then keep their defaults). Checked where indexes are made and settings
/// read or changed, so a typo is an error rather than silently ignored.
pub fn check_env() -> Result<()> {
    static CHECKED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let found = CHECKED
        .get_or_init(|| env_options().err().or_else(|| crate::runtime::env_threads().err()).map(|e| e.to_string()));
    match found {
        Some(msg) => Err(Error::InvalidArgument(msg.clone())),
        None => Ok(()),
    }
}

/// The current settings (from `YOUMU_*` environment variables at first use, then
/// [`set_io_options`]).
pub fn io_options() -> IoOptions {
    if let Ok(g) = OPTIONS.read()
        && let Some(o) = g.as_ref()
    {
        return o.clone();
    }
    let mut g = OPTIONS.write().unwrap_or_else(|p| p.into_inner());
    g.get_or_insert_with(|| env_options().unwrap_or_default()).clone()
}

/// Replace the settings. Stores built with the old retry/timeout settings are dropped
/// (rebuilt on next use); the handle cache shrinks to the new limit at once.
pub fn set_io_options(o: IoOptions) -> Result<()> {
    for (name, v) in [
        ("max_inflight", o.max_inflight as u64),
        ("coalesce_gap", o.coalesce_gap),
        ("max_open_files", o.max_open_files as u64),
        ("tail_bytes", o.tail_bytes),
        ("retries", o.retries as u64),
        ("io_threads", o.io_threads as u64),
    ] {
        check_io_option(name, &format!("set_io_options({name})"), v)?;
    }
    for (name, d) in [
        ("retry_timeout", o.retry_timeout),
        ("request_timeout", o.request_timeout),
        ("connect_timeout", o.connect_timeout),
        ("read_timeout", o.read_timeout),
    ] {
        if d.is_zero() || d.as_secs_f64() > MAX_TIMEOUT_SECS {
            return Err(Error::InvalidArgument(format!(
                "set_io_options({name}) must be a number of seconds above 0 and at most {MAX_TIMEOUT_SECS}, got {}",
                d.as_secs_f64()
            )));
        }
    }
    let old = io_options();
    *OPTIONS.write().unwrap_or_else(|p| p.into_inner()) = Some(o.clone());
    local::set_capacity(o.max_open_files);
    if old.max_inflight != o.max_inflight {
        aio::resize_inflight(o.max_inflight);
    }
    if (old.retry_timeout, old.request_timeout, old.connect_timeout, old.read_timeout)
        != (o.retry_timeout, o.request_timeout, o.connect_timeout, o.read_timeout)
    {
        aio::forget_stores();
    }
    Ok(())
}

/// Where an indexed file's bytes come from.
#[derive(Clone, Debug)]
pub enum Source {
    Local(Arc<LocalFile>),
    Remote(Arc<RemoteObject>),
}

impl Source {
    pub fn len(&self) -> u64 {
        match self {
            Source::Local(f) => f.size,
            Source::Remote(o) => o.size,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_remote(&self) -> bool {
        matches!(self, Source::Remote(_))
    }

    /// The file's path or the object's URL, for messages.
    pub fn name(&self) -> String {
        match self {
            Source::Local(f) => f.path.display().to_string(),
            Source::Remote(o) => o.url.clone(),
        }
    }

    /// Bytes `[start, start + len)`, one positioned read or one ranged GET (blocking:
    /// never call it from an I/O runtime thread).
    pub fn read_range(&self, start: u64, len: usize) -> Result<Bytes> {
        let end = start.checked_add(len as u64).filter(|&e| e <= self.len()).ok_or_else(|| {
            Error::corrupt(
                self.name(),
                format!("read of {len} bytes at offset {start} runs past the end of the file ({} bytes)", self.len()),
            )
        })?;
        match self {
            Source::Local(f) => f.read_range(start, len),
            Source::Remote(o) => {
                let o = o.clone();
                aio::block_on(async move { o.get_range(start..end).await })?
            }
        }
    }

    /// After a read or decode failed: if the file changed since it was indexed, that is
    /// the real error (a file rewritten in place under an open handle decodes as
    /// garbage or reads short, not as "changed").
    pub fn recheck(&self, err: Error) -> Error {
        match (self, &err) {
            (Source::Local(f), Error::Corrupt { .. } | Error::Unsupported { .. } | Error::Io { .. }) => {
                match f.check_unchanged() {
                    Err(changed) => changed,
                    Ok(()) => err,
                }
            }
            _ => err,
        }
    }
}

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
        if let Source::Remote(_) = &self.source {
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
    fn read_local(&mut self, f: &LocalFile, want: usize, buf: &mut [u8]) -> std::io::Result<usize> {
        let ahead_end = self.ahead_start + self.ahead.len() as u64;
        if self.pos >= self.ahead_start && self.pos < ahead_end {
            let off = (self.pos - self.ahead_start) as usize;
            let n = want.min(self.ahead.len() - off);
            buf[..n].copy_from_slice(&self.ahead[off..off + n]);
            return Ok(n);
        }
        if self.file.is_none() {
            self.file = Some(f.handle().map_err(std::io::Error::other)?);
        }
        let file = self.file.as_ref().ok_or_else(|| std::io::Error::other("no handle"))?;
        if want >= READ_AHEAD {
            return local::pread(file, self.pos, &mut buf[..want]);
        }
        let n = (READ_AHEAD as u64).min(f.size.saturating_sub(self.pos)) as usize;
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
            _ => match self.inner.source.clone() {
                Source::Local(f) => self.read_local(&f, want, buf)?,
                Source::Remote(_) => {
                    let b = self.inner.read_range(self.pos, want).map_err(std::io::Error::other)?;
                    buf[..b.len()].copy_from_slice(&b);
                    b.len()
                }
            },
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

/// Counters for `io_stats()`.
pub fn stats() -> Vec<(&'static str, u64)> {
    let (opens, open_now) = local::stats();
    vec![
        ("remote_requests", REMOTE_REQUESTS.load(Ordering::Relaxed)),
        ("remote_bytes", REMOTE_BYTES.load(Ordering::Relaxed)),
        ("remote_retries", retry::REMOTE_RETRIES.load(Ordering::Relaxed)),
        ("unplanned_remote_reads", UNPLANNED_READS.load(Ordering::Relaxed)),
        ("remote_first_byte_us", FIRST_BYTE_US.load(Ordering::Relaxed)),
        ("file_opens", opens),
        ("open_files", open_now),
    ]
}

/// Forks seen by this process image: a `pthread_atfork` child handler bumps it, so
/// "are we still the process that made this?" is one atomic load on the read path, not
/// a `getpid` system call per page.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}

fn fork_generation() -> u64 {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic (async-signal-safe).
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_in_child));
        }
    });
    FORK_GENERATION.load(Ordering::Acquire)
}

/// A value per process: made on first use, and made again in a forked child (which
/// must not touch threads, locks or connections that did not survive the fork; see
/// `runtime.rs` for the same pattern). The parent's value is leaked in the child after
/// `retire` has had a chance to release what it safely can.
pub(crate) struct PerProcess<T: 'static> {
    cur: std::sync::atomic::AtomicPtr<(u64, T)>,
}

impl<T: Send + Sync + 'static> PerProcess<T> {
    pub const fn new() -> Self {
        PerProcess { cur: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()) }
    }

    pub fn get(&self, make: impl FnOnce() -> T, retire: impl FnOnce(&T)) -> &'static T {
        let generation = fork_generation();
        let mut cur = self.cur.load(Ordering::Acquire);
        // SAFETY: values are leaked (never freed), so any pointer ever stored stays valid.
        if let Some((g, v)) = unsafe { cur.as_ref() }
            && *g == generation
        {
            return v;
        }
        let fresh = Box::into_raw(Box::new((generation, make())));
        loop {
            match self.cur.compare_exchange(cur, fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(old) => {
                    // SAFETY: leaked values stay valid.
                    if let Some((_, v)) = unsafe { old.as_ref() } {
                        retire(v);
                    }
                    // SAFETY: just leaked above.
                    return unsafe { &(*fresh).1 };
                }
                Err(actual) => {
                    // SAFETY: leaked values stay valid.
                    if let Some((g, v)) = unsafe { actual.as_ref() }
                        && *g == generation
                    {
                        // another thread of this process installed one first
                        // SAFETY: `fresh` was never shared.
                        drop(unsafe { Box::from_raw(fresh) });
                        return v;
                    }
                    cur = actual;
                }
            }
        }
    }

    /// The value of this process if it was made already.
    pub fn peek(&self) -> Option<&'static T> {
        let generation = fork_generation();
        let cur = self.cur.load(Ordering::Acquire);
        // SAFETY: as in `get`.
        unsafe { cur.as_ref() }.filter(|(g, _)| *g == generation).map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetched_serves_contained_ranges_and_reports_missing_ones_in_strict_mode() {
        let obj = RemoteObject::for_tests("s3://b/k.parquet", 100);
        let f = Fetched::new(Source::Remote(Arc::new(obj)), vec![(10, Bytes::from(vec![7u8; 20]))], true);
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

//! Opening what the user named: listing it (by the scheme that serves it,
//! [`super::scheme`]), opening found files and objects and running a parse over each, reading
//! and writing whole files or objects, reopening a saved index's files, and fetching a
//! plan's byte ranges. Everything that waits on the async runtime does so here, so callers outside
//! `storage/` stay synchronous and never branch on the backend.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use rayon::prelude::*;

use super::aio::block_on;
use super::fetch::with_fetched;
use super::fetched::Fetched;
use super::found::{Found, Listing};
use super::local::{self, LocalFile};
use super::options::io_options;
use super::remote::{RemoteObject, verify};
use super::scheme::scheme_of;
use super::source::{Source, Storage};
use super::spec::StoreSpec;
use crate::error::{Error, Result};

/// List every user path or URL, in order, by the rules of [`crate::paths`]: local paths
/// walked ([`super::walk`]), object URLs listed ([`super::remote`]). `options` configure
/// the object stores (`storage_options`), refused when nothing listed is in a store.
pub fn list(specs: &[String], options: &[(String, String)]) -> Result<Listing> {
    let mut out = Listing::default();
    for s in specs {
        scheme_of(s)?.list(s, options, &mut out)?;
    }
    if !out.found.iter().any(Found::takes_options) {
        super::spec::refuse_unused_options(options, "the path list")?;
    }
    Ok(out)
}

/// Open every one of `found` and run `work` over its bytes, many at once (up to
/// `max_inflight`): each opens itself ([`Found::open`]: a local file on youmu's pool,
/// an object with a GET of its tail, which also gives the size and ETag), `work` runs on
/// the pool, and whatever it finds missing of an object is fetched concurrently and
/// `work` rerun. `done` is called after each; once `stop` is set (or Ctrl-C is pressed)
/// entries not started are skipped (`None`) and those in flight dropped. Returns, in the
/// order of `found`, what `work` returned and the GETs it took.
#[allow(clippy::type_complexity)]
pub fn open_each<T: Send + 'static>(
    found: &[Found],
    work: impl Fn(Fetched) -> Result<T> + Send + Sync + 'static,
    done: &(dyn Fn() + Sync),
    stop: &AtomicBool,
) -> Result<Vec<Option<Result<(T, u64)>>>> {
    use futures_util::StreamExt;
    let work: Arc<dyn Fn(Fetched) -> Result<T> + Send + Sync> = Arc::new(work);
    let width = io_options().max_inflight.max(1);
    let read = || {
        block_on(async {
            let mut out: Vec<Option<Result<(T, u64)>>> = (0..found.len()).map(|_| None).collect();
            let mut stream = futures_util::stream::iter(found.iter().enumerate())
                .map(|(i, f)| {
                    let work = work.clone();
                    async move { (i, open_one(f, work).await) }
                })
                .buffer_unordered(width);
            while let Some((i, r)) = stream.next().await {
                out[i] = Some(r);
                done();
                if stop.load(Ordering::Relaxed) {
                    break; // dropping the stream cancels what is in flight
                }
            }
            out
        })
    };
    crate::runtime::run_interruptible(read, || stop.store(true, Ordering::Relaxed))?
}

/// One entry: opened, then `work` over what came with it and rounds of what it finds missing.
async fn open_one<T: Send + 'static>(
    f: &Found,
    work: Arc<dyn Fn(Fetched) -> Result<T> + Send + Sync>,
) -> Result<(T, u64)> {
    let opened = f.open().await?;
    let opening = opened.requests;
    let (t, requests) = with_fetched(opened, work).await?;
    Ok((t, requests + opening))
}

/// The whole file or object at `path` (a saved index); `options` configure its store.
pub fn read_whole(path: &Path, options: &[(String, String)]) -> Result<Vec<u8>> {
    scheme_of(&path.to_string_lossy())?.read_whole(path, options)
}

/// Write `data` as the file or object at `path`: a local file atomically (see
/// `atomic.rs`), an object with one PUT (a reader sees the old object or the new one).
pub fn write_whole(path: &Path, options: &[(String, String)], data: Vec<u8>, what: &str) -> Result<()> {
    scheme_of(&path.to_string_lossy())?.write_whole(path, options, data, what)
}

/// `storage_options` given for a local `path` whose content names no object store
/// either (`what` says so) are a mistake: refused naming the first key.
pub fn refuse_unused_options_at(path: &Path, options: &[(String, String)], what: &str) -> Result<()> {
    scheme_of(&path.to_string_lossy())?.refuse_unused_options(path, options, what)
}

/// A file or object as a saved index recorded it.
pub struct Saved {
    /// The path or URL, for messages.
    pub name: String,
    /// The local path as saved (bytes: file names need not be UTF-8).
    pub local: PathBuf,
    pub size: u64,
    pub mtime_ns: i64,
    /// The object's version (`None`: a local file).
    pub object: Option<super::source::ObjectVersion>,
}

/// Sources for the files and objects a saved index (`index`, for messages) recorded:
/// objects get one store per bucket and, with `verify`, one check of what they are now
/// (a listing per "directory" or a HEAD each), the first that changed failing the whole
/// load; local files are `stat`ed, each one's own `Err` if it changed (it is opened on
/// first read, through the handle cache).
pub fn reopen(
    saved: &[Saved],
    options: &[(String, String)],
    verify_objects: bool,
    index: &Path,
) -> Result<Vec<Result<Source>>> {
    let stale = |detail: String| Error::Stale { index: index.display().to_string(), detail };
    let mut specs: std::collections::HashMap<String, Arc<StoreSpec>> = Default::default();
    let mut objects: Vec<Option<Arc<RemoteObject>>> = Vec::with_capacity(saved.len());
    for s in saved {
        let Some(v) = &s.object else {
            objects.push(None);
            continue;
        };
        let (spec, key) = StoreSpec::parse(&s.name, options)?;
        let spec = specs.entry(spec.root.clone()).or_insert(spec).clone();
        objects.push(Some(Arc::new(RemoteObject {
            path: spec.object_path(&key)?,
            spec,
            url: s.name.clone(),
            size: s.size,
            etag: v.etag.clone(),
            version: v.version.clone(),
            mtime_ns: s.mtime_ns,
        })));
    }
    if verify_objects {
        let objs: Vec<Arc<RemoteObject>> = objects.iter().flatten().cloned().collect();
        if !objs.is_empty()
            && let Err((url, why)) = block_on(verify(&objs))??
        {
            return Err(stale(format!("{url} changed since it was indexed ({why}): rebuild the index")));
        }
    }
    Ok(crate::runtime::runtime().pool().install(|| {
        saved
            .par_iter()
            .zip(objects)
            .map(|(s, obj)| {
                if let Some(o) = obj {
                    return Ok(Source::new(o));
                }
                let p = s.local.as_path();
                let (size, mtime) =
                    local::stamp(p).map_err(|e| stale(format!("indexed file is gone or unreadable: {e}")))?;
                if size != s.size || mtime != s.mtime_ns {
                    return Err(stale(format!(
                        "{} changed since it was indexed (size {} -> {size}, mtime {} -> {mtime}): rebuild the index",
                        s.name, s.size, s.mtime_ns
                    )));
                }
                Ok(Source::new(Arc::new(LocalFile::known(p.to_path_buf(), size, mtime))))
            })
            .collect()
    }))
}

/// Read `requests` (a source and a byte range each) with at most `max_inflight` in
/// flight, calling `each(q, bytes)` on this thread as request `q` completes (in any
/// order); the first failure stops it (requests in flight are dropped) and is returned.
pub fn fetch_each(requests: &[(Source, Range<u64>)], mut each: impl FnMut(usize, Bytes)) -> Result<()> {
    use futures_util::StreamExt;
    let width = io_options().max_inflight.max(1);
    block_on(async {
        let mut stream = futures_util::stream::iter(requests.iter().enumerate())
            .map(|(q, (source, r))| async move { (q, source.get(r.clone()).await) })
            .buffer_unordered(width);
        while let Some((q, res)) = stream.next().await {
            each(q, res?);
        }
        Ok(())
    })?
}

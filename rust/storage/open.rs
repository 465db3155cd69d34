//! Opening what the user named: listing it (by the scheme that serves it,
//! [`super::scheme`]; what is found is opened and parsed by `opening.rs`), reading
//! and writing whole files or objects, reopening a saved index's files, and fetching a
//! plan's byte ranges. Everything that waits on the async runtime does so here, so callers outside
//! `storage/` stay synchronous and never branch on the backend.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use rayon::prelude::*;

use super::aio::block_on;
use super::found::{Found, Listing};
use super::local::{self, LocalFile};
use super::options::io_options;
use super::per_store::OptionsPerStore;
use super::remote::{RemoteObject, verify};
use super::scheme::scheme_of;
use super::source::{Source, Storage};
use super::spec::StoreSpec;
use crate::error::{Error, Result};

/// List every user path or URL, in order, by the rules of [`crate::index::paths`]: local paths
/// walked ([`super::walk`]), object URLs listed ([`super::remote`]). `options` configure
/// the object stores (`storage_options`, each store given those of its kind: see
/// [`super::per_store`]), refused when nothing listed is in a store.
pub fn list(specs: &[String], options: &[(String, String)]) -> Result<Listing> {
    let mut out = Listing::default();
    // every store's options first: a key none takes is refused before anything is sent
    let mut per_store = OptionsPerStore::default();
    let mut store_options = Vec::with_capacity(specs.len());
    for s in specs {
        store_options.push(per_store.of(s, options)?);
    }
    per_store.refuse_untaken(options)?;
    for (s, opts) in specs.iter().zip(store_options) {
        scheme_of(s)?.list(s, &opts, &mut out)?;
    }
    if !out.found.iter().any(Found::takes_options) {
        super::spec::refuse_unused_options(options, "the path list")?;
    }
    Ok(out)
}

/// The whole file or object at `path` (a saved index); `options` configure its store.
pub fn read_whole(path: &Path, options: &[(String, String)]) -> Result<Vec<u8>> {
    let name = path.to_string_lossy();
    // the options of an index's data (another store's among them) are given here too
    scheme_of(&name)?.read_whole(path, &OptionsPerStore::of_one(&name, options)?)
}

/// Write `data` as the file or object at `path`: a local file atomically (see
/// `atomic.rs`), an object with one PUT (a reader sees the old object or the new one).
pub fn write_whole(path: &Path, options: &[(String, String)], data: Vec<u8>, what: &str) -> Result<()> {
    let name = path.to_string_lossy();
    scheme_of(&name)?.write_whole(path, &OptionsPerStore::of_one(&name, options)?, data, what)
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
    let mut per_store = OptionsPerStore::default();
    for s in saved {
        let Some(v) = &s.object else {
            objects.push(None);
            continue;
        };
        let (spec, key) = StoreSpec::parse(&s.name, &per_store.of(&s.name, options)?)?;
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
    per_store.refuse_untaken(options)?;
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

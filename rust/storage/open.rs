//! Opening what the user named: listing it (by the scheme that serves it,
//! [`super::scheme`]; what is found is opened and parsed by `opening.rs`), reading
//! and writing whole files or objects, reopening a saved index's files, and fetching a
//! plan's byte ranges. Everything that waits on the async runtime does so here, so callers outside
//! `storage/` stay synchronous and never branch on the backend.

use std::ops::Range;
use std::path::Path;

use bytes::Bytes;

use super::aio::block_on;
use super::found::{Found, Listing};
use super::options::io_options;
use super::per_store::OptionsPerStore;
pub use super::scheme::Saved;
use super::scheme::{Scheme, scheme_of};
use super::source::{Source, Storage};
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

/// Sources for the files and objects a saved index (`index`, for messages) recorded,
/// each reopened by the scheme that serves its name ([`super::scheme::Scheme::reopen`]:
/// local files `stat`ed, objects given one store per bucket and, with `verify_objects`,
/// checked against what they are now). Every store's options are settled first: a key
/// none takes is refused before anything is sent.
pub fn reopen(
    saved: &[Saved],
    options: &[(String, String)],
    verify_objects: bool,
    index: &Path,
) -> Result<Vec<Result<Source>>> {
    let mut per_store = OptionsPerStore::default();
    // (scheme, positions in `saved`, entries with their store's options), in order of first use
    type Group<'a> = (&'static dyn Scheme, Vec<usize>, Vec<(&'a Saved, Vec<(String, String)>)>);
    let mut groups: Vec<Group<'_>> = Vec::new();
    for (i, s) in saved.iter().enumerate() {
        let scheme = scheme_of(&s.name)?;
        let opts = per_store.of(&s.name, options)?;
        match groups.iter_mut().find(|g| g.0.name() == scheme.name()) {
            Some(g) => {
                g.1.push(i);
                g.2.push((s, opts));
            }
            None => groups.push((scheme, vec![i], vec![(s, opts)])),
        }
    }
    per_store.refuse_untaken(options)?;
    let mut out: Vec<Option<Result<Source>>> = saved.iter().map(|_| None).collect();
    for (scheme, at, entries) in groups {
        for (i, source) in at.into_iter().zip(scheme.reopen(&entries, verify_objects, index)?) {
            out[i] = Some(source);
        }
    }
    Ok(out
        .into_iter()
        .map(|s| {
            s.unwrap_or_else(|| Err(Error::Internal(format!("{}: a saved file was not reopened", index.display()))))
        })
        .collect())
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

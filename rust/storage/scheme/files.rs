//! Files on a local filesystem: a path, or a `file://` URL decoded to one. Listed by a
//! walk (`walk.rs`), read in place (`local.rs`), written atomically (`atomic.rs`),
//! reopened from a saved index by a `stat` each (size and mtime as recorded).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;

use super::{Saved, Scheme, url_scheme};
use crate::error::{Error, Result};
use crate::storage::found::Listing;
use crate::storage::local::{self, LocalFile};
use crate::storage::source::Source;

pub struct LocalFiles;

pub static FILES: LocalFiles = LocalFiles;

impl LocalFiles {
    fn path(spec: &str) -> Result<PathBuf> {
        if url_scheme(spec) == "file" {
            return url::Url::parse(spec)
                .ok()
                .and_then(|u| u.to_file_path().ok())
                .ok_or_else(|| Error::InvalidArgument(format!("{spec:?} is not a valid file:// URL")));
        }
        Ok(PathBuf::from(spec))
    }
}

impl Scheme for LocalFiles {
    fn name(&self) -> &'static str {
        "local files"
    }
    fn url_schemes(&self) -> Vec<&'static str> {
        vec!["", "file"]
    }
    fn list(&self, spec: &str, _options: &[(String, String)], out: &mut Listing) -> Result<()> {
        crate::storage::walk::list_local(&Self::path(spec)?.display().to_string(), out)
    }
    fn read_whole(&self, path: &Path, _options: &[(String, String)]) -> Result<Vec<u8>> {
        std::fs::read(path).map_err(|e| Error::io(path, e))
    }
    fn write_whole(&self, path: &Path, _options: &[(String, String)], data: Vec<u8>, what: &str) -> Result<()> {
        // atomically: a temporary file renamed over it (`atomic.rs`)
        crate::storage::atomic::write(path, &data, what)
    }
    fn refuse_unused_options(&self, path: &Path, options: &[(String, String)], what: &str) -> Result<()> {
        crate::storage::spec::refuse_unused_options(options, &format!("{} ({what})", path.to_string_lossy()))
    }
    /// Each file `stat`ed (on the pool), its own `Err` if it changed; it is opened on
    /// first read, through the handle cache.
    fn reopen(
        &self,
        saved: &[(&Saved, Vec<(String, String)>)],
        _verify: bool,
        index: &Path,
    ) -> Result<Vec<Result<Source>>> {
        let stale = |detail: String| Error::Stale { index: index.display().to_string(), detail };
        if let Some((s, _)) = saved.iter().find(|(s, _)| s.object.is_some()) {
            return Err(Error::corrupt_index(index, format!("{} is a local path recorded with an object's version", s.name)));
        }
        Ok(crate::runtime::runtime().pool().install(|| {
            saved
                .par_iter()
                .map(|(s, _)| {
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
}

//! The scheme registry: each kind of place files can be in is a [`Scheme`] that claims
//! the paths and URLs it serves and lists, reads and writes them (as `object_store`
//! parses a URL into the store that serves it). Telling a user's string apart happens
//! once, in [`scheme_of`]; nothing matches on what kind of place a path names, and a new
//! kind of place is one more `impl Scheme` in [`SCHEMES`].

use std::path::{Path, PathBuf};

use super::found::Listing;
use super::spec::is_remote;
use crate::error::{Error, Result};

/// A kind of place files are in: local paths, object stores.
pub trait Scheme: Sync {
    /// Whether `spec` (a user's path or URL) is this scheme's; an error where its form
    /// is no scheme's (a URL of an unsupported scheme).
    fn claims(&self, spec: &str) -> Result<bool>;
    /// List `spec` into `out` by the rules of [`crate::paths`] (`options` configure
    /// object stores).
    fn list(&self, spec: &str, options: &[(String, String)], out: &mut Listing) -> Result<()>;
    /// The whole file or object at `path` (a saved index; a local name need not be UTF-8).
    fn read_whole(&self, path: &Path, options: &[(String, String)]) -> Result<Vec<u8>>;
    /// Write `data` as the file or object at `path`, replacing it whole: a reader sees
    /// the old bytes or the new ones (`what` names it in errors).
    fn write_whole(&self, path: &Path, options: &[(String, String)], data: Vec<u8>, what: &str) -> Result<()>;
    /// `storage_options` given for `path`, whose content names no object store (`what`
    /// says so): refused naming the first key where this scheme takes none.
    fn refuse_unused_options(&self, path: &Path, options: &[(String, String)], what: &str) -> Result<()>;
}

/// Every scheme, asked in order: the first that claims a path or URL serves it.
pub static SCHEMES: [&dyn Scheme; 2] = [&ObjectStores, &LocalFiles];

/// The scheme serving `spec`: an error naming the supported ones where none does.
pub fn scheme_of(spec: &str) -> Result<&'static dyn Scheme> {
    for s in SCHEMES {
        if s.claims(spec)? {
            return Ok(s);
        }
    }
    Err(Error::Internal(format!("no storage scheme serves {:?}", super::redact::redact(spec))))
}

/// Objects in stores (S3, GCS, Azure, HTTP), read with ranged GETs through `object_store`.
struct ObjectStores;

impl Scheme for ObjectStores {
    fn claims(&self, spec: &str) -> Result<bool> {
        is_remote(spec)
    }
    fn list(&self, spec: &str, options: &[(String, String)], out: &mut Listing) -> Result<()> {
        super::remote::list_objects(spec, options, &mut out.found)
    }
    fn read_whole(&self, path: &Path, options: &[(String, String)]) -> Result<Vec<u8>> {
        super::client::read_object(&path.to_string_lossy(), options)
    }
    fn write_whole(&self, path: &Path, options: &[(String, String)], data: Vec<u8>, _what: &str) -> Result<()> {
        // one PUT: a reader sees the old object or the new one
        super::client::write_object(&path.to_string_lossy(), options, data)
    }
    fn refuse_unused_options(&self, _path: &Path, _options: &[(String, String)], _what: &str) -> Result<()> {
        Ok(())
    }
}

/// Files on a local filesystem: a path, or a `file://` URL decoded to one.
struct LocalFiles;

impl LocalFiles {
    fn path(spec: &str) -> Result<PathBuf> {
        if spec.to_ascii_lowercase().starts_with("file://") {
            return url::Url::parse(spec)
                .ok()
                .and_then(|u| u.to_file_path().ok())
                .ok_or_else(|| Error::InvalidArgument(format!("{spec:?} is not a valid file:// URL")));
        }
        Ok(PathBuf::from(spec))
    }
}

impl Scheme for LocalFiles {
    fn claims(&self, _spec: &str) -> Result<bool> {
        // what no store claims is a local path (`is_remote` refused unsupported URLs)
        Ok(true)
    }
    fn list(&self, spec: &str, _options: &[(String, String)], out: &mut Listing) -> Result<()> {
        super::walk::list_local(&Self::path(spec)?.display().to_string(), out)
    }
    fn read_whole(&self, path: &Path, _options: &[(String, String)]) -> Result<Vec<u8>> {
        std::fs::read(path).map_err(|e| Error::io(path, e))
    }
    fn write_whole(&self, path: &Path, _options: &[(String, String)], data: Vec<u8>, what: &str) -> Result<()> {
        // atomically: a temporary file renamed over it (`atomic.rs`)
        crate::atomic::write(path, &data, what)
    }
    fn refuse_unused_options(&self, path: &Path, options: &[(String, String)], what: &str) -> Result<()> {
        super::spec::refuse_unused_options(options, &format!("{} ({what})", path.to_string_lossy()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_path_or_url_is_served_by_the_first_scheme_claiming_it() {
        let opts = [("region".to_string(), "us-east-1".to_string())];
        // object stores take storage_options; local files refuse them, naming the key
        for url in ["s3://b/k.parquet", "gs://b/k", "https://h/x.parquet"] {
            assert!(scheme_of(url).unwrap().refuse_unused_options(Path::new(url), &opts, "x").is_ok(), "{url}");
        }
        for path in ["/tmp/x.parquet", "rel/x.parquet", "file:///tmp/x.parquet"] {
            let err = scheme_of(path).unwrap().refuse_unused_options(Path::new(path), &opts, "x").unwrap_err();
            assert!(err.to_string().contains("region"), "{path}: {err}");
        }
        // a URL of a scheme nobody serves is an error naming what is supported
        let err = scheme_of("hdfs://nn/x.parquet").err().expect("hdfs is served by no scheme");
        assert!(err.to_string().contains("not supported"), "{err}");
    }

    #[test]
    fn a_file_url_lists_the_local_file_it_names() {
        let dir = std::env::temp_dir().join(format!("youmu-scheme-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("a.parquet");
        std::fs::write(&file, b"PAR1").unwrap();
        let mut out = Listing::default();
        let url = url::Url::from_file_path(&file).unwrap().to_string();
        scheme_of(&url).unwrap().list(&url, &[], &mut out).unwrap();
        assert_eq!(out.found.len(), 1);
        assert!(out.found[0].name().ends_with("a.parquet"), "{}", out.found[0].name());
        assert!(scheme_of("file://not a url%zz").unwrap().list("file://not a url%zz", &[], &mut out).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

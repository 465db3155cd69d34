//! The scheme registry: each kind of place files can be in is one [`Scheme`], one file
//! here — local paths (`files.rs`), object stores (`objects.rs`, every kind the store
//! registry `stores/` holds: S3, GCS, Azure, HTTP(S)) and the Hugging Face Hub
//! (`hub.rs`) — which names the URL schemes it serves and lists, reads, writes and
//! reopens its paths (as `object_store`'s `parse_url_opts` maps a URL to the store that
//! serves it). A user's string is told apart once, in [`scheme_of`]; nothing else
//! matches on what kind of place a path names, and a new kind of place is one more file
//! here, registered in [`SCHEMES`].

use std::path::{Path, PathBuf};

use super::found::Listing;
use super::source::{ObjectVersion, Source};
use super::stores::StoreKind;
use crate::error::{Error, Result};
use crate::redact::redact;

/// Declares each scheme file and lists what it registers, in one line.
macro_rules! schemes {
    ($($file:ident :: $scheme:ident),* $(,)?) => {
        $(mod $file;)*
        /// Every scheme; each URL scheme is served by exactly one.
        pub static SCHEMES: &[&dyn Scheme] = &[$(&$file::$scheme),*];
    };
}

schemes!(files::FILES, objects::OBJECTS, hub::HUB);

pub use hub::{HubResolver, set_hub_resolver};

/// Paths or URLs and the `storage_options` that reach them.
pub type Resolved = (Vec<String>, Vec<(String, String)>);

/// A file or object as a saved index recorded it.
pub struct Saved {
    /// The path or URL, for messages.
    pub name: String,
    /// The local path as saved (bytes: file names need not be UTF-8).
    pub local: PathBuf,
    pub size: u64,
    pub mtime_ns: i64,
    /// The object's version (`None`: a local file).
    pub object: Option<ObjectVersion>,
}

/// A kind of place files are in.
pub trait Scheme: Sync {
    /// What it is, in messages.
    fn name(&self) -> &'static str;
    /// The URL schemes it serves (`s3` for `s3://...`); `""` stands for a plain path.
    fn url_schemes(&self) -> Vec<&'static str>;
    /// What `spec` (one of its paths or URLs) stands for, where that is paths or URLs of
    /// other schemes (a Hub dataset: resolve URLs of one commit), with the options that
    /// reach them; `None` where `spec` is read as it is.
    fn resolve(&self, _spec: &str, _options: &[(String, String)]) -> Result<Option<Resolved>> {
        Ok(None)
    }
    /// List `spec` into `out` by the rules of [`crate::index::paths`] (`options` configure
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
    /// Whether a store of this scheme's own kind takes the `storage_options` key `key`
    /// (lower case): every scheme's keys together tell a misspelt key from one meant for
    /// another store (see [`super::per_store`]). Local files take none.
    fn takes_option(&self, _key: &str) -> bool {
        false
    }
    /// The store `spec` is read from, as its root (for messages) and the kind whose
    /// `storage_options` it takes (see [`super::per_store`]); `None` where no store reads
    /// it (local files take no options).
    fn store_of(&self, _spec: &str) -> Result<Option<(String, &'static dyn StoreKind)>> {
        Ok(None)
    }
    /// Sources for the files or objects of this scheme a saved index (`index`, for
    /// messages) recorded, in order, each with the `storage_options` its store takes:
    /// with `verify`, what changed since is found now (a stale index fails the load);
    /// an entry's own `Err` where only it changed and it is known without a request.
    fn reopen(
        &self,
        saved: &[(&Saved, Vec<(String, String)>)],
        verify: bool,
        index: &Path,
    ) -> Result<Vec<Result<Source>>>;
}

/// The URL scheme `spec` is written with, lowercased (`name://...`); `""` for a plain
/// path (a one-letter "scheme" is a Windows drive, not a URL).
fn url_scheme(spec: &str) -> String {
    let Some((scheme, _)) = spec.split_once("://") else { return String::new() };
    let ok = scheme.len() >= 2
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if ok { scheme.to_ascii_lowercase() } else { String::new() }
}

/// The scheme serving `spec`; a URL of a scheme none serves (`ftp://`, `hdfs://`,
/// `memory://`...) is an error naming the supported ones, never a local path that does
/// not exist.
pub fn scheme_of(spec: &str) -> Result<&'static dyn Scheme> {
    let want = url_scheme(spec);
    if let Some(s) = SCHEMES.iter().find(|s| s.url_schemes().contains(&want.as_str())) {
        return Ok(*s);
    }
    let supported: Vec<&str> = SCHEMES.iter().flat_map(|s| s.url_schemes()).filter(|u| !u.is_empty()).collect();
    Err(Error::InvalidArgument(format!(
        "{:?}: the URL scheme {want:?} is not supported (supported: {}, or a local path)",
        redact(spec),
        supported.join(", ")
    )))
}

/// `specs` with each path or URL that stands for others (see [`Scheme::resolve`])
/// replaced by them, and the options that reach them all: what is then listed, indexed
/// and recorded (an index of a Hub dataset records the resolve URLs of its commit).
pub fn resolve(specs: Vec<String>, options: Vec<(String, String)>) -> Result<Resolved> {
    let (mut out, mut options) = (Vec::with_capacity(specs.len()), options);
    for s in specs {
        match scheme_of(&s)?.resolve(&s, &options)? {
            Some((more, opts)) => {
                out.extend(more);
                options = opts;
            }
            None => out.push(s),
        }
    }
    Ok((out, options))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_url_scheme_is_served_by_one_scheme() {
        let mut seen = std::collections::HashSet::new();
        for s in SCHEMES {
            for u in s.url_schemes() {
                assert!(seen.insert(u), "{u:?} is served twice");
            }
        }
        let name = |spec: &str| scheme_of(spec).map(|s| s.name());
        let store = |spec: &str| scheme_of(spec).unwrap().store_of(spec).unwrap().map(|(_, k)| k.name());
        for (url, kind) in [
            ("s3://b/k.parquet", "Amazon S3"),
            ("S3A://b/k", "Amazon S3"),
            ("gs://b/k", "Google Cloud Storage"),
            ("abfss://c@a.dfs.core.windows.net/k", "Azure Blob Storage"),
            ("https://h/x.parquet", "HTTP(S)"),
            ("https://s3.us-east-1.amazonaws.com/bkt/k", "Amazon S3"),
        ] {
            assert_eq!((name(url).unwrap(), store(url)), ("object stores", Some(kind)), "{url}");
        }
        assert_eq!(name("hf://datasets/o/n/x.parquet").unwrap(), "the Hugging Face Hub");
        for local in ["/tmp/x.parquet", "rel/x.parquet", "file:///tmp/x.parquet", "C://x", "a:b"] {
            assert_eq!(name(local).unwrap(), "local files", "{local}");
        }
    }

    #[test]
    fn stores_take_storage_options_and_local_files_refuse_them() {
        let opts = [("region".to_string(), "us-east-1".to_string())];
        for url in ["s3://b/k.parquet", "gs://b/k", "https://h/x.parquet"] {
            assert!(scheme_of(url).unwrap().refuse_unused_options(Path::new(url), &opts, "x").is_ok(), "{url}");
        }
        for path in ["/tmp/x.parquet", "rel/x.parquet", "file:///tmp/x.parquet"] {
            let err = scheme_of(path).unwrap().refuse_unused_options(Path::new(path), &opts, "x").unwrap_err();
            assert!(err.to_string().contains("region"), "{path}: {err}");
        }
    }

    #[test]
    fn each_scheme_declares_the_options_of_its_stores() {
        // the options a path's store takes are its kind's
        let takes = |spec: &str, key: &str| {
            scheme_of(spec).unwrap().store_of(spec).unwrap().is_some_and(|(_, kind)| kind.takes_option(key))
        };
        assert!(takes("s3://b/k", "aws_region") && !takes("s3://b/k", "google_service_account"));
        assert!(takes("gs://b/k", "google_service_account") && !takes("gs://b/k", "aws_region"));
        assert!(takes("az://c/k", "azure_storage_account_name"));
        assert!(takes("https://h/x", "bearer_token_env") && takes("https://h/x", "timeout"));
        assert!(takes("hf://datasets/o/n/x.parquet", "bearer_token_env"), "the Hub's files are http(s) objects");
        assert!(!takes("/tmp/x.parquet", "timeout"), "local files take none");
        for key in ["aws_region", "google_service_account", "azure_storage_account_name", "bearer_token_env"] {
            assert_eq!(
                SCHEMES.iter().filter(|s| s.takes_option(key)).count(),
                if key.starts_with("bearer") { 2 } else { 1 },
                "{key}"
            );
            let kinds = crate::storage::stores::STORES.iter().filter(|k| k.takes_option(key)).count();
            assert_eq!(kinds, 1, "{key}: one kind of store takes it");
        }
    }

    #[test]
    fn a_url_of_a_scheme_none_serves_is_refused_naming_the_supported_ones() {
        for url in ["hdfs://nn/x.parquet", "ftp://h/x", "memory://x", "s3+x://b/k"] {
            let err = scheme_of(url).err().unwrap_or_else(|| panic!("{url} is served by no scheme"));
            let msg = err.to_string();
            assert!(msg.contains("not supported") && msg.contains("s3") && msg.contains("hf"), "{msg}");
            assert!(!msg.contains("\"\""), "the plain path's empty scheme is not listed: {msg}");
        }
        let err = resolve(vec!["/tmp/a".into(), "hdfs://nn/x".into()], vec![]).unwrap_err();
        assert!(err.to_string().contains("hdfs"), "{err}");
    }

    #[test]
    fn paths_that_stand_for_none_resolve_to_themselves() {
        let specs = vec!["/tmp/a.parquet".to_string(), "s3://b/k/".to_string()];
        let opts = vec![("region".to_string(), "x".to_string())];
        assert_eq!(resolve(specs.clone(), opts.clone()).unwrap(), (specs, opts));
    }

    #[test]
    fn hf_urls_need_the_resolver_the_bindings_install() {
        // `cargo test` builds no bindings: nothing installed one
        let err = resolve(vec!["hf://datasets/o/n/x.parquet".into()], vec![]).unwrap_err();
        assert!(err.to_string().contains("youmu Python package"), "{err}");
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

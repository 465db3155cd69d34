//! The scheme registry: each kind of place files can be in (local paths, S3, Google
//! Cloud Storage, Azure, HTTP(S), the Hugging Face Hub) is one [`Scheme`], which names
//! the URL schemes it serves and lists, reads and writes its paths (as `object_store`'s
//! `parse_url_opts` maps a URL to the store that serves it). A user's string is told
//! apart once, in [`scheme_of`]; nothing else matches on what kind of place a path
//! names, and a new kind of place is one more `impl Scheme` in [`SCHEMES`].

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use object_store::ObjectStoreScheme;

use super::found::Listing;
use crate::error::{Error, Result};
use crate::redact::redact;

/// Paths or URLs and the `storage_options` that reach them.
pub type Resolved = (Vec<String>, Vec<(String, String)>);

/// A kind of place files are in.
pub trait Scheme: Sync {
    /// What it is, in messages.
    fn name(&self) -> &'static str;
    /// The URL schemes it serves (`s3` for `s3://...`); `""` stands for a plain path.
    fn url_schemes(&self) -> &'static [&'static str];
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
    fn store_of(&self, _spec: &str) -> Result<Option<(String, ObjectStoreScheme)>> {
        Ok(None)
    }
}

/// Every scheme; each URL scheme is served by exactly one.
pub static SCHEMES: [&dyn Scheme; 6] = [&LOCAL, &S3, &GCS, &AZURE, &HTTP, &Hub];

static LOCAL: LocalFiles = LocalFiles;
static S3: Store = Store { name: "Amazon S3", url_schemes: &["s3", "s3a"], kind: ObjectStoreScheme::AmazonS3 };
static GCS: Store =
    Store { name: "Google Cloud Storage", url_schemes: &["gs"], kind: ObjectStoreScheme::GoogleCloudStorage };
static AZURE: Store = Store {
    name: "Azure Blob Storage",
    url_schemes: &["az", "adl", "azure", "abfs", "abfss"],
    kind: ObjectStoreScheme::MicrosoftAzure,
};
static HTTP: Store = Store { name: "HTTP(S)", url_schemes: &["http", "https"], kind: ObjectStoreScheme::Http };

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
    let supported: Vec<&str> =
        SCHEMES.iter().flat_map(|s| s.url_schemes().iter().copied()).filter(|u| !u.is_empty()).collect();
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

/// Objects in one kind of store, read with ranged GETs through `object_store`.
struct Store {
    name: &'static str,
    url_schemes: &'static [&'static str],
    /// The kind of store its URLs name, whose options it declares (an https URL may
    /// still name another kind's store: a path-style S3 endpoint is read as S3).
    kind: ObjectStoreScheme,
}

impl Scheme for Store {
    fn name(&self) -> &'static str {
        self.name
    }
    fn url_schemes(&self) -> &'static [&'static str] {
        self.url_schemes
    }
    fn list(&self, spec: &str, options: &[(String, String)], out: &mut Listing) -> Result<()> {
        super::listed::list_objects(spec, options, &mut out.found)
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
    fn takes_option(&self, key: &str) -> bool {
        super::spec::takes_option(&self.kind, key)
    }
    fn store_of(&self, spec: &str) -> Result<Option<(String, ObjectStoreScheme)>> {
        let (store, _) = super::spec::StoreSpec::parse(spec, &[])?;
        Ok(Some((store.root.clone(), store.scheme.clone())))
    }
}

/// Files on a local filesystem: a path, or a `file://` URL decoded to one.
struct LocalFiles;

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
    fn url_schemes(&self) -> &'static [&'static str] {
        &["", "file"]
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

/// What turns an `hf://` URL into the resolve URLs of its files and the options that
/// send the token: the Hub's API (listing a repository's tree, pinning a revision to its
/// commit, finding the token) is `huggingface_hub`'s, so the Python bindings install it
/// (`youmu.streams.hub.expand_paths`); storage knows nothing of Python.
pub type HubResolver = dyn Fn(&str, &[(String, String)]) -> Result<Resolved> + Send + Sync;

static HUB_RESOLVER: OnceLock<Box<HubResolver>> = OnceLock::new();

/// Install the Hub's resolver (once per process; later calls change nothing).
pub fn set_hub_resolver(resolver: Box<HubResolver>) {
    let _ = HUB_RESOLVER.set(resolver);
}

/// Datasets on the Hugging Face Hub (`hf://datasets/<owner>/<name>[@rev]/<path>`): each
/// stands for the resolve URLs of its files at one commit, http(s) objects read like
/// any other (ranged GETs, ETags checked).
struct Hub;

impl Hub {
    fn resolved(&self, spec: &str, options: &[(String, String)]) -> Result<Resolved> {
        let resolver = HUB_RESOLVER.get().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{:?}: hf:// paths are resolved through the youmu Python package (huggingface_hub), not loaded here",
                redact(spec)
            ))
        })?;
        let (urls, options) = resolver(spec, options)?;
        if let Some(u) = urls.iter().find(|u| url_scheme(u) == "hf") {
            return Err(Error::Internal(format!("the Hub resolved {:?} to another hf:// URL", redact(u))));
        }
        Ok((urls, options))
    }
}

impl Scheme for Hub {
    fn name(&self) -> &'static str {
        "the Hugging Face Hub"
    }
    fn url_schemes(&self) -> &'static [&'static str] {
        &["hf"]
    }
    fn resolve(&self, spec: &str, options: &[(String, String)]) -> Result<Option<Resolved>> {
        self.resolved(spec, options).map(Some)
    }
    fn list(&self, spec: &str, options: &[(String, String)], out: &mut Listing) -> Result<()> {
        let (urls, options) = self.resolved(spec, options)?;
        for u in urls {
            scheme_of(&u)?.list(&u, &options, out)?;
        }
        Ok(())
    }
    fn read_whole(&self, path: &Path, options: &[(String, String)]) -> Result<Vec<u8>> {
        let spec = path.to_string_lossy();
        let (urls, options) = self.resolved(&spec, options)?;
        match urls.as_slice() {
            [one] => scheme_of(one)?.read_whole(Path::new(one), &options),
            _ => Err(Error::InvalidArgument(format!(
                "{:?} names {} files of the Hub, not one saved index",
                redact(&spec),
                urls.len()
            ))),
        }
    }
    fn write_whole(&self, path: &Path, _options: &[(String, String)], _data: Vec<u8>, what: &str) -> Result<()> {
        Err(Error::InvalidArgument(format!(
            "{:?}: youmu does not write to the Hugging Face Hub (a {what} there needs a commit): save it locally or \
             to an object store and upload it with huggingface_hub",
            redact(&path.to_string_lossy())
        )))
    }
    fn refuse_unused_options(&self, _path: &Path, _options: &[(String, String)], _what: &str) -> Result<()> {
        Ok(())
    }
    fn takes_option(&self, key: &str) -> bool {
        HTTP.takes_option(key) // the token's options, and any http(s) client's
    }
    fn store_of(&self, _spec: &str) -> Result<Option<(String, ObjectStoreScheme)>> {
        // its files are http(s) objects: they take an http(s) store's options (the token's)
        Ok(Some(("hf://".to_string(), ObjectStoreScheme::Http)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_url_scheme_is_served_by_one_scheme() {
        let mut seen = std::collections::HashSet::new();
        for s in SCHEMES {
            for u in s.url_schemes() {
                assert!(seen.insert(*u), "{u:?} is served twice");
            }
        }
        let name = |spec: &str| scheme_of(spec).map(|s| s.name());
        assert_eq!(name("s3://b/k.parquet").unwrap(), "Amazon S3");
        assert_eq!(name("S3A://b/k").unwrap(), "Amazon S3");
        assert_eq!(name("gs://b/k").unwrap(), "Google Cloud Storage");
        assert_eq!(name("abfss://c@a.dfs.core.windows.net/k").unwrap(), "Azure Blob Storage");
        assert_eq!(name("https://h/x.parquet").unwrap(), "HTTP(S)");
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
        let takes = |spec: &str, key: &str| scheme_of(spec).unwrap().takes_option(key);
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

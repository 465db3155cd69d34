//! The store registry: each kind of object store read through the `object_store` crate
//! (S3, Google Cloud Storage, Azure, HTTP(S)) is one file here, one [`StoreKind`]
//! declaring everything about it that differs from the others — the URL schemes that
//! name it, its client builder, its environment prefix and option keys, how a key
//! becomes an object path and a URL, how long a key may be, whether it can list and
//! whether it serves suffix ranges — as `object_store` keeps one folder per store.
//! Everything else in `storage/` asks a store's kind, never which kind it is: a new
//! kind of object store is one file here and its name in [`STORES`].

use std::sync::Arc;

use object_store::path::Path as ObjectPath;
use object_store::{ClientConfigKey, ObjectStore, ObjectStoreScheme, RetryConfig};

use crate::error::{Error, Result, StorageErrorKind};
use crate::redact::redact;

/// Declares each store file and lists what it registers, in one line.
macro_rules! stores {
    ($($file:ident :: $kind:ident),* $(,)?) => {
        $(mod $file;)*
        /// Every kind of object store; each URL scheme names at most one.
        pub static STORES: &[&dyn StoreKind] = &[$(&$file::$kind),*];
    };
}

stores!(s3::S3, gcs::GCS, azure::AZURE, http::HTTP);

pub use http::MAX_HTTP_URL;

/// What building one store's client takes (a `StoreSpec`'s parts, and youmu's settings).
pub struct Build<'a> {
    /// The store's id in this process (its signed URLs are remembered under it).
    pub id: u64,
    /// `scheme://bucket/` (or the whole URL of one object), as in `StoreSpec::root`.
    pub root: &'a str,
    pub options: &'a [(String, String)],
    /// The root is one object's whole http(s) URL, its query included.
    pub one_object: bool,
    /// The `Authorization: Basic` value an http(s) URL's user info or options give.
    pub basic_auth: Option<String>,
    /// youmu's timeouts, where neither the environment nor the options set the store's own.
    pub client: Vec<(ClientConfigKey, String)>,
    /// No retries of the store's own: youmu retries every request itself (`retry.rs`).
    pub retry: RetryConfig,
}

/// How long a key is, against the most its store holds, for a message refusing it.
pub struct KeyLength {
    pub len: usize,
    pub limit: usize,
    /// What `len` counts ("bytes", "characters").
    pub unit: &'static str,
    /// What holds at most `limit` ("an object key").
    pub who: &'static str,
}

/// The longest key S3 and GCS accept (bytes) and Azure (characters).
pub const MAX_OBJECT_KEY: usize = 1024;

/// One kind of object store.
pub trait StoreKind: Sync {
    /// What it is, in messages.
    fn name(&self) -> &'static str;
    /// The URL schemes that name it (`s3` for `s3://...`); an https URL may still name
    /// another kind's store (a path-style S3 endpoint): see [`object_store_scheme`](Self::object_store_scheme).
    fn url_schemes(&self) -> &'static [&'static str];
    /// What `object_store`'s URL parser calls a URL of this kind's stores: how an
    /// https URL of S3 or Azure is told from a plain web server's. `None` for a kind
    /// that parser does not know: its own URL schemes name it.
    fn object_store_scheme(&self) -> Option<ObjectStoreScheme>;
    /// The environment variables that configure it (`AWS_` for `AWS_REGION`).
    fn env_prefix(&self) -> &'static str;
    /// Whether its stores take the `storage_options` key `key` (lower case).
    fn takes_option(&self, key: &str) -> bool;
    /// Its client: environment, then youmu's timeouts and retries, then the options.
    fn build(&self, b: Build<'_>) -> Result<Arc<dyn ObjectStore>>;
    /// Whether its URLs are plain http(s) URLs: user info is credentials, a fragment the
    /// client's own, and a query string part of one object's address.
    fn plain_http_urls(&self) -> bool {
        false
    }
    /// How long `key` (in the store at `root`) is, against the most the store holds.
    fn key_length(&self, _root: &str, key: &str) -> KeyLength {
        KeyLength { len: key.len(), limit: MAX_OBJECT_KEY, unit: "bytes", who: "an object key" }
    }
    /// The object path of `key` in the store at `root`, as `object_store` names it.
    fn object_path(&self, _root: &str, key: &str) -> String {
        key.to_string()
    }
    /// The URL of the object at `path` in the store at `root`.
    fn url_of(&self, root: &str, path: &ObjectPath) -> String {
        format!("{root}{}", path.as_ref())
    }
    /// Why its stores cannot list keys (`None`: they can).
    fn cannot_list(&self) -> Option<&'static str> {
        None
    }
    /// Whether it serves suffix ranges (the last n bytes, size unknown); where not, a
    /// lone object's tail costs a HEAD first.
    fn suffix_ranges(&self) -> bool {
        true
    }
}

impl std::fmt::Debug for dyn StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The kind of store a URL scheme (lower case: `s3`, `https`) names, if any.
pub fn named_by(url_scheme: &str) -> Option<&'static dyn StoreKind> {
    STORES.iter().copied().find(|k| k.url_schemes().contains(&url_scheme))
}

/// Every URL scheme some kind of store serves.
pub fn url_schemes() -> impl Iterator<Item = &'static str> {
    STORES.iter().flat_map(|k| k.url_schemes().iter().copied())
}

/// The kind of store `base` (`scheme://authority/`) is, and whether the first segment of
/// a path under it names the bucket (path-style https URLs of S3 and Azure, `az://`
/// URLs); `None` where no kind of store serves it. `object_store`'s URL parser decides
/// where it knows the URL (an https URL may be S3's); elsewhere the URL scheme does.
/// `Err` (`bad`) where neither knows it.
pub fn store_at(base: &str, bad: impl Fn(&str) -> Error) -> Result<Option<(&'static dyn StoreKind, bool)>> {
    let probe = url::Url::parse(&format!("{base}seg/x")).map_err(|e| bad(&e.to_string()))?;
    match ObjectStoreScheme::parse(&probe) {
        Ok((scheme, probe_path)) => {
            let kind = STORES.iter().copied().find(|k| k.object_store_scheme() == Some(scheme.clone()));
            Ok(kind.map(|k| (k, probe_path.as_ref() == "x")))
        }
        Err(e) => match named_by(probe.scheme()).filter(|k| k.object_store_scheme().is_none()) {
            Some(kind) => Ok(Some((kind, false))),
            None => Err(bad(&e.to_string())),
        },
    }
}

/// Whether the options set `key` for the store's client, as itself or with a store's
/// own prefix (`aws_timeout` for `timeout`).
pub fn user_sets(options: &[(String, String)], key: &str) -> bool {
    options.iter().any(|(k, _)| {
        k == key
            || STORES.iter().any(|s| {
                k.get(..s.env_prefix().len()).is_some_and(|p| p.eq_ignore_ascii_case(s.env_prefix()))
                    && &k[s.env_prefix().len()..] == key
            })
    })
}

/// Whether an environment variable `PREFIX_KEY` sets `key` for a store.
pub fn env_sets(prefix: &str, key: &str) -> bool {
    std::env::var_os(format!("{prefix}{}", key.to_ascii_uppercase())).is_some()
}

pub fn config_error(root: &str, e: impl std::fmt::Display) -> Error {
    Error::Storage {
        url: redact(root),
        range: String::new(),
        kind: StorageErrorKind::Config,
        detail: redact(&e.to_string()),
    }
}

pub fn unknown_key(root: &str, key: &str) -> Error {
    Error::InvalidArgument(format!(
        "storage_options key {key:?} is not an option of the store for {} (see object_store's config keys)",
        redact(root)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_url_scheme_names_one_kind_and_each_kind_one_object_store_scheme() {
        let mut seen = std::collections::HashSet::new();
        for k in STORES {
            for u in k.url_schemes() {
                assert!(seen.insert(*u), "{u:?} names two kinds of store");
            }
            let same = STORES.iter().filter(|o| o.object_store_scheme() == k.object_store_scheme()).count();
            assert!(k.object_store_scheme().is_none() || same == 1, "{}", k.name());
        }
        assert_eq!(named_by("s3a").map(|k| k.name()), Some("Amazon S3"));
        assert_eq!(named_by("https").map(|k| k.name()), Some("HTTP(S)"));
        assert!(named_by("file").is_none() && named_by("hf").is_none() && named_by("").is_none());
    }

    #[test]
    fn an_https_url_may_name_another_kinds_store() {
        let bad = |why: &str| Error::InvalidArgument(why.to_string());
        let (kind, bucket_in_path) = store_at("https://s3.us-east-1.amazonaws.com/", bad).unwrap().unwrap();
        assert_eq!((kind.name(), bucket_in_path), ("Amazon S3", true));
        let (kind, bucket_in_path) = store_at("https://acct.blob.core.windows.net/", bad).unwrap().unwrap();
        assert_eq!((kind.name(), bucket_in_path), ("Azure Blob Storage", true));
        let (kind, bucket_in_path) = store_at("https://example.org/", bad).unwrap().unwrap();
        assert_eq!((kind.name(), bucket_in_path), ("HTTP(S)", false));
        assert!(store_at("file:///", bad).unwrap().is_none(), "object_store's local files: not an object store here");
    }

    #[test]
    fn a_store_prefixed_client_key_sets_the_client_key() {
        let o = |k: &str| vec![(k.to_string(), "1s".to_string())];
        assert!(user_sets(&o("timeout"), "timeout") && user_sets(&o("aws_timeout"), "timeout"));
        assert!(user_sets(&o("google_timeout"), "timeout") && user_sets(&o("azure_timeout"), "timeout"));
        assert!(!user_sets(&o("connect_timeout"), "timeout") && !user_sets(&o("aws_"), "timeout"));
    }
}

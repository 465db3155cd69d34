//! Objects in object stores, through the `object_store` crate: URL parsing, store
//! configuration (environment first, then the user's `storage_options`), listing,
//! ranged GETs conditional on the indexed ETag, and the typed errors they end in.
//!
//! Configuration the way users of boto3, s3fs and pyarrow expect it: `AWS_*`,
//! `GOOGLE_*` and `AZURE_*` environment variables (`AWS_ACCESS_KEY_ID`,
//! `AWS_ENDPOINT_URL`, `AWS_REGION`, ...) are read, then `storage_options` (any key
//! `object_store` accepts for that store, e.g. `endpoint`, `region`, `access_key_id`,
//! `timeout`) override them; an unknown key is an error, not silently ignored, and so
//! is any key given for local paths only. An `http://` endpoint (a local MinIO or moto)
//! allows plain HTTP without a further option. Retries are youmu's ([`super::retry`]);
//! messages never show credentials ([`super::redact`]).
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientConfigKey, GetOptions, GetRange, ObjectMeta, ObjectStore, ObjectStoreExt, ObjectStoreScheme,
    RetryConfig,
};

use super::aio::io_runtime;
use super::redact::{redact, remember_secrets};
use super::retry::{Failed, retrying};
use super::{REMOTE_BYTES, REMOTE_REQUESTS};
use crate::error::{Error, Result, StorageErrorKind, range_text};

const URL_SCHEMES: &[&str] = &["s3", "s3a", "gs", "az", "adl", "azure", "abfs", "abfss", "http", "https"];

/// Whether `spec` names an object-store location (rather than a local path).
pub fn is_url(spec: &str) -> bool {
    spec.split_once("://").is_some_and(|(scheme, _)| URL_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()))
}

/// The scheme of `spec` if it is written as a URL (`name://...`; a one-letter "scheme"
/// is a Windows drive, not a URL).
fn url_scheme(spec: &str) -> Option<String> {
    let (scheme, _) = spec.split_once("://")?;
    let ok = scheme.len() >= 2
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    ok.then(|| scheme.to_ascii_lowercase())
}

/// Whether `spec` is an object-store URL (`Ok(true)`) or a local path or `file://` URL
/// (`Ok(false)`); a URL of any other scheme (`ftp://`, `hdfs://`, `memory://`...) is an
/// error saying which schemes are supported, never a local path that does not exist.
pub fn is_remote(spec: &str) -> Result<bool> {
    match url_scheme(spec) {
        Some(s) if URL_SCHEMES.contains(&s.as_str()) => Ok(true),
        Some(s) if s == "file" => Ok(false),
        Some(s) => Err(Error::InvalidArgument(format!(
            "{:?}: the URL scheme {s:?} is not supported (supported: {}, file, or a local path)",
            redact(spec),
            URL_SCHEMES.join(", ")
        ))),
        None => Ok(false),
    }
}

/// `storage_options` configure object stores: given where no object store is named
/// (only local paths, or an index of local files), they are a mistake, refused naming
/// the first key rather than ignored.
pub fn refuse_unused_options(options: &[(String, String)], what: &str) -> Result<()> {
    match options.first() {
        Some((k, _)) => Err(Error::InvalidArgument(format!(
            "storage_options key {k:?} does not apply: {what} names no object store (storage_options configure s3://, gs://, az://, abfs:// and http(s):// URLs)"
        ))),
        None => Ok(()),
    }
}

static NEXT_SPEC: AtomicU64 = AtomicU64::new(1);

/// One store: its root URL (scheme and bucket/container/host) and the options it is
/// built with. Built per process, lazily (see `aio::IoRuntime::store`).
#[derive(Debug)]
pub struct StoreSpec {
    pub id: u64,
    pub scheme: ObjectStoreScheme,
    /// `scheme://bucket/` (or `https://host/bucket/` for path-style URLs), ending in `/`.
    pub root: String,
    pub options: Vec<(String, String)>,
    /// Whether the store has answered this process yet (a store that never did and
    /// refuses connections is a wrong endpoint, not a restart to wait out).
    pub answered: AtomicBool,
}

fn config_error(root: &str, e: impl std::fmt::Display) -> Error {
    Error::Storage {
        url: redact(root),
        range: String::new(),
        kind: StorageErrorKind::Config,
        detail: redact(&e.to_string()),
    }
}

fn unknown_key(root: &str, key: &str) -> Error {
    Error::InvalidArgument(format!(
        "storage_options key {key:?} is not an option of the store for {} (see object_store's config keys)",
        redact(root)
    ))
}

/// Options whose value is a URL the client connects to (`endpoint`, `aws_endpoint_url`,
/// `proxy_url`, `azure_msi_endpoint`...): checked here, because `object_store` parses
/// some of them only when a request is sent, and panics there on a bad port.
fn check_url_option(key: &str, value: &str) -> Result<()> {
    let url_valued = (key.contains("endpoint") || key.ends_with("url")) && !key.contains("use_");
    if !url_valued {
        return Ok(());
    }
    let bad = |why: String| {
        Error::InvalidArgument(format!("storage_options[{key:?}] = {:?} is not a usable URL: {why}", redact(value)))
    };
    let u = url::Url::parse(value).map_err(|e| bad(e.to_string()))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(bad(format!("the scheme must be http or https, not {:?}", u.scheme())));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host".into()));
    }
    if u.query().is_some() || u.fragment().is_some() {
        // object paths are appended to it: a query string would end up inside them
        return Err(bad("a query string or fragment cannot be part of it".into()));
    }
    Ok(())
}

/// Whether an environment variable `PREFIX_KEY` sets `key` for a store.
fn env_sets(prefix: &str, key: &str) -> bool {
    std::env::var_os(format!("{prefix}{}", key.to_ascii_uppercase())).is_some()
}

impl StoreSpec {
    /// Split a URL into its store and the object key (or key pattern) inside it. The key
    /// is taken as written (no percent-decoding), as s3fs and pyarrow do.
    pub fn parse(spec: &str, options: &[(String, String)]) -> Result<(Arc<StoreSpec>, String)> {
        let bad = |why: &str| Error::InvalidArgument(format!("{:?} is not a usable storage URL: {why}", redact(spec)));
        let (scheme, rest) = spec.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let scheme = scheme.to_ascii_lowercase();
        if !is_remote(spec)? {
            return Err(bad("not an object-store URL"));
        }
        let (authority, mut key) = rest.split_once('/').unwrap_or((rest, ""));
        if authority.is_empty() {
            return Err(bad("no bucket or host"));
        }
        let base = format!("{scheme}://{authority}/");
        // Which store, and whether the first path segment belongs to the root
        // (path-style https URLs of S3 and Azure name the bucket there).
        let probe = url::Url::parse(&format!("{base}seg/x")).map_err(|e| bad(&e.to_string()))?;
        let (kind, probe_path) = ObjectStoreScheme::parse(&probe).map_err(|e| bad(&e.to_string()))?;
        let mut root = base;
        if probe_path.as_ref() == "x" {
            let (bucket, k) = key.split_once('/').unwrap_or((key, ""));
            if bucket.is_empty() {
                return Err(bad("no bucket in the path"));
            }
            root = format!("{root}{bucket}/");
            key = k;
        }
        if matches!(kind, ObjectStoreScheme::Local | ObjectStoreScheme::Memory) {
            return Err(bad("not an object store"));
        }
        let options: Vec<(String, String)> = options.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect();
        remember_secrets(&options);
        let spec = StoreSpec {
            id: NEXT_SPEC.fetch_add(1, Ordering::Relaxed),
            scheme: kind,
            root,
            options,
            answered: AtomicBool::new(false),
        };
        spec.check_options()?;
        Ok((Arc::new(spec), key.to_string()))
    }

    /// The same store with another id (a loaded index gets stores of its own).
    pub fn with_options(root: &str, options: &[(String, String)]) -> Result<Arc<StoreSpec>> {
        Ok(Self::parse(root, options)?.0)
    }

    fn check_options(&self) -> Result<()> {
        use object_store::aws::AmazonS3ConfigKey;
        use object_store::azure::AzureConfigKey;
        use object_store::gcp::GoogleConfigKey;
        for (k, _) in &self.options {
            let ok = match self.scheme {
                ObjectStoreScheme::AmazonS3 => k.parse::<AmazonS3ConfigKey>().is_ok(),
                ObjectStoreScheme::GoogleCloudStorage => k.parse::<GoogleConfigKey>().is_ok(),
                ObjectStoreScheme::MicrosoftAzure => k.parse::<AzureConfigKey>().is_ok(),
                _ => k.parse::<ClientConfigKey>().is_ok(),
            };
            if !ok {
                return Err(unknown_key(&self.root, k));
            }
        }
        for (k, v) in &self.options {
            check_url_option(k, v)?;
        }
        Ok(())
    }

    fn user_sets(&self, client_key: &str) -> bool {
        self.options.iter().any(|(k, _)| {
            k == client_key
                || k.strip_prefix("aws_").or_else(|| k.strip_prefix("google_")).or_else(|| k.strip_prefix("azure_"))
                    == Some(client_key)
        })
    }

    /// Build the store (environment, then youmu's timeouts and retries, then options).
    pub(crate) fn build(&self) -> Result<Arc<dyn ObjectStore>> {
        use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
        use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
        use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
        use object_store::http::HttpBuilder;

        let io = super::io_options();
        // youmu retries every request itself (`super::retry`): one loop, one policy.
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(1),
                base: 2.0,
            },
            max_retries: 0,
            retry_timeout: io.retry_timeout,
        };
        let env_prefix = match self.scheme {
            ObjectStoreScheme::AmazonS3 => "AWS_",
            ObjectStoreScheme::GoogleCloudStorage => "GOOGLE_",
            ObjectStoreScheme::MicrosoftAzure => "AZURE_",
            _ => "YOUMU_HTTP_",
        };
        // youmu's timeouts unless the environment or the options set the store's own.
        let mut client: Vec<(ClientConfigKey, String)> = Vec::new();
        for (key, ck, value) in [
            ("timeout", ClientConfigKey::Timeout, io.request_timeout),
            ("connect_timeout", ClientConfigKey::ConnectTimeout, io.connect_timeout),
            ("read_timeout", ClientConfigKey::ReadTimeout, io.read_timeout),
        ] {
            if !self.user_sets(key) && !env_sets(env_prefix, key) {
                client.push((ck, format!("{}ms", value.as_millis().max(1))));
            }
        }
        let root = &self.root;
        let err = |e: object_store::Error| config_error(root, e);
        let store: Arc<dyn ObjectStore> = match self.scheme {
            ObjectStoreScheme::AmazonS3 => {
                let mut b = AmazonS3Builder::from_env().with_url(root.as_str()).with_retry(retry);
                for (ck, v) in client {
                    b = b.with_config(AmazonS3ConfigKey::Client(ck), v);
                }
                for (k, v) in &self.options {
                    b = b.with_config(k.parse().map_err(|_| unknown_key(root, k))?, v.as_str());
                }
                // An http:// endpoint was asked for explicitly: allow it (local S3-compatible stores).
                let http_endpoint =
                    b.get_config_value(&AmazonS3ConfigKey::Endpoint).is_some_and(|e| e.starts_with("http://"));
                if http_endpoint && !self.user_sets("allow_http") && !env_sets("AWS_", "allow_http") {
                    b = b.with_allow_http(true);
                }
                Arc::new(b.build().map_err(err)?)
            }
            ObjectStoreScheme::GoogleCloudStorage => {
                let mut b = GoogleCloudStorageBuilder::from_env().with_url(root.as_str()).with_retry(retry);
                for (ck, v) in client {
                    b = b.with_config(GoogleConfigKey::Client(ck), v);
                }
                for (k, v) in &self.options {
                    b = b.with_config(k.parse().map_err(|_| unknown_key(root, k))?, v.as_str());
                }
                Arc::new(b.build().map_err(err)?)
            }
            ObjectStoreScheme::MicrosoftAzure => {
                let mut b = MicrosoftAzureBuilder::from_env().with_url(root.as_str()).with_retry(retry);
                for (ck, v) in client {
                    b = b.with_config(AzureConfigKey::Client(ck), v);
                }
                for (k, v) in &self.options {
                    b = b.with_config(k.parse().map_err(|_| unknown_key(root, k))?, v.as_str());
                }
                Arc::new(b.build().map_err(err)?)
            }
            _ => {
                let base = root
                    .split_once("://")
                    .map(|(s, r)| (s, r.split('/').next().unwrap_or("")))
                    .map_or_else(|| root.clone(), |(s, host)| format!("{s}://{host}"));
                let mut b = HttpBuilder::new().with_url(base).with_retry(retry);
                if root.starts_with("http://") {
                    b = b.with_config(ClientConfigKey::AllowHttp, "true");
                }
                for (ck, v) in client {
                    b = b.with_config(ck, v);
                }
                for (k, v) in &self.options {
                    b = b.with_config(k.parse().map_err(|_| unknown_key(root, k))?, v.as_str());
                }
                Arc::new(b.build().map_err(err)?)
            }
        };
        Ok(store)
    }

    /// The object path of a key inside this store (`HttpStore` paths include the
    /// path-style prefix of the root).
    pub fn object_path(&self, key: &str) -> Result<ObjectPath> {
        let full = match self.scheme {
            ObjectStoreScheme::Http => {
                let after_host = self.root.split_once("://").and_then(|(_, r)| r.split_once('/')).map_or("", |x| x.1);
                format!("{after_host}{key}")
            }
            _ => key.to_string(),
        };
        ObjectPath::parse(&full)
            .map_err(|e| Error::InvalidArgument(format!("{}{key:?} is not a valid object key: {e}", self.root)))
    }

    /// The URL of an object path of this store.
    pub fn url_of(&self, path: &ObjectPath) -> String {
        match self.scheme {
            ObjectStoreScheme::Http => {
                let host_end =
                    self.root.split_once("://").map_or(0, |(s, r)| s.len() + 3 + r.find('/').unwrap_or(r.len()));
                format!("{}/{}", &self.root[..host_end], path.as_ref())
            }
            _ => format!("{}{}", self.root, path.as_ref()),
        }
    }

    fn store(&self) -> Result<Arc<dyn ObjectStore>> {
        io_runtime().store(self)
    }

    /// Whether the store can list keys (a plain HTTP server cannot: WebDAV's PROPFIND
    /// is all `object_store` could try, and web servers answer it 405 or 501).
    pub fn can_list(&self) -> bool {
        self.scheme != ObjectStoreScheme::Http
    }

    fn cannot_list(&self, url: &str) -> Error {
        Error::InvalidArgument(format!(
            "{}: a plain http(s):// server cannot list objects, so a URL there must name one object \
             (e.g. .../train-00000.parquet), not a prefix or a glob; list the objects' URLs instead",
            redact(url)
        ))
    }

    /// Every object under `prefix` (a key prefix ending in `/`, or empty), unsorted.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let url = format!("{}{prefix}", self.root);
        if !self.can_list() {
            return Err(self.cannot_list(&url));
        }
        let store = self.store()?;
        let p = if prefix.is_empty() { None } else { Some(self.object_path(prefix.trim_end_matches('/'))?) };
        retrying(&self.answered, || {
            let (store, p) = (store.clone(), p.clone());
            async move {
                let _permit = io_runtime().permits().acquire_owned().await;
                REMOTE_REQUESTS.fetch_add(1, Ordering::Relaxed);
                store.list(p.as_ref()).try_collect::<Vec<ObjectMeta>>().await
            }
        })
        .await
        .map_err(|e| classify(e, &url, "", false))
    }

    /// The objects and "directories" right under `prefix` (one LIST request).
    async fn list_dir(&self, prefix: Option<&ObjectPath>) -> Result<object_store::ListResult> {
        let url = format!("{}{}", self.root, prefix.map_or(String::new(), |p| format!("{p}/")));
        if !self.can_list() {
            return Err(self.cannot_list(&url));
        }
        let store = self.store()?;
        retrying(&self.answered, || {
            let (store, p) = (store.clone(), prefix.cloned());
            async move {
                let _permit = io_runtime().permits().acquire_owned().await;
                REMOTE_REQUESTS.fetch_add(1, Ordering::Relaxed);
                store.list_with_delimiter(p.as_ref()).await
            }
        })
        .await
        .map_err(|e| classify(e, &url, "", false))
    }

    /// Metadata of one object (a HEAD).
    pub async fn head(&self, path: &ObjectPath) -> Result<ObjectMeta> {
        let store = self.store()?;
        retrying(&self.answered, || {
            let (store, path) = (store.clone(), path.clone());
            async move {
                let _permit = io_runtime().permits().acquire_owned().await;
                REMOTE_REQUESTS.fetch_add(1, Ordering::Relaxed);
                store.head(&path).await
            }
        })
        .await
        .map_err(|e| classify(e, &self.url_of(path), "", false))
    }

    /// One GET of `path` (the whole object, or `opts.range`), its body read in full (a
    /// body cut short is retried like a failed request): the object as the response
    /// describes it, where the bytes start, the bytes. Errors name `url` and `range`.
    async fn get(
        &self,
        path: &ObjectPath,
        opts: GetOptions,
        (url, range, indexed): (&str, &str, bool),
    ) -> Result<(ObjectMeta, u64, Bytes)> {
        let store = self.store()?;
        retrying(&self.answered, || {
            let (store, path, opts) = (store.clone(), path.clone(), opts.clone());
            async move {
                let _permit = io_runtime().permits().acquire_owned().await;
                REMOTE_REQUESTS.fetch_add(1, Ordering::Relaxed);
                let sent = std::time::Instant::now();
                let res = store.get_opts(&path, opts).await?;
                super::record_first_byte(sent.elapsed());
                let (meta, start) = (res.meta.clone(), res.range.start);
                let bytes = res.bytes().await?;
                REMOTE_BYTES.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                Ok((meta, start, bytes))
            }
        })
        .await
        .map_err(|e| classify(e, url, range, indexed))
    }
}

/// The whole object at `url` (a saved index kept in a store).
pub fn read_object(url: &str, options: &[(String, String)]) -> Result<Vec<u8>> {
    let (spec, key) = StoreSpec::parse(url, options)?;
    let path = spec.object_path(&key)?;
    super::aio::block_on(async move {
        let (_, _, bytes) = spec.get(&path, GetOptions::default(), (url, "", false)).await?;
        Ok(bytes.to_vec())
    })?
}

/// Write `data` as the object at `url` (one PUT: a reader sees the old object or the
/// new one, never half of it).
pub fn write_object(url: &str, options: &[(String, String)], data: Vec<u8>) -> Result<()> {
    let (spec, key) = StoreSpec::parse(url, options)?;
    let path = spec.object_path(&key)?;
    let data = Bytes::from(data);
    super::aio::block_on(async move {
        let store = spec.store()?;
        // a PUT of the whole object is idempotent: sending it again is safe
        retrying(&spec.answered, || {
            let (store, path, data) = (store.clone(), path.clone(), data.clone());
            async move {
                let _permit = io_runtime().permits().acquire_owned().await;
                REMOTE_REQUESTS.fetch_add(1, Ordering::Relaxed);
                store.put(&path, data.into()).await.map(|_| ())
            }
        })
        .await
        .map_err(|e| classify(e, url, "", false))
    })?
}

/// One indexed object and what it looked like when indexed.
#[derive(Debug)]
pub struct RemoteObject {
    pub spec: Arc<StoreSpec>,
    pub path: ObjectPath,
    pub url: String,
    pub size: u64,
    pub etag: Option<String>,
    pub version: Option<String>,
    pub mtime_ns: i64,
}

fn mtime_ns(meta: &ObjectMeta) -> i64 {
    meta.last_modified.timestamp_nanos_opt().unwrap_or(0)
}

impl RemoteObject {
    pub fn from_meta(spec: Arc<StoreSpec>, meta: &ObjectMeta) -> RemoteObject {
        RemoteObject {
            url: spec.url_of(&meta.location),
            spec,
            path: meta.location.clone(),
            size: meta.size,
            etag: meta.e_tag.clone(),
            version: meta.version.clone(),
            mtime_ns: mtime_ns(meta),
        }
    }

    #[cfg(test)]
    pub fn for_tests(url: &str, size: u64) -> RemoteObject {
        let (spec, key) = StoreSpec::parse(url, &[]).expect("url");
        RemoteObject {
            path: ObjectPath::from(key.as_str()),
            url: url.to_string(),
            spec,
            size,
            etag: None,
            version: None,
            mtime_ns: 0,
        }
    }

    /// The last `n` bytes of an object not indexed yet, and the object as that response
    /// describes it (size, ETag, version). One GET: a suffix range where the size is not
    /// known yet (no HEAD first); a bounded one, conditional on the listed ETag, where a
    /// listing gave the size (Azure has no suffix ranges: a lone object costs it a HEAD).
    pub async fn get_tail(
        spec: Arc<StoreSpec>,
        path: ObjectPath,
        listed: Option<ObjectMeta>,
        n: u64,
    ) -> Result<(RemoteObject, u64, Bytes)> {
        let url = spec.url_of(&path);
        let listed = match listed {
            None if spec.scheme == ObjectStoreScheme::MicrosoftAzure => Some(spec.head(&path).await?),
            other => other,
        };
        let opts = match &listed {
            Some(m) => GetOptions {
                range: Some(GetRange::Bounded(m.size.saturating_sub(n)..m.size)),
                if_match: m.e_tag.clone(),
                ..Default::default()
            },
            None => GetOptions { range: Some(GetRange::Suffix(n)), ..Default::default() },
        };
        let tail = format!("last {n} bytes");
        let (meta, start, bytes) = spec.get(&path, opts, (&url, &tail, false)).await?;
        let obj = RemoteObject::from_meta(spec, &ObjectMeta { location: path, ..meta });
        if bytes.len() as u64 != obj.size.saturating_sub(start) {
            return Err(Error::Storage {
                url: redact(&url),
                range: tail,
                kind: StorageErrorKind::Other,
                detail: format!("short read: {} of {} bytes", bytes.len(), obj.size.saturating_sub(start)),
            });
        }
        Ok((obj, start, bytes))
    }

    /// Bytes `range` of the indexed object: one GET, conditional on the recorded ETag
    /// (`If-Match`), and the response's own ETag (or Last-Modified, where the store
    /// sends no ETag) and size compared with the indexed ones, so an object replaced
    /// since it was indexed is an error, never other data, even from a server that
    /// ignores `If-Match`. Retries, backoff and timeouts: [`super::retry`].
    pub async fn get_range(&self, range: Range<u64>) -> Result<Bytes> {
        let r = range_text(range.start, range.end);
        let opts = GetOptions {
            range: Some(GetRange::Bounded(range.clone())),
            if_match: self.etag.clone(),
            ..Default::default()
        };
        let (meta, _, bytes) = self.spec.get(&self.path, opts, (&self.url, &r, true)).await?;
        if let Err(why) = self.answered_by(&meta) {
            return Err(Error::Changed { path: redact(&self.url), detail: why });
        }
        if bytes.len() as u64 != range.end - range.start {
            return Err(Error::Storage {
                url: redact(&self.url),
                range: r,
                kind: StorageErrorKind::Other,
                detail: format!("short read: {} of {} bytes", bytes.len(), range.end - range.start),
            });
        }
        Ok(bytes)
    }

    /// Whether a GET's response (`meta`: the whole object's size, its ETag and
    /// Last-Modified as the response states them) came from the indexed object. What a
    /// response leaves out cannot be compared (some servers send no ETag on a 206).
    fn answered_by(&self, meta: &ObjectMeta) -> std::result::Result<(), String> {
        if meta.size != self.size {
            return Err(format!("size {} -> {}", self.size, meta.size));
        }
        let strong = |t: &str| t.trim_start_matches("W/").to_string();
        match (&self.etag, &meta.e_tag) {
            (Some(a), Some(b)) if strong(a) != strong(b) => Err(format!("ETag {a} -> {b}")),
            (Some(_), Some(_)) => Ok(()),
            _ if self.mtime_ns != 0 && mtime_ns(meta) != 0 && mtime_ns(meta) != self.mtime_ns => {
                Err(format!("last modified {} -> {} ns", self.mtime_ns, mtime_ns(meta)))
            }
            _ => Ok(()),
        }
    }

    /// Whether `meta` (a listing or HEAD now) still describes the indexed object.
    pub fn same_as(&self, meta: &ObjectMeta) -> std::result::Result<(), String> {
        if meta.size != self.size {
            return Err(format!("size {} -> {}", self.size, meta.size));
        }
        match (&self.etag, &meta.e_tag) {
            (Some(a), Some(b)) if a != b => Err(format!("ETag {a} -> {b}")),
            (None, _) if mtime_ns(meta) != self.mtime_ns => {
                Err(format!("last modified {} -> {} ns", self.mtime_ns, mtime_ns(meta)))
            }
            _ => Ok(()),
        }
    }
}

/// Check that `objs` are unchanged since they were indexed: objects sharing a
/// "directory" are checked against one listing of it (a LIST answers for 1,000 keys),
/// lone ones with a HEAD each, many requests in flight. `Err((url, why))` names the
/// first changed object.
pub async fn verify(objs: &[Arc<RemoteObject>]) -> Result<std::result::Result<(), (String, String)>> {
    use futures_util::StreamExt;
    let mut groups: std::collections::BTreeMap<(u64, String), Vec<Arc<RemoteObject>>> = Default::default();
    for o in objs {
        let key = o.path.as_ref();
        let dir = key.rfind('/').map_or(String::new(), |i| key[..=i].to_string());
        groups.entry((o.spec.id, dir)).or_default().push(o.clone());
    }
    let checks = futures_util::stream::iter(groups)
        .map(|((_, dir), members)| async move {
            // a plain HTTP server cannot list: a HEAD each
            if members.len() < 4 || !members[0].spec.can_list() {
                for o in &members {
                    let meta = match o.spec.head(&o.path).await {
                        Ok(m) => m,
                        Err(Error::Storage { kind: StorageErrorKind::NotFound, .. }) => {
                            return Ok(Err((o.url.clone(), "no longer exists".to_string())));
                        }
                        Err(e) => return Err(e),
                    };
                    if let Err(why) = o.same_as(&meta) {
                        return Ok(Err((o.url.clone(), why)));
                    }
                }
                return Ok(Ok(()));
            }
            let spec = &members[0].spec;
            let prefix = if dir.is_empty() { None } else { Some(spec.object_path(dir.trim_end_matches('/'))?) };
            let listing = spec.list_dir(prefix.as_ref()).await?;
            let now: std::collections::HashMap<&str, &ObjectMeta> =
                listing.objects.iter().map(|m| (m.location.as_ref(), m)).collect();
            for o in &members {
                match now.get(o.path.as_ref()) {
                    None => return Ok(Err((o.url.clone(), "no longer exists".to_string()))),
                    Some(m) => {
                        if let Err(why) = o.same_as(m) {
                            return Ok(Err((o.url.clone(), why)));
                        }
                    }
                }
            }
            Ok(Ok(()))
        })
        .buffered(super::io_options().max_inflight.max(1))
        .collect::<Vec<Result<std::result::Result<(), (String, String)>>>>()
        .await;
    for c in checks {
        if let Err(changed) = c? {
            return Ok(Err(changed));
        }
    }
    Ok(Ok(()))
}

/// Turn an `object_store` error into youmu's: what failed (URL and byte range) and a
/// kind the caller can act on (retry later, fix credentials, rebuild the index...).
/// `indexed`: the object was indexed, so "not found" or a failed `If-Match` means it
/// changed since.
pub(crate) fn classify(failed: Failed, url: &str, range: &str, indexed: bool) -> Error {
    use object_store::Error as E;
    let Failed { error: e, retries, elapsed } = failed;
    let url = &redact(url);
    let mut detail = redact(&error_chain(&e));
    if retries > 0 {
        let plural = if retries == 1 { "retry" } else { "retries" };
        detail.push_str(&format!(" (after {retries} {plural} over {:.1} s)", elapsed.as_secs_f64()));
    }
    let kind = match &e {
        E::Precondition { .. } => {
            return Error::Changed {
                path: url.to_string(),
                detail: "its ETag no longer matches (the object was replaced)".into(),
            };
        }
        // a listing's 404 arrives as a generic error: the S3 error code says which
        _ if detail.contains("NoSuchBucket") || detail.contains("ContainerNotFound") => {
            StorageErrorKind::BucketNotFound
        }
        E::NotFound { .. } if indexed => {
            return Error::Changed { path: url.to_string(), detail: "the object no longer exists".into() };
        }
        E::NotFound { .. } => StorageErrorKind::NotFound,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => StorageErrorKind::Auth,
        E::UnknownConfigurationKey { .. } => StorageErrorKind::Config,
        // reqwest refuses to build the request: an http:// URL with allow_http off
        _ if detail.contains("URL scheme is not allowed") => {
            detail
                .push_str(" (plain http:// needs storage_options[\"allow_http\"] = \"true\"; use https:// otherwise)");
            StorageErrorKind::Config
        }
        _ if detail.contains("builder error") => StorageErrorKind::Config,
        _ => transport_kind(&e, &detail),
    };
    Error::Storage { url: url.to_string(), range: range.to_string(), kind, detail }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

fn transport_kind(e: &(dyn std::error::Error + 'static), detail: &str) -> StorageErrorKind {
    use object_store::client::HttpErrorKind;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(h) = c.downcast_ref::<object_store::client::HttpError>() {
            return match h.kind() {
                HttpErrorKind::Timeout => StorageErrorKind::Timeout,
                _ => StorageErrorKind::RetriesExhausted,
            };
        }
        if let Some(r) = c.downcast_ref::<reqwest::Error>() {
            return if r.is_timeout() { StorageErrorKind::Timeout } else { StorageErrorKind::RetriesExhausted };
        }
        cur = c.source();
    }
    // object_store's retry error is not public: read its status from the text
    // (every message also says "retry_timeout", so look for the failure itself).
    let lower = detail.to_ascii_lowercase();
    if lower.contains("status code: 5") || lower.contains("status code: 429") || lower.contains("status code: 408") {
        StorageErrorKind::RetriesExhausted
    } else if lower.contains("status code: 403") || lower.contains("status code: 401") {
        StorageErrorKind::Auth
    } else if lower.contains("timed out") || lower.contains("operation timeout") {
        StorageErrorKind::Timeout
    } else if lower.contains(" retries") {
        StorageErrorKind::RetriesExhausted
    } else {
        StorageErrorKind::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_store_root_and_key() {
        let (s, k) = StoreSpec::parse("s3://bkt/a/b.parquet", &[]).unwrap();
        assert_eq!((s.root.as_str(), k.as_str()), ("s3://bkt/", "a/b.parquet"));
        assert_eq!(s.url_of(&s.object_path(&k).unwrap()), "s3://bkt/a/b.parquet");
        let (s, k) = StoreSpec::parse("https://s3.us-east-1.amazonaws.com/bkt/x/", &[]).unwrap();
        assert_eq!((s.root.as_str(), k.as_str()), ("https://s3.us-east-1.amazonaws.com/bkt/", "x/"));
        assert_eq!(s.scheme, ObjectStoreScheme::AmazonS3);
        let (s, k) = StoreSpec::parse("http://127.0.0.1:9000/data/x.parquet", &[]).unwrap();
        assert_eq!(s.scheme, ObjectStoreScheme::Http);
        assert_eq!((s.root.as_str(), k.as_str()), ("http://127.0.0.1:9000/", "data/x.parquet"));
        assert_eq!(s.url_of(&s.object_path(&k).unwrap()), "http://127.0.0.1:9000/data/x.parquet");
        let (s, _) = StoreSpec::parse("gs://b/k", &[]).unwrap();
        assert_eq!(s.scheme, ObjectStoreScheme::GoogleCloudStorage);
        let (s, _) = StoreSpec::parse("az://c/k", &[]).unwrap();
        assert_eq!(s.scheme, ObjectStoreScheme::MicrosoftAzure);
        assert!(
            is_url("S3://b/k") && is_url("abfs://c@a.dfs.core.windows.net/k") && !is_url("/tmp/x") && !is_url("a:b")
        );
    }

    #[test]
    fn unknown_storage_options_are_errors() {
        let opts = |k: &str| vec![(k.to_string(), "x".to_string())];
        assert!(StoreSpec::parse("s3://b/k", &[("endpoint".into(), "http://127.0.0.1:9000".into())]).is_ok());
        assert!(matches!(StoreSpec::parse("s3://b/k", &opts("endpoint")), Err(Error::InvalidArgument(_))));
        assert!(StoreSpec::parse("s3://b/k", &opts("AWS_ACCESS_KEY_ID")).is_ok());
        assert!(StoreSpec::parse("s3://b/k", &opts("timeout")).is_ok());
        assert!(matches!(StoreSpec::parse("s3://b/k", &opts("endpiont")), Err(Error::InvalidArgument(_))));
        assert!(StoreSpec::parse("s3:///k", &[]).is_err());
    }
}

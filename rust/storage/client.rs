//! Requests to object stores through the `object_store` crate: building a store's
//! client (environment, then youmu's timeouts, then `storage_options`), listing, HEADs,
//! GETs and PUTs, each behind the `max_inflight` gate and youmu's retry loop
//! ([`super::retry`]), and the typed errors they end in. An `http://` endpoint (a local
//! MinIO or moto) allows plain HTTP without a further option.
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientConfigKey, GetOptions, ObjectMeta, ObjectStore, ObjectStoreExt, RetryConfig};

use super::aio::{block_on, io_runtime};
use super::counters::{REMOTE_BYTES, REMOTE_REQUESTS, record_first_byte};
use super::retry::{Failed, retrying};
use super::spec::StoreSpec;
use super::stores::{Build, env_sets};
use crate::error::{Error, Result, StorageErrorKind};
use crate::redact::redact;

impl StoreSpec {
    /// Build the store (environment, then youmu's timeouts and retries, then options):
    /// its kind builds the client (`stores/`).
    fn build(&self) -> Result<Arc<dyn ObjectStore>> {
        let io = super::options::io_options();
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
        // youmu's timeouts unless the environment or the options set the store's own.
        let mut client: Vec<(ClientConfigKey, String)> = Vec::new();
        for (key, ck, value) in [
            ("timeout", ClientConfigKey::Timeout, io.request_timeout),
            ("connect_timeout", ClientConfigKey::ConnectTimeout, io.connect_timeout),
            ("read_timeout", ClientConfigKey::ReadTimeout, io.read_timeout),
        ] {
            if !self.user_sets(key) && !env_sets(self.kind.env_prefix(), key) {
                client.push((ck, format!("{}ms", value.as_millis().max(1))));
            }
        }
        self.kind.build(Build {
            id: self.id,
            root: &self.root,
            options: &self.options,
            one_object: self.one_object,
            basic_auth: self.basic_auth(),
            client,
            retry,
        })
    }

    fn store(&self) -> Result<Arc<dyn ObjectStore>> {
        io_runtime().store(self.id, || self.build())
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

    /// Every object under `prefix`, sorted by key (bytewise), waited for on this thread.
    pub fn list_sorted(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let mut v = block_on(self.list(prefix))??;
        v.sort_by(|a, b| a.location.as_ref().cmp(b.location.as_ref()));
        Ok(v)
    }

    /// The objects and "directories" right under `prefix` (one LIST request).
    pub(super) async fn list_dir(&self, prefix: Option<&ObjectPath>) -> Result<object_store::ListResult> {
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

    /// What an object is now: a HEAD, or for a URL with a query (presigned for GET
    /// only: a HEAD is refused) a GET of its first byte.
    pub(super) async fn check_one(&self, path: &ObjectPath, url: &str) -> Result<ObjectMeta> {
        if !self.one_object {
            return self.head(path).await;
        }
        let opts = GetOptions { range: Some(object_store::GetRange::Bounded(0..1)), ..Default::default() };
        Ok(self.get(path, opts, (url, "bytes 0-0", false)).await?.0)
    }

    /// One GET of `path` (the whole object, or `opts.range`), its body read in full (a
    /// body cut short is retried like a failed request): the object as the response
    /// describes it, where the bytes start, the bytes. Errors name `url` and `range`.
    pub(super) async fn get(
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
                record_first_byte(sent.elapsed());
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
    block_on(async move {
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
    block_on(async move {
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
    if kind == StorageErrorKind::Auth {
        detail.push_str(&auth_hint(url, &detail));
    }
    Error::Storage { url: url.to_string(), range: range.to_string(), kind, detail }
}

/// What to do about a refused request to `url`: a file of the Hugging Face Hub is read
/// with the Hub's token, found where every Hugging Face library finds it
/// ([`super::hub_token`]); other http(s) URLs with their user info, which saved and
/// pickled indexes do not keep. Never the credentials themselves.
fn auth_hint(url: &str, detail: &str) -> String {
    const FIX: &str = "set HF_TOKEN, or log in with `hf auth login`, with a token that may read it";
    if let Some(file) = super::hub_file::hub_file(url) {
        return format!(" ({file} on the Hugging Face Hub: {FIX})");
    }
    if super::hub_token::on_hub(url) {
        return format!(" (a file of the Hugging Face Hub: {FIX})");
    }
    if url.starts_with("http") && !detail.contains("storage_options") {
        return " (credentials of an http(s) URL's user info are not stored in saved or pickled indexes: pass \
                storage_options={\"username\": ..., \"password\": ...} when loading one)"
            .into();
    }
    String::new()
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

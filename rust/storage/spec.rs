//! Object-store locations: how a URL of an object store splits into a store (of the
//! kind the store registry, `stores/`, says it is) and a key, and the checks of
//! `storage_options` made before anything is sent. What differs between kinds of store
//! (key limits, object paths, URLs, listing) each kind declares; nothing here asks which
//! kind a store is.
//!
//! Configuration the way users of boto3, s3fs and pyarrow expect it: `AWS_*`,
//! `GOOGLE_*` and `AZURE_*` environment variables (`AWS_ACCESS_KEY_ID`,
//! `AWS_ENDPOINT_URL`, `AWS_REGION`, ...) are read, then `storage_options` (any key
//! `object_store` accepts for that store, e.g. `endpoint`, `region`, `access_key_id`,
//! `timeout`) override them; an unknown key is an error, not silently ignored, and so
//! is any key given for local paths only. Messages never show credentials
//! ([`crate::redact`]).
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use object_store::path::Path as ObjectPath;

use super::stores::{self, KeyLength, MAX_HTTP_URL, StoreKind, unknown_key};
use crate::error::{Error, Result};
use crate::redact::{redact, remember_secrets};

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
    /// What kind of store it is (see `stores/`).
    pub kind: &'static dyn StoreKind,
    /// `scheme://bucket/` (or `https://host/bucket/` for path-style URLs), ending in `/`.
    pub root: String,
    pub options: Vec<(String, String)>,
    /// Whether the store has answered this process yet (a store that never did and
    /// refuses connections is a wrong endpoint, not a restart to wait out).
    pub answered: AtomicBool,
    /// The user info an http(s) URL was written with (`user:password`, as typed): sent
    /// as the client's Basic credentials, never part of `root` or of any URL youmu
    /// shows or saves. `storage_options` `username`/`password` give the same.
    pub user_info: Option<String>,
    /// The root is one object's whole http(s) URL with its query string (a presigned S3
    /// or GCS URL, an Azure SAS URL, `?download=true`): requests go to it as written,
    /// unsigned, and its key is empty.
    pub one_object: bool,
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

impl StoreSpec {
    /// Split a URL into its store and the object key (or key pattern) inside it. The key
    /// is taken as written (no percent-decoding), as s3fs and pyarrow do.
    pub fn parse(spec: &str, options: &[(String, String)]) -> Result<(Arc<StoreSpec>, String)> {
        let bad = |why: &str| Error::InvalidArgument(format!("{:?} is not a usable storage URL: {why}", redact(spec)));
        let (scheme, rest) = spec.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let scheme = scheme.to_ascii_lowercase();
        // the kind its URL scheme names: are its URLs plain http(s) ones (user info,
        // fragment and query string read as a browser reads them)?
        let named = stores::named_by(&scheme);
        let http = named.is_some_and(|k| k.plain_http_urls());
        // user info first: a password may hold `/`, `?` or `#` as typed
        let (user_info, rest) = match rest.split_once('/').unwrap_or((rest, "")).0.rfind('@') {
            Some(at) if http => (Some(rest[..at].to_string()), &rest[at + 1..]),
            _ => (None, rest),
        };
        if http && user_info.is_none() && slash_in_user_info(rest) {
            return Err(Error::InvalidArgument(format!(
                "{:?}: the user info (user:password@) of this URL holds an unescaped '/', which would end its \
                 host: percent-encode it ('/' as %2F, '@' as %40), or pass storage_options={{\"username\": ..., \
                 \"password\": ...}}",
                redact(spec)
            )));
        }
        // an http(s) URL's fragment is the client's own (a browser never sends it): not
        // part of the object's key, never sent, and so never quoted by a server's answer
        let rest = if http { rest.split_once('#').map_or(rest, |(r, _)| r) } else { rest };
        let (authority, mut key) = rest.split_once('/').unwrap_or((rest, ""));
        if authority.is_empty() {
            return Err(bad("no bucket or host"));
        }
        if let Some(kind) = named.filter(|_| http && rest.contains('?')) {
            return Self::one_object(kind, &format!("{scheme}://{rest}"), user_info, options);
        }
        let base = format!("{scheme}://{authority}/");
        // Which store, and whether the first path segment belongs to the root
        // (path-style https URLs of S3 and Azure name the bucket there).
        let Some((kind, bucket_in_path)) = stores::store_at(&base, bad)? else {
            return Err(bad("not an object store"));
        };
        let mut root = base;
        if bucket_in_path {
            let (bucket, k) = key.split_once('/').unwrap_or((key, ""));
            if bucket.is_empty() {
                return Err(bad("no bucket in the path"));
            }
            root = format!("{root}{bucket}/");
            key = k;
        }
        let options: Vec<(String, String)> = options.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect();
        remember_secrets(&options);
        let spec = StoreSpec {
            id: NEXT_SPEC.fetch_add(1, Ordering::Relaxed),
            kind,
            root,
            options,
            answered: AtomicBool::new(false),
            user_info,
            one_object: false,
        };
        spec.check_options()?;
        Ok((Arc::new(spec), key.to_string()))
    }

    /// An http(s) URL with a query string names one object: the query is part of its
    /// address (a signature, a SAS token), so `?` is no glob character there and the
    /// URL is fetched as written — never re-signed, whatever host it names.
    fn one_object(
        kind: &'static dyn StoreKind,
        spec: &str,
        user_info: Option<String>,
        options: &[(String, String)],
    ) -> Result<(Arc<StoreSpec>, String)> {
        let bad = |why: &str| Error::InvalidArgument(format!("{:?} is not a usable storage URL: {why}", redact(spec)));
        let url = spec.split_once('#').map_or(spec, |(u, _)| u); // a fragment is never sent
        if url.len() > MAX_HTTP_URL {
            let shown: String = redact(url).chars().take(96).collect();
            return Err(Error::InvalidArgument(format!(
                "{shown:?}...: {} bytes long; an http(s) URL holds at most {MAX_HTTP_URL}",
                url.len()
            )));
        }
        let parsed = url::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(bad("no host"));
        }
        if parsed.path().ends_with('/') {
            return Err(bad("a URL with a query string names one object, and this path ends in '/'"));
        }
        let options: Vec<(String, String)> = options.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect();
        remember_secrets(&options);
        let spec = StoreSpec {
            id: NEXT_SPEC.fetch_add(1, Ordering::Relaxed),
            kind,
            root: url.to_string(),
            options,
            answered: AtomicBool::new(false),
            user_info,
            one_object: true,
        };
        spec.check_options()?;
        Ok((Arc::new(spec), String::new()))
    }

    /// The same store with another id (a loaded index gets stores of its own).
    pub fn with_options(root: &str, options: &[(String, String)]) -> Result<Arc<StoreSpec>> {
        Ok(Self::parse(root, options)?.0)
    }

    fn check_options(&self) -> Result<()> {
        for (k, _) in &self.options {
            if !self.kind.takes_option(k) {
                return Err(unknown_key(&self.root, k));
            }
        }
        for (k, v) in &self.options {
            check_url_option(k, v)?;
        }
        Ok(())
    }

    /// The `Authorization: Basic` value the client sends: the URL's own user info (as
    /// typed: a `#`, `?` or `@` in a password is itself, a `%XX` its byte), else the
    /// `username` and `password` options taken literally. A default header of the
    /// client: object_store builds its requests from `http::Uri`s, which drop user info.
    pub(super) fn basic_auth(&self) -> Option<String> {
        let (user, password) = match &self.user_info {
            Some(info) => {
                let (u, p) = info.split_once(':').map_or((info.as_str(), ""), |(u, p)| (u, p));
                (percent_decode(u), percent_decode(p))
            }
            None => {
                let get = |name: &str| self.options.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_bytes().to_vec());
                let (user, password) = (get("username"), get("password"));
                if user.is_none() && password.is_none() {
                    return None;
                }
                (user.unwrap_or_default(), password.unwrap_or_default())
            }
        };
        let mut pair = user;
        pair.push(b':');
        pair.extend_from_slice(&password);
        Some(format!("Basic {}", base64(&pair)))
    }

    pub(super) fn user_sets(&self, client_key: &str) -> bool {
        stores::user_sets(&self.options, client_key)
    }
    /// The object path of a key inside this store (as its kind names it).
    pub fn object_path(&self, key: &str) -> Result<ObjectPath> {
        if self.one_object {
            return Ok(ObjectPath::default()); // the root is the object
        }
        self.check_key_length(key)?;
        let full = self.kind.object_path(&self.root, key);
        ObjectPath::parse(&full)
            .map_err(|e| Error::InvalidArgument(format!("{}{key:?} is not a valid object key: {e}", self.root)))
    }

    /// A key the store could never hold is refused here, naming it (each kind says how
    /// long a key it holds: S3 and GCS keys 1,024 bytes, Azure blob names 1,024
    /// characters, an http(s) URL [`MAX_HTTP_URL`] bytes).
    fn check_key_length(&self, key: &str) -> Result<()> {
        let KeyLength { len, limit, unit, who } = self.kind.key_length(&self.root, key);
        if len <= limit {
            return Ok(());
        }
        let shown: String = key.chars().take(64).collect();
        let shown = format!("{}{shown}", redact(&self.root));
        Err(Error::InvalidArgument(format!("{shown:?}...: {len} {unit} long; {who} holds at most {limit}")))
    }

    /// The URL of an object path of this store.
    pub fn url_of(&self, path: &ObjectPath) -> String {
        if self.one_object {
            return self.root.clone();
        }
        self.kind.url_of(&self.root, path)
    }
    /// Whether the store can list keys (a plain HTTP server cannot).
    pub fn can_list(&self) -> bool {
        self.kind.cannot_list().is_none()
    }

    pub(super) fn cannot_list(&self, url: &str) -> Error {
        Error::InvalidArgument(format!(
            "{}: {}, so a URL there must name one object (e.g. .../train-00000.parquet), not a prefix or a \
             glob; list the objects' URLs instead",
            redact(url),
            self.kind.cannot_list().unwrap_or("the store cannot list objects")
        ))
    }
}

/// Whether `rest` (an http(s) URL after `://`) reads as user info whose password holds
/// an unescaped `/` (`user:pa/ss@host/key`): before the first `/` a `user:...` that is
/// no `host:port` (its "port" is not a number), and an `@` after it. A number there is
/// a port (`host:8080/a@b.parquet` is a path holding `@`), so only that case is read as
/// written; messages blank it either way (`redact`).
fn slash_in_user_info(rest: &str) -> bool {
    let Some((first, after)) = rest.split_once('/') else { return false };
    if first.contains('@') || first.starts_with('[') || !after.contains('@') {
        return false;
    }
    first.split_once(':').is_some_and(|(_, port)| port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()))
}

/// `%XX` escapes decoded (a `%` not followed by two hex digits stays itself).
fn percent_decode(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Standard base64 with padding (RFC 4648), what Basic authentication sends.
fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &c)| n | (c as u32) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() { ABC[(n >> (18 - 6 * i)) as usize & 63] as char } else { '=' });
        }
    }
    out
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
        assert_eq!(s.kind.name(), "Amazon S3");
        let (s, k) = StoreSpec::parse("http://127.0.0.1:9000/data/x.parquet", &[]).unwrap();
        assert_eq!(s.kind.name(), "HTTP(S)");
        assert_eq!((s.root.as_str(), k.as_str()), ("http://127.0.0.1:9000/", "data/x.parquet"));
        assert_eq!(s.url_of(&s.object_path(&k).unwrap()), "http://127.0.0.1:9000/data/x.parquet");
        let (s, _) = StoreSpec::parse("gs://b/k", &[]).unwrap();
        assert_eq!(s.kind.name(), "Google Cloud Storage");
        let (s, _) = StoreSpec::parse("az://c/k", &[]).unwrap();
        assert_eq!(s.kind.name(), "Azure Blob Storage");
    }

    #[test]
    fn base64_is_rfc_4648() {
        let cases =
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE=")];
        for (plain, encoded) in cases {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
        assert_eq!(base64(b"Aladdin:open sesame"), "QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
    }

    #[test]
    fn user_info_stays_out_of_roots_and_urls() {
        let (s, k) = StoreSpec::parse("http://admin:p#w?x@127.0.0.1:9/d/x.parquet", &[]).unwrap();
        assert_eq!((s.root.as_str(), k.as_str()), ("http://127.0.0.1:9/", "d/x.parquet"));
        assert_eq!(s.url_of(&s.object_path(&k).unwrap()), "http://127.0.0.1:9/d/x.parquet");
        assert_eq!(s.basic_auth().as_deref(), Some(format!("Basic {}", base64(b"admin:p#w?x"))).as_deref());
        let opts = [("username".to_string(), "ad min".to_string()), ("password".to_string(), "p@ss".to_string())];
        let (s, _) = StoreSpec::parse("http://127.0.0.1:9/d/x.parquet", &opts).unwrap();
        assert_eq!(s.basic_auth().as_deref(), Some(format!("Basic {}", base64(b"ad min:p@ss"))).as_deref());
        let (s, _) = StoreSpec::parse("http://a%40b:100%@127.0.0.1:9/d/x.parquet", &[]).unwrap();
        assert_eq!(s.basic_auth().as_deref(), Some(format!("Basic {}", base64(b"a@b:100%"))).as_deref());
        assert!(StoreSpec::parse("s3://b/k", &opts).is_err(), "credentials of http stores only");
        let e = StoreSpec::parse("http://admin:pa/ss@127.0.0.1:9/d/x.parquet", &[]).unwrap_err().to_string();
        assert!(e.contains("%2F") && !e.contains("pa/ss") && e.contains("127.0.0.1:9"), "{e}");
        let (s, k) = StoreSpec::parse("http://127.0.0.1:9/d/x.parquet#sig=S3CRET", &[]).unwrap();
        assert_eq!(s.url_of(&s.object_path(&k).unwrap()), "http://127.0.0.1:9/d/x.parquet", "a fragment is never sent");
        let (s, k) = StoreSpec::parse("http://127.0.0.1:9/d/a@b.parquet", &[]).unwrap();
        assert_eq!((s.root.as_str(), k.as_str()), ("http://127.0.0.1:9/", "d/a@b.parquet"), "a port, then a path");
        let (s, _) = StoreSpec::parse("abfs://container@acct.dfs.core.windows.net/k", &[]).unwrap();
        assert!(s.user_info.is_none() && s.root.contains("container@"), "not user info outside http(s)");
    }

    #[test]
    fn a_url_with_a_query_names_one_object() {
        for url in [
            "https://bkt.s3.amazonaws.com/a/x.parquet?X-Amz-Signature=ab&X-Amz-Expires=60",
            "https://acct.blob.core.windows.net/c/x?sv=2020&sig=abc#frag",
            "http://127.0.0.1:9000/data/x.parquet?download=true",
        ] {
            let (s, k) = StoreSpec::parse(url, &[]).unwrap();
            assert!(s.one_object && k.is_empty() && s.kind.name() == "HTTP(S)", "{url}");
            assert_eq!(s.url_of(&s.object_path(&k).unwrap()), url.split('#').next().unwrap());
        }
        assert!(StoreSpec::parse("http://h/dir/?sig=1", &[]).is_err());
        assert!(!StoreSpec::parse("s3://b/k?x", &[]).unwrap().0.one_object, "s3 keys may hold '?'");
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

    #[test]
    fn keys_no_store_could_hold_are_refused_naming_them() {
        let long = "k".repeat(1025);
        for url in ["s3://bkt/", "gs://bkt/"] {
            let (s, _) = StoreSpec::parse(&format!("{url}x"), &[]).unwrap();
            assert!(s.object_path(&"k".repeat(1024)).is_ok(), "{url}");
            let e = s.object_path(&long).unwrap_err().to_string();
            assert!(e.contains("1025 bytes") && e.contains(url) && e.len() < 300, "{e}");
        }
        let (az, _) = StoreSpec::parse("az://acct/ctr/x", &[]).unwrap();
        assert!(az.object_path(&"é".repeat(1024)).is_ok(), "Azure counts characters");
        assert!(az.object_path(&"é".repeat(1025)).unwrap_err().to_string().contains("1025 characters"));
        let (h, _) = StoreSpec::parse("https://host.example/d/x", &[]).unwrap();
        assert!(h.object_path(&"k".repeat(4000)).is_ok(), "http paths may be longer than object keys");
        let e = h.object_path(&"k".repeat(MAX_HTTP_URL)).unwrap_err().to_string();
        assert!(e.contains("an http(s) URL holds at most") && e.len() < 300, "{e}");
        let q = format!("https://host.example/x?sig={}", "s".repeat(MAX_HTTP_URL));
        let e = StoreSpec::parse(&q, &[]).unwrap_err().to_string();
        assert!(e.contains("bytes long") && e.len() < 300, "{e}");
    }
}

//! Plain web servers: `http://` and `https://` URLs `object_store` does not recognise as
//! another store's. Such a server cannot list; a URL with a query string names one object
//! (a presigned URL, `?download=true`), fetched as written; credentials are a bearer
//! token (`bearer.rs`, the Hub's own: `hub_token.rs`) or Basic ones (the URL's user info,
//! or `username`/`password`), sent to the store's own host only (`redirects.rs`).

use std::sync::Arc;

use object_store::http::HttpBuilder;
use object_store::path::Path as ObjectPath;
use object_store::{ClientConfigKey, ObjectStore, ObjectStoreScheme};

use super::{Build, KeyLength, StoreKind, config_error, unknown_key};
use crate::error::{Error, Result};
use crate::redact::redact;
use crate::storage::{bearer, hub_token, options, redirects};

/// The longest http(s) URL youmu requests: room for percent-encoding (up to 3 bytes a
/// byte) under the `http` crate's 65,534-byte URI limit.
pub const MAX_HTTP_URL: usize = 16 * 1024;

/// youmu's own `storage_options` of http(s) stores: Basic credentials, what user info in
/// the URL gives (an index or a pickle never stores either: pass them at load).
const HTTP_CREDENTIALS: &[&str] = &["username", "password"];

pub struct WebServer;

pub static HTTP: WebServer = WebServer;

/// Where the host of `root` (`scheme://host[:port]/...`) ends.
fn host_end(root: &str) -> usize {
    root.split_once("://").map_or(0, |(s, r)| s.len() + 3 + r.find('/').unwrap_or(r.len()))
}

impl StoreKind for WebServer {
    fn name(&self) -> &'static str {
        "HTTP(S)"
    }
    fn url_schemes(&self) -> &'static [&'static str] {
        &["http", "https"]
    }
    fn object_store_scheme(&self) -> Option<ObjectStoreScheme> {
        Some(ObjectStoreScheme::Http)
    }
    fn env_prefix(&self) -> &'static str {
        options::HTTP_ENV_PREFIX
    }
    fn takes_option(&self, key: &str) -> bool {
        key.parse::<ClientConfigKey>().is_ok() || bearer::is_bearer_key(key) || HTTP_CREDENTIALS.contains(&key)
    }
    fn build(&self, b: Build<'_>) -> Result<Arc<dyn ObjectStore>> {
        let root = b.root;
        let base = if b.one_object {
            root.to_string() // the object's own URL, its query included
        } else {
            root[..host_end(root)].to_string()
        };
        // credentials the options give win; else the Hub's own host gets the Hub's token
        let token = match bearer::token(b.options, root)? {
            None if b.basic_auth.is_none() => hub_token::implicit_token(root)?,
            given => given,
        };
        if token.is_some() && b.basic_auth.is_some() {
            return Err(Error::InvalidArgument(format!(
                "{}: a bearer token and Basic credentials (user info or username/password) both \
                 authenticate the requests: give one",
                redact(root)
            )));
        }
        let headers = match (token, b.basic_auth) {
            (Some(token), _) => Some(bearer::headers(&token, root)?),
            (None, Some(auth)) => {
                let mut value = reqwest::header::HeaderValue::from_str(&auth).map_err(|e| config_error(root, e))?;
                value.set_sensitive(true);
                Some(reqwest::header::HeaderMap::from_iter([(reqwest::header::AUTHORIZATION, value)]))
            }
            (None, None) => None,
        };
        // GETs and HEADs follow redirects in `redirects.rs` (remembering signed
        // URLs), sending the credentials to the store's own host only.
        let auth = headers.as_ref().and_then(|h| h.get(reqwest::header::AUTHORIZATION).cloned());
        let mut http = HttpBuilder::new()
            .with_url(base)
            .with_retry(b.retry)
            .with_http_connector(redirects::RedirectingConnector { auth, store: b.id });
        // first: the client options replace any set before them
        if let Some(headers) = headers {
            http = http.with_client_options(object_store::ClientOptions::new().with_default_headers(headers));
        }
        if root.starts_with("http://") {
            http = http.with_config(ClientConfigKey::AllowHttp, "true");
        }
        for (ck, v) in b.client.into_iter().chain(options::http_env()?) {
            http = http.with_config(ck, v);
        }
        for (k, v) in
            b.options.iter().filter(|(k, _)| !HTTP_CREDENTIALS.contains(&k.as_str()) && !bearer::is_bearer_key(k))
        {
            http = http.with_config(k.parse().map_err(|_| unknown_key(root, k))?, v.as_str());
        }
        Ok(Arc::new(http.build().map_err(|e| config_error(root, e))?))
    }
    fn plain_http_urls(&self) -> bool {
        true
    }
    /// A URL longer than [`MAX_HTTP_URL`] cannot be requested (the `http` crate under
    /// `object_store` stops at 65,534 bytes once the key is percent-encoded, and its
    /// request builders panic).
    fn key_length(&self, root: &str, key: &str) -> KeyLength {
        KeyLength { len: root.len() + key.len(), limit: MAX_HTTP_URL, unit: "bytes", who: "an http(s) URL" }
    }
    /// `HttpStore` paths include the path-style prefix of the root.
    fn object_path(&self, root: &str, key: &str) -> String {
        let after_host = root.split_once("://").and_then(|(_, r)| r.split_once('/')).map_or("", |x| x.1);
        format!("{after_host}{key}")
    }
    fn url_of(&self, root: &str, path: &ObjectPath) -> String {
        format!("{}/{}", &root[..host_end(root)], path.as_ref())
    }
    /// WebDAV's PROPFIND is all `object_store` could try, and web servers answer it 405
    /// or 501.
    fn cannot_list(&self) -> Option<&'static str> {
        Some("a plain http(s):// server cannot list objects")
    }
}

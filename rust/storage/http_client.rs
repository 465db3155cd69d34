//! A reqwest client built from an http(s) store's [`ClientOptions`] exactly as
//! `object_store` builds its own (user agent, proxy, certificates, timeouts, HTTP/2
//! settings, plain HTTP), except that it follows no redirect: [`super::redirects`]
//! follows them itself, so it can remember where an object was sent. `object_store`
//! keeps its builder private; every option youmu can set reaches the store as a
//! [`ClientConfigKey`], read back here (default headers are not: the credentials they
//! carry are added per request, to the store's own host only).

use object_store::{ClientConfigKey as Key, ClientOptions};

fn config_error(what: String) -> object_store::Error {
    object_store::Error::Generic { store: "HTTP", source: what.into() }
}

/// `object_store`'s reading of a boolean option.
fn truthy(v: &str) -> bool {
    matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "on" | "yes" | "y")
}

/// A client for `options` that returns every redirect as it is answered.
pub fn without_redirects(options: &ClientOptions) -> object_store::Result<reqwest::Client> {
    let get = |k: Key| options.get_config_value(&k);
    let yes = |k: Key| get(k).is_some_and(|v| truthy(&v));
    let duration = |k: Key| -> object_store::Result<Option<std::time::Duration>> {
        get(k)
            .map(|v| humantime::parse_duration(&v).map_err(|e| config_error(format!("{}: {v:?}: {e}", k.as_ref()))))
            .transpose()
    };
    let number = |k: Key| -> object_store::Result<Option<usize>> {
        get(k).map(|v| v.parse::<usize>().map_err(|e| config_error(format!("{}: {v:?}: {e}", k.as_ref())))).transpose()
    };
    let client_error = |e: reqwest::Error| config_error(format!("cannot build the HTTP client: {e}"));
    // reqwest needs rustls's process provider (the I/O runtime installs it too)
    let _ = rustls::crypto::ring::default_provider().install_default();

    let mut b = reqwest::ClientBuilder::new()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(get(Key::UserAgent).unwrap_or_else(|| concat!("youmu/", env!("CARGO_PKG_VERSION")).to_string()));
    if let Some(url) = get(Key::ProxyUrl) {
        let mut proxy = reqwest::Proxy::all(&url).map_err(client_error)?;
        if let Some(pem) = get(Key::ProxyCaCertificate) {
            let cert = reqwest::tls::Certificate::from_pem(pem.as_bytes()).map_err(client_error)?;
            b = b.tls_certs_merge(std::iter::once(cert));
        }
        if let Some(excludes) = get(Key::ProxyExcludes) {
            proxy = proxy.no_proxy(reqwest::NoProxy::from_string(&excludes));
        }
        b = b.proxy(proxy);
    }
    if yes(Key::NoSystemCertificates) {
        b = b.tls_certs_only(std::iter::empty());
    }
    if let Some(t) = duration(Key::Timeout)? {
        b = b.timeout(t);
    }
    if let Some(t) = duration(Key::ConnectTimeout)? {
        b = b.connect_timeout(t);
    }
    if let Some(t) = duration(Key::ReadTimeout)? {
        b = b.read_timeout(t);
    }
    if let Some(t) = duration(Key::PoolIdleTimeout)? {
        b = b.pool_idle_timeout(t);
    }
    if let Some(n) = number(Key::PoolMaxIdlePerHost)? {
        b = b.pool_max_idle_per_host(n);
    }
    if let Some(t) = duration(Key::Http2KeepAliveInterval)? {
        b = b.http2_keep_alive_interval(t);
    }
    if let Some(t) = duration(Key::Http2KeepAliveTimeout)? {
        b = b.http2_keep_alive_timeout(t);
    }
    if yes(Key::Http2KeepAliveWhileIdle) {
        b = b.http2_keep_alive_while_idle(true);
    }
    if let Some(n) = number(Key::Http2MaxFrameSize)? {
        b = b.http2_max_frame_size(Some(
            u32::try_from(n).map_err(|e| config_error(format!("http2_max_frame_size: {e}")))?,
        ));
    }
    if yes(Key::Http1Only) {
        b = b.http1_only();
    }
    if yes(Key::Http2Only) {
        b = b.http2_prior_knowledge();
    }
    if yes(Key::AllowInvalidCertificates) {
        b = b.danger_accept_invalid_certs(true);
    }
    // Compression would change Content-Length, which sizes objects (as object_store).
    b = b.no_gzip().no_brotli().no_zstd().no_deflate().https_only(!yes(Key::AllowHttp));
    b.build().map_err(client_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_that_do_not_parse_are_config_errors() {
        assert!(without_redirects(&ClientOptions::new().with_allow_http(true)).is_ok());
        let bad = ClientOptions::new().with_config(Key::Timeout, "soon");
        let e = without_redirects(&bad).unwrap_err().to_string();
        assert!(e.contains("timeout") && e.contains("soon"), "{e}");
        assert!(truthy("YES") && truthy("1") && !truthy("off"));
    }
}

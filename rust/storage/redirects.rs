//! Redirects of http(s) stores followed here, and where each object was sent remembered:
//! the Hugging Face Hub answers every read of a file's resolve URL (pinned to a commit)
//! with a `302` to a signed URL on its CDN, so following it anew would make every page
//! read two round trips (measured at 20 ms to a first byte: 0.44–0.54× the rows/s of
//! local files; with the URL kept, 0.92–1.37×, `benches/RESULTS.md`). The signed URL is
//! kept per requested URL (one file at one commit) and later GETs and HEADs of that URL
//! go straight to it, as a browser reuses a signed download link.
//!
//! What keeps this safe:
//!
//! * the requests sent to a remembered URL are the ones asked for, `If-Match` (the
//!   indexed ETag) and `Range` included, and their answers are checked like any other
//!   (`remote.rs`): a remembered URL can fail a read, never serve other bytes;
//! * the store's credentials (bearer token, Basic) go to the requested URL's own
//!   scheme, host and port only, never to the host a redirect leads to (as reqwest
//!   strips them when a redirect leaves the host);
//! * a signed URL expires: one whose query says when (`Expires=` of CloudFront and the
//!   Hub's CDN, `X-Amz-Date`+`X-Amz-Expires` of S3, `X-Goog-*` of GCS, `se=` of Azure)
//!   is dropped [`EXPIRY_MARGIN`] before then; one the CDN refuses (401, 403, 404, 410:
//!   expired, revoked, or gone) is dropped and the requested URL asked again, once,
//!   before the answer is returned.
//!
//! Where each URL was sent is kept once per process, not per store client, and outlives
//! a fork: a fork-based DataLoader worker starts from what the parent knew (the parent
//! resolved every file when it indexed it), so a worker's pages go straight to the CDN
//! too. The parent's table is copied on the child's first use only if no thread of the
//! parent held its lock at the fork (`try_lock`: that thread does not exist in the child,
//! and waiting on it would hang; the child then starts empty). Requests for a URL not
//! known yet wait for one of them to ask (single flight, as a browser's or Go's
//! `singleflight` coalescing does): a worker's first window of reads, all in flight at
//! once, asks the Hub once, not once per page.
//!
//! Only GET and HEAD are followed here; other methods go through `object_store`'s own
//! client, which follows redirects itself.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use object_store::ClientOptions;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use reqwest::header::{AUTHORIZATION, HeaderValue, LOCATION};
use reqwest::{Method, StatusCode};
use url::Url;

use crate::runtime::perprocess::PerProcess;

/// A signed URL this close to its expiry is asked for anew rather than used.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(10);
/// Redirects followed for one request at most (reqwest's default too).
const MAX_HOPS: usize = 10;
/// Remembered URLs per store at most (one per file read; past it the expired ones are
/// dropped, and if that is not enough, all of them).
const MAX_TARGETS: usize = 1 << 16;

/// Connects an http(s) store: its GETs and HEADs through [`Redirects`], `Retry-After`
/// waited out on every answer ([`super::retry_after`]). `auth`: the `Authorization`
/// value of the store's own host, if any; `store`: the store's id (`StoreSpec::id`, the
/// same in a forked child), which keys what it remembers: a URL another store (other
/// credentials) was sent to is never used for this one.
#[derive(Debug, Default)]
pub struct RedirectingConnector {
    pub auth: Option<HeaderValue>,
    pub store: u64,
}

impl HttpConnector for RedirectingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let redirects = Redirects {
            direct: HttpClient::new(super::http_client::without_redirects(options)?),
            following: ReqwestConnector::default().connect(options)?,
            auth: self.auth.clone(),
            store: self.store,
            asking: Mutex::new(HashMap::new()),
        };
        Ok(super::retry_after::waiting(HttpClient::new(redirects)))
    }
}

/// Where requested URLs were sent: `(store id, requested URL)` to its target.
type Table = HashMap<(u64, String), Target>;

static TARGETS: PerProcess<Mutex<Table>> = PerProcess::new();

/// This process's table; in a forked child, made on first use from the parent's where
/// no thread held the parent's lock at the fork (see the module doc).
fn targets() -> &'static Mutex<Table> {
    let mut inherited: Option<Table> = None;
    let table = TARGETS.get(
        || Mutex::new(HashMap::new()),
        |parents| {
            inherited = match parents.try_lock() {
                Ok(t) => Some(t.clone()),
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner().clone()),
                Err(TryLockError::WouldBlock) => None, // held by a thread of the parent: not here
            }
        },
    );
    if let Some(parents) = inherited {
        let now = SystemTime::now();
        let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
        for (k, v) in parents.into_iter().filter(|(_, v)| v.usable(now)) {
            t.entry(k).or_insert(v);
        }
    }
    table
}

/// Where a requested URL was last sent, and until when that holds.
#[derive(Debug, Clone)]
struct Target {
    url: Url,
    expires: Option<SystemTime>,
}

impl Target {
    fn usable(&self, now: SystemTime) -> bool {
        self.expires.is_none_or(|t| now + EXPIRY_MARGIN < t)
    }
}

#[derive(Debug)]
struct Redirects {
    /// Follows no redirect, sends no credentials of its own.
    direct: HttpClient,
    /// `object_store`'s client (follows redirects, sends the store's credentials).
    following: HttpClient,
    auth: Option<HeaderValue>,
    store: u64,
    /// The URLs being asked now, each with the gate its other requests wait at.
    asking: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

type Answer = Result<HttpResponse, HttpError>;

/// A redirect target's answer that says its signed URL no longer opens the object.
fn refused(status: StatusCode) -> bool {
    matches!(status.as_u16(), 401 | 403 | 404 | 410)
}

fn is_redirect(status: StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// Whether `a` and `b` are on one scheme, host and port (where credentials may go).
pub(super) fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme() && a.host_str() == b.host_str() && a.port_or_known_default() == b.port_or_known_default()
}

fn request_error(e: impl std::error::Error + Send + Sync + 'static) -> HttpError {
    HttpError::new(HttpErrorKind::Request, e)
}

#[derive(Debug)]
struct Redirected(String);

impl std::fmt::Display for Redirected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Redirected {}

impl Redirects {
    fn key(&self, requested: &str) -> (u64, String) {
        (self.store, requested.to_string())
    }

    fn remembered(&self, requested: &str) -> Option<Url> {
        let mut targets = targets().lock().ok()?;
        let key = self.key(requested);
        let t = targets.get(&key)?;
        if t.usable(SystemTime::now()) {
            return Some(t.url.clone());
        }
        targets.remove(&key);
        None
    }

    fn remember(&self, requested: &str, url: Url) {
        let expires = expiry(&url);
        let Ok(mut targets) = targets().lock() else { return };
        if targets.len() >= MAX_TARGETS {
            let now = SystemTime::now();
            targets.retain(|_, t| t.usable(now));
            if targets.len() >= MAX_TARGETS {
                targets.clear();
            }
        }
        targets.insert(self.key(requested), Target { url, expires });
    }

    fn forget(&self, requested: &str) {
        if let Ok(mut targets) = targets().lock() {
            targets.remove(&self.key(requested));
        }
    }

    /// The gate of `requested` while it is being asked: `(gate, whether this request asks)`.
    fn gate(&self, requested: &str) -> Option<(Arc<tokio::sync::Mutex<()>>, bool)> {
        let mut asking = self.asking.lock().ok()?;
        match asking.get(requested) {
            Some(g) => Some((g.clone(), false)),
            None => {
                let g = Arc::new(tokio::sync::Mutex::new(()));
                asking.insert(requested.to_string(), g.clone());
                Some((g, true))
            }
        }
    }

    fn asked(&self, requested: &str) {
        if let Ok(mut asking) = self.asking.lock() {
            asking.remove(requested);
        }
    }

    /// The requested URL's answer, its redirects followed: the answer and where it came
    /// from. `make(url, own_host)`: the request as asked, sent to `url`.
    async fn follow(&self, make: &Make<'_>, requested: &Url) -> Result<(HttpResponse, Url), HttpError> {
        let mut at = requested.clone();
        for _ in 0..=MAX_HOPS {
            let resp = self.direct.execute(make(&at, same_origin(&at, requested))?).await?;
            if !is_redirect(resp.status()) {
                return Ok((resp, at));
            }
            let Some(location) = resp.headers().get(LOCATION).and_then(|v| v.to_str().ok()) else {
                return Ok((resp, at)); // a redirect without a place to go: the caller sees it as answered
            };
            at = at.join(location).map_err(request_error)?;
        }
        Err(request_error(Redirected(format!("more than {MAX_HOPS} redirects"))))
    }

    async fn get_or_head(&self, req: HttpRequest) -> Answer {
        let (parts, body) = req.into_parts();
        let key = parts.uri.to_string();
        let requested = Url::parse(&key).map_err(request_error)?;
        // The request as asked, sent to `url`, with the store's credentials only if `url`
        // is on the requested URL's own host.
        let make = |url: &Url, own_host: bool| -> Result<HttpRequest, HttpError> {
            let mut p = parts.clone();
            p.uri = url.as_str().parse().map_err(request_error)?;
            p.headers.remove(AUTHORIZATION);
            if let (true, Some(auth)) = (own_host, &self.auth) {
                p.headers.insert(AUTHORIZATION, auth.clone());
            }
            Ok(HttpRequest::from_parts(p, body.clone()))
        };
        let mut asked_again = false;
        let mut target = self.remembered(&key);
        // Not known yet: one request asks, the others wait for it and then use its answer
        // (the gate is held across the request: a tokio mutex, dropped on cancellation).
        let mut asking = None;
        if target.is_none()
            && let Some((gate, first)) = self.gate(&key)
        {
            let guard = gate.clone().lock_owned().await;
            if first {
                asking = Some(guard);
            } else {
                drop(guard);
                target = self.remembered(&key);
            }
        }
        if let Some(target) = target {
            let resp = self.direct.execute(make(&target, same_origin(&target, &requested))?).await?;
            // a URL that answered without a redirect before has nothing to ask again
            let unsent = target == requested;
            if !is_redirect(resp.status()) && (unsent || !refused(resp.status())) {
                return Ok(resp);
            }
            self.forget(&key);
            asked_again = true;
        }
        let answer = async {
            loop {
                let (resp, at) = self.follow(&make, &requested).await?;
                if at == requested {
                    // no redirect: remembered as such, so later requests wait for no gate
                    if resp.status().is_success() {
                        self.remember(&key, at);
                    }
                    return Ok(resp);
                }
                if refused(resp.status()) && !asked_again {
                    asked_again = true; // a signed URL refused as soon as it was given: ask once more
                    continue;
                }
                if resp.status().is_success() {
                    self.remember(&key, at);
                }
                return Ok(resp);
            }
        }
        .await;
        if asking.take().is_some() {
            self.asked(&key);
        }
        answer
    }
}

/// Builds the request as asked, for a URL (and whether it is the requested URL's host).
type Make<'a> = dyn Fn(&Url, bool) -> Result<HttpRequest, HttpError> + Send + Sync + 'a;

// `HttpService` is declared with `async_trait`; this is the signature it expands to.
impl HttpService for Redirects {
    fn call<'a, 'b>(&'a self, req: HttpRequest) -> Pin<Box<dyn Future<Output = Answer> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            if req.method() == Method::GET || req.method() == Method::HEAD {
                self.get_or_head(req).await
            } else {
                self.following.execute(req).await
            }
        })
    }
}

/// When a signed URL stops opening its object, as its query says (`None`: it does not say).
pub fn expiry(url: &Url) -> Option<SystemTime> {
    let q: HashMap<String, String> = url.query_pairs().map(|(k, v)| (k.to_ascii_lowercase(), v.into_owned())).collect();
    let at_unix = |secs: i64| u64::try_from(secs).ok().map(|s| UNIX_EPOCH + Duration::from_secs(s));
    if let Some(secs) = q.get("expires").and_then(|v| v.parse::<i64>().ok()) {
        return at_unix(secs); // CloudFront, the Hub's CDN
    }
    for (date, ttl) in [("x-amz-date", "x-amz-expires"), ("x-goog-date", "x-goog-expires")] {
        if let (Some(d), Some(t)) = (q.get(date), q.get(ttl).and_then(|t| t.parse::<i64>().ok())) {
            return unix_of_timestamp(d).and_then(|start| at_unix(start.checked_add(t)?));
        }
    }
    q.get("se").and_then(|d| unix_of_timestamp(d)).and_then(at_unix) // Azure SAS
}

/// Seconds since the epoch of a UTC time written `20250102T030405Z` (SigV4) or
/// `2025-01-02T03:04:05Z` (ISO 8601, as Azure writes it; fractions of a second ignored).
fn unix_of_timestamp(text: &str) -> Option<i64> {
    let digits: String = text.split('.').next()?.chars().filter(|c| c.is_ascii_digit()).collect();
    if digits.len() != 14 || !text.trim_end().ends_with('Z') {
        return None;
    }
    let n = |a: usize, b: usize| digits[a..b].parse::<i64>().ok();
    let (y, m, d, hh, mm, ss) = (n(0, 4)?, n(4, 6)?, n(6, 8)?, n(8, 10)?, n(10, 12)?, n(12, 14)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    Some(days_from_civil(y, m, d) * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unix(url: &str) -> Option<u64> {
        expiry(&Url::parse(url).unwrap()).map(|t| t.duration_since(UNIX_EPOCH).unwrap().as_secs())
    }

    #[test]
    fn signed_urls_say_when_they_expire() {
        assert_eq!(
            unix("https://cdn-lfs.hf.co/repos/x?Expires=1700000000&Signature=s&Key-Pair-Id=k"),
            Some(1_700_000_000)
        );
        // 2025-01-02T03:04:05Z = 1735787045
        assert_eq!(
            unix("https://b.s3.amazonaws.com/k?X-Amz-Date=20250102T030405Z&X-Amz-Expires=3600&X-Amz-Signature=s"),
            Some(1_735_787_045 + 3600)
        );
        assert_eq!(
            unix("https://storage.googleapis.com/b/k?X-Goog-Date=20250102T030405Z&X-Goog-Expires=60"),
            Some(1_735_787_105)
        );
        assert_eq!(
            unix("https://a.blob.core.windows.net/c/k?sv=2022&se=2025-01-02T03:04:05Z&sig=s"),
            Some(1_735_787_045)
        );
        assert_eq!(unix("https://cdn/x?token=opaque"), None);
        assert_eq!(unix("https://cdn/x?X-Amz-Date=garbage&X-Amz-Expires=60"), None);
        assert_eq!(unix("https://cdn/x?Expires=-5"), None);
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }

    #[test]
    fn targets_are_dropped_before_they_expire() {
        let now = SystemTime::now();
        let url = Url::parse("https://cdn/x").unwrap();
        assert!(Target { url: url.clone(), expires: None }.usable(now));
        assert!(Target { url: url.clone(), expires: Some(now + EXPIRY_MARGIN * 2) }.usable(now));
        assert!(!Target { url, expires: Some(now + EXPIRY_MARGIN / 2) }.usable(now));
    }

    #[test]
    fn credentials_stay_on_their_own_host() {
        let a = Url::parse("https://huggingface.co/datasets/o/n/resolve/c/f").unwrap();
        assert!(same_origin(&a, &Url::parse("https://huggingface.co:443/other").unwrap()));
        assert!(!same_origin(&a, &Url::parse("https://cdn-lfs.hf.co/x").unwrap()));
        assert!(!same_origin(&a, &Url::parse("http://huggingface.co/x").unwrap()));
        assert!(!same_origin(&a, &Url::parse("https://huggingface.co:8443/x").unwrap()));
    }
}

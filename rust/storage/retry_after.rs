//! HTTP 429 (and 503) answers that say when to come back (`Retry-After`, in seconds, as
//! the Hugging Face Hub and RFC 9110 send it) are waited out in the transport, before
//! youmu's own retry loop ([`super::retry`]) sees them: that loop's early backoffs are
//! a tenth of a second, and a rate limiter that asked for a few seconds would only
//! count those retries against the client. A wait longer than what is left of
//! `retry_timeout`, or more waits than `retries`, hands the answer to the retry loop
//! as it is.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use object_store::ClientOptions;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};

/// Connects like `object_store`'s default (reqwest) and waits out `Retry-After`.
#[derive(Debug, Default)]
pub struct RetryAfterConnector;

impl HttpConnector for RetryAfterConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(waiting(ReqwestConnector::default().connect(options)?))
    }
}

/// `inner`, with `Retry-After` waited out on its answers.
pub fn waiting(inner: HttpClient) -> HttpClient {
    HttpClient::new(RetryAfter { inner })
}

#[derive(Debug)]
struct RetryAfter {
    inner: HttpClient,
}

/// The pause a 429 or 503 answer asks for (`Retry-After: <seconds>`); `None` for any
/// other answer, or a date form (left to the retry loop's backoff).
pub fn asked_pause(status: u16, retry_after: Option<&str>) -> Option<Duration> {
    if status != 429 && status != 503 {
        return None;
    }
    let secs: f64 = retry_after?.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

type Answer = Result<HttpResponse, HttpError>;

// `HttpService` is declared with `async_trait`; this is the signature it expands to.
impl HttpService for RetryAfter {
    fn call<'a, 'b>(&'a self, req: HttpRequest) -> Pin<Box<dyn Future<Output = Answer> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            let io = super::options::io_options();
            let start = Instant::now();
            let (parts, body) = req.into_parts();
            let mut waits = 0usize;
            loop {
                let attempt = HttpRequest::from_parts(parts.clone(), body.clone());
                let resp = self.inner.execute(attempt).await?;
                let header = resp.headers().get("retry-after").and_then(|v| v.to_str().ok());
                let Some(pause) = asked_pause(resp.status().as_u16(), header) else { return Ok(resp) };
                let left = io.retry_timeout.saturating_sub(start.elapsed());
                if waits >= io.retries || pause > left {
                    return Ok(resp);
                }
                waits += 1;
                super::retry::REMOTE_RETRIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(pause).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_rate_limits_with_seconds_ask_for_a_pause() {
        assert_eq!(asked_pause(429, Some("2")), Some(Duration::from_secs(2)));
        assert_eq!(asked_pause(503, Some(" 0.5 ")), Some(Duration::from_millis(500)));
        assert_eq!(asked_pause(429, None), None);
        assert_eq!(asked_pause(429, Some("Wed, 21 Oct 2015 07:28:00 GMT")), None);
        assert_eq!(asked_pause(429, Some("-1")), None);
        assert_eq!(asked_pause(500, Some("2")), None);
    }
}

//! youmu's retry loop around every object-store request (`object_store`'s own is
//! switched off: its decorrelated jitter with base 2 hovers near the first backoff, so
//! ten retries were spent about a second into an outage and `retry_timeout` never
//! applied).
//!
//! What is retried, and for how long:
//!
//! * a store that answered badly or went away (5xx, 429, 408, refused or reset
//!   connections, truncated bodies): up to `retries` times, with exponential backoff
//!   and jitter stretched so the retries span `retry_timeout` (the last one starts about
//!   `retry_timeout` after the first attempt). A store restarting for seconds or
//!   minutes is ridden out, as the exponential backoff with jitter of the AWS
//!   Architecture Blog ("Exponential Backoff and Jitter") intends.
//! * a request that got no answer in time (connect timeout, no first byte within
//!   `read_timeout`, `request_timeout`): retried once. A hung endpoint looks the same
//!   on every attempt, so it fails within about
//!   `connect_timeout + 2 * read_timeout` (20 s by default) instead of `retry_timeout`.
//! * a store that never answered this process and refuses connections (a wrong
//!   endpoint): retried once, not for `retry_timeout`.
//!
//! Everything else (404, 403, a failed `If-Match`, a bad configuration) is not retried.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Retries sent by this process (all stores).
pub static REMOTE_RETRIES: AtomicU64 = AtomicU64::new(0);

/// The first backoff; later ones grow from it.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Retries of requests that got no answer at all.
const TIMEOUT_RETRIES: usize = 1;
/// Retries of refused connections to a store that never answered this process.
const FIRST_CONTACT_RETRIES: usize = 1;

/// Why a failed request may succeed when sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transient {
    /// No answer in time (connect, first byte, whole request).
    Timeout,
    /// The connection could not be made (refused, DNS).
    Connect,
    /// The store answered 5xx/429/408, or the connection broke mid-request.
    Other,
}

/// Whether `e` is worth retrying, and why.
pub fn transient(e: &object_store::Error) -> Option<Transient> {
    use object_store::client::HttpErrorKind;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(h) = c.downcast_ref::<object_store::client::HttpError>() {
            return match h.kind() {
                HttpErrorKind::Timeout => Some(Transient::Timeout),
                HttpErrorKind::Connect => Some(Transient::Connect),
                HttpErrorKind::Request | HttpErrorKind::Interrupted | HttpErrorKind::Decode => Some(Transient::Other),
                // builder errors (a disallowed scheme) and the like: sending again cannot help
                _ => None,
            };
        }
        cur = c.source();
    }
    // object_store's retry error is not public: read the status from its text.
    let text = e.to_string().to_ascii_lowercase();
    let status = text.split("status code: ").nth(1).and_then(|s| s.get(..3)).and_then(|s| s.parse::<u16>().ok());
    match status {
        Some(s) if s >= 500 || s == 429 || s == 408 => Some(Transient::Other),
        _ => None,
    }
}

/// The growth factor `g` of backoffs `first * g^k` (k = 0..retries) whose sum is
/// `span`: the retries then cover the retry timeout, whatever the two settings are.
pub fn growth(retries: usize, first: Duration, span: Duration) -> f64 {
    let (n, a, t) = (retries.max(1) as f64, first.as_secs_f64(), span.as_secs_f64());
    // one retry: there is nothing to grow
    if retries <= 1 || n * a >= t {
        return 1.0;
    }
    let sum = |g: f64| if (g - 1.0).abs() < 1e-9 { n * a } else { a * (g.powf(n) - 1.0) / (g - 1.0) };
    let (mut lo, mut hi) = (1.0f64, 2.0f64);
    while sum(hi) < t && hi < 1e9 {
        hi *= 2.0;
    }
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if sum(mid) < t {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// A number in [0.5, 1.5) for jitter (randomised per call by std's hasher keys).
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    0.5 + (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// The pause before retry `k` (0-based).
pub fn backoff(k: usize, retries: usize, span: Duration) -> Duration {
    let g = growth(retries, FIRST_BACKOFF, span);
    let base = FIRST_BACKOFF.as_secs_f64() * g.powi(k.min(i32::MAX as usize) as i32);
    Duration::from_secs_f64((base * jitter()).min(span.as_secs_f64()))
}

/// A request that failed for good: its last error, and the retries spent on it.
#[derive(Debug)]
pub struct Failed {
    pub error: object_store::Error,
    pub retries: usize,
    pub elapsed: Duration,
}

/// Run `attempt` until it succeeds, fails for good, or the retry budget is spent (see
/// the module docs). `answered`: whether the store has answered this process before
/// (set here on any answer).
pub async fn retrying<T, F, Fut>(answered: &AtomicBool, mut attempt: F) -> Result<T, Failed>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, object_store::Error>>,
{
    let io = super::options::io_options();
    let start = Instant::now();
    let (mut retries, mut timeouts, mut refused) = (0usize, 0usize, 0usize);
    loop {
        let e = match attempt().await {
            Ok(v) => {
                answered.store(true, Ordering::Relaxed);
                return Ok(v);
            }
            Err(e) => e,
        };
        let why = transient(&e);
        if !matches!(why, Some(Transient::Timeout | Transient::Connect)) {
            answered.store(true, Ordering::Relaxed);
        }
        let give_up = match why {
            None => true,
            Some(Transient::Timeout) => {
                timeouts += 1;
                timeouts > TIMEOUT_RETRIES
            }
            Some(Transient::Connect) if !answered.load(Ordering::Relaxed) => {
                refused += 1;
                refused > FIRST_CONTACT_RETRIES
            }
            Some(_) => false,
        };
        let elapsed = start.elapsed();
        if give_up || retries >= io.retries || elapsed >= io.retry_timeout {
            return Err(Failed { error: e, retries, elapsed });
        }
        let pause = backoff(retries, io.retries, io.retry_timeout).min(io.retry_timeout - elapsed);
        retries += 1;
        REMOTE_RETRIES.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(pause).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoffs_span_the_retry_timeout() {
        for (n, span) in [(10usize, 180.0f64), (3, 20.0), (1, 5.0), (100, 180.0), (10, 0.5)] {
            let g = growth(n, FIRST_BACKOFF, Duration::from_secs_f64(span));
            let total: f64 = (0..n).map(|k| 0.1 * g.powi(k as i32)).sum();
            assert!(
                total >= span * 0.99 || (g == 1.0 && (n == 1 || n as f64 * 0.1 >= span)),
                "{n} {span}: {total} (g {g})"
            );
            assert!(total <= span * 1.01 || g == 1.0, "{n} {span}: {total}");
        }
        // the defaults: the first retries come fast, a 5 s restart is outlasted by the sixth
        let d = |k| backoff(k, 10, Duration::from_secs(180)).as_secs_f64();
        assert!(d(0) < 0.15);
        assert!((0..6).map(d).sum::<f64>() > 5.0);
        let j: Vec<f64> = (0..50).map(|_| jitter()).collect();
        assert!(j.iter().all(|&x| (0.5..1.5).contains(&x)) && j.iter().any(|&x| (x - j[0]).abs() > 1e-6));
    }
}

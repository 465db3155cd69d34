//! What this process sent to and got from storage, for `io_stats()` and the tests that
//! assert a plan fetched everything a decode needed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Requests sent to object stores by this process, retries included
/// (`retry::REMOTE_RETRIES` counts those).
pub static REMOTE_REQUESTS: AtomicU64 = AtomicU64::new(0);
/// Bytes received from object stores.
pub static REMOTE_BYTES: AtomicU64 = AtomicU64::new(0);
/// Remote reads a decode asked for that its plan had not fetched (each one a blocking
/// GET on a pool thread): zero unless a plan is wrong. Tests assert it stays zero.
pub static UNPLANNED_READS: AtomicU64 = AtomicU64::new(0);

/// Time to the response headers of recent GETs (an exponentially weighted mean, in
/// microseconds; 0 before the first): what a stream needs to size its read-ahead.
pub static FIRST_BYTE_US: AtomicU64 = AtomicU64::new(0);

pub(crate) fn record_first_byte(d: Duration) {
    let us = d.as_micros().min(u64::MAX as u128) as u64;
    // weight 1/16: a few dozen requests settle it, one slow request does not
    let _ = FIRST_BYTE_US.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
        Some(if old == 0 { us } else { old - old / 16 + us / 16 })
    });
}

//! Storage: where the bytes of an indexed file come from.
//!
//! One abstraction, the [`Storage`] trait, used by index builds, header scans, page
//! reads and the dictionary cache alike; the rest of the crate holds a [`Source`] (an
//! `Arc<dyn Storage>`) and never asks which backend it is:
//!
//! * [`LocalFile`]: a file on a local filesystem, read with `pread` through a bounded
//!   LRU of open handles ([`local`]), so an index over 100,000 files needs no more file
//!   descriptors than the limit allows.
//! * [`RemoteObject`]: an object in an object store (S3, GCS, Azure, HTTP), read with
//!   ranged GETs through the `object_store` crate ([`client`], [`remote`]) on youmu's
//!   own async runtime ([`aio`]), conditional on the ETag recorded when it was indexed.
//!
//! Which kind of place a user's path or URL names is one registry of [`scheme`]s, one
//! file each (local paths, objects in stores, the Hugging Face Hub), each listing its
//! paths (a local walk in `walk.rs`, an object listing in `listed.rs`, by the naming rules
//! of `crate::rules`), reading and writing them whole and reopening what a saved index
//! recorded; which kind of object store (S3, GCS, Azure, HTTP(S)) is a second registry,
//! [`stores`], one file per kind, which everything about a store asks; what a listing found is a
//! [`Found`], which opens itself; how a set of found files is opened and parsed is
//! `opening.rs` (local files in batches per pool task, objects one task each), how they
//! are read, saved and reopened `open.rs`. No caller branches on the backend or waits on the
//! async runtime itself.
//!
//! Reads are vectored: a batch of pages (or an index build step) names the byte ranges
//! each read needs and storage brings them in ([`fetch_reads`], [`Source::fetch`]): a
//! local file is read in place by the decode's `pread`s; an object's ranges are
//! planned before they are made: [`fetch`] issues them concurrently (bounded by
//! `max_inflight`, adjacent ranges optionally coalesced) and the decoder then runs, on
//! youmu's CPU pool, over a [`Fetched`] view of those bytes. Decoding never runs on an
//! I/O thread and an I/O thread never waits on a decode.
//!
//! I/O knobs ([`IoOptions`]) are process-wide and change nothing about the data: a saved
//! index stays valid whatever they are set to.

pub mod aio;
pub mod atomic;
pub mod bearer;
pub mod client;
pub mod counters;
pub mod fetch;
pub mod fetched;
pub mod found;
pub mod http_client;
pub mod hub_file;
pub mod hub_token;
pub mod listed;
pub mod local;
pub mod open;
pub mod opening;
pub mod options;
pub mod per_store;
pub mod redirects;
pub mod remote;
pub mod retry;
pub mod retry_after;
pub mod scheme;
pub mod source;
pub mod spec;
pub mod stores;
pub mod vectored;
pub mod walk;

use std::sync::atomic::Ordering;

use crate::error::{Error, Result};

pub use counters::{FIRST_BYTE_US, REMOTE_BYTES, REMOTE_REQUESTS, UNPLANNED_READS};
pub use fetched::{Fetched, FetchedCursor};
pub use found::{Found, Listing};
pub use open::*;
pub use opening::open_each;
pub use options::*;
pub use scheme::{resolve, set_hub_resolver};
pub use source::{ObjectVersion, Source, Storage};
pub use spec::refuse_unused_options;
pub use vectored::{any_remote, fetch_reads, refuse_unused_options_for, spawn_read, suggested_read_ahead};

/// Replace the settings. Stores built with the old retry/timeout settings are dropped
/// (rebuilt on next use); the handle cache shrinks to the new limit at once.
pub fn set_io_options(o: IoOptions) -> Result<()> {
    for (name, v) in [
        ("max_inflight", o.max_inflight as u64),
        ("coalesce_gap", o.coalesce_gap),
        ("max_open_files", o.max_open_files as u64),
        ("tail_bytes", o.tail_bytes),
        ("retries", o.retries as u64),
        ("io_threads", o.io_threads as u64),
    ] {
        check_io_option(name, &format!("set_io_options({name})"), v)?;
    }
    for (name, d) in [
        ("retry_timeout", o.retry_timeout),
        ("request_timeout", o.request_timeout),
        ("connect_timeout", o.connect_timeout),
        ("read_timeout", o.read_timeout),
    ] {
        if d.is_zero() || d.as_secs_f64() > MAX_TIMEOUT_SECS {
            return Err(Error::InvalidArgument(format!(
                "set_io_options({name}) must be a number of seconds above 0 and at most {MAX_TIMEOUT_SECS}, got {}",
                d.as_secs_f64()
            )));
        }
    }
    let old = options::replace(o.clone());
    local::set_capacity(o.max_open_files);
    if old.max_inflight != o.max_inflight {
        aio::resize_inflight(o.max_inflight);
    }
    if (old.retry_timeout, old.request_timeout, old.connect_timeout, old.read_timeout)
        != (o.retry_timeout, o.request_timeout, o.connect_timeout, o.read_timeout)
    {
        aio::forget_stores();
    }
    Ok(())
}

/// Counters for `io_stats()`.
pub fn stats() -> Vec<(&'static str, u64)> {
    let (opens, open_now) = local::stats();
    vec![
        ("remote_requests", REMOTE_REQUESTS.load(Ordering::Relaxed)),
        ("remote_bytes", REMOTE_BYTES.load(Ordering::Relaxed)),
        ("remote_retries", retry::REMOTE_RETRIES.load(Ordering::Relaxed)),
        ("unplanned_remote_reads", UNPLANNED_READS.load(Ordering::Relaxed)),
        ("remote_first_byte_us", FIRST_BYTE_US.load(Ordering::Relaxed)),
        ("file_opens", opens),
        ("open_files", open_now),
    ]
}

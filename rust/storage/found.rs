//! What discovery found, before anything is opened: one [`Found`] per file or object, a
//! handle on what the listing of its scheme made of it (as [`super::Source`] is a
//! handle on an opened one), and the entries it skipped, with why. Nothing matches on
//! what kind of entry it is: each kind says its name and identity and opens itself.

use std::ffi::OsString;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;

use super::source::Source;
use crate::error::Result;

/// A file or object a listing found, not opened yet.
pub trait Listed: Send + Sync + std::fmt::Debug {
    /// Its path or URL, for messages and for the index.
    fn name(&self) -> String;
    /// What tells two found entries apart (two spellings of one local file are one).
    /// Compared as bytes: two names that are not UTF-8 may display alike.
    fn identity(&self) -> OsString;
    /// Whether `storage_options` configure how it is reached (an object in a store);
    /// options given where no entry takes them are refused, not ignored.
    fn takes_options(&self) -> bool;
    /// Open it (from async code; blocking work is left to [`Opened::source`], which
    /// runs on youmu's pool): a source on it and whatever bytes opening it brought along.
    fn open(&self) -> BoxFuture<'_, Result<Opened>>;
}

/// A found entry opened: what makes its source, the bytes `[start, len)` that came with
/// opening it (an object's tail, from the GET that told its size and ETag; nothing for a
/// local file, which is read in place) and the requests opening it took.
pub struct Opened {
    /// Run on youmu's pool, in the task that first parses the entry: a local file's
    /// open and `fstat` block (and would cost a second hop to the pool apart); an
    /// object's source is made already.
    pub source: Box<dyn FnOnce() -> Result<Source> + Send>,
    pub start: u64,
    pub tail: Bytes,
    pub requests: u64,
}

/// One file or object found by discovery: a shared handle on one [`Listed`].
#[derive(Debug, Clone)]
pub struct Found(Arc<dyn Listed>);

impl Found {
    pub fn new(listed: Arc<dyn Listed>) -> Found {
        Found(listed)
    }

    pub fn name(&self) -> String {
        self.0.name()
    }

    /// See [`Listed::identity`].
    pub fn identity(&self) -> OsString {
        self.0.identity()
    }

    /// See [`Listed::takes_options`].
    pub fn takes_options(&self) -> bool {
        self.0.takes_options()
    }

    /// See [`Listed::open`].
    pub fn open(&self) -> BoxFuture<'_, Result<Opened>> {
        self.0.open()
    }
}

/// What listing the user's paths found, in order, and what it skipped (entry, reason):
/// entries that are not regular files, and files or directories reached again.
#[derive(Debug, Default)]
pub struct Listing {
    pub found: Vec<Found>,
    pub skipped: Vec<(String, String)>,
}

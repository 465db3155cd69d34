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
    /// How it opens (see [`Opening`]); nothing is done until that is run.
    fn open(&self) -> Opening<'_>;
}

/// How a found entry opens, which decides how a build schedules it (`opening.rs`).
pub enum Opening<'a> {
    /// By blocking calls, on youmu's pool (a local file's `open` and `fstat`), its
    /// source read in place from then on: cheap enough that such entries are opened
    /// and parsed many to a pool task rather than one task and one wake-up each.
    InPlace(Box<dyn FnOnce() -> Result<Source> + Send>),
    /// By a request that brings bytes along (an object's tail GET, which also tells its
    /// size and ETag): a task of its own, many in flight.
    Fetching(BoxFuture<'a, Result<Opened>>),
}

/// An entry opened by a request: its source, the bytes `[start, len)` that came with
/// opening it and the requests opening it took.
pub struct Opened {
    pub source: Source,
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
    pub fn open(&self) -> Opening<'_> {
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

//! What discovery found, before anything is opened: a local file or an object (with
//! what its listing said), and the entries it skipped, with why.

use std::path::PathBuf;
use std::sync::Arc;

use object_store::ObjectMeta;
use object_store::path::Path as ObjectPath;

use super::spec::StoreSpec;

/// One file or object found by discovery, not opened yet.
#[derive(Debug, Clone)]
pub enum Found {
    Local(PathBuf),
    Remote {
        spec: Arc<StoreSpec>,
        path: ObjectPath,
        /// From the listing (size, ETag), when the object was listed.
        meta: Option<ObjectMeta>,
    },
}

impl Found {
    pub fn name(&self) -> String {
        match self {
            Found::Local(p) => p.display().to_string(),
            Found::Remote { spec, path, .. } => spec.url_of(path),
        }
    }

    /// What tells two found entries apart: a local file's canonical path (so two
    /// spellings of one file are one), an object's URL. Compared as bytes: two names
    /// that are not UTF-8 may display alike.
    pub fn identity(&self) -> std::ffi::OsString {
        match self {
            Found::Local(p) => std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()).into_os_string(),
            Found::Remote { .. } => self.name().into(),
        }
    }

    /// Whether this is an object in a store.
    pub fn in_store(&self) -> bool {
        matches!(self, Found::Remote { .. })
    }
}

/// What listing the user's paths found, in order, and what it skipped (entry, reason):
/// entries that are not regular files, and files or directories reached again.
#[derive(Debug, Default)]
pub struct Listing {
    pub found: Vec<Found>,
    pub skipped: Vec<(String, String)>,
}

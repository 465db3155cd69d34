//! The entries listings find ([`Listed`]): a local file (found by the walk of
//! `walk.rs`) and an object (found by [`list_objects`] here), each opened its own way:
//! a file on youmu's pool, read in place from then on; an object by one GET of its
//! tail, which also tells its size and ETag (see [`super::found::Opening`]).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use object_store::ObjectMeta;
use object_store::path::Path as ObjectPath;

use super::found::{Found, Listed, Opened, Opening};
use super::local::LocalFile;
use super::options::io_options;
use super::remote::RemoteObject;
use super::source::Source;
use super::spec::StoreSpec;
use crate::error::{Error, Result};
use crate::redact::redact;
use crate::rules::{KeyPlan, is_glob, names_object};

/// A local file found by a walk.
#[derive(Debug)]
struct ListedFile(PathBuf);

/// The found entry of the local file at `path`.
pub fn file(path: PathBuf) -> Found {
    Found::new(Arc::new(ListedFile(path)))
}

impl Listed for ListedFile {
    fn name(&self) -> String {
        self.0.display().to_string()
    }
    fn identity(&self) -> OsString {
        std::fs::canonicalize(&self.0).unwrap_or_else(|_| self.0.clone()).into_os_string()
    }
    fn takes_options(&self) -> bool {
        false
    }
    fn open(&self) -> Opening<'_> {
        let path = self.0.clone();
        // an open and a stat: blocking calls, made on the pool with the footer's parse
        Opening::InPlace(Box::new(move || LocalFile::open(&path).map(|f| Source::new(Arc::new(f)))))
    }
}

/// An object found by a listing (with what the listing said of it, where it listed it)
/// or named by its URL.
#[derive(Debug)]
struct ListedObject {
    spec: Arc<StoreSpec>,
    path: ObjectPath,
    meta: Option<ObjectMeta>,
}

fn object(spec: Arc<StoreSpec>, path: ObjectPath, meta: Option<ObjectMeta>) -> Found {
    Found::new(Arc::new(ListedObject { spec, path, meta }))
}

impl Listed for ListedObject {
    fn name(&self) -> String {
        self.spec.url_of(&self.path)
    }
    fn identity(&self) -> OsString {
        self.name().into()
    }
    fn takes_options(&self) -> bool {
        true
    }
    fn open(&self) -> Opening<'_> {
        Opening::Fetching(Box::pin(async move {
            if let Some(m) = &self.meta
                && m.size < 12
            {
                return Err(Error::corrupt(
                    self.name(),
                    format!("object is {} bytes, too small to be Parquet", m.size),
                ));
            }
            let (obj, start, tail) = RemoteObject::get_tail(
                self.spec.clone(),
                self.path.clone(),
                self.meta.clone(),
                io_options().tail_bytes,
            )
            .await?;
            Ok(Opened { source: Source::new(Arc::new(obj)), start, tail, requests: 1 })
        }))
    }
}

/// List the object-store URL `spec` into `out` by the rules of [`crate::index::paths`]: an
/// object, a prefix listed in key order, or a glob matched against a prefix's keys.
pub(crate) fn list_objects(spec: &str, options: &[(String, String)], out: &mut Vec<Found>) -> Result<()> {
    let (store, key) = StoreSpec::parse(spec, options)?;
    let listed = |prefix: &str| -> Result<Vec<ObjectMeta>> { store.list_sorted(prefix) };
    let push = |out: &mut Vec<Found>, m: ObjectMeta| out.push(object(store.clone(), m.location.clone(), Some(m)));
    if store.one_object {
        out.push(object(store.clone(), store.object_path(&key)?, None));
        return Ok(());
    }
    if is_glob(&key) {
        let plan =
            KeyPlan::new(&key).map_err(|e| Error::InvalidArgument(format!("bad glob {:?}: {e}", redact(spec))))?;
        let before = out.len();
        for m in listed(plan.prefix())? {
            if plan.takes(m.location.as_ref()) {
                push(out, m);
            }
        }
        if out.len() == before {
            return Err(Error::InvalidArgument(format!("glob {:?} matched no Parquet objects", redact(spec))));
        }
        return Ok(());
    }
    // plain HTTP cannot list: a URL there names one object, whatever its name
    if names_object(&key) || (!store.can_list() && !key.is_empty() && !key.ends_with('/')) {
        out.push(object(store.clone(), store.object_path(&key)?, None));
        return Ok(());
    }
    let plan = KeyPlan::new(&key).map_err(Error::InvalidArgument)?;
    let before = out.len();
    for m in listed(plan.prefix())? {
        if plan.takes(m.location.as_ref()) {
            push(out, m);
        }
    }
    if out.len() == before {
        if !key.is_empty() && !key.ends_with('/') {
            // not a prefix of anything: an object named without an extension
            out.push(object(store.clone(), store.object_path(&key)?, None));
            return Ok(());
        }
        return Err(Error::InvalidArgument(format!(
            "{} holds no Parquet objects (*.parquet, *.parq, *.pq; hidden names skipped)",
            redact(spec)
        )));
    }
    Ok(())
}

//! Objects in the stores of the store registry (`stores/`: S3, GCS, Azure, HTTP(S)),
//! read with ranged GETs through `object_store`: listed (`listed.rs`), read and written
//! whole with one GET or PUT (`client.rs`), reopened from a saved index with one store
//! per bucket and, where asked, one check of what each object is now (`remote.rs`).
//! Which kind of store an object is in, and everything that differs between kinds, is
//! the store registry's.

use std::path::Path;
use std::sync::Arc;

use super::{Saved, Scheme};
use crate::error::{Error, Result};
use crate::storage::aio::block_on;
use crate::storage::found::Listing;
use crate::storage::remote::{RemoteObject, verify};
use crate::storage::source::Source;
use crate::storage::spec::StoreSpec;
use crate::storage::stores::{self, StoreKind};

pub struct ObjectStores;

pub static OBJECTS: ObjectStores = ObjectStores;

impl Scheme for ObjectStores {
    fn name(&self) -> &'static str {
        "object stores"
    }
    fn url_schemes(&self) -> Vec<&'static str> {
        stores::url_schemes().collect()
    }
    fn list(&self, spec: &str, options: &[(String, String)], out: &mut Listing) -> Result<()> {
        crate::storage::listed::list_objects(spec, options, &mut out.found)
    }
    fn read_whole(&self, path: &Path, options: &[(String, String)]) -> Result<Vec<u8>> {
        crate::storage::client::read_object(&path.to_string_lossy(), options)
    }
    fn write_whole(&self, path: &Path, options: &[(String, String)], data: Vec<u8>, _what: &str) -> Result<()> {
        // one PUT: a reader sees the old object or the new one
        crate::storage::client::write_object(&path.to_string_lossy(), options, data)
    }
    fn refuse_unused_options(&self, _path: &Path, _options: &[(String, String)], _what: &str) -> Result<()> {
        Ok(())
    }
    fn takes_option(&self, key: &str) -> bool {
        stores::STORES.iter().any(|k| k.takes_option(key))
    }
    fn store_of(&self, spec: &str) -> Result<Option<(String, &'static dyn StoreKind)>> {
        let (store, _) = StoreSpec::parse(spec, &[])?;
        Ok(Some((store.root.clone(), store.kind)))
    }
    /// One store per bucket; with `verify`, one check of what the objects are now (a
    /// listing per "directory" or a HEAD each), the first that changed failing the whole
    /// load. Without it (an index pickled into a worker, checked by its parent) reads
    /// still refuse a replaced object (their GETs are conditional on the ETag).
    fn reopen(
        &self,
        saved: &[(&Saved, Vec<(String, String)>)],
        verify_objects: bool,
        index: &Path,
    ) -> Result<Vec<Result<Source>>> {
        let mut specs: std::collections::HashMap<String, Arc<StoreSpec>> = Default::default();
        let mut objects: Vec<Arc<RemoteObject>> = Vec::with_capacity(saved.len());
        for (s, options) in saved {
            let Some(v) = &s.object else {
                return Err(Error::corrupt_index(index, format!("{} is an object recorded without its version", s.name)));
            };
            let (spec, key) = StoreSpec::parse(&s.name, options)?;
            let spec = specs.entry(spec.root.clone()).or_insert(spec).clone();
            objects.push(Arc::new(RemoteObject {
                path: spec.object_path(&key)?,
                spec,
                url: s.name.clone(),
                size: s.size,
                etag: v.etag.clone(),
                version: v.version.clone(),
                mtime_ns: s.mtime_ns,
            }));
        }
        if verify_objects
            && !objects.is_empty()
            && let Err((url, why)) = block_on(verify(&objects))??
        {
            return Err(Error::Stale {
                index: index.display().to_string(),
                detail: format!("{url} changed since it was indexed ({why}): rebuild the index"),
            });
        }
        Ok(objects.into_iter().map(|o| Ok(Source::new(o))).collect())
    }
}

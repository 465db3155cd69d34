//! Datasets on the Hugging Face Hub (`hf://datasets/<owner>/<name>[@rev]/<path>`): each
//! stands for the resolve URLs of its files at one commit, http(s) objects read like any
//! other (ranged GETs, ETags checked). The Hub's API (listing a repository's tree,
//! pinning a revision to its commit, finding the token) is `huggingface_hub`'s, so the
//! Python bindings install the resolver (`youmu.streams.hub.expand_paths`); storage knows
//! nothing of Python.

use std::path::Path;
use std::sync::OnceLock;

use super::{Resolved, Saved, Scheme, scheme_of, url_scheme};
use crate::error::{Error, Result};
use crate::redact::redact;
use crate::storage::found::Listing;
use crate::storage::source::Source;
use crate::storage::stores::{self, StoreKind};

/// What turns an `hf://` URL into the resolve URLs of its files and the options that
/// send the token.
pub type HubResolver = dyn Fn(&str, &[(String, String)]) -> Result<Resolved> + Send + Sync;

static HUB_RESOLVER: OnceLock<Box<HubResolver>> = OnceLock::new();

/// Install the Hub's resolver (once per process; later calls change nothing).
pub fn set_hub_resolver(resolver: Box<HubResolver>) {
    let _ = HUB_RESOLVER.set(resolver);
}

pub struct Hub;

pub static HUB: Hub = Hub;

/// The kind of store the Hub's files are in: the resolve URLs are https ones.
fn files_kind() -> Option<&'static dyn StoreKind> {
    stores::named_by("https")
}

impl Hub {
    fn resolved(&self, spec: &str, options: &[(String, String)]) -> Result<Resolved> {
        let resolver = HUB_RESOLVER.get().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{:?}: hf:// paths are resolved through the youmu Python package (huggingface_hub), not loaded here",
                redact(spec)
            ))
        })?;
        let (urls, options) = resolver(spec, options)?;
        if let Some(u) = urls.iter().find(|u| url_scheme(u) == "hf") {
            return Err(Error::Internal(format!("the Hub resolved {:?} to another hf:// URL", redact(u))));
        }
        Ok((urls, options))
    }
}

impl Scheme for Hub {
    fn name(&self) -> &'static str {
        "the Hugging Face Hub"
    }
    fn url_schemes(&self) -> Vec<&'static str> {
        vec!["hf"]
    }
    fn resolve(&self, spec: &str, options: &[(String, String)]) -> Result<Option<Resolved>> {
        self.resolved(spec, options).map(Some)
    }
    fn list(&self, spec: &str, options: &[(String, String)], out: &mut Listing) -> Result<()> {
        let (urls, options) = self.resolved(spec, options)?;
        for u in urls {
            scheme_of(&u)?.list(&u, &options, out)?;
        }
        Ok(())
    }
    fn read_whole(&self, path: &Path, options: &[(String, String)]) -> Result<Vec<u8>> {
        let spec = path.to_string_lossy();
        let (urls, options) = self.resolved(&spec, options)?;
        match urls.as_slice() {
            [one] => scheme_of(one)?.read_whole(Path::new(one), &options),
            _ => Err(Error::InvalidArgument(format!(
                "{:?} names {} files of the Hub, not one saved index",
                redact(&spec),
                urls.len()
            ))),
        }
    }
    fn write_whole(&self, path: &Path, _options: &[(String, String)], _data: Vec<u8>, what: &str) -> Result<()> {
        Err(Error::InvalidArgument(format!(
            "{:?}: youmu does not write to the Hugging Face Hub (a {what} there needs a commit): save it locally or \
             to an object store and upload it with huggingface_hub",
            redact(&path.to_string_lossy())
        )))
    }
    fn refuse_unused_options(&self, _path: &Path, _options: &[(String, String)], _what: &str) -> Result<()> {
        Ok(())
    }
    fn takes_option(&self, key: &str) -> bool {
        files_kind().is_some_and(|k| k.takes_option(key)) // the token's options, and any http(s) client's
    }
    fn store_of(&self, _spec: &str) -> Result<Option<(String, &'static dyn StoreKind)>> {
        // its files are http(s) objects: they take an http(s) store's options (the token's)
        Ok(files_kind().map(|k| ("hf://".to_string(), k)))
    }
    /// An index records the resolve URLs an `hf://` path stood for (reopened as the
    /// objects they are), never the `hf://` path itself.
    fn reopen(
        &self,
        saved: &[(&Saved, Vec<(String, String)>)],
        _verify: bool,
        index: &Path,
    ) -> Result<Vec<Result<Source>>> {
        let name = saved.first().map_or(String::new(), |(s, _)| redact(&s.name));
        Err(Error::corrupt_index(index, format!("{name}: an index records the resolve URLs of the Hub's files, not hf:// paths")))
    }
}

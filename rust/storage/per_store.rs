//! One `storage_options` for paths in several kinds of store (an index over `hf://` and
//! `s3://` files): each store takes the options of its kind, and an option that no store
//! takes is refused, naming it, before anything is sent.

use super::scheme::{SCHEMES, scheme_of};
use super::stores::unknown_key;
use crate::error::{Error, Result};
use crate::redact::redact;

/// One `storage_options` for paths in several kinds of store (an index over `hf://`
/// and `s3://` files): each store takes the options of its kind (`bearer_token_env`
/// an http(s) store, `aws_region` S3, `timeout` all of them), and an option none of
/// them takes is refused, naming it, rather than ignored.
#[derive(Default)]
pub struct OptionsPerStore {
    taken: std::collections::BTreeSet<String>,
    stores: Vec<String>,
}

impl OptionsPerStore {
    /// The options the store of `url` takes (all of them where no store reads it: its
    /// scheme refuses what it does not take).
    pub fn of(&mut self, url: &str, options: &[(String, String)]) -> Result<Vec<(String, String)>> {
        if options.is_empty() {
            return Ok(Vec::new());
        }
        let Some((root, kind)) = scheme_of(url)?.store_of(url)? else { return Ok(options.to_vec()) };
        if self.stores.len() < 4 && !self.stores.contains(&root) {
            self.stores.push(root);
        }
        let mine: Vec<(String, String)> =
            options.iter().filter(|(k, _)| kind.takes_option(&k.to_ascii_lowercase())).cloned().collect();
        self.taken.extend(mine.iter().map(|(k, _)| k.to_ascii_lowercase()));
        Ok(mine)
    }

    /// The options the store of `url` (one object: a saved index) takes from those of
    /// a whole index, refusing a key that no scheme's store takes (a misspelt one).
    pub fn of_one(url: &str, options: &[(String, String)]) -> Result<Vec<(String, String)>> {
        let in_store = !options.is_empty() && scheme_of(url)?.store_of(url)?.is_some();
        if let Some((k, _)) =
            options.iter().find(|(k, _)| in_store && !SCHEMES.iter().any(|s| s.takes_option(&k.to_ascii_lowercase())))
        {
            return Err(unknown_key(&redact(url), k));
        }
        Self::default().of(url, options)
    }

    /// After every store was asked: refuse an option that none of them took.
    pub fn refuse_untaken(&self, options: &[(String, String)]) -> Result<()> {
        if self.stores.is_empty() {
            return Ok(()); // no store: the callers' own check says so
        }
        match options.iter().find(|(k, _)| !self.taken.contains(&k.to_ascii_lowercase())) {
            None => Ok(()),
            Some((k, _)) if self.stores.len() == 1 => Err(unknown_key(&self.stores[0], k)),
            Some((k, _)) => Err(Error::InvalidArgument(format!(
                "storage_options key {k:?} is not an option of any of the stores named ({}...; see object_store's \
                 config keys, and bearer_token*/username/password for http(s) stores)",
                self.stores.iter().map(|r| redact(r)).collect::<Vec<_>>().join(", ")
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_store_takes_the_options_of_its_kind() {
        let o = |k: &str| (k.to_string(), "value-of-it".to_string());
        let opts = vec![o("bearer_token_env"), o("aws_region"), o("timeout")];
        let keys = |v: Vec<(String, String)>| v.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        let mut per = OptionsPerStore::default();
        assert_eq!(keys(per.of("s3://b/k", &opts).unwrap()), ["aws_region", "timeout"]);
        assert_eq!(keys(per.of("https://h/x.parquet", &opts).unwrap()), ["bearer_token_env", "timeout"]);
        assert!(per.refuse_untaken(&opts).is_ok());
        let mut only_s3 = OptionsPerStore::default();
        only_s3.of("s3://b/k", &opts).unwrap();
        let e = only_s3.refuse_untaken(&opts).unwrap_err().to_string();
        assert!(e.contains("bearer_token_env"), "{e}");
        let e = OptionsPerStore::of_one("s3://b/i.youmu", &[o("endpiont")]).unwrap_err().to_string();
        assert!(
            e.contains("\"endpiont\"") && e.contains("s3://b/i.youmu"),
            "a misspelt key, named with the store: {e}"
        );
        // a key of another kind of store is meant for the index's data there, not refused
        for key in ["google_service_account", "azure_storage_account_name", "bearer_token_env"] {
            assert_eq!(OptionsPerStore::of_one("s3://b/i.youmu", &[o(key)]).unwrap(), vec![], "{key}");
        }
        assert_eq!(OptionsPerStore::of_one("s3://b/i.youmu", &opts).unwrap().len(), 2);
        let mut mixed = OptionsPerStore::default();
        assert_eq!(keys(mixed.of("hf://datasets/o/n/x.parquet", &opts).unwrap()), ["bearer_token_env", "timeout"]);
        assert_eq!(keys(mixed.of("/tmp/x.parquet", &opts).unwrap()), ["bearer_token_env", "aws_region", "timeout"]);
        let e = mixed.refuse_untaken(&opts).unwrap_err().to_string();
        assert!(e.contains("aws_region") && e.contains("hf://"), "local files take none: {e}");
    }
}

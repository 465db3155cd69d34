//! Azure Blob Storage (and Data Lake Gen2): `az://`, `adl://`, `azure://`, `abfs://`,
//! `abfss://` URLs, and https URLs `object_store` recognises as Azure's.

use std::sync::Arc;

use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::{ObjectStore, ObjectStoreScheme};

use super::{Build, KeyLength, MAX_OBJECT_KEY, StoreKind, config_error, unknown_key};
use crate::error::Result;
use crate::storage::retry_after::RetryAfterConnector;

pub struct MicrosoftAzure;

pub static AZURE: MicrosoftAzure = MicrosoftAzure;

impl StoreKind for MicrosoftAzure {
    fn name(&self) -> &'static str {
        "Azure Blob Storage"
    }
    fn url_schemes(&self) -> &'static [&'static str] {
        &["az", "adl", "azure", "abfs", "abfss"]
    }
    fn object_store_scheme(&self) -> Option<ObjectStoreScheme> {
        Some(ObjectStoreScheme::MicrosoftAzure)
    }
    fn env_prefix(&self) -> &'static str {
        "AZURE_"
    }
    fn takes_option(&self, key: &str) -> bool {
        key.parse::<AzureConfigKey>().is_ok()
    }
    fn build(&self, b: Build<'_>) -> Result<Arc<dyn ObjectStore>> {
        let root = b.root;
        let mut az = MicrosoftAzureBuilder::from_env()
            .with_url(root)
            .with_retry(b.retry)
            .with_http_connector(RetryAfterConnector);
        for (ck, v) in b.client {
            az = az.with_config(AzureConfigKey::Client(ck), v);
        }
        for (k, v) in b.options {
            az = az.with_config(k.parse().map_err(|_| unknown_key(root, k))?, v.as_str());
        }
        Ok(Arc::new(az.build().map_err(|e| config_error(root, e))?))
    }
    /// Blob names are at most 1,024 characters (not bytes).
    fn key_length(&self, _root: &str, key: &str) -> KeyLength {
        KeyLength { len: key.chars().count(), limit: MAX_OBJECT_KEY, unit: "characters", who: "an Azure blob name" }
    }
    /// Azure has no suffix ranges: a lone object's tail costs a HEAD first.
    fn suffix_ranges(&self) -> bool {
        false
    }
}

//! Google Cloud Storage: `gs://` URLs.

use std::sync::Arc;

use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::{ObjectStore, ObjectStoreScheme};

use super::{Build, StoreKind, config_error, unknown_key};
use crate::error::Result;
use crate::storage::retry_after::RetryAfterConnector;

pub struct GoogleCloudStorage;

pub static GCS: GoogleCloudStorage = GoogleCloudStorage;

impl StoreKind for GoogleCloudStorage {
    fn name(&self) -> &'static str {
        "Google Cloud Storage"
    }
    fn url_schemes(&self) -> &'static [&'static str] {
        &["gs"]
    }
    fn object_store_scheme(&self) -> Option<ObjectStoreScheme> {
        Some(ObjectStoreScheme::GoogleCloudStorage)
    }
    fn env_prefix(&self) -> &'static str {
        "GOOGLE_"
    }
    fn takes_option(&self, key: &str) -> bool {
        key.parse::<GoogleConfigKey>().is_ok()
    }
    fn build(&self, b: Build<'_>) -> Result<Arc<dyn ObjectStore>> {
        let root = b.root;
        let mut gcs = GoogleCloudStorageBuilder::from_env()
            .with_url(root)
            .with_retry(b.retry)
            .with_http_connector(RetryAfterConnector);
        for (ck, v) in b.client {
            gcs = gcs.with_config(GoogleConfigKey::Client(ck), v);
        }
        for (k, v) in b.options {
            gcs = gcs.with_config(k.parse().map_err(|_| unknown_key(root, k))?, v.as_str());
        }
        Ok(Arc::new(gcs.build().map_err(|e| config_error(root, e))?))
    }
}

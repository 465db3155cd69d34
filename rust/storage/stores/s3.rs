//! Amazon S3 (and S3-compatible stores: MinIO, moto, R2...): `s3://` and `s3a://` URLs,
//! and https URLs `object_store` recognises as S3's.

use std::sync::Arc;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::{ObjectStore, ObjectStoreScheme};

use super::{Build, StoreKind, config_error, env_sets, unknown_key, user_sets};
use crate::error::Result;
use crate::storage::retry_after::RetryAfterConnector;

pub struct AmazonS3;

pub static S3: AmazonS3 = AmazonS3;

impl StoreKind for AmazonS3 {
    fn name(&self) -> &'static str {
        "Amazon S3"
    }
    fn url_schemes(&self) -> &'static [&'static str] {
        &["s3", "s3a"]
    }
    fn object_store_scheme(&self) -> Option<ObjectStoreScheme> {
        Some(ObjectStoreScheme::AmazonS3)
    }
    fn env_prefix(&self) -> &'static str {
        "AWS_"
    }
    fn takes_option(&self, key: &str) -> bool {
        key.parse::<AmazonS3ConfigKey>().is_ok()
    }
    fn build(&self, b: Build<'_>) -> Result<Arc<dyn ObjectStore>> {
        let root = b.root;
        let mut s3 = AmazonS3Builder::from_env()
            .with_url(root)
            .with_retry(b.retry)
            .with_http_connector(RetryAfterConnector);
        for (ck, v) in b.client {
            s3 = s3.with_config(AmazonS3ConfigKey::Client(ck), v);
        }
        for (k, v) in b.options {
            s3 = s3.with_config(k.parse().map_err(|_| unknown_key(root, k))?, v.as_str());
        }
        // An http:// endpoint was asked for explicitly: allow it (local S3-compatible stores).
        let http_endpoint =
            s3.get_config_value(&AmazonS3ConfigKey::Endpoint).is_some_and(|e| e.starts_with("http://"));
        if http_endpoint && !user_sets(b.options, "allow_http") && !env_sets("AWS_", "allow_http") {
            s3 = s3.with_allow_http(true);
        }
        Ok(Arc::new(s3.build().map_err(|e| config_error(root, e))?))
    }
}

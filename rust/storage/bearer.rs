//! `Authorization: Bearer <token>` for http(s) stores (the Hugging Face Hub's resolve
//! URLs, or any server taking a bearer token), from one of three `storage_options`:
//!
//! * `bearer_token`: the token itself;
//! * `bearer_token_env`: the environment variable holding it (`HF_TOKEN`);
//! * `bearer_token_file`: the file holding it (what `hf auth login` writes).
//!
//! The last two are read by each process when it opens the store, so an index pickled
//! into DataLoader workers or Ray actors carries where the token is, never the token.
//! The token is sent as a sensitive header (reqwest drops it when a redirect leaves the
//! host, as the Hub's redirects to its CDN's signed URLs need) and is remembered by
//! [`crate::redact`], so no message shows it.

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};

use crate::error::{Error, Result, StorageErrorKind};
use crate::redact::{redact, remember_secrets};

/// The `storage_options` keys read here (they configure youmu, not `object_store`).
pub const KEYS: &[&str] = &["bearer_token", "bearer_token_env", "bearer_token_file"];

/// Whether `key` (lower case) is one of [`KEYS`].
pub fn is_bearer_key(key: &str) -> bool {
    KEYS.contains(&key)
}

/// The token `options` ask for, read now (`None` when they ask for none); `root` names
/// the store in errors.
pub fn token(options: &[(String, String)], root: &str) -> Result<Option<String>> {
    let asked: Vec<&(String, String)> = options.iter().filter(|(k, _)| is_bearer_key(k)).collect();
    if asked.len() > 1 {
        return Err(Error::InvalidArgument(format!(
            "storage_options for {} name {} bearer-token sources ({}): give one",
            redact(root),
            asked.len(),
            asked.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(", ")
        )));
    }
    let Some((key, value)) = asked.first() else { return Ok(None) };
    let unusable = |why: String| Error::Storage {
        url: redact(root),
        range: String::new(),
        kind: StorageErrorKind::Config,
        detail: format!("storage_options[{key:?}]: {why}"),
    };
    let raw = match key.as_str() {
        "bearer_token" => value.clone(),
        "bearer_token_env" => std::env::var(value)
            .map_err(|_| unusable(format!("the environment variable {value:?} is not set in this process")))?,
        _ => std::fs::read_to_string(value)
            .map_err(|e| unusable(format!("the token file {value:?} cannot be read: {}", e.kind())))?,
    };
    let token = raw.trim().to_string();
    if token.is_empty() {
        return Err(unusable("the token is empty".into()));
    }
    remember_secrets(&[("bearer_token".into(), token.clone())]);
    Ok(Some(token))
}

/// The default headers sending `token`.
pub fn headers(token: &str, root: &str) -> Result<HeaderMap> {
    let mut v = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| Error::Storage {
        url: redact(root),
        range: String::new(),
        kind: StorageErrorKind::Config,
        detail: "the bearer token holds characters an HTTP header cannot carry".into(),
    })?;
    v.set_sensitive(true);
    let mut h = HeaderMap::new();
    h.insert(AUTHORIZATION, v);
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_come_from_a_value_a_variable_or_a_file() {
        let o = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert_eq!(token(&[], "https://h/").unwrap(), None);
        assert_eq!(
            token(&o("bearer_token", " hf_abcdefgh12\n"), "https://h/").unwrap().as_deref(),
            Some("hf_abcdefgh12")
        );
        let dir = std::env::temp_dir().join(format!("youmu-bearer-{}", std::process::id()));
        std::fs::write(&dir, "hf_fromfile123\n").unwrap();
        let f = token(&o("bearer_token_file", dir.to_str().unwrap()), "https://h/").unwrap();
        assert_eq!(f.as_deref(), Some("hf_fromfile123"));
        std::fs::remove_file(&dir).unwrap();
        let e = token(&o("bearer_token_env", "YOUMU_SURELY_UNSET_VARIABLE"), "https://h/").unwrap_err();
        assert!(e.to_string().contains("YOUMU_SURELY_UNSET_VARIABLE"), "{e}");
        let both = [("bearer_token".into(), "a".into()), ("bearer_token_env".into(), "B".into())];
        assert!(matches!(token(&both, "https://h/"), Err(Error::InvalidArgument(_))));
        assert!(redact("sent hf_abcdefgh12").contains("***"));
        let h = headers("hf_abcdefgh12", "https://h/").unwrap();
        assert!(h[AUTHORIZATION].is_sensitive());
    }
}

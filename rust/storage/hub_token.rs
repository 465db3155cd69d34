//! The Hugging Face Hub's token, sent to the Hub's own host and nowhere else.
//!
//! Every http(s) store decides here whether it sends it: a store on the scheme, host
//! and port of the Hub's endpoint (`HF_ENDPOINT`, else `https://huggingface.co`) whose
//! `storage_options` give no credentials of their own (`bearer_token*`, Basic user
//! info or `username`/`password`: those win) sends the token every Hugging Face
//! library sends the Hub, found as `huggingface_hub` finds it: `HF_TOKEN` (or the older
//! `HUGGING_FACE_HUB_TOKEN`), else the file `hf auth login` writes (`HF_TOKEN_PATH`,
//! else `$HF_HOME/token`, `HF_HOME` defaulting to `$XDG_CACHE_HOME/huggingface` or
//! `~/.cache/huggingface`); none when `HF_HUB_DISABLE_IMPLICIT_TOKEN` is set. So the
//! resolve URLs an `hf://` path stands for and those a user typed or copied from the
//! Hub's website are read alike.
//!
//! It is read by each process when it builds the store, so no index, state or pickle
//! holds it (nor where it was found); it is remembered by [`crate::redact`], so no
//! message shows it; and a redirect off the Hub's host (to its CDN) never carries it
//! (`redirects.rs`).

use std::path::PathBuf;

use crate::error::{Error, Result, StorageErrorKind};
use crate::redact::{redact, remember_secrets};

/// The Hub's address when `HF_ENDPOINT` is not set (as `huggingface_hub`'s).
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// The Hub's address: `HF_ENDPOINT` as set now, else [`DEFAULT_ENDPOINT`] (what
/// `youmu.streams.hub.endpoint` says too).
pub fn endpoint() -> String {
    let set = std::env::var("HF_ENDPOINT").ok().filter(|e| !e.trim().is_empty());
    set.unwrap_or_else(|| DEFAULT_ENDPOINT.to_string()).trim().trim_end_matches('/').to_string()
}

/// Whether `url` is on the Hub's own scheme, host and port (an unparsable `HF_ENDPOINT`
/// names no host: then none is).
pub fn on_hub(url: &str) -> bool {
    let (Ok(url), Ok(hub)) = (url::Url::parse(url), url::Url::parse(&endpoint())) else { return false };
    matches!(url.scheme(), "http" | "https") && url.host_str().is_some() && super::redirects::same_origin(&url, &hub)
}

/// The token a store whose URLs start with `root` sends when its options give no
/// credentials: the Hub's, for a store on the Hub's host (see the module docs); `None`
/// elsewhere or when there is none. A token that cannot be read or sent is an error
/// naming where it was found, never showing it.
pub fn implicit_token(root: &str) -> Result<Option<String>> {
    if !on_hub(root) || truthy(std::env::var("HF_HUB_DISABLE_IMPLICIT_TOKEN").ok().as_deref()) {
        return Ok(None);
    }
    let unusable = |detail: String| Error::Storage {
        url: redact(root),
        range: String::new(),
        kind: StorageErrorKind::Config,
        detail,
    };
    let (raw, from) = match from_environment() {
        Some((var, Ok(raw))) if clean(&raw).is_some() => (raw, format!("the environment variable {var}")),
        Some((var, Err(_))) => return Err(unusable(format!("the Hugging Face token in {var} is not valid UTF-8"))),
        _ => {
            let path = token_path();
            match std::fs::read(&path) {
                Ok(bytes) => {
                    let from = format!("the Hugging Face token file {:?} (hf auth login)", path.display().to_string());
                    let raw = String::from_utf8(bytes).map_err(|_| unusable(format!("{from} is not valid UTF-8")))?;
                    (raw, from)
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => {
                    return Err(unusable(format!(
                        "the Hugging Face token file {:?} (hf auth login) cannot be read: {}",
                        path.display().to_string(),
                        e.kind()
                    )));
                }
            }
        }
    };
    let Some(token) = clean(&raw) else { return Ok(None) };
    remember_secrets(&[("bearer_token".into(), token.clone())]);
    if reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
        return Err(unusable(format!("the token in {from} holds characters an HTTP header cannot carry")));
    }
    Ok(Some(token))
}

/// `HF_TOKEN`, else `HUGGING_FACE_HUB_TOKEN`: the first set to a non-empty value (as
/// `huggingface_hub` reads them: one set to blanks hides the other, not the file).
fn from_environment() -> Option<(&'static str, std::result::Result<String, std::ffi::OsString>)> {
    ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"]
        .into_iter()
        .find_map(|var| std::env::var_os(var).filter(|v| !v.is_empty()).map(|v| (var, v.into_string())))
}

/// A token as `huggingface_hub` cleans it: line breaks removed, blanks trimmed, empty
/// is none.
fn clean(raw: &str) -> Option<String> {
    let t = raw.replace(['\r', '\n'], "");
    let t = t.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// `huggingface_hub`'s reading of a boolean variable.
fn truthy(v: Option<&str>) -> bool {
    v.is_some_and(|v| matches!(v.trim().to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE"))
}

/// Where `hf auth login` saves the token, by `huggingface_hub`'s rule.
fn token_path() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(p) = var("HF_TOKEN_PATH") {
        return expand_user(p);
    }
    let home = var("HF_HOME").unwrap_or_else(|| {
        var("XDG_CACHE_HOME").unwrap_or_else(|| PathBuf::from("~").join(".cache")).join("huggingface")
    });
    expand_user(home).join("token")
}

/// A leading `~` as the user's home directory (`$HOME`), as Python's `expanduser`.
fn expand_user(p: PathBuf) -> PathBuf {
    let Ok(rest) = p.strip_prefix("~") else { return p };
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(rest),
        None => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_cleaned_and_booleans_read_as_huggingface_hub_reads_them() {
        assert_eq!(clean(" hf_abc\r\n").as_deref(), Some("hf_abc"));
        assert_eq!(clean("hf_a\nbc").as_deref(), Some("hf_abc"));
        assert_eq!(clean(" \n "), None);
        assert!(truthy(Some("1")) && truthy(Some("yes")) && truthy(Some("True")));
        assert!(!truthy(Some("0")) && !truthy(Some("")) && !truthy(None));
        assert_eq!(expand_user(PathBuf::from("/a/b")), PathBuf::from("/a/b"));
    }
}

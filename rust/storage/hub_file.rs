//! Files of the Hugging Face Hub as the native core reads them: the resolve URLs an
//! `hf://` path resolves to (`{endpoint}/datasets/<owner>/<name>/resolve/<commit>/<path>`),
//! told apart so that messages about them name the `hf://` file and the Hub's fix
//! (its token), not a generic http(s) server's.

/// The `hf://datasets/<owner>/<name>@<commit>/<path>` URL a Hub resolve URL
/// (`{endpoint}/datasets/<owner>/<name>/resolve/<commit>/<path>`, what an `hf://` path
/// resolves to) stands for; `None` for any other URL. Messages name a Hub file this way
/// and say how the Hub's token is found.
pub fn hub_file(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return None;
    }
    let segments: Vec<&str> = parsed.path_segments()?.collect();
    let at = segments.windows(5).position(|w| {
        w[0] == "datasets"
            && !w[1].is_empty()
            && !w[2].is_empty()
            && w[3] == "resolve"
            && w[4].len() == 40
            && w[4].bytes().all(|b| b.is_ascii_hexdigit())
    })?;
    let rest = &segments[at + 5..];
    if rest.is_empty() || rest.iter().all(|s| s.is_empty()) {
        return None;
    }
    let (owner, name, commit) = (segments[at + 1], segments[at + 2], segments[at + 4]);
    Some(format!("hf://datasets/{owner}/{name}@{commit}/{}", rest.join("/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_resolve_urls_are_named_as_the_hf_urls_they_stand_for() {
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let url = format!("https://huggingface.co/datasets/org/set/resolve/{commit}/data/a%20b.parquet");
        assert_eq!(hub_file(&url).unwrap(), format!("hf://datasets/org/set@{commit}/data/a%20b.parquet"));
        let local = format!("http://127.0.0.1:8080/datasets/o/n/resolve/{commit}/x.parquet");
        assert_eq!(hub_file(&local).unwrap(), format!("hf://datasets/o/n@{commit}/x.parquet"));
        for other in [
            "https://huggingface.co/datasets/o/n/resolve/main/x.parquet".to_string(), // not pinned: not ours
            format!("https://h/datasets/o/n/resolve/{commit}/"),
            format!("https://h/models/o/n/resolve/{commit}/x"),
            format!("s3://b/datasets/o/n/resolve/{commit}/x"),
            "https://h/x.parquet".into(),
            "/datasets/o/n/resolve/x".into(),
        ] {
            assert_eq!(hub_file(&other), None, "{other}");
        }
    }
}

//! Credentials never reach a message: one function, [`redact`], applied to every error
//! text that leaves the core (`Error::message`, which the Python mapping and the
//! inspect report use) and to every URL or option quoted in one.
//!
//! Three kinds of secret are blanked out to `***`:
//!
//! * user info in URLs (`https://admin:hunter2@host/...` -> `https://***@host/...`);
//! * signature and token query parameters (Azure SAS `sig=`, S3 and GCS presigned
//!   `X-Amz-Signature=`, `X-Goog-Credential=`, `token=`...);
//! * the values of secret `storage_options` (keys naming a secret, key, token,
//!   password, credential or SAS), remembered when a store is configured, wherever
//!   they appear (a library may quote them in its own error).

use std::collections::BTreeSet;

const MASK: &str = "***";

/// Query parameters whose values are credentials (lower case).
const SECRET_PARAMS: &[&str] = &[
    "sig",
    "signature",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "x-goog-signature",
    "x-goog-credential",
    "token",
    "access_token",
    "sas_token",
    "password",
];

/// Secret option values seen by this process, longest first (so a value containing
/// another is blanked whole). No lock a fork could leave held (see [`crate::rcu`]).
static SECRETS: crate::rcu::Rcu<BTreeSet<(std::cmp::Reverse<usize>, String)>> = crate::rcu::Rcu::new(BTreeSet::new);

/// Whether a `storage_options` key (any case, with or without its store's prefix)
/// names a secret.
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["secret", "key", "token", "password", "credential", "sas", "signature", "bearer"].iter().any(|w| k.contains(w))
        && !k.ends_with("_path")
        && !k.ends_with("_file")
        && !k.ends_with("_env")
}

/// Flags (`skip_signature=true`) and numbers are settings, not secrets: blanking every
/// "true" in a message would only hide what it says. Nor are short words: a value is
/// blanked wherever it appears, and test stores' stand-in credentials ("testing", as
/// moto and LocalStack suggest) would otherwise blank pieces of file names
/// ("parquet-testing/..."). Real keys and tokens are far longer than 8 characters.
fn looks_secret(v: &str) -> bool {
    let t = v.trim();
    t.len() >= 8
        && t.parse::<f64>().is_err()
        && !["true", "false", "yes", "no"].contains(&t.to_ascii_lowercase().as_str())
}

/// Remember the secret values among `options`, so messages never show them.
pub fn remember_secrets(options: &[(String, String)]) {
    let fresh: Vec<String> =
        options.iter().filter(|(k, v)| is_secret_key(k) && looks_secret(v)).map(|(_, v)| v.clone()).collect();
    if fresh.is_empty() {
        return;
    }
    // only a secret not seen yet makes a new set, so the sets left behind (see
    // `crate::rcu`) are bounded by the distinct secrets a process is given
    SECRETS.update(|s| {
        let new: Vec<_> =
            fresh.iter().map(|v| (std::cmp::Reverse(v.len()), v.clone())).filter(|e| !s.contains(e)).collect();
        (!new.is_empty()).then(|| s.iter().cloned().chain(new).collect())
    });
}

/// `text` with every credential it holds blanked out (see the module docs).
pub fn redact(text: &str) -> String {
    let mut out = redact_urls(text);
    for (_, v) in SECRETS.get().iter() {
        if out.contains(v.as_str()) {
            out = out.replace(v.as_str(), MASK);
        }
    }
    out
}

fn ends_token(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>' | ')' | ']' | '}' | ',' | ';')
}

/// User info of every `scheme://user:pass@host` and secret query parameters.
fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (before, after) = rest.split_at(i + 3);
        out.push_str(before);
        let mut end = after.find(ends_token).unwrap_or(after.len());
        // punctuation after a URL in a sentence ("GET <url>: 403") is not part of it
        end = after[..end].trim_end_matches([':', '.', ',']).len();
        let (url, tail) = after.split_at(end);
        out.push_str(&redact_one_url(url));
        rest = tail;
    }
    out.push_str(rest);
    redact_params(&out)
}

/// The part of a URL after `://`: user info blanked, and every value of its query and
/// fragment (a presigned or SAS URL's whole query is its credential: `X-Amz-Credential`,
/// `se`, `sp` and `sig` together grant access).
fn redact_one_url(url: &str) -> String {
    // the authority ends at the first `/`: a password may hold `#` or `?` (unescaped, as
    // users type them), and blanking a little more than user info is harmless
    let auth_end = url.find('/').unwrap_or(url.len());
    let first = &url[..auth_end];
    let at = match first.rfind('@') {
        Some(at) => Some(at),
        // `user:pa/ss@host`: a password typed with an unescaped `/` (or a port and a
        // path holding `@`, blanked a little too much)
        None if first.contains(':') && !first.starts_with('[') => url.rfind('@'),
        None => None,
    };
    let (auth, rest) = match at {
        Some(at) => (format!("{MASK}@"), &url[at + 1..]),
        None => (String::new(), url),
    };
    let split = rest.find(['?', '#']).unwrap_or(rest.len());
    let (path, query) = rest.split_at(split);
    format!("{auth}{path}{}", blank_query(query))
}

/// `?a=1&b=2#c=3` -> `?a=***&b=***#c=***` (a part without `=` is blanked whole).
fn blank_query(query: &str) -> String {
    let mut out = String::with_capacity(query.len());
    let mut part = String::new();
    let flush = |part: &mut String, out: &mut String| {
        if !part.is_empty() {
            match part.split_once('=') {
                Some((name, _)) => out.push_str(&format!("{name}={MASK}")),
                None => out.push_str(MASK),
            }
            part.clear();
        }
    };
    for c in query.chars() {
        if matches!(c, '?' | '&' | '#' | ';') {
            flush(&mut part, &mut out);
            out.push(c);
        } else {
            part.push(c);
        }
    }
    flush(&mut part, &mut out);
    out
}

/// The longest name a parameter of [`SECRET_PARAMS`] has, and more.
const MAX_PARAM_NAME: usize = 24;

/// The length of the parameter name `bytes` starts with when an `=` follows it (a name
/// is 1 to [`MAX_PARAM_NAME`] bytes of `[A-Za-z0-9_-]`). It looks at most
/// `MAX_PARAM_NAME + 1` bytes, so [`redact_params`] is linear in its text: searching
/// for the next `=` from every word boundary instead made a long message without one
/// quadratic (a 400 kB message took seconds).
fn param_name_len(bytes: &[u8]) -> Option<usize> {
    let window = &bytes[..bytes.len().min(MAX_PARAM_NAME + 1)];
    #[cfg(test)]
    LOOKED_AT.with(|n| n.set(n.get() + window.len()));
    let len = window.iter().position(|&b| !(b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))?;
    (len > 0 && window[len] == b'=').then_some(len)
}

#[cfg(test)]
thread_local! {
    /// Bytes [`param_name_len`] looked at on this thread: what the linearity test counts.
    static LOOKED_AT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// `name=value` query parameters (after `?` or `&`, or a bare SAS string) whose name is
/// a credential.
fn redact_params(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let bytes = text.as_bytes();
    while i < text.len() {
        let at_boundary =
            i == 0 || matches!(bytes[i - 1], b'?' | b'&' | b'#' | b' ' | b'"' | b'\'' | b'(' | b'=' | b':');
        if at_boundary && let Some(eq) = param_name_len(&bytes[i..]) {
            let name = &text[i..i + eq];
            if SECRET_PARAMS.contains(&name.to_ascii_lowercase().as_str()) {
                let vstart = i + eq + 1;
                let vlen =
                    text[vstart..].find(|c: char| c == '&' || c == '#' || ends_token(c)).unwrap_or(text.len() - vstart);
                // as for URLs: a sentence's punctuation after the value stays
                let vlen = text[vstart..vstart + vlen].trim_end_matches([':', '.', ',']).len();
                if text[vstart..vstart + vlen].contains('/') {
                    // a path segment (a Hive-style partition `token=a/part-0.parquet`), not a
                    // credential: signatures and tokens in query strings are URL-encoded
                    out.push_str(&text[i..vstart + vlen]);
                    i = vstart + vlen;
                    continue;
                }
                out.push_str(name);
                out.push('=');
                if vlen > 0 {
                    out.push_str(MASK);
                }
                i = vstart + vlen;
                continue;
            }
        }
        let c = text[i..].chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes the parameter scan looks at while redacting `text`.
    fn looked_at(text: &str) -> usize {
        LOOKED_AT.with(|n| n.set(0));
        redact(text);
        LOOKED_AT.with(|n| n.get())
    }

    #[test]
    fn redaction_looks_at_each_byte_a_bounded_number_of_times() {
        // word boundaries without an `=` after them: each used to search to the end
        for (unit, n) in [("a ", 500_000), ("x:", 500_000), ("ab&", 300_000), ("é ", 300_000), ("token ", 100_000)] {
            let text = unit.repeat(n);
            let work = looked_at(&text);
            assert!(work <= (MAX_PARAM_NAME + 1) * text.len(), "{unit:?} x {n}: {work} bytes looked at");
        }
        let text = format!("{} sig=abc", "word ".repeat(200_000));
        assert!(redact(&text).ends_with(" sig=***"), "a parameter after a long text is still found");
    }

    #[test]
    fn user_info_signatures_and_secret_values_are_blanked() {
        assert_eq!(
            redact("GET http://admin:hunter2@127.0.0.1:1/x.parquet failed"),
            "GET http://***@127.0.0.1:1/x.parquet failed"
        );
        assert_eq!(redact("\"https://u@h/p?a=1\""), "\"https://***@h/p?a=***\"");
        assert_eq!(redact("https://h/p?sv=2020&sig=abc%2Fdef&se=1"), "https://h/p?sv=***&sig=***&se=***");
        assert_eq!(redact("https://h/p.parquet?download"), "https://h/p.parquet?***");
        assert_eq!(redact("GET https://h/p#sig=abc: 403"), "GET https://h/p#sig=***: 403");
        assert_eq!(redact("http://admin:pa#ss@h/x.parquet"), "http://***@h/x.parquet", "a # in the password");
        assert_eq!(redact("http://admin:p?w@h/x.parquet"), "http://***@h/x.parquet", "a ? in the password");
        assert_eq!(redact("http://admin:p@w@h/x"), "http://***@h/x", "an @ in the password");
        assert_eq!(redact("GET http://admin:pa/ss@h:9/x failed"), "GET http://***@h:9/x failed", "a / in it");
        assert_eq!(redact("http://h:9/a@b.parquet"), "http://***@b.parquet", "blanked a little too much");
        assert_eq!(redact("code=python/part-0.parquet"), "code=python/part-0.parquet", "a Hive partition");
        assert_eq!(redact("token=a/part-0.parquet: bad"), "token=a/part-0.parquet: bad", "a Hive partition");
        assert_eq!(redact("x.parquet#sig=abc"), "x.parquet#sig=***");
        assert_eq!(redact("sv=2020&SIG=abc"), "sv=2020&SIG=***");
        assert_eq!(redact("X-Amz-Signature=deadbeef&X-Amz-Date=1"), "X-Amz-Signature=***&X-Amz-Date=1");
        assert_eq!(redact("design=1 signature"), "design=1 signature", "only whole parameter names");
        assert_eq!(redact("s3://bucket/a@b/key"), "s3://bucket/a@b/key", "an @ in the key is not user info");
        remember_secrets(&[
            ("secret_access_key".into(), "wJalrXUtnFEMI".into()),
            ("region".into(), "us-east-1".into()),
            ("aws_session_token".into(), "xy".into()),
        ]);
        assert_eq!(redact("bad signature for wJalrXUtnFEMI in us-east-1"), "bad signature for *** in us-east-1");
        remember_secrets(&[("secret_access_key".into(), "testing".into())]);
        assert_eq!(redact("/data/parquet-testing/x.parquet"), "/data/parquet-testing/x.parquet", "short words stay");
        assert!(
            is_secret_key("AZURE_STORAGE_ACCOUNT_KEY") && is_secret_key("sas_token") && is_secret_key("access_key_id")
        );
        assert!(
            !is_secret_key("endpoint") && !is_secret_key("region") && !is_secret_key("google_service_account_path")
        );
    }
}

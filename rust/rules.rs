//! Discovery's rules about names (rules 2 and 3 of [`crate::index::paths`], and what a glob
//! pattern spells): pure functions of names and patterns, the same for a local walk and
//! an object listing, used by both in `storage/` so the backends agree on what is data.

const DATA_EXTENSIONS: &[&str] = &[".parquet", ".parq", ".pq"];

/// Rule 3.
pub fn has_data_extension(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    DATA_EXTENSIONS.iter().any(|e| lower.ends_with(e) && lower.len() > e.len())
}

/// Rule 2.
pub fn is_hidden(name: &str) -> bool {
    name.starts_with('.') || name.starts_with('_')
}

/// Whether `s` holds a glob character (`*`, `?`, `[`).
pub fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// How a glob matches, as Python's `glob` does: case-sensitive, `*` within one
/// component, a leading dot spelled by the pattern.
pub const GLOB_OPTIONS: glob::MatchOptions =
    glob::MatchOptions { case_sensitive: true, require_literal_separator: true, require_literal_leading_dot: true };

/// Whether a glob's last component spells an extension (`*.bin`), so the pattern and not
/// rule 3 decides which names are data.
pub fn pattern_spells_extension(pattern: &str) -> bool {
    let last = pattern.rsplit('/').next().unwrap_or(pattern);
    last.rsplit_once('.').is_some_and(|(_, ext)| !ext.is_empty() && !is_glob(ext))
}

/// Rule 2 for a glob match: a hidden component of `matched` below the pattern's literal
/// prefix is allowed only where the pattern's component at the same depth starts with
/// the same character.
pub fn hidden_in_match(pattern: &str, matched: &str) -> bool {
    let pc: Vec<&str> = pattern.split('/').collect();
    let mc: Vec<&str> = matched.split('/').collect();
    let literal_prefix = pc.iter().take_while(|c| !is_glob(c)).count();
    let same_depth = !pattern.contains("**") && pc.len() == mc.len();
    mc.iter().enumerate().skip(literal_prefix).any(|(i, c)| is_hidden(c) && !(same_depth && pc[i].starts_with(&c[..1])))
}

/// Rule 2 for one name matched by one pattern component.
pub fn hidden_for(name: &str, pattern: &str) -> bool {
    is_hidden(name) && !pattern.starts_with(&name[..1])
}

/// Rules 2 and 3 for a listed key, relative to the listed prefix.
pub fn listed_is_data(rel: &str) -> bool {
    !rel.split('/').any(is_hidden) && rel.rsplit('/').next().is_some_and(has_data_extension)
}

/// Rule 6: a key that names one object (no glob, a data extension, no trailing `/`), so
/// nothing is listed for it.
pub fn names_object(key: &str) -> bool {
    !is_glob(key) && !key.is_empty() && !key.ends_with('/') && key.rsplit('/').next().is_some_and(has_data_extension)
}

/// How a store's listing answers the key part of a URL (rules 2, 3 and 6): a key with a
/// glob keeps the matching keys under the glob's literal prefix; any other key that may
/// be a prefix keeps the data keys below it. The same for every store youmu lists
/// itself and for listings made elsewhere (the Hugging Face Hub's tree API, listed
/// through `huggingface_hub`).
#[derive(Debug)]
pub enum KeyPlan {
    /// List `prefix` and keep the keys the pattern matches.
    Glob { key: String, prefix: String, pattern: glob::Pattern, own_extension: bool },
    /// List `prefix` (ending in `/`, or empty for the whole store) and keep its data keys.
    Prefix { prefix: String },
}

impl KeyPlan {
    /// The plan for `key`; `Err` holds why a glob is not one.
    pub fn new(key: &str) -> std::result::Result<KeyPlan, String> {
        if let Some(first_glob) = key.find(['*', '?', '[']) {
            let prefix = key[..key[..first_glob].rfind('/').map_or(0, |i| i + 1)].to_string();
            let pattern = glob::Pattern::new(key).map_err(|e| e.to_string())?;
            return Ok(KeyPlan::Glob {
                key: key.to_string(),
                prefix,
                pattern,
                own_extension: pattern_spells_extension(key),
            });
        }
        let prefix = if key.is_empty() || key.ends_with('/') { key.to_string() } else { format!("{key}/") };
        Ok(KeyPlan::Prefix { prefix })
    }

    /// The prefix to list.
    pub fn prefix(&self) -> &str {
        match self {
            KeyPlan::Glob { prefix, .. } | KeyPlan::Prefix { prefix } => prefix,
        }
    }

    /// Whether the listed key `k` (a full key, under [`KeyPlan::prefix`]) is data here.
    pub fn takes(&self, k: &str) -> bool {
        match self {
            KeyPlan::Prefix { prefix } => listed_is_data(&k[prefix.len().min(k.len())..]),
            KeyPlan::Glob { key, pattern, own_extension, .. } => {
                if pattern.matches_with(k, GLOB_OPTIONS) {
                    return !hidden_in_match(key, k)
                        && (*own_extension || k.rsplit('/').next().is_some_and(has_data_extension));
                }
                // a "directory" matched by the pattern: its objects, by rules 2 and 3
                k.char_indices().filter(|&(_, c)| c == '/').any(|(i, _)| {
                    pattern.matches_with(&k[..i], GLOB_OPTIONS)
                        && !hidden_in_match(key, &k[..i])
                        && listed_is_data(&k[i + 1..])
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_keys_follow_the_same_rules() {
        assert!(listed_is_data("a.parquet") && listed_is_data("x/B.PQ"));
        assert!(!listed_is_data("_x/a.parquet") && !listed_is_data(".a.parquet.crc") && !listed_is_data("a.txt"));
        assert!(hidden_in_match("d/*", "d/.x") && !hidden_in_match("d/.*", "d/.x") && !hidden_in_match("d/*", "d/x"));
    }

    #[test]
    fn extensions_and_patterns() {
        assert!(has_data_extension("a.PARQ") && !has_data_extension(".parquet") && !has_data_extension("a.txt"));
        assert!(
            pattern_spells_extension("d/part-*.bin")
                && !pattern_spells_extension("d/*")
                && !pattern_spells_extension("d/*.*")
        );
        assert!(hidden_for("_a", "*") && !hidden_for("_a", "_*") && !hidden_for("a", "*"));
    }

    #[test]
    fn key_plans_pick_listed_keys() {
        let keys = ["d/a.parquet", "d/_tmp/b.parquet", "d/sub/c.parquet", "d/x.txt", "e/a.parquet"];
        let pick = |key: &str| {
            let p = KeyPlan::new(key).unwrap();
            keys.iter().filter(|k| k.starts_with(p.prefix()) && p.takes(k)).copied().collect::<Vec<_>>()
        };
        assert_eq!(pick("d"), ["d/a.parquet", "d/sub/c.parquet"]);
        assert_eq!(pick(""), ["d/a.parquet", "d/sub/c.parquet", "e/a.parquet"]);
        assert_eq!(pick("d/*.parquet"), ["d/a.parquet"]);
        assert_eq!(pick("*"), ["d/a.parquet", "d/sub/c.parquet", "e/a.parquet"]);
        assert_eq!(pick("d/*.txt"), ["d/x.txt"]);
        assert!(KeyPlan::new("d/[").is_err());
    }
}

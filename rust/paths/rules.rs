//! Discovery's rules about names (rules 2 and 3 of [`crate::paths`], and what a glob
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
}

//! Turning the user's `paths` (files, directories, globs, lists of these) into an
//! ordered list of Parquet files. Order is what the global page order is built on,
//! so it must be deterministic: directories are walked in sorted order.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

fn walk_dir(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .map(|e| e.map(|e| e.path()).map_err(|err| Error::io(dir, err)))
        .collect::<Result<_>>()?;
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // hidden files and in-progress writes (`_temporary`, `.part`) are not data
        if name.starts_with('.') || name.starts_with('_') {
            continue;
        }
        if p.is_dir() {
            walk_dir(&p, out)?;
        } else if name.ends_with(".parquet") || name.ends_with(".parq") || name.ends_with(".pq") {
            out.push(p);
        }
    }
    Ok(())
}

/// Expand one user path.
pub fn expand_one(spec: &str, out: &mut Vec<PathBuf>) -> Result<()> {
    if is_glob(spec) && !Path::new(spec).exists() {
        let matches = glob::glob(spec).map_err(|e| Error::InvalidArgument(format!("bad glob {spec:?}: {e}")))?;
        let mut found: Vec<PathBuf> = Vec::new();
        for m in matches {
            let p = m.map_err(|e| Error::io(e.path(), std::io::Error::other(e.to_string())))?;
            if p.is_dir() { walk_dir(&p, &mut found)? } else { found.push(p) }
        }
        if found.is_empty() {
            return Err(Error::InvalidArgument(format!("glob {spec:?} matched no files")));
        }
        found.sort();
        out.extend(found);
        return Ok(());
    }
    let p = Path::new(spec);
    let meta = std::fs::metadata(p).map_err(|e| Error::io(p, e))?;
    if meta.is_dir() {
        let before = out.len();
        walk_dir(p, out)?;
        if out.len() == before {
            return Err(Error::InvalidArgument(format!("directory {spec:?} contains no *.parquet files")));
        }
    } else {
        out.push(p.to_path_buf());
    }
    Ok(())
}

/// Expand every user path, in order; the same file twice is an error (its rows would
/// be delivered twice per epoch).
pub fn expand(specs: &[String]) -> Result<Vec<PathBuf>> {
    if specs.is_empty() {
        return Err(Error::InvalidArgument("no paths given".into()));
    }
    let mut out = Vec::new();
    for s in specs {
        expand_one(s, &mut out)?;
    }
    let mut seen = std::collections::HashSet::new();
    for p in &out {
        let key = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        if !seen.insert(key) {
            return Err(Error::InvalidArgument(format!("{} is listed more than once", p.display())));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_walked_sorted_and_skip_hidden() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("b")).unwrap();
        for f in ["b/2.parquet", "a.parquet", "c.txt", ".hidden.parquet", "_tmp.parquet"] {
            std::fs::write(d.path().join(f), b"x").unwrap();
        }
        let got = expand(&[d.path().to_str().unwrap().to_string()]).unwrap();
        let names: Vec<_> =
            got.iter().map(|p| p.strip_prefix(d.path()).unwrap().to_str().unwrap().to_string()).collect();
        assert_eq!(names, vec!["a.parquet", "b/2.parquet"]);
    }

    #[test]
    fn duplicates_and_empty_globs_are_errors() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("a.parquet");
        std::fs::write(&f, b"x").unwrap();
        let s = f.to_str().unwrap().to_string();
        assert!(expand(&[s.clone(), s]).is_err());
        assert!(expand(&[format!("{}/*.nothing", d.path().display())]).is_err());
        assert!(expand(&[]).is_err());
    }
}

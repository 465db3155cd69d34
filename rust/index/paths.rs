//! Discovery: turning the user's `paths` (files, directories, globs, object-store URLs
//! and prefixes, lists of these) into an ordered list of Parquet files and objects.
//! Order is what the global page order is built on, so it is deterministic.
//!
//! The rules, the same for local paths and object stores:
//!
//! 1. **Only regular files are data.** A FIFO, socket or device named like a Parquet
//!    file is skipped (opening a FIFO would block forever) and reported in
//!    `PageIndex.skipped`; naming one explicitly is an error.
//! 2. **Hidden names are skipped**: a file, directory, object or key component whose name
//!    starts with `.` or `_` (checksums such as `.part-0.parquet.crc`, `_SUCCESS`,
//!    `_temporary/`, `_delta_log/`), in directory walks, prefix listings and glob
//!    matches alike, unless the pattern itself spells that leading character (as
//!    Python's `glob` does for dot files).
//! 3. **Data extensions**: walks, listings and globs take names ending in `.parquet`,
//!    `.parq` or `.pq`, in any case. A file or object named explicitly is read whatever
//!    its name, and so is a glob match when the pattern's last component spells an
//!    extension of its own (`part-*.bin`).
//! 4. **Order**: directories and prefixes are walked in sorted (bytewise) order; glob
//!    matches are sorted; the user's list keeps its order. A file listed twice is an
//!    error (its rows would be delivered twice per epoch).
//! 5. **Links are followed, each directory and file once**: a directory or file reached
//!    again (a symlink loop, a second link) is skipped and reported in
//!    `PageIndex.skipped`; walks are bounded ([`MAX_WALK_ENTRIES`], [`MAX_WALK_DEPTH`])
//!    and poll for Ctrl-C (`runtime::interrupted`).
//! 6. **URLs**: `s3://`, `s3a://`, `gs://`, `az://`, `abfs[s]://`, `http(s)://` name
//!    object stores (`file://` a local path). A URL ending in `/`, or one whose last
//!    component has no data extension and is a prefix of objects, is listed; otherwise it
//!    names one object. `http(s)://` servers that are not S3 or Azure can only name
//!    objects (plain HTTP has no listing).
//!
//! Rules 2 and 3 are [`crate::rules`], pure functions of names; listing a local path or an
//! object-store URL by them is storage's ([`storage::list`]: a walk of the local
//! filesystem, a listing of a store's keys). What is left here is the same for both:
//! the user's list as a whole, and the duplicates in it.

use crate::error::{Error, Result};
use crate::storage;
pub use crate::storage::walk::{MAX_WALK_DEPTH, MAX_WALK_ENTRIES};
pub use crate::storage::{Found, Listing as Discovery};

/// Expand every user path or URL, in order (see the module docs for the rules).
/// `options` configure the object stores (`storage_options`).
pub fn discover(specs: &[String], options: &[(String, String)]) -> Result<Discovery> {
    if specs.is_empty() {
        return Err(Error::InvalidArgument("no paths given".into()));
    }
    let d = storage::list(specs, options)?;
    let mut seen = std::collections::HashSet::new();
    for f in &d.found {
        if !seen.insert(f.identity()) {
            return Err(Error::InvalidArgument(format!("{} is listed more than once", f.name())));
        }
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    /// Local files only: the files `specs` name, in order.
    fn expand(specs: &[String]) -> Result<Vec<PathBuf>> {
        Ok(discover(specs, &[])?.found.iter().map(|f| PathBuf::from(f.name())).collect())
    }

    fn names(d: &Path, got: &[PathBuf]) -> Vec<String> {
        got.iter().map(|p| p.strip_prefix(d).unwrap().to_str().unwrap().to_string()).collect()
    }

    #[test]
    fn directories_are_walked_sorted_and_skip_hidden() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("b")).unwrap();
        std::fs::create_dir(d.path().join("_tmp")).unwrap();
        for f in [
            "b/2.parquet",
            "a.parquet",
            "c.txt",
            ".hidden.parquet",
            "_tmp.parquet",
            "_tmp/x.parquet",
            "D.PARQUET",
            "e.Parq",
            "f.pq",
        ] {
            std::fs::write(d.path().join(f), b"x").unwrap();
        }
        let got = expand(&[d.path().to_str().unwrap().to_string()]).unwrap();
        assert_eq!(names(d.path(), &got), vec!["D.PARQUET", "a.parquet", "b/2.parquet", "e.Parq", "f.pq"]);
    }

    #[test]
    fn globs_skip_hidden_files_unless_spelled_and_filter_extensions() {
        let d = tempfile::tempdir().unwrap();
        for f in ["a.parquet", ".a.parquet.crc", "_SUCCESS", "b.bin", "c.PARQUET", "_meta.parquet", ".d.parquet"] {
            std::fs::write(d.path().join(f), b"x").unwrap();
        }
        let g = |p: &str| expand(&[format!("{}/{p}", d.path().display())]).map(|v| names(d.path(), &v));
        assert_eq!(g("*").unwrap(), vec!["a.parquet", "c.PARQUET"]);
        assert_eq!(g("*.bin").unwrap(), vec!["b.bin"], "the pattern spells its extension");
        assert_eq!(g(".*").unwrap(), vec![".d.parquet"]);
        assert_eq!(g("_*.parquet").unwrap(), vec!["_meta.parquet"]);
        assert!(g("*.nothing").is_err());
    }

    #[test]
    fn fifos_are_skipped_and_reported_not_opened() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.parquet"), b"x").unwrap();
        let fifo = d.path().join("b.parquet");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let got = discover(&[d.path().to_str().unwrap().to_string()], &[]).unwrap();
        assert_eq!(got.found.len(), 1);
        assert_eq!(got.skipped.len(), 1);
        assert!(got.skipped[0].0.ends_with("b.parquet") && got.skipped[0].1.contains("FIFO"));
        assert!(matches!(expand(&[fifo.display().to_string()]), Err(Error::InvalidArgument(m)) if m.contains("FIFO")));
    }

    #[test]
    fn duplicates_and_empty_globs_are_errors() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("a.parquet");
        std::fs::write(&f, b"x").unwrap();
        let s = f.to_str().unwrap().to_string();
        assert!(expand(&[s.clone(), s.clone()]).is_err());
        assert!(expand(&[format!("file://{s}"), s]).is_err(), "file:// names the same file");
        assert!(expand(&[format!("{}/*.nothing", d.path().display())]).is_err());
        assert!(expand(&[]).is_err());
    }

    #[test]
    fn symlink_loops_are_walked_once() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("a.parquet"), b"x").unwrap();
        std::fs::write(d.path().join("sub/b.parquet"), b"x").unwrap();
        std::os::unix::fs::symlink(".", d.path().join("l1")).unwrap();
        std::os::unix::fs::symlink("..", d.path().join("sub/up")).unwrap();
        for spec in [d.path().display().to_string(), format!("{}/**/*.parquet", d.path().display())] {
            let got = discover(std::slice::from_ref(&spec), &[]).unwrap();
            assert_eq!(got.found.len(), 2, "{spec}");
            assert!(got.skipped.iter().any(|(_, why)| why.contains("walked already")) || spec.contains("**"));
        }
    }
}

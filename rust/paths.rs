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

use std::path::{Path, PathBuf};

use object_store::ObjectMeta;

use crate::error::{Error, Result};
pub use crate::storage::Found;
use crate::storage::spec::StoreSpec;
use crate::storage::{Location, refuse_unused_options};

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

fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Whether a glob's last component spells an extension (`*.bin`), so the pattern and not
/// rule 3 decides which names are data.
fn pattern_spells_extension(pattern: &str) -> bool {
    let last = pattern.rsplit('/').next().unwrap_or(pattern);
    last.rsplit_once('.').is_some_and(|(_, ext)| !ext.is_empty() && !is_glob(ext))
}

/// Rule 2 for a glob match: a hidden component of `matched` below the pattern's literal
/// prefix is allowed only where the pattern's component at the same depth starts with
/// the same character.
fn hidden_in_match(pattern: &str, matched: &str) -> bool {
    let pc: Vec<&str> = pattern.split('/').collect();
    let mc: Vec<&str> = matched.split('/').collect();
    let literal_prefix = pc.iter().take_while(|c| !is_glob(c)).count();
    let same_depth = !pattern.contains("**") && pc.len() == mc.len();
    mc.iter().enumerate().skip(literal_prefix).any(|(i, c)| is_hidden(c) && !(same_depth && pc[i].starts_with(&c[..1])))
}

/// What discovery found, and what it skipped (entry, reason) under rule 1.
#[derive(Debug, Default)]
pub struct Discovery {
    pub found: Vec<Found>,
    pub skipped: Vec<(String, String)>,
}

/// Most entries one discovery looks at, and deepest directory nesting it follows: a
/// corpus is millions of files at a few levels, while a tree past these bounds is a
/// mistake (a walk of `/`, links that multiply paths) that would otherwise run for hours.
pub const MAX_WALK_ENTRIES: usize = 1 << 24;
pub const MAX_WALK_DEPTH: usize = 256;

/// State of one discovery's local walks: the directories entered so far, by (device,
/// inode), so a symlink loop or a second link to a walked directory is entered once
/// (following links is what makes a link to a corpus work; without this, two links to
/// `.` make 2^depth paths and the walk never ends), and the entries seen, bounded.
#[derive(Default)]
struct Walk {
    entered: std::collections::HashSet<(u64, u64)>,
    /// Files found, by (device, inode): a file reached again through a link is the same
    /// file (its rows would come twice per epoch).
    found: std::collections::HashSet<(u64, u64)>,
    entries: usize,
}

impl Walk {
    /// Whether `dir` is entered for the first time (`false`: walked already, skip it).
    fn enter(&mut self, dir: &Path, meta: &std::fs::Metadata, skipped: &mut Vec<(String, String)>) -> bool {
        use std::os::unix::fs::MetadataExt;
        if self.entered.insert((meta.dev(), meta.ino())) {
            return true;
        }
        skipped
            .push((dir.display().to_string(), "a directory walked already (a symlink loop or a second link)".into()));
        false
    }

    /// Whether `file` is found for the first time (`false`: reached again through a link).
    fn find(&mut self, file: &Path, meta: &std::fs::Metadata, skipped: &mut Vec<(String, String)>) -> bool {
        use std::os::unix::fs::MetadataExt;
        if self.found.insert((meta.dev(), meta.ino())) {
            return true;
        }
        skipped.push((file.display().to_string(), "a file found already through another link".into()));
        false
    }

    /// Count `n` entries against the bound, and let Ctrl-C through.
    fn count(&mut self, n: usize, dir: &Path) -> Result<()> {
        self.entries = self.entries.saturating_add(n);
        if self.entries > MAX_WALK_ENTRIES {
            return Err(Error::InvalidArgument(format!(
                "discovery stopped at {}: more than {MAX_WALK_ENTRIES} entries under the paths given; name the \
                 data directories (or a glob) rather than a whole filesystem",
                dir.display()
            )));
        }
        crate::runtime::interrupted()
    }
}

fn walk_dir(dir: &Path, out: &mut Vec<PathBuf>, skipped: &mut Vec<(String, String)>, walk: &mut Walk) -> Result<()> {
    let meta = std::fs::metadata(dir).map_err(|e| Error::io(dir, e))?;
    if walk.enter(dir, &meta, skipped) {
        walk_entered(dir, out, skipped, walk, 0)?;
    }
    Ok(())
}

fn walk_entered(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    skipped: &mut Vec<(String, String)>,
    walk: &mut Walk,
    depth: usize,
) -> Result<()> {
    if depth > MAX_WALK_DEPTH {
        return Err(Error::InvalidArgument(format!(
            "{}: directories nested more than {MAX_WALK_DEPTH} deep",
            dir.display()
        )));
    }
    let mut entries: Vec<PathBuf> = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        entries.push(e.map_err(|err| Error::io(dir, err))?.path());
        if entries.len().is_multiple_of(4096) {
            walk.count(4096, dir)?;
        }
    }
    walk.count(entries.len() % 4096, dir)?;
    entries.sort();
    for p in entries {
        let name = p.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
        if is_hidden(&name) {
            continue;
        }
        // `metadata` follows symlinks: a link to a regular file is data.
        let meta = match std::fs::metadata(&p) {
            Ok(m) => m,
            Err(e) => {
                if has_data_extension(&name) {
                    skipped.push((p.display().to_string(), format!("cannot stat: {e}")));
                }
                continue;
            }
        };
        if meta.is_dir() {
            if walk.enter(&p, &meta, skipped) {
                walk_entered(&p, out, skipped, walk, depth + 1)?;
            }
        } else if has_data_extension(&name) && (!meta.is_file() || walk.find(&p, &meta, skipped)) {
            accept_local(p, &meta, out, skipped);
        }
    }
    Ok(())
}

fn accept_local(p: PathBuf, meta: &std::fs::Metadata, out: &mut Vec<PathBuf>, skipped: &mut Vec<(String, String)>) {
    if meta.is_file() {
        out.push(p);
    } else {
        skipped.push((p.display().to_string(), format!("not a regular file ({})", file_kind(meta))));
    }
}

fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a file"
    }
}

/// Rule 2 for one name matched by one pattern component.
fn hidden_for(name: &str, pattern: &str) -> bool {
    is_hidden(name) && !pattern.starts_with(&name[..1])
}

/// Expand a local glob component by component, as Python's `glob` does (`*`, `?`,
/// `[...]` within a component, `**` for any depth); `read_dir` never yields `.` or
/// `..`, and hidden names need the pattern to spell their first character.
fn glob_local(spec: &str, walk: &mut Walk) -> Result<Vec<PathBuf>> {
    let opts =
        glob::MatchOptions { case_sensitive: true, require_literal_separator: true, require_literal_leading_dot: true };
    let comps: Vec<&str> = spec.split('/').collect();
    let first_glob = comps.iter().position(|c| is_glob(c)).unwrap_or(comps.len());
    let base = comps[..first_glob].join("/");
    let mut frontier =
        vec![PathBuf::from(if base.is_empty() { if spec.starts_with('/') { "/" } else { "." } } else { &base })];
    let list = |dir: &Path| -> Vec<(PathBuf, String)> {
        let mut v: Vec<(PathBuf, String)> = std::fs::read_dir(dir)
            .map(|rd| {
                // names that are not UTF-8 match as `os.fsdecode` would show them, lossily
                rd.filter_map(|e| e.ok()).map(|e| (e.path(), e.file_name().to_string_lossy().into_owned())).collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    for c in &comps[first_glob..] {
        let mut next = Vec::new();
        if *c == "**" {
            // this directory and every non-hidden directory below it, each once however
            // many links lead to it (see `Walk`)
            let mut seen = std::collections::HashSet::new();
            let mut stack: Vec<PathBuf> = frontier.into_iter().rev().collect();
            while let Some(d) = stack.pop() {
                use std::os::unix::fs::MetadataExt;
                let Ok(meta) = std::fs::metadata(&d) else { continue };
                if !seen.insert((meta.dev(), meta.ino())) {
                    continue;
                }
                let listed = list(&d);
                walk.count(listed.len(), &d)?;
                let subdirs: Vec<PathBuf> =
                    listed.into_iter().filter(|(p, n)| !is_hidden(n) && p.is_dir()).map(|(p, _)| p).collect();
                next.push(d);
                stack.extend(subdirs.into_iter().rev());
            }
        } else if is_glob(c) {
            let pat = glob::Pattern::new(c).map_err(|e| Error::InvalidArgument(format!("bad glob {spec:?}: {e}")))?;
            for d in &frontier {
                walk.count(1, d)?;
                next.extend(
                    list(d).into_iter().filter(|(_, n)| pat.matches_with(n, opts) && !hidden_for(n, c)).map(|(p, _)| p),
                );
            }
        } else if !c.is_empty() {
            next.extend(frontier.iter().map(|d| d.join(c)).filter(|p| p.symlink_metadata().is_ok()));
        } else {
            next = frontier;
        }
        frontier = next;
    }
    if base.is_empty() && !spec.starts_with('/') {
        // relative to the working directory, as written: `a.parquet`, not `./a.parquet`
        frontier = frontier.into_iter().map(|p| p.strip_prefix(".").map(Path::to_path_buf).unwrap_or(p)).collect();
    }
    Ok(frontier)
}

fn expand_local(spec: &str, out: &mut Vec<PathBuf>, skipped: &mut Vec<(String, String)>) -> Result<()> {
    let mut walk = Walk::default();
    if is_glob(spec) && !Path::new(spec).exists() {
        let own_extension = pattern_spells_extension(spec);
        let mut found: Vec<PathBuf> = Vec::new();
        for p in glob_local(spec, &mut walk)? {
            let Ok(meta) = std::fs::metadata(&p) else { continue };
            let name = p.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
            if meta.is_dir() {
                walk_dir(&p, &mut found, skipped, &mut walk)?;
            } else if (own_extension || has_data_extension(&name)) && (!meta.is_file() || walk.find(&p, &meta, skipped))
            {
                accept_local(p, &meta, &mut found, skipped);
            }
        }
        if found.is_empty() {
            return Err(Error::InvalidArgument(format!("glob {spec:?} matched no Parquet files")));
        }
        found.sort();
        out.extend(found);
        return Ok(());
    }
    let p = Path::new(spec);
    let meta = std::fs::metadata(p).map_err(|e| Error::io(p, e))?;
    if meta.is_dir() {
        let before = out.len();
        walk_dir(p, out, skipped, &mut walk)?;
        if out.len() == before {
            return Err(Error::InvalidArgument(format!(
                "directory {spec:?} contains no Parquet files (*.parquet, *.parq, *.pq; hidden names skipped)"
            )));
        }
    } else if meta.is_file() {
        out.push(p.to_path_buf());
    } else {
        return Err(Error::InvalidArgument(format!("{spec} is not a regular file ({})", file_kind(&meta))));
    }
    Ok(())
}

/// Rules 2 and 3 for a listed key, relative to the listed prefix.
fn listed_is_data(rel: &str) -> bool {
    !rel.split('/').any(is_hidden) && rel.rsplit('/').next().is_some_and(has_data_extension)
}

fn expand_remote(spec: &str, options: &[(String, String)], out: &mut Vec<Found>) -> Result<()> {
    let (store, key) = StoreSpec::parse(spec, options)?;
    let listed = |prefix: &str| -> Result<Vec<ObjectMeta>> { store.list_sorted(prefix) };
    let push = |out: &mut Vec<Found>, m: ObjectMeta| {
        out.push(Found::Remote { spec: store.clone(), path: m.location.clone(), meta: Some(m) })
    };
    if let Some(first_glob) = key.find(['*', '?', '[']) {
        let prefix = &key[..key[..first_glob].rfind('/').map_or(0, |i| i + 1)];
        let pattern =
            glob::Pattern::new(&key).map_err(|e| Error::InvalidArgument(format!("bad glob {spec:?}: {e}")))?;
        let opts = glob::MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            require_literal_leading_dot: true,
        };
        let own_extension = pattern_spells_extension(&key);
        let before = out.len();
        for m in listed(prefix)? {
            let k = m.location.as_ref();
            if pattern.matches_with(k, opts)
                && !hidden_in_match(&key, k)
                && (own_extension || k.rsplit('/').next().is_some_and(has_data_extension))
            {
                push(out, m);
            } else if !pattern.matches_with(k, opts) {
                // a "directory" matched by the pattern: its objects, by rules 2 and 3
                let dir_match = k.char_indices().filter(|&(_, c)| c == '/').any(|(i, _)| {
                    pattern.matches_with(&k[..i], opts)
                        && !hidden_in_match(&key, &k[..i])
                        && listed_is_data(&k[i + 1..])
                });
                if dir_match {
                    push(out, m);
                }
            }
        }
        if out.len() == before {
            return Err(Error::InvalidArgument(format!("glob {spec:?} matched no Parquet objects")));
        }
        return Ok(());
    }
    let last = key.rsplit('/').next().unwrap_or("");
    // plain HTTP cannot list: a URL there names one object, whatever its name
    let names_object = has_data_extension(last) || !store.can_list();
    if !key.is_empty() && !key.ends_with('/') && names_object {
        out.push(Found::Remote { spec: store.clone(), path: store.object_path(&key)?, meta: None });
        return Ok(());
    }
    let prefix = if key.is_empty() || key.ends_with('/') { key.clone() } else { format!("{key}/") };
    let before = out.len();
    for m in listed(&prefix)? {
        if listed_is_data(&m.location.as_ref()[prefix.len().min(m.location.as_ref().len())..]) {
            push(out, m);
        }
    }
    if out.len() == before {
        if !key.is_empty() && !key.ends_with('/') {
            // not a prefix of anything: an object named without an extension
            out.push(Found::Remote { spec: store.clone(), path: store.object_path(&key)?, meta: None });
            return Ok(());
        }
        return Err(Error::InvalidArgument(format!(
            "{spec} holds no Parquet objects (*.parquet, *.parq, *.pq; hidden names skipped)"
        )));
    }
    Ok(())
}

/// Expand every user path or URL, in order (see the module docs for the rules).
/// `options` configure the object stores (`storage_options`).
pub fn discover(specs: &[String], options: &[(String, String)]) -> Result<Discovery> {
    if specs.is_empty() {
        return Err(Error::InvalidArgument("no paths given".into()));
    }
    let mut d = Discovery::default();
    for s in specs {
        match Location::of(s)? {
            Location::Store => expand_remote(s, options, &mut d.found)?,
            Location::Local(local) => {
                let mut files = Vec::new();
                expand_local(&local.display().to_string(), &mut files, &mut d.skipped)?;
                d.found.extend(files.into_iter().map(Found::Local));
            }
        }
    }
    if !d.found.iter().any(Found::in_store) {
        refuse_unused_options(options, "the path list")?;
    }
    let mut seen = std::collections::HashSet::new();
    for f in &d.found {
        if !seen.insert(f.identity()) {
            return Err(Error::InvalidArgument(format!("{} is listed more than once", f.name())));
        }
    }
    Ok(d)
}

/// Local files only (no stores): the files `specs` name, in order.
pub fn expand(specs: &[String]) -> Result<Vec<PathBuf>> {
    discover(specs, &[])?
        .found
        .into_iter()
        .map(|f| match f {
            Found::Local(p) => Ok(p),
            other => Err(Error::InvalidArgument(format!("{} is not a local path", other.name()))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn listed_keys_follow_the_same_rules() {
        assert!(listed_is_data("a.parquet") && listed_is_data("x/B.PQ"));
        assert!(!listed_is_data("_x/a.parquet") && !listed_is_data(".a.parquet.crc") && !listed_is_data("a.txt"));
        assert!(hidden_in_match("d/*", "d/.x") && !hidden_in_match("d/.*", "d/.x") && !hidden_in_match("d/*", "d/x"));
    }
}

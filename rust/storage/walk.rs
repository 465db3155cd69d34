//! Listing local paths for discovery: a directory walked in sorted order, a glob
//! expanded component by component, each directory and file entered once however many
//! links lead to it, bounded and interruptible (rules 1, 4 and 5 of [`crate::index::paths`];
//! which names are data is [`crate::rules`]).

use std::path::{Path, PathBuf};

use super::found::Listing;
use crate::error::{Error, Result};
use crate::rules::{GLOB_OPTIONS, has_data_extension, hidden_for, is_glob, is_hidden, pattern_spells_extension};

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
        // a directory of many files stats each one: Ctrl-C must not wait for all of them
        crate::runtime::interrupted()?;
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

/// Expand a local glob component by component, as Python's `glob` does (`*`, `?`,
/// `[...]` within a component, `**` for any depth); `read_dir` never yields `.` or
/// `..`, and hidden names need the pattern to spell their first character.
fn glob_local(spec: &str, walk: &mut Walk) -> Result<Vec<PathBuf>> {
    let opts = GLOB_OPTIONS;
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

/// List the local path `spec` (a file, a directory or a glob) into `out`, by the rules
/// of [`crate::index::paths`].
pub(crate) fn list_local(spec: &str, out: &mut Listing) -> Result<()> {
    let mut files = Vec::new();
    expand_local(spec, &mut files, &mut out.skipped)?;
    out.found.extend(files.into_iter().map(super::listed::file));
    Ok(())
}

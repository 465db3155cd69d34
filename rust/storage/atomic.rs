//! Writing a file whole or not at all, in place of what the user named.
//!
//! The bytes go to a fresh temporary file beside the target and are renamed over it,
//! so a crash or a full disk never leaves half a file, and readers see the old file or
//! the new one. What "the target" is matters: renaming over a symlink would replace the
//! link, so links are followed to the file they point at; renaming over a device or a
//! directory would replace it (as root, `/dev/null` would become a regular file), so
//! only regular files (or nothing) are written over. Each save gets its own temporary
//! name (created with `O_EXCL`), so concurrent saves into one directory cannot write
//! into each other's temporary file, and a failed save removes its temporary file.
//! Errors name the path the caller gave.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// The file a path designates once symlinks are followed (it need not exist yet).
fn resolve(path: &Path) -> Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&p).map_err(|e| Error::io(path, e))?;
                p = match p.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            _ => return Ok(p),
        }
    }
    Err(Error::io(path, std::io::Error::other("too many levels of symbolic links")))
}

fn kind(ft: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_fifo() {
        "a named pipe"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Write `bytes` to `path` atomically (see the module doc). `arg` names the argument in
/// errors (`"save(path)"`).
pub fn write(path: &Path, bytes: &[u8], arg: &str) -> Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let target = resolve(path)?;
    let existing = match std::fs::metadata(&target) {
        Ok(m) if m.is_file() => Some(m),
        Ok(m) => {
            return Err(Error::InvalidArgument(format!(
                "{arg}: {} is {}, not a regular file; youmu only writes over regular files",
                path.display(),
                kind(&m.file_type())
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(path, e)),
    };
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "index".into());
    let mut attempt = 0;
    let (tmp, mut file) = loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let tmp = dir.join(format!(".{name}.{}.{n}.{nanos:x}.tmp", std::process::id()));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => attempt += 1,
            Err(e) => {
                return Err(Error::io(path, std::io::Error::new(e.kind(), format!("creating a file beside it: {e}"))));
            }
        }
    };
    let result = (|| -> std::io::Result<()> {
        file.write_all(bytes)?;
        if let Some(m) = &existing {
            // the new file takes the place of the old one: keep its permissions
            file.set_permissions(m.permissions())?;
        }
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, &target)?;
        // make the rename itself durable; not every filesystem can sync a directory
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(path, e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_through_a_symlink_and_keeps_the_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real.bin");
        std::fs::write(&real, b"old").expect("write");
        let link = dir.path().join("link.bin");
        std::os::unix::fs::symlink("real.bin", &link).expect("symlink");
        write(&link, b"new", "save(path)").expect("save");
        assert!(std::fs::symlink_metadata(&link).expect("meta").file_type().is_symlink());
        assert_eq!(std::fs::read(&real).expect("read"), b"new");
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("ls").filter_map(|e| e.ok()).collect();
        assert_eq!(left.len(), 2, "no temporary file is left: {left:?}");
    }

    #[test]
    fn a_dangling_symlink_creates_its_target() {
        let dir = tempfile::tempdir().expect("tempdir");
        let link = dir.path().join("link.bin");
        std::os::unix::fs::symlink("made.bin", &link).expect("symlink");
        write(&link, b"x", "save(path)").expect("save");
        assert_eq!(std::fs::read(dir.path().join("made.bin")).expect("read"), b"x");
    }

    #[test]
    fn directories_and_devices_are_refused_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = write(dir.path(), b"x", "save(path)").unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument(ref m) if m.contains("a directory") && m.contains("save(path)")),
            "{e}"
        );
        let e = write(Path::new("/dev/null"), b"x", "save(path)").unwrap_err();
        assert!(e.to_string().contains("/dev/null is a character device"), "{e}");
    }

    #[test]
    fn a_failed_write_leaves_nothing_and_names_the_callers_path() {
        let e = write(Path::new("/nonexistent-dir/x/idx.youmu"), b"x", "save(path)").unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent-dir/x/idx.youmu:"), "{e}");
    }
}

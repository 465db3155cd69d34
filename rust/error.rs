//! One error type for the whole core. The Python layer maps each variant to one
//! exception class in exactly one place (`py/errors.rs`).

use std::path::Path;

use parquet::errors::ParquetError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bug (a panic in youmu or a library), caught before it reached Python.
    #[error("internal error (please report it with the file that triggers it): {0}")]
    Internal(String),
    /// The OS refused an operation on a file (missing, permission, short read of a healthy file...).
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },

    /// The bytes of a file are not valid Parquet: truncated, bit-flipped, inconsistent metadata.
    #[error("{path}: corrupt or truncated Parquet file: {detail}")]
    Corrupt { path: String, detail: String },

    /// A valid file uses something this build cannot read (encryption, LZO, ...).
    #[error("{path}: unsupported Parquet feature: {detail}")]
    Unsupported { path: String, detail: String },

    /// Two files disagree on the projected schema.
    #[error("schema mismatch between {first} and {other}: {detail}")]
    SchemaMismatch { first: String, other: String, detail: String },

    /// A requested column does not exist in a file.
    #[error("{path}: no top-level column named {column:?} (available: {available})")]
    ColumnNotFound { path: String, column: String, available: String },

    /// A page or row id outside the index.
    #[error("{what} {id} is out of range (the index has {len})")]
    OutOfRange { what: &'static str, id: i128, len: u64 },

    /// A persisted index that no longer matches the files on disk.
    #[error("stale index {index}: {detail}")]
    Stale { index: String, detail: String },

    /// A caller passed something meaningless (empty path list, bad glob, ...).
    #[error("{0}")]
    InvalidArgument(String),

    /// A caller passed an argument of the wrong type (a float where ids are expected, ...).
    #[error("{0}")]
    ArgumentType(String),

    /// A request whose result cannot fit in memory (checked before allocating it).
    #[error("{what} needs about {} but only {} of memory is available", human_bytes(*bytes), human_bytes(*available))]
    TooLarge { what: String, bytes: u128, available: u64 },

    /// A value in a file that does not fit the type it is read as (an INT96 timestamp
    /// beyond the range of the chosen unit). The file is not corrupt.
    #[error("{path}: {detail}")]
    Overflow { path: String, detail: String },

    /// A column name that matches more than one top-level column of a file.
    #[error("{path}: column name {column:?} is ambiguous: {count} top-level columns have it")]
    AmbiguousColumn { path: String, column: String, count: usize },

    /// The bytes of a saved youmu index (not a Parquet file) are damaged or not an index.
    #[error("{path}: corrupt youmu index file: {detail}")]
    CorruptIndex { path: String, detail: String },

    /// Work stopped on request (a progress callback asked to stop).
    #[error("{0}")]
    Cancelled(String),

    /// An indexed file or object changed since it was indexed (rewritten in place,
    /// replaced, deleted): its pages would be other data, so nothing is read.
    #[error("{path} changed since it was indexed ({detail}): rebuild the index")]
    Changed { path: String, detail: String },

    /// A request to an object store failed: `url` and `range` say what was asked for,
    /// `kind` why it failed (after retries, where retrying applies).
    #[error("{url}{}: {kind}: {detail}", if range.is_empty() { String::new() } else { format!(" ({range})") })]
    Storage { url: String, range: String, kind: StorageErrorKind, detail: String },

    /// Not an error a caller sees: an index-build step asks for byte ranges it does not
    /// have yet (see `storage::Fetched`); the build driver fetches them and retries.
    #[error("internal: byte ranges {0:?} were needed before they were fetched")]
    NeedData(Vec<(u64, u64)>),
}

/// `1.5 GiB`-style size for messages.
pub fn human_bytes(b: impl Into<u128>) -> String {
    let b = b.into();
    let units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{b} bytes") } else { format!("{v:.1} {}", units[u]) }
}

/// Why an object-store request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageErrorKind {
    /// No such object (key).
    NotFound,
    /// No such bucket or container.
    BucketNotFound,
    /// Credentials missing, wrong or without permission.
    Auth,
    /// The request timed out (after retries).
    Timeout,
    /// Transient failures (5xx, throttling, dropped connections) outlasted the retries.
    RetriesExhausted,
    /// The store could not be configured from the URL, environment and options.
    Config,
    /// Anything else the store reported.
    Other,
}

impl std::fmt::Display for StorageErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StorageErrorKind::NotFound => "object not found",
            StorageErrorKind::BucketNotFound => "bucket not found",
            StorageErrorKind::Auth => "access denied (check credentials)",
            StorageErrorKind::Timeout => "timed out",
            StorageErrorKind::RetriesExhausted => "failed after retries",
            StorageErrorKind::Config => "cannot configure the store",
            StorageErrorKind::Other => "request failed",
        })
    }
}

/// Describe a byte range for an error message.
pub fn range_text(start: u64, end: u64) -> String {
    format!("bytes {start}..{end}")
}

impl Error {
    /// The message a user sees: the error's text with credentials blanked out (user
    /// info in URLs, signatures, secret `storage_options`; see `crate::redact`).
    pub fn message(&self) -> String {
        crate::redact::redact(&self.to_string())
    }

    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io { path: path.as_ref().display().to_string(), source }
    }

    pub fn corrupt(path: impl AsRef<Path>, detail: impl Into<String>) -> Self {
        Error::Corrupt { path: path.as_ref().display().to_string(), detail: detail.into() }
    }

    pub fn corrupt_index(path: impl AsRef<Path>, detail: impl Into<String>) -> Self {
        Error::CorruptIndex { path: path.as_ref().display().to_string(), detail: detail.into() }
    }

    /// Classify an error raised by the `parquet` crate while handling `path`.
    /// `context` says where (row group, page, offset) so the message can point at it.
    pub fn from_parquet(path: impl AsRef<Path>, context: &str, err: ParquetError) -> Self {
        // youmu's own errors (storage, staleness) travel through the parquet crate as
        // `External`: give them back with their kind.
        let err = match err {
            ParquetError::External(e) => match e.downcast::<Error>() {
                Ok(ours) => return *ours,
                Err(other) => ParquetError::External(other),
            },
            other => other,
        };
        let path = path.as_ref().display().to_string();
        let text = err.to_string();
        let detail = if context.is_empty() { text.clone() } else { format!("{context}: {text}") };
        let lower = text.to_ascii_lowercase();
        let unsupported = matches!(err, ParquetError::NYI(_))
            || lower.contains("encrypt")
            || lower.contains("disabled feature")
            || lower.contains("not supported")
            || lower.contains("unsupported")
            || lower.contains("not yet implemented");
        if unsupported { Error::Unsupported { path, detail } } else { Error::Corrupt { path, detail } }
    }

    /// Prefix the error with where it happened, keeping its kind.
    pub fn context(self, ctx: &str) -> Self {
        match self {
            Error::Corrupt { path, detail } => Error::Corrupt { path, detail: format!("{ctx}: {detail}") },
            Error::Unsupported { path, detail } => Error::Unsupported { path, detail: format!("{ctx}: {detail}") },
            other => other,
        }
    }
}

/// Run `f`, turning a panic into [`Error::Internal`]: the Python layer wraps every call
/// into the core with this, so no panic reaches Python as pyo3's `PanicException` (not a
/// `YoumuError`) and none unwinds out of a thread-pool task (which would abort).
pub fn catch_panics<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_quietly(f).unwrap_or_else(|msg| Err(Error::Internal(msg)))
}

thread_local! {
    /// How many `catch_quietly` calls are running on this thread.
    static CATCHING: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Run `f`, returning a panic's message as `Err` instead of unwinding, without the
/// default hook's "thread panicked at ..." and backtrace on stderr: the panic becomes
/// an error the caller reports (typed, naming the file), so printing it too would show
/// users a Rust backtrace for an exception they may well catch. `YOUMU_PRINT_PANICS=1`
/// keeps the default output for debugging (not `RUST_BACKTRACE`, which many set
/// globally for other programs).
pub fn catch_quietly<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    install_quiet_hook();
    struct Depth;
    impl Drop for Depth {
        fn drop(&mut self) {
            CATCHING.with(|c| c.set(c.get().saturating_sub(1)));
        }
    }
    CATCHING.with(|c| c.set(c.get() + 1));
    let _depth = Depth;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into())
    })
}

/// Threads of youmu's pools: their panics always reach a `catch_quietly` on the thread
/// that waits for them (rayon re-raises a task's panic in `install`, and spawned tasks
/// run under `catch_panics`), so they are quiet too.
const POOL_THREAD_PREFIX: &str = "youmu-";

fn install_quiet_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let caught = CATCHING.with(|c| c.get() > 0)
                || std::thread::current().name().is_some_and(|n| n.starts_with(POOL_THREAD_PREFIX));
            let debugging = std::env::var_os("YOUMU_PRINT_PANICS").is_some_and(|v| v != "0");
            if !caught || debugging {
                previous(info);
            }
        }));
    });
}

#[cfg(test)]
mod panic_tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_internal_error() {
        let r: Result<u8> = catch_panics(|| {
            let v: Vec<u8> = vec![];
            Ok(v[3])
        });
        assert!(matches!(r, Err(Error::Internal(ref m)) if m.contains("index out of bounds")), "{r:?}");
        assert_eq!(catch_panics(|| Ok(7)).ok(), Some(7));
    }
}

//! Process-wide I/O settings ([`IoOptions`]): their defaults, the `YOUMU_*` environment
//! variables that set them, and the checks of every value. None of them changes what is
//! read, only how: a saved index stays valid whatever they are set to.

use std::time::Duration;

use crate::error::{Error, Result};

/// Process-wide I/O settings. None of them changes what is read, only how.
#[derive(Debug, Clone, PartialEq)]
pub struct IoOptions {
    /// Object-store requests in flight at once, over all indexes of the process.
    pub max_inflight: usize,
    /// Ranges of one object at most this many bytes apart are fetched with one GET
    /// (0: only touching ranges merge).
    pub coalesce_gap: u64,
    /// Merged requests are not grown beyond this many bytes.
    pub coalesce_max: u64,
    /// Open local file handles kept (least recently used closed first).
    pub max_open_files: usize,
    /// Bytes of an object's tail read by the first GET of an index build (footer and,
    /// where writers put it, the OffsetIndex).
    pub tail_bytes: u64,
    /// Retries of a failed request (transient errors only: 5xx, 429, dropped
    /// connections, truncated bodies; a request that got no answer in time is retried
    /// once). Their backoff grows exponentially, with jitter, so they span `retry_timeout`.
    pub retries: usize,
    /// No retry starts after this long since the first attempt.
    pub retry_timeout: Duration,
    /// Whole-request timeout (connect to last byte); `storage_options["timeout"]` overrides it per index.
    pub request_timeout: Duration,
    /// Connect timeout; `storage_options["connect_timeout"]` overrides it per index.
    pub connect_timeout: Duration,
    /// No byte for this long (the first of a response, or the next) fails the attempt:
    /// a hung endpoint fails within about `connect_timeout + 2 * read_timeout`;
    /// `storage_options["read_timeout"]` overrides it per index.
    pub read_timeout: Duration,
    /// Worker threads of the I/O runtime (they only move bytes).
    pub io_threads: usize,
}

impl Default for IoOptions {
    fn default() -> Self {
        IoOptions {
            // Durner et al. (VLDB 2023): small S3 requests are dominated by first-byte
            // latency; ~1 MiB pages need tens to hundreds of requests in flight.
            max_inflight: 64,
            // A page or dictionary is tens of KiB to a few MiB; a 64 KiB hole costs
            // about a millisecond of transfer, a request tens of milliseconds.
            coalesce_gap: 64 << 10,
            coalesce_max: 16 << 20,
            max_open_files: default_max_open_files(),
            tail_bytes: 256 << 10,
            retries: 10,
            retry_timeout: Duration::from_secs(180),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            // S3's first byte comes in tens of milliseconds, its p99.9 within a second or
            // two (Durner et al., VLDB 2023): ten seconds of silence is a hung endpoint.
            read_timeout: Duration::from_secs(10),
            io_threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(2, 8),
        }
    }
}

/// A quarter of the soft `RLIMIT_NOFILE` (the rest is left to Python, sockets, other
/// libraries and forked workers that inherit the parent's handles), at least 16.
pub fn default_max_open_files() -> usize {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we pass.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 { lim.rlim_cur } else { 1024 };
    ((soft.min(1 << 20) / 4) as usize).clamp(16, 16384)
}

/// Read on the I/O path (no lock a fork could leave held: see [`crate::rcu`]); made
/// from the `YOUMU_*` variables at first use.
static OPTIONS: crate::rcu::Rcu<IoOptions> = crate::rcu::Rcu::new(|| env_options().unwrap_or_default());

/// The range of every integer setting, shared by `set_io_options` and the `YOUMU_*`
/// variables: (name, environment variable, lowest, highest). Bounded by what the
/// machine and the libraries take: tokio's semaphore holds at most 2^61 permits and
/// each request in flight holds a socket; every I/O thread is a real thread; handles
/// beyond the descriptor limit cannot be opened; a gap or tail beyond 1 GiB is a
/// buffer of that size.
pub fn io_option_range(name: &str) -> Option<(u64, u64)> {
    Some(match name {
        "max_inflight" => (1, MAX_INFLIGHT),
        "coalesce_gap" => (0, 1 << 30),
        "max_open_files" => (1, max_open_files_limit()),
        "tail_bytes" => (8, 1 << 30),
        "retries" => (0, 100),
        "io_threads" => (1, MAX_IO_THREADS),
        _ => return None,
    })
}

/// Most object-store requests in flight at once.
pub const MAX_INFLIGHT: u64 = 16384;
/// Most I/O runtime threads (they only move bytes: a few per core are plenty).
pub const MAX_IO_THREADS: u64 = 256;
/// Longest timeout, in seconds (a week): longer ones overflow clocks in the HTTP stack.
pub const MAX_TIMEOUT_SECS: f64 = 7.0 * 86400.0;

/// The soft `RLIMIT_NOFILE` (at least 16): more handles than this cannot be open.
pub fn max_open_files_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we pass.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 { lim.rlim_cur } else { 1024 };
    soft.clamp(16, 1 << 20)
}

/// `value` checked against [`io_option_range`]; `what` names it in the error.
pub fn check_io_option(name: &str, what: &str, value: u64) -> Result<u64> {
    let (lo, hi) = io_option_range(name).ok_or_else(|| Error::Internal(format!("no I/O setting {name}")))?;
    if (lo..=hi).contains(&value) {
        Ok(value)
    } else {
        Err(Error::InvalidArgument(format!("{what} must be an integer between {lo} and {hi}, got {value}")))
    }
}

/// The I/O settings the `YOUMU_*` variables ask for, or an error naming the first
/// variable that is not an integer in its range.
fn env_options() -> Result<IoOptions> {
    let mut o = IoOptions::default();
    let num = |name: &str, var: &str| -> Result<Option<u64>> {
        let Some(raw) = std::env::var_os(var) else { return Ok(None) };
        let text = raw.to_string_lossy();
        let what = format!("environment variable {var}={text:?}");
        let v = text.trim().parse::<u64>().map_err(|_| {
            let (lo, hi) = io_option_range(name).unwrap_or((0, u64::MAX));
            Error::InvalidArgument(format!("{what} must be an integer between {lo} and {hi}"))
        })?;
        check_io_option(name, &what, v).map(Some)
    };
    if let Some(v) = num("max_inflight", "YOUMU_MAX_INFLIGHT")? {
        o.max_inflight = v as usize;
    }
    if let Some(v) = num("coalesce_gap", "YOUMU_COALESCE_GAP")? {
        o.coalesce_gap = v;
    }
    if let Some(v) = num("max_open_files", "YOUMU_MAX_OPEN_FILES")? {
        o.max_open_files = v as usize;
    }
    if let Some(v) = num("retries", "YOUMU_RETRIES")? {
        o.retries = v as usize;
    }
    Ok(o)
}

/// The client settings of http(s) stores that `YOUMU_HTTP_<KEY>` variables give (any
/// key of `object_store`'s client options: `YOUMU_HTTP_TIMEOUT=30s`,
/// `YOUMU_HTTP_PROXY_URL=...`), or an error naming the first variable whose key or value
/// the client refuses (checked by building a client with it: nothing is sent).
pub fn http_env() -> Result<Vec<(object_store::ClientConfigKey, String)>> {
    let mut out = Vec::new();
    let mut vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
        .filter(|(k, _)| k.starts_with(HTTP_ENV_PREFIX))
        .collect();
    vars.sort();
    if !vars.is_empty() {
        // building the client below needs rustls's process provider, which the I/O
        // runtime installs too (ring); checking may come first
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    for (var, value) in vars {
        let key = var[HTTP_ENV_PREFIX.len()..].to_ascii_lowercase();
        let bad = |why: String| Error::InvalidArgument(format!("environment variable {var}={value:?} {why}"));
        let ck: object_store::ClientConfigKey = key
            .parse()
            .map_err(|_| bad(format!("names no http client option {key:?} (see object_store's ClientConfigKey)")))?;
        object_store::http::HttpBuilder::new()
            .with_url("http://127.0.0.1/")
            .with_config(ck, value.as_str())
            .build()
            .map_err(|e| bad(format!("is not a valid {key}: {e}")))?;
        out.push((ck, value));
    }
    Ok(out)
}

/// The prefix of the variables [`http_env`] reads.
pub const HTTP_ENV_PREFIX: &str = "YOUMU_HTTP_";

/// `Err` naming the first `YOUMU_*` variable that is malformed or out of range (the
/// settings then keep their defaults). Checked where indexes are made and settings
/// read or changed, so a typo is an error rather than silently ignored.
pub fn check_env() -> Result<()> {
    static CHECKED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let found = CHECKED.get_or_init(|| {
        env_options()
            .err()
            .or_else(|| crate::runtime::env_threads().err())
            .or_else(|| crate::runtime::env_allocator().err())
            .or_else(|| crate::runtime::env_fast_decode().err())
            .or_else(|| http_env().err())
            .map(|e| e.to_string())
    });
    match found {
        Some(msg) => Err(Error::InvalidArgument(msg.clone())),
        None => Ok(()),
    }
}

/// The current settings (from `YOUMU_*` environment variables at first use, then
/// [`set_io_options`]).
pub fn io_options() -> IoOptions {
    OPTIONS.get().clone()
}

/// Make `o` the settings (checked by the caller) and return the ones it replaces.
pub(super) fn replace(o: IoOptions) -> IoOptions {
    OPTIONS.update(|_| Some(o.clone())).clone()
}

//! `hf://datasets/...` paths: storage's Hub scheme resolves them through the resolver
//! installed here, `youmu.streams.hub` (through `huggingface_hub`, which knows the Hub's API,
//! tokens and endpoints); what comes back are resolve URLs pinned to a commit. From
//! there on they are http(s) objects like any other: ranged GETs, ETags checked, read by
//! the core, which sends the Hub's token to the Hub's host (`storage/hub_token.rs`).

use pyo3::prelude::*;

use crate::rules::{KeyPlan, names_object};

thread_local! {
    /// The exception `youmu.streams.hub` raised while resolving on this thread: raised as it was
    /// (its type says what the Hub answered) by [`recover`].
    static RAISED: std::cell::RefCell<Option<PyErr>> = const { std::cell::RefCell::new(None) };
}

/// Install storage's resolver of `hf://` URLs (its Hub scheme): `youmu.streams.hub.expand_paths`.
pub fn install() {
    crate::storage::set_hub_resolver(Box::new(|spec: &str, options: &[(String, String)]| {
        ask_hub("expand_paths", vec![spec.to_string()], options, |r| r.extract())
    }));
}

/// `youmu.streams.hub.<function>(names, options)`, as `extract` reads it; what it raises is kept
/// for [`recover`].
fn ask_hub<T>(
    function: &str,
    names: Vec<String>,
    options: &[(String, String)],
    extract: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>,
) -> crate::error::Result<T> {
    Python::attach(|py| -> PyResult<T> {
        let opts = super::dicts::options_dict(py, options)?;
        extract(&py.import("youmu.streams.hub")?.call_method1(function, (names, opts))?)
    })
    .map_err(|e: PyErr| {
        let message = Python::attach(|py| e.value(py).to_string());
        RAISED.with(|r| r.borrow_mut().replace(e));
        crate::error::Error::InvalidArgument(message)
    })
}

/// `r`, where it failed because resolving an `hf://` URL raised, as that exception.
pub fn recover<T>(r: crate::error::Result<T>) -> PyResult<T> {
    let raised = RAISED.with(|r| r.borrow_mut().take());
    match (r, raised) {
        (Err(_), Some(e)) => Err(e),
        (r, _) => Ok(r?),
    }
}

/// `specs` with every path that stands for others (an `hf://` URL: the resolve URLs of
/// its files) replaced by them, and the options that reach them.
pub fn resolve(specs: Vec<String>, options: Vec<(String, String)>) -> PyResult<crate::storage::scheme::Resolved> {
    recover(crate::storage::resolve(specs, options))
}

/// How a listing answers `key` (the part of a URL inside its store or repository):
/// `None` when the key names one object and nothing is listed, else the prefix to list.
#[pyfunction]
pub fn listing_prefix(key: &str) -> PyResult<Option<String>> {
    if names_object(key) {
        return Ok(None);
    }
    let plan = KeyPlan::new(key).map_err(|e| crate::error::Error::InvalidArgument(format!("bad glob {key:?}: {e}")))?;
    Ok(Some(plan.prefix().to_string()))
}

/// The keys among `listed` (all under `listing_prefix(key)`) that `key` takes, by the
/// rules of `PageIndex` paths (hidden names skipped, data extensions, glob matches),
/// sorted bytewise.
#[pyfunction]
pub fn listed_data(key: &str, listed: Vec<String>) -> PyResult<Vec<String>> {
    let plan = KeyPlan::new(key).map_err(|e| crate::error::Error::InvalidArgument(format!("bad glob {key:?}: {e}")))?;
    let mut keep: Vec<String> = listed.into_iter().filter(|k| k.starts_with(plan.prefix()) && plan.takes(k)).collect();
    keep.sort();
    Ok(keep)
}

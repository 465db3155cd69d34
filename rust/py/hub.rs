//! `hf://datasets/...` paths: the Hub is listed, and its branches resolved to commits, by
//! `youmu.hub` (through `huggingface_hub`, which knows the Hub's API, tokens and
//! endpoints); what comes back are resolve URLs pinned to a commit and the options that
//! say where the token is. From there on they are http(s) objects like any other: ranged
//! GETs, ETags checked, read by the core.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::rules::{KeyPlan, names_object};

/// Path specs and storage options, as a `PageIndex` is given them.
type SpecsAndOptions = (Vec<String>, Vec<(String, String)>);

/// Whether `spec` is an `hf://` URL.
pub fn is_hf(spec: &str) -> bool {
    spec.get(..5).is_some_and(|s| s.eq_ignore_ascii_case("hf://"))
}

/// `specs` with every `hf://` URL replaced by the resolve URLs of the files it names, and
/// `options` with the token's source added (both unchanged when there is none).
pub fn expand(py: Python<'_>, specs: Vec<String>, options: Vec<(String, String)>) -> PyResult<SpecsAndOptions> {
    if !specs.iter().any(|s| is_hf(s)) {
        return Ok((specs, options));
    }
    let opts = PyDict::new(py);
    for (k, v) in &options {
        opts.set_item(k, v)?;
    }
    py.import("youmu.hub")?.call_method1("expand_paths", (specs, opts))?.extract()
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

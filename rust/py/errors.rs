//! The one place where core errors become Python exceptions. The exception classes
//! are defined in Python (`youmu/errors.py`) so they can inherit from both
//! `YoumuError` and the matching builtin (`IndexError`, `ValueError`, `TypeError`,
//! `MemoryError`, `OverflowError`, `OSError`).

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::error::{Error, StorageErrorKind};

fn class_name(e: &Error) -> &'static str {
    match e {
        Error::Io { .. } => "YoumuIOError",
        Error::Corrupt { .. } => "CorruptFileError",
        Error::Unsupported { .. } => "UnsupportedError",
        Error::SchemaMismatch { .. } => "SchemaMismatchError",
        Error::ColumnNotFound { .. } => "ColumnNotFoundError",
        Error::OutOfRange { .. } => "PageOutOfRangeError",
        Error::Stale { .. } => "StaleIndexError",
        Error::InvalidArgument(_) => "InvalidArgumentError",
        Error::ArgumentType(_) => "ArgumentTypeError",
        Error::TooLarge { .. } => "RequestTooLargeError",
        Error::Overflow { .. } => "ValueOverflowError",
        Error::AmbiguousColumn { .. } => "AmbiguousColumnError",
        Error::CorruptIndex { .. } => "CorruptFileError",
        Error::Changed { .. } => "StaleIndexError",
        Error::Storage { kind, .. } => match kind {
            StorageErrorKind::NotFound => "ObjectNotFoundError",
            StorageErrorKind::BucketNotFound => "BucketNotFoundError",
            StorageErrorKind::Auth => "StorageAuthError",
            StorageErrorKind::Timeout => "StorageTimeoutError",
            StorageErrorKind::RetriesExhausted => "RetriesExhaustedError",
            StorageErrorKind::Config => "InvalidArgumentError",
            StorageErrorKind::Other => "StorageError",
        },
        Error::Cancelled(_) | Error::Internal(_) | Error::NeedData(_) => "YoumuError",
    }
}

pub fn to_pyerr(py: Python<'_>, e: Error) -> PyErr {
    let msg = e.message();
    let made =
        py.import("youmu.errors").and_then(|m| m.getattr(class_name(&e))).and_then(|cls| cls.call1((msg.clone(),)));
    match made {
        Ok(exc) => PyErr::from_value(exc),
        Err(_) => PyRuntimeError::new_err(msg),
    }
}

/// A `youmu.errors.PrefetchError`: a background read (`PageIndex.prefetch`,
/// `prefetch_window`) that cannot deliver its pages, `msg` naming it and what failed;
/// a plain `RuntimeError` (its base) only if the Python class cannot be reached.
pub fn prefetch_error(py: Python<'_>, msg: String) -> PyErr {
    let made =
        py.import("youmu.errors").and_then(|m| m.getattr("PrefetchError")).and_then(|cls| cls.call1((msg.clone(),)));
    match made {
        Ok(exc) => PyErr::from_value(exc),
        Err(_) => PyRuntimeError::new_err(msg),
    }
}

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        Python::attach(|py| to_pyerr(py, e))
    }
}

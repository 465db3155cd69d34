//! Argument and result conversions shared by the binding classes.

use arrow_array::RecordBatch;
use arrow_pyarrow::ToPyArrow;
use numpy::{PyArray1, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

/// A sequence of ids (numpy integer array, list, range...) as u64, negatives rejected.
pub fn ids_from(obj: &Bound<'_, PyAny>, len: u64, what: &str) -> PyResult<Vec<u64>> {
    if let Ok(arr) = obj.cast::<PyArray1<i64>>() {
        let ro = arr.readonly();
        return check(ro.as_slice()?.iter().copied(), len, what);
    }
    if let Ok(arr) = obj.cast::<PyArray1<u64>>() {
        let ro = arr.readonly();
        let v: Vec<u64> = ro.as_slice()?.to_vec();
        if let Some(&bad) = v.iter().find(|&&x| x >= len) {
            return Err(out_of_range(what, bad as i128, len));
        }
        return Ok(v);
    }
    if let Ok(arr) = obj.cast::<numpy::PyUntypedArray>() {
        if arr.ndim() != 1 {
            return Err(PyTypeError::new_err(format!("{what} ids must be one-dimensional")));
        }
        // other integer dtypes: let numpy cast
        let cast = obj.call_method1("astype", ("int64",))?;
        return ids_from(&cast, len, what);
    }
    let v: Vec<i64> =
        obj.extract().map_err(|_| PyTypeError::new_err(format!("{what} ids must be a sequence of integers")))?;
    check(v.into_iter(), len, what)
}

/// `PageOutOfRangeError` (a `YoumuError` and an `IndexError`), through the one mapping.
fn out_of_range(what: &str, id: i128, len: u64) -> PyErr {
    let what: &'static str = match what {
        "page" => "page",
        "row" => "row",
        "file" => "file",
        "window row" => "window row",
        _ => "id",
    };
    crate::error::Error::OutOfRange { what, id, len }.into()
}

fn check(it: impl Iterator<Item = i64>, len: u64, what: &str) -> PyResult<Vec<u64>> {
    it.map(|x| if x < 0 || x as u64 >= len { Err(out_of_range(what, x as i128, len)) } else { Ok(x as u64) }).collect()
}

/// Python-style index (negative counts from the end).
pub fn norm_index(i: i64, len: u64, what: &str) -> PyResult<u64> {
    let j = if i < 0 { i + len as i64 } else { i };
    if j < 0 || j as u64 >= len {
        return Err(out_of_range(what, i as i128, len));
    }
    Ok(j as u64)
}

/// `str`, `os.PathLike`, or an iterable of these.
pub fn paths_from(obj: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let py = obj.py();
    let fspath = py.import("os")?.getattr("fspath")?;
    if obj.is_instance_of::<PyString>() || obj.hasattr("__fspath__")? {
        return Ok(vec![fspath.call1((obj,))?.extract()?]);
    }
    let mut out = Vec::new();
    for item in obj.try_iter().map_err(|_| PyTypeError::new_err("paths must be a path or a list of paths"))? {
        out.push(fspath.call1((item?,))?.extract()?);
    }
    Ok(out)
}

pub fn batches_to_py(py: Python<'_>, batches: Vec<RecordBatch>) -> PyResult<Bound<'_, PyList>> {
    let items = batches.iter().map(|b| b.to_pyarrow(py)).collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// `storage_options`: a mapping of option names to values (str, bool, int, float; the
/// store parses them), or None.
pub fn storage_options_from(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, String)>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(Vec::new()) };
    let dict = obj.cast::<PyDict>().map_err(|_| PyTypeError::new_err("storage_options must be a dict"))?;
    let mut out = Vec::with_capacity(dict.len());
    for (k, v) in dict.iter() {
        let key: String = k.extract().map_err(|_| PyTypeError::new_err("storage_options keys must be strings"))?;
        let value = if let Ok(b) = v.extract::<bool>() {
            b.to_string()
        } else if v.is_instance_of::<PyString>() {
            v.extract()?
        } else if v.extract::<f64>().is_ok() {
            v.str()?.to_string()
        } else {
            return Err(PyTypeError::new_err(format!("storage_options[{key:?}] must be a str, bool or number")));
        };
        out.push((key, value));
    }
    Ok(out)
}

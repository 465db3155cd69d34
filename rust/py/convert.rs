//! Argument and result conversions shared by the binding classes.
//!
//! Ids (pages, rows, positions) are integers, and one rule decides what is an id
//! everywhere: a Python int (or anything with `__index__`, like `np.int64`), a list,
//! tuple or range of them, or a one-dimensional numpy array of any integer dtype —
//! contiguous or not (strided, reversed, broadcast views are fine). Anything else is an
//! `ArgumentTypeError` (a `TypeError`) naming the argument: floats even when whole
//! (`np.array([1.0])`: truncating a float id reads the wrong page, and a float id is
//! nearly always a bug upstream), bools and boolean masks (`True` is not page 1),
//! `bytes` and `str` (sequences of small ints or characters), 0-d and 2-D arrays. An
//! empty array of any dtype is no ids (`np.array([])` is float64).

use arrow_array::RecordBatch;
use arrow_pyarrow::ToPyArrow;
use numpy::{PyArray1, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyRange, PyString, PyTuple};

use crate::error::Error;

fn type_error(msg: String) -> PyErr {
    Error::ArgumentType(msg).into()
}

/// `PageOutOfRangeError` (a `YoumuError` and an `IndexError`), through the one mapping.
fn out_of_range(what: &'static str, id: i128, len: u64) -> PyErr {
    Error::OutOfRange { what, id, len }.into()
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// One integer id from a Python object (`int` or `__index__`, not `bool`), as i128 so
/// that huge ints are out of range rather than an overflow.
pub(crate) fn int_of(item: &Bound<'_, PyAny>) -> Option<i128> {
    if item.is_instance_of::<PyBool>() {
        return None;
    }
    let int = if item.is_instance_of::<PyInt>() {
        item.clone()
    } else {
        // numpy integer scalars and other `__index__` types (numpy bools have none)
        if !item.hasattr("__index__").unwrap_or(false) {
            return None;
        }
        item.call_method0("__index__").ok().filter(|v| v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>())?
    };
    Some(int.extract::<i128>().unwrap_or_else(|_| if int.lt(0).unwrap_or(false) { i128::MIN } else { i128::MAX }))
}

/// An integer argument (an `int` or `__index__`, never a `bool` or a float) in
/// `lo..=hi`: `ArgumentTypeError` naming `arg` for another type, `InvalidArgumentError`
/// naming it and the range for a value outside (a huge int included, never a builtin
/// `OverflowError`).
pub fn int_arg(obj: &Bound<'_, PyAny>, arg: &str, lo: u64, hi: u64) -> PyResult<u64> {
    let Some(v) = int_of(obj) else {
        return Err(type_error(format!("{arg} must be an int, got {} {}", type_name(obj), short_repr(obj))));
    };
    u64::try_from(v).ok().filter(|v| (lo..=hi).contains(v)).ok_or_else(|| {
        Error::InvalidArgument(format!("{arg} must be an integer between {lo} and {hi}, got {}", short_repr(obj)))
            .into()
    })
}

/// A seed or other 64-bit key: any int in `0..2**64`.
pub fn seed_arg(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<u64> {
    int_arg(obj, arg, 0, u64::MAX)
}

/// A list (or tuple) of integers, each in `lo..=hi` (as [`int_arg`], naming the item).
pub fn ints_arg(obj: &Bound<'_, PyAny>, arg: &str, lo: u64, hi: u64) -> PyResult<Vec<u64>> {
    if !(obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>()) {
        return Err(type_error(format!("{arg} must be a list of ints, got {} {}", type_name(obj), short_repr(obj))));
    }
    let mut out = Vec::with_capacity(obj.len()?);
    for (i, item) in obj.try_iter()?.enumerate() {
        out.push(int_arg(&item?, &format!("{arg} item {i}"), lo, hi)?);
    }
    Ok(out)
}

/// A `str` argument; anything else is an `ArgumentTypeError` naming `arg` (not PyO3's
/// builtin `TypeError`, which names no argument).
pub fn str_arg(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<String> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.to_owned());
    }
    Err(type_error(format!("{arg} must be a str, got {} {}", type_name(obj), short_repr(obj))))
}

/// A filesystem path or object-store URL: a `str`, `bytes` (as `open()` takes them) or
/// an `os.PathLike`, decoded by `os.fsdecode`; anything else is an `ArgumentTypeError`
/// naming `arg`.
pub fn path_arg(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<std::path::PathBuf> {
    let pathlike = obj.is_instance_of::<PyString>()
        || obj.is_instance_of::<PyBytes>()
        || obj.hasattr("__fspath__").unwrap_or(false);
    if !pathlike {
        return Err(type_error(format!(
            "{arg} must be a path (str, bytes or os.PathLike), got {} {}",
            type_name(obj),
            short_repr(obj)
        )));
    }
    let decoded = obj.py().import("os")?.call_method1("fsdecode", (obj,))?;
    Ok(std::path::PathBuf::from(str_arg(&decoded, arg)?))
}

/// A `bool` (or numpy bool) argument; anything else, even 0 or 1 or a string such as
/// "no" (true as Python sees it), is an `ArgumentTypeError` naming `arg`.
pub fn bool_arg(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<bool> {
    let numpy_bool = obj.get_type().name().is_ok_and(|n| n == "bool" || n == "bool_");
    if obj.is_instance_of::<PyBool>() || numpy_bool {
        return obj.is_truthy();
    }
    Err(type_error(format!("{arg} must be True or False, got {} {}", type_name(obj), short_repr(obj))))
}

/// A positive, finite number of seconds (an int or a float, not a bool), at most `max`.
pub fn seconds_arg(obj: &Bound<'_, PyAny>, arg: &str, max: f64) -> PyResult<f64> {
    if obj.is_instance_of::<PyBool>() || !(obj.is_instance_of::<PyFloat>() || int_of(obj).is_some()) {
        return Err(type_error(format!(
            "{arg} must be a number of seconds (int or float), got {} {}",
            type_name(obj),
            short_repr(obj)
        )));
    }
    let v: f64 = obj.extract().unwrap_or(f64::INFINITY);
    if v > 0.0 && v <= max {
        Ok(v)
    } else {
        Err(Error::InvalidArgument(format!(
            "{arg} must be a number of seconds above 0 and at most {max}, got {}",
            short_repr(obj)
        ))
        .into())
    }
}

fn checked(id: i128, len: u64, what: &'static str) -> PyResult<u64> {
    if id < 0 || id >= len as i128 { Err(out_of_range(what, id, len)) } else { Ok(id as u64) }
}

/// A single id argument, Python-style (negative counts from the end).
pub fn index_from(obj: &Bound<'_, PyAny>, len: u64, what: &'static str, arg: &str) -> PyResult<u64> {
    let Some(i) = int_of(obj) else {
        return Err(type_error(format!("{arg} must be an integer, got {} {}", type_name(obj), short_repr(obj))));
    };
    let j = if i < 0 { i + len as i128 } else { i };
    if j < 0 || j >= len as i128 {
        return Err(out_of_range(what, i, len));
    }
    Ok(j as u64)
}

fn short_repr(obj: &Bound<'_, PyAny>) -> String {
    let r = obj.repr().map(|r| r.to_string()).unwrap_or_default();
    if r.chars().count() > 40 { format!("{}...", r.chars().take(40).collect::<String>()) } else { r }
}

/// Ids from one of the accepted forms (see the module doc), each checked `< len`.
/// `per_id` is the bytes the call allocates per id (this vector and its outputs); the
/// total is checked against the memory available before anything is allocated, since
/// a range or a broadcast numpy view can be any length without occupying memory.
pub fn ids_from(obj: &Bound<'_, PyAny>, len: u64, what: &'static str, arg: &str, per_id: u64) -> PyResult<Vec<u64>> {
    let want = "a list, tuple or range of ints or a 1-D integer numpy array";
    let reserve = |n: usize| -> PyResult<Vec<u64>> {
        crate::limits::check_fits(|| format!("{arg} ({n} ids)"), n as u128 * per_id.max(8) as u128)?;
        Ok(crate::limits::vec_with_capacity::<u64>(n, || format!("{arg} ({n} ids)"))?)
    };
    if obj.is_instance_of::<PyString>()
        || obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyByteArray>()
        || obj.is_instance_of::<PyBool>()
    {
        return Err(type_error(format!("{arg} must be {want}, got {} {}", type_name(obj), short_repr(obj))));
    }
    if let Ok(r) = obj.cast::<PyRange>() {
        let (start, stop, step): (i128, i128, i128) =
            (r.getattr("start")?.extract()?, r.getattr("stop")?.extract()?, r.getattr("step")?.extract()?);
        let n = if step > 0 {
            (stop - start).max(0).div_euclid(step) + i128::from((stop - start).max(0) % step != 0)
        } else {
            (start - stop).max(0).div_euclid(-step) + i128::from((start - stop).max(0) % -step != 0)
        };
        if n == 0 {
            return Ok(vec![]);
        }
        let last = start + (n - 1) * step;
        let (lo, hi) = (start.min(last), start.max(last));
        if lo < 0 {
            return Err(out_of_range(what, lo, len));
        }
        if hi >= len as i128 {
            return Err(out_of_range(what, hi, len));
        }
        let n = usize::try_from(n).map_err(|_| out_of_range(what, hi, len))?;
        let mut out = reserve(n)?;
        out.extend((0..n as i128).map(|i| (start + i * step) as u64));
        return Ok(out);
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let n = obj.len()?;
        let mut out = reserve(n)?;
        for (i, item) in obj.try_iter()?.enumerate() {
            let item = item?;
            let Some(id) = int_of(&item) else {
                return Err(type_error(format!(
                    "{arg} must hold integer ids, but item {i} is {} {}",
                    type_name(&item),
                    short_repr(&item)
                )));
            };
            out.push(checked(id, len, what)?);
        }
        return Ok(out);
    }
    let array = if obj.is_instance_of::<PyUntypedArray>() {
        obj.clone()
    } else if obj.hasattr("__array__")? || obj.hasattr("__array_interface__")? {
        // torch tensors, pyarrow arrays, pandas Series: whatever numpy makes of them
        obj.py().import("numpy")?.getattr("asarray")?.call1((obj,))?
    } else {
        return Err(type_error(format!("{arg} must be {want}, got {}", type_name(obj))));
    };
    ids_from_array(&array, len, what, arg, &reserve)
}

fn ids_from_array(
    obj: &Bound<'_, PyAny>,
    len: u64,
    what: &'static str,
    arg: &str,
    reserve: &dyn Fn(usize) -> PyResult<Vec<u64>>,
) -> PyResult<Vec<u64>> {
    let untyped = obj.cast::<PyUntypedArray>()?;
    let dtype = untyped.dtype();
    if untyped.ndim() != 1 {
        return Err(type_error(format!(
            "{arg} must be a one-dimensional array of ids, got a {}-d array of shape {:?}",
            untyped.ndim(),
            untyped.shape()
        )));
    }
    // no ids: whatever the dtype (`np.array([])` is float64)
    if untyped.len() == 0 {
        return Ok(vec![]);
    }
    let kind = dtype.kind();
    if kind != b'i' && kind != b'u' {
        let hint = match kind {
            b'f' => " (floats are refused even when whole: cast with .astype(np.int64) if that is what you mean)",
            b'b' => " (a boolean mask is not a list of ids: use np.flatnonzero(mask))",
            _ => "",
        };
        return Err(type_error(format!("{arg} must be an integer array, got dtype {dtype}{hint}")));
    }
    macro_rules! typed {
        ($($t:ty),*) => {$(
            if let Ok(a) = obj.cast::<PyArray1<$t>>() {
                let ro = a.readonly();
                let view = ro.as_array();
                let mut out = reserve(view.len())?;
                for &x in view.iter() {
                    out.push(checked(x as i128, len, what)?);
                }
                return Ok(out);
            }
        )*};
    }
    typed!(i64, u64, i32, u32, i16, u16, i8, u8);
    // an integer dtype in foreign byte order: numpy converts it to the native one
    let native = obj.call_method1("astype", (dtype.call_method1("newbyteorder", ("=",))?,))?;
    if native.cast::<PyUntypedArray>()?.dtype().is_equiv_to(&dtype) {
        return Err(type_error(format!("{arg}: unsupported integer dtype {dtype}")));
    }
    ids_from_array(&native, len, what, arg, reserve)
}

/// A list of column names: `None`, or an iterable of `str` (a lone `str` is refused:
/// it would be taken as one column per character).
pub fn columns_from(obj: Option<&Bound<'_, PyAny>>, arg: &str) -> PyResult<Option<Vec<String>>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(None) };
    if obj.is_instance_of::<PyString>() {
        let r = short_repr(obj);
        return Err(type_error(format!(
            "{arg} must be a list of column names, got the str {r} (for one column pass [{r}])"
        )));
    }
    let iter = obj
        .try_iter()
        .map_err(|_| type_error(format!("{arg} must be a list of column names, got {}", type_name(obj))))?;
    let mut out = Vec::new();
    for (i, item) in iter.enumerate() {
        let item = item?;
        match item.cast::<PyString>() {
            Ok(s) => out.push(s.to_str()?.to_string()),
            Err(_) => {
                return Err(type_error(format!(
                    "{arg} must hold column names (str), but item {i} is {} {}",
                    type_name(&item),
                    short_repr(&item)
                )));
            }
        }
    }
    Ok(Some(out))
}

/// `str`, `bytes` (decoded as `os.fsdecode` does), `os.PathLike`, or an iterable of these.
pub fn paths_from(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<String>> {
    let py = obj.py();
    let os = py.import("os")?;
    let one = |item: &Bound<'_, PyAny>| -> PyResult<String> {
        let is_path =
            item.is_instance_of::<PyString>() || item.is_instance_of::<PyBytes>() || item.hasattr("__fspath__")?;
        if !is_path {
            return Err(type_error(format!(
                "{arg} must be a path (str, bytes or os.PathLike) or a list of paths, got {} {}",
                type_name(item),
                short_repr(item)
            )));
        }
        let path = os.getattr("fsdecode")?.call1((item,))?;
        path.extract::<String>().map_err(|_| {
            // discovery takes text (paths and URLs alike); files found in a directory or
            // by a glob are read whatever their names
            Error::InvalidArgument(format!(
                "{arg}: the path {} is not valid UTF-8; name its directory or a glob matching it instead",
                short_repr(&path)
            ))
            .into()
        })
    };
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() || obj.hasattr("__fspath__")? {
        return Ok(vec![one(obj)?]);
    }
    let iter = obj.try_iter().map_err(|_| {
        type_error(format!(
            "{arg} must be a path (str, bytes or os.PathLike) or a list of paths, got {}",
            type_name(obj)
        ))
    })?;
    let mut out = Vec::new();
    for item in iter {
        out.push(one(&item?)?);
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
    let dict = obj
        .cast::<PyDict>()
        .map_err(|_| type_error(format!("storage_options must be a dict, got {}", type_name(obj))))?;
    let mut out = Vec::with_capacity(dict.len());
    for (k, v) in dict.iter() {
        let key: String = k.extract().map_err(|_| type_error("storage_options keys must be strings".into()))?;
        let value = if let Ok(b) = v.extract::<bool>() {
            b.to_string()
        } else if v.is_instance_of::<PyString>() {
            v.extract()?
        } else if v.extract::<f64>().is_ok() {
            v.str()?.to_string()
        } else {
            return Err(type_error(format!("storage_options[{key:?}] must be a str, bool or number")));
        };
        out.push((key, value));
    }
    Ok(out)
}

//! `youmu.Permutation`: the keyed permutation with vectorised numpy calls.

use numpy::PyArray1;
use pyo3::prelude::*;

use super::convert::{ids_from, index_from, int_arg, seed_arg};
use crate::order::permute::{Permutation, derive_key};

/// Turn a purpose (int or str) into a u64 so different uses of one seed differ.
fn purpose_code(p: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(s) = p.extract::<String>() {
        // FNV-1a: stable across runs and platforms (unlike Python's hash()).
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in s.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        return Ok(h);
    }
    if p.is_instance_of::<pyo3::types::PyBool>() || super::convert::int_of(p).is_none() {
        return Err(crate::error::Error::ArgumentType(format!(
            "Permutation(purpose) must be a str or an int, got {}",
            p.get_type().name()?
        ))
        .into());
    }
    seed_arg(p, "Permutation(purpose)")
}

#[pyclass(name = "Permutation", module = "youmu._core", frozen)]
pub struct PyPermutation {
    inner: Permutation,
    #[pyo3(get)]
    seed: u64,
    #[pyo3(get)]
    epoch: u64,
    #[pyo3(get)]
    key: u64,
}

#[pymethods]
impl PyPermutation {
    /// A permutation of `range(n)` keyed by (seed, epoch, purpose).
    #[new]
    #[pyo3(signature = (n, seed=None, epoch=None, purpose=None))]
    fn new(
        n: &Bound<'_, PyAny>,
        seed: Option<&Bound<'_, PyAny>>,
        epoch: Option<&Bound<'_, PyAny>>,
        purpose: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let n = int_arg(n, "Permutation(n)", 0, i64::MAX as u64)?;
        let seed = seed.map_or(Ok(0), |s| seed_arg(s, "Permutation(seed)"))?;
        let epoch = epoch.map_or(Ok(0), |e| seed_arg(e, "Permutation(epoch)"))?;
        let purpose = purpose.filter(|p| !p.is_none());
        let p = match purpose {
            None => 0,
            Some(p) => purpose_code(p)?,
        };
        let key = derive_key(&[seed, epoch, p]);
        Ok(PyPermutation { inner: Permutation::new(n, key), seed, epoch, key })
    }

    fn __len__(&self) -> usize {
        self.inner.len() as usize
    }

    fn __getitem__(&self, i: &Bound<'_, PyAny>) -> PyResult<u64> {
        Ok(self.inner.apply(index_from(i, self.inner.len(), "position", "Permutation index")?))
    }

    /// The position of element `x`.
    fn inverse(&self, x: &Bound<'_, PyAny>) -> PyResult<u64> {
        Ok(self.inner.inverse(index_from(x, self.inner.len(), "element", "inverse() argument 'x'")?))
    }

    /// `perm[i]` for every i of an integer array (numpy int64 out).
    fn take<'py>(&self, py: Python<'py>, idx: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let ids = ids_from(idx, self.inner.len(), "position", "take() argument 'idx'", 16)?;
        let perm = self.inner;
        let out = py.detach(move || perm.take(&ids));
        Ok(PyArray1::from_vec(py, out))
    }

    /// `inverse(x)` for every x of an integer array.
    fn inverse_take<'py>(&self, py: Python<'py>, idx: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let ids = ids_from(idx, self.inner.len(), "element", "inverse_take() argument 'idx'", 16)?;
        let perm = self.inner;
        let out = py.detach(move || perm.inverse_take(&ids));
        Ok(PyArray1::from_vec(py, out))
    }

    /// `perm[start:stop]` as a numpy array (no index array needed).
    #[pyo3(signature = (start=None, stop=None))]
    fn range<'py>(
        &self,
        py: Python<'py>,
        start: Option<&Bound<'py, PyAny>>,
        stop: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let bound = |v: Option<&Bound<'py, PyAny>>, arg: &str, default: u64| {
            v.filter(|v| !v.is_none()).map_or(Ok(default), |v| int_arg(v, arg, 0, u64::MAX))
        };
        let start = bound(start, "Permutation.range(start)", 0)?;
        let stop = bound(stop, "Permutation.range(stop)", self.inner.len())?.min(self.inner.len());
        let perm = self.inner;
        let out = super::detach(py, move || perm.range(start.min(stop), stop))?;
        Ok(PyArray1::from_vec(py, out))
    }

    fn __repr__(&self) -> String {
        format!("Permutation(n={}, seed={}, epoch={})", self.inner.len(), self.seed, self.epoch)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        // Rebuilt from its key so purpose strings need not be kept.
        let py = slf.py();
        let me = slf.get();
        let ctor = py.import("youmu._core")?.getattr("_permutation_from_key")?;
        let args = (me.inner.len(), me.seed, me.epoch, me.key).into_pyobject(py)?.into_any();
        Ok((ctor, args))
    }
}

/// Unpickling: the arguments `__reduce__` gave, checked like `Permutation`'s (positions
/// and elements are handed to Python as int64, so `n` is below 2**63).
#[pyfunction]
pub fn _permutation_from_key(
    n: &Bound<'_, PyAny>,
    seed: &Bound<'_, PyAny>,
    epoch: &Bound<'_, PyAny>,
    key: &Bound<'_, PyAny>,
) -> PyResult<PyPermutation> {
    let n = int_arg(n, "Permutation(n)", 0, i64::MAX as u64)?;
    let (seed, epoch) = (seed_arg(seed, "Permutation(seed)")?, seed_arg(epoch, "Permutation(epoch)")?);
    let key = seed_arg(key, "Permutation key")?;
    Ok(PyPermutation { inner: Permutation::new(n, key), seed, epoch, key })
}

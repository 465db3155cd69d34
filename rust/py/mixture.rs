//! `youmu._core.FlatMap` / `youmu._core.MixtureMap`: the mixture index maps with
//! vectorised numpy calls (GIL released; `crate::order::mixture` evaluates the batch). The
//! Python classes `youmu.FlatMixture` / `youmu.MixtureDataset` wrap these and own the
//! children.

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::convert::{bool_arg, ids_from, index_from, int_arg, ints_arg, seed_arg};
use crate::order::mixture::{FlatMap, MixtureMap, Policy, purpose_code};
use crate::order::permute::derive_key;

type I64Array<'py> = Bound<'py, PyArray1<i64>>;

// ------------------------------------------------------------------------------------
// FlatMap
// ------------------------------------------------------------------------------------

/// Keyed permutation of the concatenation of children of the given lengths.
#[pyclass(name = "FlatMap", module = "youmu._core", frozen)]
pub struct PyFlatMap {
    inner: FlatMap,
    lengths: Vec<u64>,
    #[pyo3(get)]
    seed: u64,
    #[pyo3(get)]
    shuffle: bool,
}

#[pymethods]
impl PyFlatMap {
    /// `lengths`: one per child. The order equals
    /// `youmu.Permutation(sum(lengths), seed=seed, purpose="flat-mixture")` applied to
    /// the concatenation (identity when `shuffle` is false).
    #[new]
    #[pyo3(signature = (lengths, seed=None, shuffle=None))]
    fn new(
        lengths: &Bound<'_, PyAny>,
        seed: Option<&Bound<'_, PyAny>>,
        shuffle: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let lengths = ints_arg(lengths, "FlatMap(lengths)", 0, u64::MAX)?;
        let seed = seed.map_or(Ok(0), |s| seed_arg(s, "FlatMap(seed)"))?;
        let shuffle = shuffle.map_or(Ok(true), |s| bool_arg(s, "FlatMap(shuffle)"))?;
        let key = shuffle.then(|| derive_key(&[seed, 0, purpose_code("flat-mixture")]));
        Ok(PyFlatMap { inner: FlatMap::new(&lengths, key)?, lengths, seed, shuffle })
    }

    fn __len__(&self) -> usize {
        self.inner.len() as usize
    }

    #[getter]
    fn lengths(&self) -> Vec<u64> {
        self.lengths.clone()
    }

    /// Cumulative lengths: child `c` owns concatenated indices `offsets[c]..offsets[c+1]`.
    #[getter]
    fn offsets<'py>(&self, py: Python<'py>) -> I64Array<'py> {
        PyArray1::from_vec(py, self.inner.offsets().iter().map(|&x| x as i64).collect())
    }

    /// `(child number, index in child)` of global index `i` (negative counts from the end).
    fn locate(&self, i: &Bound<'_, PyAny>) -> PyResult<(usize, u64)> {
        let i = index_from(i, self.inner.len(), "index", "locate() argument 'i'")?;
        Ok(self.inner.locate_unchecked(i))
    }

    /// `locate` for every index of an integer array: `(children, indices)` as int64 arrays.
    fn locate_many<'py>(&self, py: Python<'py>, idx: &Bound<'py, PyAny>) -> PyResult<(I64Array<'py>, I64Array<'py>)> {
        let ids = ids_from(idx, self.inner.len(), "index", "locate_many() argument 'idx'", 24)?;
        let map = &self.inner;
        let (c, l) = py.detach(|| map.locate_many(&ids));
        Ok((PyArray1::from_vec(py, c), PyArray1::from_vec(py, l)))
    }

    /// Global index where item `local` of child `child` appears (inverse of `locate`).
    fn position(&self, child: &Bound<'_, PyAny>, local: &Bound<'_, PyAny>) -> PyResult<u64> {
        let child = int_arg(child, "position(child)", 0, self.lengths.len().saturating_sub(1) as u64)? as usize;
        let local = int_arg(local, "position(local)", 0, u64::MAX)?;
        Ok(self.inner.position(child, local)?)
    }

    fn __repr__(&self) -> String {
        format!("FlatMap({} children, len={}, seed={})", self.lengths.len(), self.inner.len(), self.seed)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let me = slf.get();
        let args = PyTuple::new(
            slf.py(),
            [
                me.lengths.clone().into_pyobject(slf.py())?.into_any(),
                me.seed.into_pyobject(slf.py())?.into_any(),
                pyo3::types::PyBool::new(slf.py(), me.shuffle).to_owned().into_any(),
            ],
        )?;
        Ok((slf.get_type().into_any(), args))
    }
}

// ------------------------------------------------------------------------------------
// MixtureMap
// ------------------------------------------------------------------------------------

fn policy_from(s: &str) -> PyResult<Policy> {
    match s {
        "restart" => Ok(Policy::Restart),
        "stop" => Ok(Policy::Stop),
        other => Err(crate::error::Error::InvalidArgument(format!(
            "MixtureMap(policy) must be 'restart' or 'stop', got {other:?}"
        ))
        .into()),
    }
}

/// Weighted block mixture: global index -> (child, index in child, pass).
#[pyclass(name = "MixtureMap", module = "youmu._core", frozen)]
pub struct PyMixtureMap {
    inner: MixtureMap,
    stages: Vec<(u64, Vec<f64>)>,
    #[pyo3(get)]
    policy: String,
    requested_len: Option<u64>,
    chunks: Option<Vec<u64>>,
}

#[pymethods]
impl PyMixtureMap {
    /// `stages`: `[(start index, [weight per child]), ...]`, first start 0.
    #[new]
    #[allow(clippy::too_many_arguments)] // mirrors the Python signature
    #[pyo3(signature = (names, lengths, stages, block_size=None, seed=None, policy="restart", length=None, chunks=None))]
    fn new(
        py: Python<'_>,
        names: Vec<String>,
        lengths: &Bound<'_, PyAny>,
        stages: Vec<(u64, Vec<f64>)>,
        block_size: Option<&Bound<'_, PyAny>>,
        seed: Option<&Bound<'_, PyAny>>,
        policy: &str,
        length: Option<&Bound<'_, PyAny>>,
        chunks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let lengths = ints_arg(lengths, "MixtureMap(lengths)", 0, u64::MAX)?;
        let block_size = block_size.map_or(Ok(2048), |b| int_arg(b, "MixtureMap(block_size)", 0, u64::MAX))?;
        let seed = seed.map_or(Ok(0), |s| seed_arg(s, "MixtureMap(seed)"))?;
        let length =
            length.filter(|l| !l.is_none()).map(|l| int_arg(l, "MixtureMap(length)", 0, u64::MAX)).transpose()?;
        let chunks =
            chunks.filter(|c| !c.is_none()).map(|c| ints_arg(c, "MixtureMap(chunks)", 0, u64::MAX)).transpose()?;
        let pol = policy_from(policy)?;
        let st = stages.clone();
        let mut inner = py.detach(move || MixtureMap::new(names, lengths, &st, block_size, seed, pol, length))?;
        if let Some(c) = &chunks {
            inner.set_child_chunks(c)?;
        }
        Ok(PyMixtureMap { inner, stages, policy: policy.to_string(), requested_len: length, chunks })
    }

    fn __len__(&self) -> usize {
        self.inner.len() as usize
    }

    #[getter]
    fn names(&self) -> Vec<String> {
        self.inner.names().to_vec()
    }

    #[getter]
    fn lengths(&self) -> Vec<u64> {
        self.inner.lengths().to_vec()
    }

    /// Run length of every child's chunk-local pass order (None: uniform orders).
    #[getter]
    fn chunks(&self) -> Option<Vec<u64>> {
        self.chunks.clone()
    }

    #[getter]
    fn block_size(&self) -> u64 {
        self.inner.block_size()
    }

    #[getter]
    fn seed(&self) -> u64 {
        self.inner.seed()
    }

    /// `(start, end)` of every weight stage in force (`end` None: open-ended). Under
    /// policy "stop" the stages after the exhaustion point are dropped.
    #[getter]
    fn stage_bounds(&self) -> Vec<(u64, Option<u64>)> {
        self.inner.stage_bounds()
    }

    /// `(child number, index in child, pass)` of global index `i`.
    fn locate(&self, i: &Bound<'_, PyAny>) -> PyResult<(u32, u64, u64)> {
        let i = index_from(i, self.inner.len(), "index", "locate() argument 'i'")?;
        let l = self.inner.locate_unchecked(i);
        Ok((l.child, l.index, l.pass))
    }

    /// `locate` for an integer array: `(children, indices, passes)` as int64 arrays.
    fn locate_many<'py>(
        &self,
        py: Python<'py>,
        idx: &Bound<'py, PyAny>,
    ) -> PyResult<(I64Array<'py>, I64Array<'py>, I64Array<'py>)> {
        let ids = ids_from(idx, self.inner.len(), "index", "locate_many() argument 'idx'", 32)?;
        let map = &self.inner;
        let (c, x, p) = py.detach(|| map.locate_many(&ids));
        Ok((PyArray1::from_vec(py, c), PyArray1::from_vec(py, x), PyArray1::from_vec(py, p)))
    }

    /// `(children, draw numbers)`: index `i` is draw number `k` (0-based, over all
    /// passes) of its child. Pass = `k // len(child)`.
    fn samples_many<'py>(&self, py: Python<'py>, idx: &Bound<'py, PyAny>) -> PyResult<(I64Array<'py>, I64Array<'py>)> {
        let ids = ids_from(idx, self.inner.len(), "index", "samples_many() argument 'idx'", 24)?;
        let map = &self.inner;
        let (c, k) = py.detach(|| map.samples_many(&ids));
        Ok((PyArray1::from_vec(py, c), PyArray1::from_vec(py, k)))
    }

    /// Draws from every child among the first `i` indices (`0 <= i <= len`).
    fn counts(&self, py: Python<'_>, i: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
        // beyond the length is an IndexError (`PageOutOfRangeError`), as for any position
        let i = match super::convert::int_of(i) {
            Some(v) if (0..=self.inner.len() as i128).contains(&v) => v as u64,
            Some(v) => {
                return Err(crate::error::Error::OutOfRange { what: "counts(i)", id: v, len: self.inner.len() }.into());
            }
            None => int_arg(i, "counts(i)", 0, self.inner.len())?,
        };
        let map = &self.inner;
        Ok(py.detach(|| map.counts(i)))
    }

    /// Global index of draw number `sample` of child `child`, or None if never drawn
    /// (within the mixture's length).
    fn position(&self, child: &Bound<'_, PyAny>, sample: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        let last = self.inner.names().len().saturating_sub(1) as u64;
        let child = int_arg(child, "position(child)", 0, last)? as usize;
        let sample = int_arg(sample, "position(sample)", 0, u64::MAX)?;
        Ok(self.inner.position_of(child, sample).filter(|&p| p < self.inner.len()))
    }

    /// Draws of every child in block `block` of stage `stage` (sums to the block size).
    fn block_counts(&self, stage: &Bound<'_, PyAny>, block: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
        let stage = int_arg(stage, "block_counts(stage)", 0, usize::MAX as u64)? as usize;
        Ok(self.inner.block_counts(stage, int_arg(block, "block_counts(block)", 0, u64::MAX)?)?)
    }

    /// Allocation's draws of every child among the first `k` draws of `stage`.
    fn stage_counts(&self, stage: &Bound<'_, PyAny>, k: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
        let stage = int_arg(stage, "stage_counts(stage)", 0, usize::MAX as u64)? as usize;
        Ok(self.inner.stage_counts(stage, int_arg(k, "stage_counts(k)", 0, u64::MAX)?)?)
    }

    /// Stage of global index `i`.
    fn stage_of(&self, i: &Bound<'_, PyAny>) -> PyResult<usize> {
        Ok(self.inner.stage_of(int_arg(i, "stage_of(i)", 0, u64::MAX)?))
    }

    /// Per stage, every child's bound on |draws in a window of whole blocks - target|
    /// (NaN where the child has weight 0).
    fn window_bounds(&self) -> Vec<Vec<f64>> {
        self.inner.window_bounds()
    }

    fn __repr__(&self) -> String {
        format!(
            "MixtureMap({} children, {} stage(s), block_size={}, policy={:?}, len={})",
            self.inner.names().len(),
            self.stages.len(),
            self.inner.block_size(),
            self.policy,
            self.inner.len()
        )
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let me = slf.get();
        let args = PyTuple::new(
            py,
            [
                me.inner.names().to_vec().into_pyobject(py)?.into_any(),
                me.inner.lengths().to_vec().into_pyobject(py)?.into_any(),
                me.stages.clone().into_pyobject(py)?.into_any(),
                me.inner.block_size().into_pyobject(py)?.into_any(),
                me.inner.seed().into_pyobject(py)?.into_any(),
                me.policy.clone().into_pyobject(py)?.into_any(),
                me.requested_len.into_pyobject(py)?.into_any(),
                me.chunks.clone().into_pyobject(py)?.into_any(),
            ],
        )?;
        Ok((slf.get_type().into_any(), args))
    }
}

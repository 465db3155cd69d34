//! `youmu._core.PendingPages`: pages read in the background (`PageIndex.prefetch`,
//! `prefetch_window`), delivered once to the process that started the read.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, sync_channel};

use arrow_array::RecordBatch;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use super::convert::batches_to_py;
use super::errors::prefetch_error;
use crate::error::Result;
use crate::index::PageIndex;

/// Run `work`, a read of `index`'s pages, in the background, where its storage says
/// ([`crate::storage::spawn_read`]: a pool task for files read in place, a thread of
/// its own where requests wait on the network, so the pool's threads stay free to
/// decode and several windows prefetched at once all have their requests in flight).
pub(super) fn background(
    index: &PageIndex,
    what: &'static str,
    work: impl FnOnce() -> Result<Vec<RecordBatch>> + Send + 'static,
) -> PyResult<PendingPages> {
    let (tx, rx) = sync_channel(1);
    let job = move || {
        let _ = tx.send(super::guard(work));
    };
    crate::storage::spawn_read(index.sources(), job).map_err(|e| {
        Python::attach(|py| {
            let err = prefetch_error(py, format!("{what} cannot start its reader thread: {e}"));
            err.set_cause(py, Some(PyOSError::new_err(e.to_string())));
            err
        })
    })?;
    Ok(PendingPages {
        state: Mutex::new(State::Waiting(rx)),
        generation: crate::runtime::perprocess::fork_generation(),
        what,
    })
}

enum State {
    Waiting(Receiver<Result<Vec<RecordBatch>>>),
    Ready(Result<Vec<RecordBatch>>),
    Taken,
}

/// Pages being read in the background (see `PageIndex.prefetch`).
#[pyclass(module = "youmu._core", frozen)]
pub struct PendingPages {
    state: Mutex<State>,
    /// The fork generation it was started in: its reader does not exist in a forked child.
    generation: u64,
    /// The call that started it, for its errors (`PageIndex.prefetch`, ...).
    what: &'static str,
}

#[pymethods]
impl PendingPages {
    /// Wait for the pages (GIL released) and return them as a list of RecordBatches.
    fn result<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        if self.generation != crate::runtime::perprocess::fork_generation() {
            return Err(prefetch_error(
                py,
                format!(
                    "{}: this prefetch was started in another process (before a fork); start it again here",
                    self.what
                ),
            ));
        }
        let state = {
            let mut g = self.state.lock().map_err(|_| self.poisoned(py))?;
            std::mem::replace(&mut *g, State::Taken)
        };
        let out = match state {
            State::Waiting(rx) => py.detach(move || rx.recv()).map_err(|_| {
                prefetch_error(py, format!("{}: its reader thread stopped before delivering the pages", self.what))
            })?,
            State::Ready(r) => r,
            State::Taken => {
                return Err(prefetch_error(
                    py,
                    format!("{}: result() was already taken (a prefetch delivers once)", self.what),
                ));
            }
        };
        batches_to_py(py, out?)
    }

    /// Whether the pages are ready (never blocks).
    fn done(&self, py: Python<'_>) -> PyResult<bool> {
        let mut g = self.state.lock().map_err(|_| self.poisoned(py))?;
        if let State::Waiting(rx) = &*g
            && let Ok(r) = rx.try_recv()
        {
            *g = State::Ready(r);
        }
        Ok(!matches!(&*g, State::Waiting(_)))
    }
}

impl PendingPages {
    fn poisoned(&self, py: Python<'_>) -> PyErr {
        prefetch_error(py, format!("{}: its state was poisoned by a panic", self.what))
    }
}

//! `youmu._core.PendingPages`: pages read in the background (`PageIndex.prefetch`,
//! `prefetch_window`), delivered once to the process that started the read.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, sync_channel};

use arrow_array::RecordBatch;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use super::convert::batches_to_py;
use crate::error::Result;
use crate::index::PageIndex;

/// Run `work`, a read of `index`'s pages, in the background, where its storage says
/// ([`crate::storage::spawn_read`]: a pool task for files read in place, a thread of
/// its own where requests wait on the network, so the pool's threads stay free to
/// decode and several windows prefetched at once all have their requests in flight).
pub(super) fn background(
    index: &PageIndex,
    work: impl FnOnce() -> Result<Vec<RecordBatch>> + Send + 'static,
) -> PyResult<PendingPages> {
    let (tx, rx) = sync_channel(1);
    let job = move || {
        let _ = tx.send(super::guard(work));
    };
    crate::storage::spawn_read(index.sources(), job)
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start a prefetch thread: {e}")))?;
    Ok(PendingPages { state: Mutex::new(State::Waiting(rx)), generation: crate::perprocess::fork_generation() })
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
}

#[pymethods]
impl PendingPages {
    /// Wait for the pages (GIL released) and return them as a list of RecordBatches.
    fn result<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        if self.generation != crate::perprocess::fork_generation() {
            return Err(PyRuntimeError::new_err(
                "this prefetch was started in another process (before a fork); start it again here",
            ));
        }
        let state = {
            let mut g = self.state.lock().map_err(|_| PyRuntimeError::new_err("prefetch state poisoned"))?;
            std::mem::replace(&mut *g, State::Taken)
        };
        let out = match state {
            State::Waiting(rx) => py
                .detach(move || rx.recv())
                .map_err(|_| PyRuntimeError::new_err("youmu's reader thread stopped before delivering the pages"))?,
            State::Ready(r) => r,
            State::Taken => return Err(PyRuntimeError::new_err("result() was already taken")),
        };
        batches_to_py(py, out?)
    }

    /// Whether the pages are ready (never blocks).
    fn done(&self) -> PyResult<bool> {
        let mut g = self.state.lock().map_err(|_| PyRuntimeError::new_err("prefetch state poisoned"))?;
        if let State::Waiting(rx) = &*g
            && let Ok(r) = rx.try_recv()
        {
            *g = State::Ready(r);
        }
        Ok(!matches!(&*g, State::Waiting(_)))
    }
}

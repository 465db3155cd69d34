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
use crate::runtime::runtime;

/// Run `work` in the background. Local pages are read by a pool task. Remote pages
/// get a thread of their own that waits on the network (the pool's threads stay free to
/// decode), so several windows prefetched at once all have their requests in flight.
pub(super) fn background(
    remote: bool,
    work: impl FnOnce() -> Result<Vec<RecordBatch>> + Send + 'static,
) -> PyResult<PendingPages> {
    let (tx, rx) = sync_channel(1);
    let job = move || {
        let _ = tx.send(super::guard(work));
    };
    if remote {
        std::thread::Builder::new()
            .name("youmu-prefetch".into())
            .spawn(job)
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start a prefetch thread: {e}")))?;
    } else {
        runtime().pool().spawn(job);
    }
    Ok(PendingPages { state: Mutex::new(State::Waiting(rx)), pid: std::process::id() })
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
    pid: u32,
}

#[pymethods]
impl PendingPages {
    /// Wait for the pages (GIL released) and return them as a list of RecordBatches.
    fn result<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        if self.pid != std::process::id() {
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

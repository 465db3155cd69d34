//! youmu's async I/O runtime: a small multi-threaded tokio runtime that only moves
//! bytes (object-store requests), plus the per-process state tied to it: the built
//! stores (their connection pools belong to this runtime) and the `max_inflight` gate.
//! A leaf module: it knows stores only as built clients keyed by an id, so the code
//! that configures and calls them (`client.rs`) depends on it and not the other way.
//!
//! Tokio is not fork-safe: a runtime (or a connection pool) made before a fork-based
//! DataLoader worker starts has no threads in the child and hangs there. Everything here
//! is therefore made per process ([`PerProcess`]): a child builds its own runtime and
//! stores on first use; the parent's are leaked, never touched.
//!
//! Callers wait with [`block_on`] on their own thread (a Python thread with the GIL
//! released, or a youmu pool thread); it refuses to run on a runtime thread, where
//! blocking would stall every request in flight.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};

use object_store::ObjectStore;
use tokio::sync::Semaphore;

use crate::error::{Error, Result};
use crate::runtime::perprocess::PerProcess;

pub struct IoRuntime {
    rt: tokio::runtime::Runtime,
    permits: RwLock<Arc<Semaphore>>,
    stores: Mutex<HashMap<u64, Arc<dyn ObjectStore>>>,
}

static IO: PerProcess<IoRuntime> = PerProcess::new();

fn make() -> IoRuntime {
    // rustls needs a process-wide crypto provider; ring (no C toolchain beyond cc).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let o = super::options::io_options();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(o.io_threads)
        .thread_name("youmu-aio")
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start youmu's I/O runtime: {e}"));
    IoRuntime { rt, permits: RwLock::new(Arc::new(Semaphore::new(o.max_inflight))), stores: Mutex::new(HashMap::new()) }
}

pub fn io_runtime() -> &'static IoRuntime {
    IO.get(make, |_| {})
}

impl IoRuntime {
    /// The gate every request passes (`max_inflight` permits).
    pub fn permits(&self) -> Arc<Semaphore> {
        self.permits.read().map(|p| p.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    /// The store with id `id` in this process, built with `build` on first use.
    pub fn store(&self, id: u64, build: impl FnOnce() -> Result<Arc<dyn ObjectStore>>) -> Result<Arc<dyn ObjectStore>> {
        if let Some(s) = self.stores.lock().map_err(|_| poisoned())?.get(&id) {
            return Ok(s.clone());
        }
        // Built inside the runtime's context: reqwest's pool binds to its reactor.
        let _guard = self.rt.enter();
        let store = build()?;
        Ok(self.stores.lock().map_err(|_| poisoned())?.entry(id).or_insert(store).clone())
    }
}

fn poisoned() -> Error {
    Error::Internal("youmu's store registry lock was poisoned by an earlier panic".into())
}

/// Run `fut` to completion on the I/O runtime, waiting on this thread.
pub(crate) fn block_on<F: Future>(fut: F) -> Result<F::Output> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::Internal("a blocking read was attempted on an async runtime thread".into()));
    }
    Ok(io_runtime().rt.block_on(fut))
}

pub(crate) fn resize_inflight(n: usize) {
    if let Some(io) = IO.peek()
        && let Ok(mut p) = io.permits.write()
    {
        // Requests holding the old gate's permits finish under it; new ones use this one.
        *p = Arc::new(Semaphore::new(n.max(1)));
    }
}

pub(crate) fn forget_stores() {
    if let Some(io) = IO.peek()
        && let Ok(mut s) = io.stores.lock()
    {
        s.clear();
    }
}

//! Opening what a listing found and running a parse over each, many at once, in one
//! loop. An entry opened by a request (an object's tail GET) is a task of its own, many
//! in flight, each rerun as its parse finds bytes missing. Entries opened in place (local
//! files) go to youmu's pool in batches: one task opens, `fstat`s and parses a run of
//! them one after the other and completes once. A task and a wake-up of the loop per
//! small local file cost about a fifth of its footer's parse (`benches/RESULTS.md`,
//! "The scheme registry"); per batch they cost nothing measurable, as a parallel
//! iterator did.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::StreamExt;
use futures_util::future::BoxFuture;

use super::aio::block_on;
use super::fetch::{on_pool, with_fetched};
use super::fetched::Fetched;
use super::found::{Found, Opening};
use super::options::io_options;
use super::source::Source;
use crate::error::{Error, Result, catch_panics};

/// What `work` returned for one entry (its position in the listing) and the GETs it took.
type Done<T> = (usize, Result<(T, u64)>);
type Work<T> = Arc<dyn Fn(Fetched) -> Result<T> + Send + Sync>;
type MakeSource = Box<dyn FnOnce() -> Result<Source> + Send>;

/// Most entries opened in place per pool task: about 6 ms of small footers, so a
/// Ctrl-C or a progress callback asking to stop is seen soon.
const MAX_BATCH: usize = 64;

/// Open every one of `found` and run `work` over its bytes, many at once (up to
/// `max_inflight` tasks): each opens itself ([`Found::open`]: local files in batches on
/// youmu's pool, an object with a GET of its tail, which also gives the size and ETag),
/// `work` runs on the pool, and whatever it finds missing of an object is fetched
/// concurrently and `work` rerun. `done` is called after each entry; once `stop` is set
/// (or Ctrl-C is pressed) entries not started are skipped (`None`) and those in flight
/// dropped. Returns, in the order of `found`, what `work` returned and the GETs it took.
#[allow(clippy::type_complexity)]
pub fn open_each<T: Send + 'static>(
    found: &[Found],
    work: impl Fn(Fetched) -> Result<T> + Send + Sync + 'static,
    done: &(dyn Fn() + Sync),
    stop: &AtomicBool,
) -> Result<Vec<Option<Result<(T, u64)>>>> {
    let threads = crate::runtime::runtime().pool().current_num_threads();
    open_in_batches(found, Arc::new(work), done, stop, batch_len(found.len(), threads))
}

/// Entries opened in place per pool task: enough tasks for each pool thread to take
/// several (one slow file does not hold the end of a build back), one each for a few.
fn batch_len(entries: usize, threads: usize) -> usize {
    (entries / (threads.max(1) * 4)).clamp(1, MAX_BATCH)
}

/// [`open_each`] with at most `batch` entries opened in place per pool task.
#[allow(clippy::type_complexity)]
fn open_in_batches<T: Send + 'static>(
    found: &[Found],
    work: Work<T>,
    done: &(dyn Fn() + Sync),
    stop: &AtomicBool,
    batch: usize,
) -> Result<Vec<Option<Result<(T, u64)>>>> {
    let width = io_options().max_inflight.max(1);
    // seen by batches running on the pool, which cannot borrow `stop`
    let halt = Arc::new(AtomicBool::new(false));
    let read = || {
        block_on(async {
            let mut out: Vec<Option<Result<(T, u64)>>> = (0..found.len()).map(|_| None).collect();
            let mut tasks = futures_util::stream::iter(tasks(found, batch))
                .map(|t| t.run(work.clone(), halt.clone()))
                .buffer_unordered(width);
            while let Some(finished) = tasks.next().await {
                for (i, r) in finished {
                    out[i] = Some(r);
                    done();
                }
                if stop.load(Ordering::Relaxed) {
                    halt.store(true, Ordering::Relaxed);
                    break; // dropping the stream cancels what is in flight
                }
            }
            out
        })
    };
    crate::runtime::run_interruptible(read, || {
        stop.store(true, Ordering::Relaxed);
        halt.store(true, Ordering::Relaxed);
    })?
}

/// One task of a build: entries opened in place, or one opened by a request.
enum Task<'a> {
    InPlace(Vec<(usize, MakeSource)>),
    Fetching(usize, BoxFuture<'a, Result<super::found::Opened>>),
}

/// The tasks for `found`, made as the loop takes them (a task not taken opens nothing):
/// entries opened in place gathered `batch` to a task, the others one each.
fn tasks(found: &[Found], batch: usize) -> impl Iterator<Item = Task<'_>> {
    let mut entries = found.iter().enumerate();
    let mut gathered: Vec<(usize, MakeSource)> = Vec::new();
    std::iter::from_fn(move || {
        for (i, f) in entries.by_ref() {
            match f.open() {
                Opening::InPlace(make) => {
                    gathered.push((i, make));
                    if gathered.len() >= batch {
                        return Some(Task::InPlace(std::mem::take(&mut gathered)));
                    }
                }
                Opening::Fetching(opening) => return Some(Task::Fetching(i, opening)),
            }
        }
        (!gathered.is_empty()).then(|| Task::InPlace(std::mem::take(&mut gathered)))
    })
}

impl<'a> Task<'a> {
    async fn run<T: Send + 'static>(self, work: Work<T>, halt: Arc<AtomicBool>) -> Vec<Done<T>> {
        match self {
            Task::Fetching(i, opening) => {
                let r = async {
                    let opened = opening.await?;
                    let opening_requests = opened.requests;
                    let (t, requests) = with_fetched(opened, work).await?;
                    Ok((t, requests + opening_requests))
                };
                vec![(i, r.await)]
            }
            Task::InPlace(entries) => {
                let ids: Vec<usize> = entries.iter().map(|(i, _)| *i).collect();
                match on_pool(move || Ok(in_place(entries, &*work, &halt))).await {
                    Ok(finished) => finished,
                    // the pool dropped the task: each entry says so
                    Err(e) => ids.into_iter().map(|i| (i, Err(Error::Internal(e.to_string())))).collect(),
                }
            }
        }
    }
}

/// Open and parse `entries` one after the other (on a pool thread), each its own result
/// (a file that fails, or whose parse panics, fails alone, naming itself); once `halt`
/// is set the rest are skipped.
fn in_place<T>(
    entries: Vec<(usize, MakeSource)>,
    work: &dyn Fn(Fetched) -> Result<T>,
    halt: &AtomicBool,
) -> Vec<Done<T>> {
    entries
        .into_iter()
        .take_while(|_| !halt.load(Ordering::Relaxed))
        .map(|(i, make)| (i, catch_panics(|| make().and_then(|s| work(Fetched::direct(s)))).map(|t| (t, 0))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::listed::file;
    use crate::storage::source::Storage;

    /// Files `f00`..`f{n}` holding their own number, found in that order.
    fn numbered(dir: &std::path::Path, n: usize) -> Vec<Found> {
        (0..n)
            .map(|i| {
                let p = dir.join(format!("f{i:02}"));
                std::fs::write(&p, i.to_string()).unwrap();
                file(p)
            })
            .collect()
    }

    /// Reads a file's number; fails on one that holds none.
    fn number(f: Fetched) -> Result<usize> {
        let bytes = f.read_range(0, f.source.len() as usize)?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        text.parse().map_err(|_| Error::corrupt(f.source.name(), format!("{text:?} is not a number")))
    }

    fn numbers(found: &[Found], batch: usize) -> Vec<Result<usize>> {
        let stop = AtomicBool::new(false);
        open_in_batches(found, Arc::new(number), &|| {}, &stop, batch)
            .unwrap()
            .into_iter()
            .map(|r| {
                r.expect("every entry was opened").map(|(n, requests)| {
                    assert_eq!(requests, 0, "a local file takes no request");
                    n
                })
            })
            .collect()
    }

    #[test]
    fn batches_return_each_file_in_the_order_found() {
        let d = tempfile::tempdir().unwrap();
        let found = numbered(d.path(), 23);
        for batch in [1, 3, 7, 64] {
            let got: Vec<usize> = numbers(&found, batch).into_iter().map(|r| r.unwrap()).collect();
            assert_eq!(got, (0..23).collect::<Vec<_>>(), "batches of {batch}");
        }
    }

    #[test]
    fn a_file_that_fails_in_the_middle_of_a_batch_fails_alone_naming_itself() {
        let d = tempfile::tempdir().unwrap();
        let found = numbered(d.path(), 9);
        std::fs::remove_file(d.path().join("f04")).unwrap(); // gone between listing and opening
        std::fs::write(d.path().join("f06"), "six").unwrap(); // opens, its parse fails
        let got = numbers(&found, 9);
        for (i, r) in got.iter().enumerate() {
            match i {
                4 | 6 => {
                    let msg = r.as_ref().unwrap_err().to_string();
                    assert!(msg.contains(&format!("f0{i}")), "{msg}");
                }
                _ => assert_eq!(*r.as_ref().unwrap(), i),
            }
        }
    }

    #[test]
    fn a_panicking_parse_fails_its_file_and_not_the_batch() {
        let d = tempfile::tempdir().unwrap();
        let found = numbered(d.path(), 5);
        let stop = AtomicBool::new(false);
        let work = |f: Fetched| {
            let n = number(f)?;
            if n == 2 {
                panic!("a parser bug");
            }
            Ok(n)
        };
        let got = open_in_batches(&found, Arc::new(work), &|| {}, &stop, 5).unwrap();
        let failed: Vec<bool> = got.iter().map(|r| r.as_ref().unwrap().is_err()).collect();
        assert_eq!(failed, [false, false, true, false, false]);
    }

    #[test]
    fn nothing_found_opens_nothing() {
        let stop = AtomicBool::new(false);
        assert!(open_in_batches(&[], Arc::new(number), &|| {}, &stop, 4).unwrap().is_empty());
        assert!(open_each(&[], number, &|| {}, &stop).unwrap().is_empty());
    }

    #[test]
    fn a_stop_leaves_entries_not_started_unopened() {
        let d = tempfile::tempdir().unwrap();
        let found = numbered(d.path(), 40);
        let stop = AtomicBool::new(false);
        let done = std::sync::atomic::AtomicUsize::new(0);
        let tick = || {
            if done.fetch_add(1, Ordering::Relaxed) + 1 == 3 {
                stop.store(true, Ordering::Relaxed);
            }
        };
        let got = open_in_batches(&found, Arc::new(number), &tick, &stop, 1).unwrap();
        assert_eq!(got.iter().filter(|r| r.is_some()).count(), 3, "one file per task: the loop stops after the third");
        for (i, r) in got.iter().enumerate() {
            if let Some(r) = r {
                assert_eq!(r.as_ref().unwrap().0, i);
            }
        }
    }

    #[test]
    fn batches_take_a_share_of_the_pool_up_to_a_cap() {
        assert_eq!(batch_len(1, 8), 1);
        assert_eq!(batch_len(200, 2), 25);
        assert_eq!(batch_len(3000, 2), MAX_BATCH);
        assert_eq!(batch_len(0, 0), 1);
    }
}

//! Vectored reads: the bytes of many reads (a batch of pages, of rows) brought in at once,
//! each read handed on as soon as its bytes can be decoded — the one read path every
//! batch of pages takes, whatever its files are on (`object_store`'s `get_ranges`, with
//! the decode of each read started as its own ranges arrive).

use std::collections::BTreeMap;
use std::ops::Range;

use bytes::Bytes;

use super::fetch::{coalesce, part};
use super::fetched::Fetched;
use super::open::fetch_each;
use super::options::io_options;
use super::source::{Source, Storage};
use crate::error::Result;

impl Source {
    /// The bytes one read needs, as a [`Fetched`] view (blocking: never call it from an
    /// I/O runtime thread): a file read in place is read by the decode's positioned
    /// reads ([`Fetched::direct`]; `ranges` is not even computed); an object's `ranges`
    /// are fetched now with concurrent, coalesced GETs.
    pub fn fetch(&self, ranges: impl FnOnce() -> Vec<Range<u64>>) -> Result<Fetched> {
        if self.reads_in_place() {
            return Ok(Fetched::direct(self.clone()));
        }
        let got = super::aio::block_on(super::fetch::fetch_ranges(self, &ranges()))??;
        Ok(Fetched::new(self.clone(), got, false))
    }
}

/// The bytes of many reads, each handed to `ready(i, bytes)` as soon as it can be decoded.
/// Read `i` is of `reads[i].1` (`reads[i].0` names that file: reads of one file share
/// requests) and needs the byte ranges `ranges(i)`.
///
/// A read of a local file is ready at once: the decode's positioned reads are its reads
/// ([`Fetched::direct`]; `ranges(i)` is not even computed). The reads of an object have
/// their ranges coalesced into requests (`coalesce_gap`, `coalesce_max`), fetched
/// concurrently (`max_inflight`), and each read is ready as soon as its own requests are
/// in, while the others are still in flight — latency is paid once per batch, not once
/// per page; a request's buffer is freed once every read that needs it is ready.
///
/// Blocks the calling thread while requests are in flight (never call it from an I/O
/// runtime thread); `ready` should hand the decode to youmu's pool. The first failed
/// request stops the rest (those in flight are dropped) and is returned.
pub fn fetch_reads(
    reads: &[(usize, &Source)],
    ranges: &dyn Fn(usize) -> Vec<Range<u64>>,
    mut ready: impl FnMut(usize, Fetched),
) -> Result<()> {
    let needs: Vec<Vec<Range<u64>>> =
        reads.iter().enumerate().map(|(i, (_, s))| if s.reads_in_place() { Vec::new() } else { ranges(i) }).collect();
    // Plan: distinct ranges per file, coalesced into requests.
    let mut per_file: BTreeMap<usize, (&Source, Vec<Range<u64>>)> = BTreeMap::new();
    for ((file, source), rs) in reads.iter().zip(&needs) {
        per_file.entry(*file).or_insert_with(|| (*source, Vec::new())).1.extend(rs.iter().cloned());
    }
    let o = io_options();
    let mut requests: Vec<(usize, Source, Range<u64>)> = Vec::new();
    for (file, (source, rs)) in per_file {
        requests.extend(coalesce(&rs, o.coalesce_gap, o.coalesce_max).into_iter().map(|r| (file, source.clone(), r)));
    }
    // Which requests each read waits for: requests are grouped by file, sorted and
    // disjoint within it, so a range's request is found by binary search.
    let (files, starts): (Vec<usize>, Vec<u64>) = requests.iter().map(|(f, _, q)| (*f, q.start)).unzip();
    let request_of = |file: usize, r: &Range<u64>| -> Option<usize> {
        let lo = files.partition_point(|&f| f < file);
        let hi = files.partition_point(|&f| f <= file);
        let q = lo + starts[lo..hi].partition_point(|&s| s <= r.start).checked_sub(1)?;
        (r.end <= requests[q].2.end).then_some(q)
    };
    let deps: Vec<Vec<usize>> = reads
        .iter()
        .zip(&needs)
        .map(|((file, _), rs)| {
            let mut d: Vec<usize> = rs.iter().filter_map(|r| request_of(*file, r)).collect();
            d.sort_unstable();
            d.dedup();
            d
        })
        .collect();
    let mut waiting: Vec<Vec<usize>> = vec![Vec::new(); requests.len()];
    for (i, d) in deps.iter().enumerate() {
        for &q in d {
            waiting[q].push(i);
        }
    }
    let mut remaining: Vec<usize> = deps.iter().map(|d| d.len()).collect();
    for i in (0..reads.len()).filter(|&i| remaining[i] == 0) {
        ready(i, Fetched::new(reads[i].1.clone(), Vec::new(), false));
    }
    if requests.is_empty() {
        return Ok(());
    }
    // reads not yet ready that hold on to each request's bytes
    let mut holders: Vec<usize> = waiting.iter().map(|w| w.len()).collect();
    let mut got: Vec<Option<Bytes>> = vec![None; requests.len()];
    let fetches: Vec<(Source, Range<u64>)> = requests.iter().map(|(_, s, r)| (s.clone(), r.clone())).collect();
    fetch_each(&fetches, |q, b| {
        got[q] = Some(b);
        for &i in &waiting[q] {
            remaining[i] -= 1;
            if remaining[i] > 0 {
                continue;
            }
            let file = reads[i].0;
            let mut parts = Vec::with_capacity(needs[i].len());
            for r in &needs[i] {
                if let Some(qi) = request_of(file, r)
                    && let Some(b) = &got[qi]
                {
                    parts.push((r.start, part(requests[qi].2.start, b, r)));
                }
            }
            parts.sort_by_key(|x| x.0);
            parts.dedup_by_key(|x| x.0);
            ready(i, Fetched::new(reads[i].1.clone(), parts, false));
            // a request's buffer is freed once every read has its parts
            for &qi in &deps[i] {
                holders[qi] -= 1;
                if holders[qi] == 0 {
                    got[qi] = None;
                }
            }
        }
    })
}

/// Run `job`, a read of `sources`, in the background: on youmu's pool where every source
/// is read in place (the job's decodes run there anyway); on a thread of its own where
/// some wait on the network, so the pool's threads stay free to decode and several
/// reads started at once all have their requests in flight.
pub fn spawn_read<'a>(
    sources: impl IntoIterator<Item = &'a Source>,
    job: impl FnOnce() + Send + 'static,
) -> std::io::Result<()> {
    if sources.into_iter().all(|s| s.reads_in_place()) {
        crate::runtime::runtime().pool().spawn(job);
        return Ok(());
    }
    std::thread::Builder::new().name("youmu-prefetch".into()).spawn(job).map(|_| ())
}

/// Windows of `window_pages` pages a stream over `sources` should read ahead: the most
/// any of them asks for ([`Storage::read_ahead`]: 1 for a local file, whose next window is
/// read on the pool while the current one is consumed; more for an object); 1 for none.
pub fn suggested_read_ahead<'a>(sources: impl IntoIterator<Item = &'a Source>, window_pages: usize) -> usize {
    sources.into_iter().map(|s| Storage::read_ahead(s, window_pages)).max().unwrap_or(1)
}

/// Whether any of `sources` is an object in a store: what `PageIndex.is_remote` reports
/// (a description for people; reads never branch on it outside storage).
pub fn any_remote<'a>(sources: impl IntoIterator<Item = &'a Source>) -> bool {
    !sources.into_iter().all(|s| s.reads_in_place())
}

/// `storage_options` given with a saved index (at `path`) that names only local files,
/// and is itself local, are a mistake: refused naming the first key (see
/// [`refuse_unused_options_at`](super::open::refuse_unused_options_at)).
pub fn refuse_unused_options_for<'a>(
    path: &std::path::Path,
    options: &[(String, String)],
    sources: impl IntoIterator<Item = &'a Source>,
    what: &str,
) -> Result<()> {
    if sources.into_iter().all(|s| s.reads_in_place()) {
        super::open::refuse_unused_options_at(path, options, what)?;
    }
    Ok(())
}

//! Planned reads: coalescing a batch's byte ranges into requests, fetching them
//! concurrently, running a parse over what opening a file brought and fetching what it
//! finds missing, and handing CPU work to youmu's pool from async code.

use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::source::Storage;
use crate::error::{Error, Result, catch_panics};

/// Requests for `ranges` of one object: a range joins the request before it when the
/// hole between them is at most `gap` bytes and the request stays within `max` bytes.
/// Overlapping and touching ranges always merge (`object_store`'s `coalesce_ranges`
/// does the same, with a fixed 1 MiB gap; random pages want a small one).
pub fn coalesce(ranges: &[Range<u64>], gap: u64, max: u64) -> Vec<Range<u64>> {
    let mut sorted: Vec<Range<u64>> = ranges.iter().filter(|r| r.end > r.start).cloned().collect();
    sorted.sort_by_key(|r| (r.start, r.end));
    let mut out: Vec<Range<u64>> = Vec::with_capacity(sorted.len());
    for r in sorted {
        if let Some(last) = out.last_mut() {
            let overlaps = r.start <= last.end;
            let near = r.start.saturating_sub(last.end) <= gap && r.end.max(last.end) - last.start <= max;
            if overlaps || near {
                last.end = last.end.max(r.end);
                continue;
            }
        }
        out.push(r);
    }
    out
}

/// The part `want` of a request's bytes `got` (which starts at `start`). A part that is
/// not the whole request is copied out, so a merged buffer is not kept alive by a
/// small slice of it (the ~2x memory users of merged reads report).
pub fn part(start: u64, got: &Bytes, want: &Range<u64>) -> Bytes {
    let a = (want.start - start) as usize;
    let b = (want.end - start) as usize;
    if a == 0 && b == got.len() { got.clone() } else { Bytes::copy_from_slice(&got[a..b]) }
}

/// Fetch `ranges` of `source` with coalesced, concurrent requests; returns
/// `(start, bytes)` for each range as asked.
pub async fn fetch_ranges(source: &impl Storage, ranges: &[Range<u64>]) -> Result<Vec<(u64, Bytes)>> {
    use futures_util::StreamExt;
    let o = super::options::io_options();
    let requests = coalesce(ranges, o.coalesce_gap, o.coalesce_max);
    let got: Vec<Result<(Range<u64>, Bytes)>> = futures_util::stream::iter(requests)
        .map(|r| async move { source.get(r.clone()).await.map(|b| (r, b)) })
        .buffer_unordered(o.max_inflight.max(1))
        .collect()
        .await;
    let got = got.into_iter().collect::<Result<Vec<_>>>()?;
    ranges
        .iter()
        .map(|want| {
            let (r, b) = got
                .iter()
                .find(|(r, _)| r.start <= want.start && want.end <= r.end)
                .ok_or_else(|| Error::Internal(format!("range {want:?} was not fetched")))?;
            Ok((want.start, part(r.start, b, want)))
        })
        .collect()
}

/// Byte ranges of one object held in memory: disjoint, sorted, adjacent ones joined
/// (so a read spanning two fetches is served from one buffer).
#[derive(Default, Clone)]
pub struct RangeSet {
    ranges: Vec<(u64, Bytes)>,
}

impl RangeSet {
    pub fn new(start: u64, bytes: Bytes) -> Self {
        RangeSet { ranges: vec![(start, bytes)] }
    }

    pub fn as_vec(&self) -> Vec<(u64, Bytes)> {
        self.ranges.clone()
    }

    /// The parts of `want` not held.
    pub fn missing(&self, want: &Range<u64>) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        let mut pos = want.start;
        for (s, b) in &self.ranges {
            let e = s + b.len() as u64;
            if e <= pos {
                continue;
            }
            if *s >= want.end {
                break;
            }
            if *s > pos {
                out.push(pos..*s);
            }
            pos = pos.max(e);
        }
        if pos < want.end {
            out.push(pos..want.end);
        }
        out
    }

    /// Add bytes at `start` (not overlapping what is held), joining neighbours.
    pub fn insert(&mut self, start: u64, bytes: Bytes) {
        self.ranges.push((start, bytes));
        self.ranges.sort_by_key(|r| r.0);
        let mut joined: Vec<(u64, Bytes)> = Vec::with_capacity(self.ranges.len());
        for (s, b) in self.ranges.drain(..) {
            match joined.last_mut() {
                Some((ls, lb)) if *ls + lb.len() as u64 >= s => {
                    let end = s + b.len() as u64;
                    let lend = *ls + lb.len() as u64;
                    if end > lend {
                        let mut m = BytesMut::with_capacity((end - *ls) as usize);
                        m.extend_from_slice(lb);
                        m.extend_from_slice(&b[(lend - s) as usize..]);
                        *lb = m.freeze();
                    }
                }
                _ => joined.push((s, b)),
            }
        }
        self.ranges = joined;
    }
}

/// Run `work` over an entry opened by a request, on youmu's pool, over a
/// [`Fetched`](super::fetched::Fetched) holding what came with opening it (an object's
/// tail). Where the source fetches ahead (an object) the view is strict, and each
/// [`Error::NeedData`] `work` returns is fetched (coalesced, concurrently) before it runs
/// again; where it is read in place `work` reads what it needs itself.
/// Returns what `work` returned and the GETs this sent (opening's not included).
pub async fn with_fetched<T: Send + 'static>(
    opened: super::found::Opened,
    work: Arc<dyn Fn(super::fetched::Fetched) -> Result<T> + Send + Sync>,
) -> Result<(T, u64)> {
    let o = super::options::io_options();
    let super::found::Opened { source, start, tail, .. } = opened;
    let mut have = if tail.is_empty() { RangeSet::default() } else { RangeSet::new(start, tail) };
    let strict = !source.reads_in_place();
    let (w, reader) = (work.clone(), super::fetched::Fetched::new(source.clone(), have.as_vec(), strict));
    let mut result = on_pool(move || w(reader)).await;
    let mut requests = 0u64;
    for round in 0..8 {
        match result {
            Err(Error::NeedData(wanted)) if strict => {
                let mut missing: Vec<Range<u64>> =
                    wanted.iter().flat_map(|&(a, b)| have.missing(&(a..b.min(source.len())))).collect();
                if round == 0 {
                    // The tail held less than the footer: writers put the OffsetIndex just
                    // before it, so fetch as much again before the footer's start too
                    // (usually enough, saving a third round trip).
                    for r in missing.iter_mut().filter(|r| r.end == start) {
                        r.start = r.start.saturating_sub((r.end - r.start).max(o.tail_bytes));
                    }
                }
                missing = coalesce(&missing, o.coalesce_gap, o.coalesce_max);
                if missing.is_empty() {
                    return Err(Error::Internal(format!(
                        "{}: a needed range is held but was not found",
                        source.name()
                    )));
                }
                requests += missing.len() as u64;
                for (s, b) in fetch_ranges(&source, &missing).await? {
                    have.insert(s, b);
                }
                let reader = super::fetched::Fetched::new(source.clone(), have.as_vec(), strict);
                let w = work.clone();
                result = on_pool(move || w(reader)).await;
            }
            other => return other.map(|t| (t, requests)),
        }
    }
    Err(Error::Internal(format!("{}: reading the object asked for more data eight times", source.name())))
}

/// Run CPU work on youmu's pool and await it from async code, so decoding and footer
/// parsing never occupy an I/O thread.
pub async fn on_pool<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    crate::runtime::runtime().pool().spawn(move || {
        let _ = tx.send(catch_panics(f));
    });
    rx.await.map_err(|_| Error::Internal("youmu's pool dropped a task".into()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalescing_merges_near_ranges_within_the_size_cap() {
        let r = [0..10, 12..20, 100..110, 5..8, 200..300];
        assert_eq!(coalesce(&r, 0, 1 << 20), vec![0..10, 12..20, 100..110, 200..300]);
        assert_eq!(coalesce(&r, 2, 1 << 20), vec![0..20, 100..110, 200..300]);
        assert_eq!(coalesce(&r, 1000, 1 << 20), vec![0..300]);
        assert_eq!(coalesce(&r, 1000, 150), vec![0..110, 200..300]);
        assert_eq!(coalesce(&[0..10, 10..20], 0, 1 << 20), vec![0..20], "touching ranges merge");
    }

    #[test]
    fn parts_of_merged_requests_are_copied_out() {
        let got = Bytes::from((0u8..100).collect::<Vec<_>>());
        let p = part(50, &got, &(60..70));
        assert_eq!(p.as_ref(), &(10u8..20).collect::<Vec<_>>()[..]);
        assert_eq!(part(50, &got, &(50..150)).as_ptr(), got.as_ptr(), "a whole request is not copied");
    }

    #[test]
    fn range_sets_report_holes_and_join_neighbours() {
        let mut s = RangeSet::new(100, Bytes::from(vec![1u8; 50]));
        assert_eq!(s.missing(&(80..160)), vec![80..100, 150..160]);
        assert!(s.missing(&(110..140)).is_empty());
        s.insert(80, Bytes::from(vec![2u8; 20]));
        assert_eq!(s.ranges.len(), 1);
        assert_eq!(s.ranges[0].0, 80);
        assert_eq!(s.ranges[0].1.len(), 70);
        assert_eq!(s.ranges[0].1[19..21], [2, 1]);
        s.insert(300, Bytes::from(vec![3u8; 5]));
        assert_eq!(s.missing(&(80..305)), vec![150..300]);
    }
}

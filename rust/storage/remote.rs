//! One indexed object and what it looked like when indexed (size, ETag, version,
//! Last-Modified): its ranged GETs, conditional on the recorded ETag, and the checks that
//! tell an object replaced since it was indexed from the one indexed (listing a URL for
//! discovery is `listed.rs`).
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectMeta};

use super::spec::StoreSpec;
use crate::error::{Error, Result, StorageErrorKind, range_text};
use crate::redact::redact;

/// One indexed object and what it looked like when indexed.
#[derive(Debug)]
pub struct RemoteObject {
    pub spec: Arc<StoreSpec>,
    pub path: ObjectPath,
    pub url: String,
    pub size: u64,
    pub etag: Option<String>,
    pub version: Option<String>,
    pub mtime_ns: i64,
}

fn mtime_ns(meta: &ObjectMeta) -> i64 {
    meta.last_modified.timestamp_nanos_opt().unwrap_or(0)
}

impl RemoteObject {
    pub fn from_meta(spec: Arc<StoreSpec>, meta: &ObjectMeta) -> RemoteObject {
        RemoteObject {
            url: spec.url_of(&meta.location),
            spec,
            path: meta.location.clone(),
            size: meta.size,
            etag: meta.e_tag.clone(),
            version: meta.version.clone(),
            mtime_ns: mtime_ns(meta),
        }
    }

    #[cfg(test)]
    pub fn for_tests(url: &str, size: u64) -> RemoteObject {
        let (spec, key) = StoreSpec::parse(url, &[]).expect("url");
        RemoteObject {
            path: ObjectPath::from(key.as_str()),
            url: url.to_string(),
            spec,
            size,
            etag: None,
            version: None,
            mtime_ns: 0,
        }
    }

    /// The last `n` bytes of an object not indexed yet, and the object as that response
    /// describes it (size, ETag, version). One GET: a suffix range where the size is not
    /// known yet (no HEAD first); a bounded one, conditional on the listed ETag, where a
    /// listing gave the size (a kind of store without suffix ranges, Azure, costs a lone
    /// object a HEAD).
    pub async fn get_tail(
        spec: Arc<StoreSpec>,
        path: ObjectPath,
        listed: Option<ObjectMeta>,
        n: u64,
    ) -> Result<(RemoteObject, u64, Bytes)> {
        let url = spec.url_of(&path);
        let listed = match listed {
            None if !spec.kind.suffix_ranges() => Some(spec.head(&path).await?),
            other => other,
        };
        let opts = match &listed {
            Some(m) => GetOptions {
                range: Some(GetRange::Bounded(m.size.saturating_sub(n)..m.size)),
                if_match: m.e_tag.clone(),
                ..Default::default()
            },
            None => GetOptions { range: Some(GetRange::Suffix(n)), ..Default::default() },
        };
        let tail = format!("last {n} bytes");
        let (meta, start, bytes) = spec.get(&path, opts, (&url, &tail, false)).await?;
        let obj = RemoteObject::from_meta(spec, &ObjectMeta { location: path, ..meta });
        if bytes.len() as u64 != obj.size.saturating_sub(start) {
            return Err(Error::Storage {
                url: redact(&url),
                range: tail,
                kind: StorageErrorKind::Other,
                detail: format!("short read: {} of {} bytes", bytes.len(), obj.size.saturating_sub(start)),
            });
        }
        Ok((obj, start, bytes))
    }

    /// Bytes `range` of the indexed object: one GET, conditional on the recorded ETag
    /// (`If-Match`), and the response's own ETag (or Last-Modified, where the store
    /// sends no ETag) and size compared with the indexed ones, so an object replaced
    /// since it was indexed is an error, never other data, even from a server that
    /// ignores `If-Match`. Retries, backoff and timeouts: [`super::retry`].
    pub async fn get_range(&self, range: Range<u64>) -> Result<Bytes> {
        let r = range_text(range.start, range.end);
        let opts = GetOptions {
            range: Some(GetRange::Bounded(range.clone())),
            if_match: self.etag.clone(),
            ..Default::default()
        };
        let (meta, _, bytes) = self.spec.get(&self.path, opts, (&self.url, &r, true)).await?;
        if let Err(why) = self.answered_by(&meta) {
            return Err(Error::Changed { path: redact(&self.url), detail: why });
        }
        if bytes.len() as u64 != range.end - range.start {
            return Err(Error::Storage {
                url: redact(&self.url),
                range: r,
                kind: StorageErrorKind::Other,
                detail: format!("short read: {} of {} bytes", bytes.len(), range.end - range.start),
            });
        }
        Ok(bytes)
    }

    /// Whether a GET's response (`meta`: the whole object's size, its ETag and
    /// Last-Modified as the response states them) came from the indexed object. What a
    /// response leaves out cannot be compared (some servers send no ETag on a 206).
    fn answered_by(&self, meta: &ObjectMeta) -> std::result::Result<(), String> {
        if meta.size != self.size {
            return Err(format!("size {} -> {}", self.size, meta.size));
        }
        let strong = |t: &str| t.trim_start_matches("W/").to_string();
        match (&self.etag, &meta.e_tag) {
            (Some(a), Some(b)) if strong(a) != strong(b) => Err(format!("ETag {a} -> {b}")),
            (Some(_), Some(_)) => Ok(()),
            _ if self.mtime_ns != 0 && mtime_ns(meta) != 0 && mtime_ns(meta) != self.mtime_ns => {
                Err(format!("last modified {} -> {} ns", self.mtime_ns, mtime_ns(meta)))
            }
            _ => Ok(()),
        }
    }

    /// Whether `meta` (a listing or HEAD now) still describes the indexed object.
    pub fn same_as(&self, meta: &ObjectMeta) -> std::result::Result<(), String> {
        if meta.size != self.size {
            return Err(format!("size {} -> {}", self.size, meta.size));
        }
        match (&self.etag, &meta.e_tag) {
            (Some(a), Some(b)) if a != b => Err(format!("ETag {a} -> {b}")),
            (None, _) if mtime_ns(meta) != self.mtime_ns => {
                Err(format!("last modified {} -> {} ns", self.mtime_ns, mtime_ns(meta)))
            }
            _ => Ok(()),
        }
    }
}

/// Check that `objs` are unchanged since they were indexed: objects sharing a
/// "directory" are checked against one listing of it (a LIST answers for 1,000 keys),
/// lone ones with a HEAD each, many requests in flight. `Err((url, why))` names the
/// first changed object.
pub async fn verify(objs: &[Arc<RemoteObject>]) -> Result<std::result::Result<(), (String, String)>> {
    use futures_util::StreamExt;
    let mut groups: std::collections::BTreeMap<(u64, String), Vec<Arc<RemoteObject>>> = Default::default();
    for o in objs {
        let key = o.path.as_ref();
        let dir = key.rfind('/').map_or(String::new(), |i| key[..=i].to_string());
        groups.entry((o.spec.id, dir)).or_default().push(o.clone());
    }
    let checks = futures_util::stream::iter(groups)
        .map(|((_, dir), members)| async move {
            // a plain HTTP server cannot list: a HEAD each
            if members.len() < 4 || !members[0].spec.can_list() {
                for o in &members {
                    let meta = match o.spec.check_one(&o.path, &o.url).await {
                        Ok(m) => m,
                        Err(Error::Storage { kind: StorageErrorKind::NotFound, .. }) => {
                            return Ok(Err((o.url.clone(), "no longer exists".to_string())));
                        }
                        Err(e) => return Err(e),
                    };
                    if let Err(why) = o.same_as(&meta) {
                        return Ok(Err((o.url.clone(), why)));
                    }
                }
                return Ok(Ok(()));
            }
            let spec = &members[0].spec;
            let prefix = if dir.is_empty() { None } else { Some(spec.object_path(dir.trim_end_matches('/'))?) };
            let listing = spec.list_dir(prefix.as_ref()).await?;
            let now: std::collections::HashMap<&str, &ObjectMeta> =
                listing.objects.iter().map(|m| (m.location.as_ref(), m)).collect();
            for o in &members {
                match now.get(o.path.as_ref()) {
                    None => return Ok(Err((o.url.clone(), "no longer exists".to_string()))),
                    Some(m) => {
                        if let Err(why) = o.same_as(m) {
                            return Ok(Err((o.url.clone(), why)));
                        }
                    }
                }
            }
            Ok(Ok(()))
        })
        .buffered(super::options::io_options().max_inflight.max(1))
        .collect::<Vec<Result<std::result::Result<(), (String, String)>>>>()
        .await;
    for c in checks {
        if let Err(changed) = c? {
            return Ok(Err(changed));
        }
    }
    Ok(Ok(()))
}

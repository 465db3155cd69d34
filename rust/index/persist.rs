//! Saving and loading an index, so a later run skips every footer read and header scan.
//!
//! Layout (format 3, little endian): magic, version, selected columns, the INT96
//! timestamp unit, then per file its path (or an object's URL), size and mtime, an
//! object's ETag and version (to detect a stale index), its footer re-serialized by the
//! parquet crate (without statistics), and per row group its page table and the page
//! locations youmu uses; last a checksum trailer (`checksum.rs`), verified before
//! anything is parsed. Loading touches each local file only to `stat` it, and checks
//! objects with one listing per prefix (or a HEAD each, for a few). Credentials and
//! `storage_options` are never saved.
//!
//! Formats 1 and 2 (2 had two incompatible layouts: a checksummed one with the INT96
//! unit, and one with object stamps) are refused with a "rebuild" message.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use parquet::file::metadata::{
    PageIndexPolicy, ParquetMetaDataBuilder, ParquetMetaDataOptions, ParquetMetaDataReader, ParquetMetaDataWriter,
    ParquetStatisticsPolicy,
};
use parquet::file::page_index::offset_index::PageLocation;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::index::PageIndex;
use crate::parquet::file::{FileEntry, INDEX_MAGIC as MAGIC, PageSource, SavedTables};
use crate::runtime::runtime;
use crate::storage::{self, Fetched, ObjectVersion, Source, Storage};

/// 3: the INT96 unit, per file an object's ETag and version after its mtime, and the
/// checksum trailer. 1 and 2 are older layouts (rebuild).
const VERSION: u32 = 3;

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
}

struct R<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or_else(|| {
            Error::corrupt_index(self.path, format!("truncated at byte {} (wanted {n} more)", self.pos))
        })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N]> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(self.arr()?))
    }
    fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_le_bytes(self.arr()?))
    }
    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u64()?;
        let n = usize::try_from(n).map_err(|_| Error::corrupt_index(self.path, "length overflows"))?;
        self.take(n)
    }
    fn string(&mut self) -> Result<String> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| Error::corrupt_index(self.path, "a name is not UTF-8"))
    }
    /// A count of items of at least `min_size` bytes each, checked against what is left.
    fn count(&mut self, min_size: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_size.max(1)) > self.buf.len() - self.pos {
            return Err(Error::corrupt_index(self.path, format!("claims {n} entries at byte {}", self.pos)));
        }
        Ok(n)
    }
}

fn source_code(s: PageSource) -> u8 {
    match s {
        PageSource::OffsetIndex => 0,
        PageSource::HeaderScan => 1,
        PageSource::HeaderScanMerged => 2,
    }
}

fn source_from(code: u8, path: &Path) -> Result<PageSource> {
    Ok(match code {
        0 => PageSource::OffsetIndex,
        1 => PageSource::HeaderScan,
        2 => PageSource::HeaderScanMerged,
        other => return Err(Error::corrupt_index(path, format!("unknown page source {other}"))),
    })
}

impl PageIndex {
    /// Save to a local path (written atomically, see `atomic.rs`) or to an object URL
    /// (one PUT, with the index's `storage_options`).
    pub fn save(&self, path: &Path) -> Result<()> {
        let bytes = self.to_bytes()?;
        storage::write_whole(path, &self.storage_options, bytes, "save(path)")
    }

    pub fn load(path: &Path) -> Result<PageIndex> {
        Self::load_with(path, &[])
    }

    /// Load a saved index (a path, or the URL of an object); `storage_options` configure
    /// the stores of its objects (and of the index object itself).
    pub fn load_with(path: &Path, storage_options: &[(String, String)]) -> Result<PageIndex> {
        let buf = storage::read_whole(path, storage_options)?;
        let idx = Self::from_bytes_with(&buf, path, storage_options, true)?;
        storage::refuse_unused_options_for(path, storage_options, idx.sources(), "an index of local files")?;
        Ok(idx)
    }

    /// The serialized index (what `save` writes).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut w = W(Vec::new());
        w.0.extend_from_slice(MAGIC);
        w.u32(VERSION);
        match &self.columns {
            None => w.u8(0),
            Some(cols) => {
                w.u8(1);
                w.u32(cols.len() as u32);
                for c in cols {
                    w.bytes(c.as_bytes());
                }
            }
        }
        w.u8(unit_code(self.int96_unit));
        w.u32(self.files.len() as u32);
        for f in &self.files {
            w.bytes(&f.source.saved_name()?);
            w.u64(f.size);
            w.i64(f.mtime_ns);
            write_object_stamp(&mut w, &f.source);
            let md = ParquetMetaDataBuilder::new_from_metadata(f.meta.metadata().as_ref().clone())
                .set_offset_index(None)
                .build();
            let mut footer = Vec::new();
            ParquetMetaDataWriter::new(&mut footer, &md)
                .finish()
                .map_err(|e| Error::from_parquet(&f.path, "re-serializing footer", e))?;
            w.bytes(&footer);
            let locations_of: Vec<Vec<Vec<PageLocation>>> = (0..f.num_row_groups()).map(|rg| f.locations(rg)).collect();
            w.u32(f.num_row_groups() as u32);
            w.u32(f.leaves.len() as u32);
            for (rg, rg_locations) in locations_of.iter().enumerate() {
                w.u8(source_code(f.page_source[rg]));
                if f.rg_has_locations[rg] {
                    w.u8(1);
                    for locs in rg_locations {
                        w.u32(locs.len() as u32);
                        for l in locs {
                            w.i64(l.offset);
                            w.u32(l.compressed_page_size as u32);
                            w.i64(l.first_row_index);
                        }
                    }
                } else {
                    w.u8(0);
                }
                let (lo, hi) = (f.rg_page_start[rg] as usize, f.rg_page_start[rg + 1] as usize);
                w.u32((hi - lo) as u32);
                for u in &f.page_first_row[lo..hi] {
                    w.u64(*u as u64);
                }
            }
        }
        Ok(crate::index::checksum::seal(w.0))
    }

    /// Rebuild an index from `to_bytes` output; `path` names the source in errors.
    pub fn from_bytes(buf: &[u8], path: &Path) -> Result<PageIndex> {
        Self::from_bytes_with(buf, path, &[], true)
    }

    /// [`PageIndex::from_bytes`] with `storage_options` for its objects. `verify`:
    /// check that every object is unchanged now (a load); without it (an index pickled
    /// into a worker, checked by its parent) reads still refuse a replaced object.
    pub fn from_bytes_with(
        buf: &[u8],
        path: &Path,
        storage_options: &[(String, String)],
        verify: bool,
    ) -> Result<PageIndex> {
        if buf.get(..8) != Some(MAGIC.as_slice()) {
            let what = if buf.starts_with(b"PAR1") {
                "this is a Parquet file, not a saved index (build one with PageIndex(paths))"
            } else {
                "not a youmu index file (it does not start with YOUMUIDX)"
            };
            return Err(Error::corrupt_index(path, what));
        }
        let version = buf.get(8..12).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        if let Some(version) = version.filter(|&v| v != VERSION)
            && (1..VERSION).contains(&version)
        {
            return Err(Error::Stale {
                index: path.display().to_string(),
                detail: format!("written in index format {version}, this youmu reads format {VERSION}: rebuild it"),
            });
        }
        let payload = crate::index::checksum::unseal(buf).map_err(|why| Error::corrupt_index(path, why))?;
        let mut r = R { buf: payload, pos: 8, path };
        let version = r.u32()?;
        if version != VERSION {
            return Err(Error::Stale {
                index: path.display().to_string(),
                detail: format!("written in index format {version} by a newer youmu, this one reads {VERSION}"),
            });
        }
        let columns = match r.u8()? {
            0 => None,
            _ => {
                let n = r.count(8)?;
                Some((0..n).map(|_| r.string()).collect::<Result<Vec<_>>>()?)
            }
        };
        let int96_unit = unit_from(r.u8()?, path)?;
        struct Raw {
            file: String,
            /// The local path as saved: bytes, since file names need not be UTF-8.
            local: PathBuf,
            size: u64,
            mtime: i64,
            stamp: ObjectStamp,
            footer: Bytes,
            tables: SavedTables,
        }
        let nfiles = r.count(8)?;
        let mut raws = Vec::with_capacity(nfiles);
        for _ in 0..nfiles {
            let name = r.bytes()?;
            let local = PathBuf::from(std::ffi::OsStr::from_bytes(name));
            let file = String::from_utf8_lossy(name).into_owned();
            let size = r.u64()?;
            let mtime = r.i64()?;
            let stamp = read_object_stamp(&mut r)?;
            let footer = Bytes::copy_from_slice(r.bytes()?);
            let nrg = r.count(2)?;
            let nleaves = r.count(0)?;
            let mut tables = SavedTables { locations: vec![], page_starts: vec![], sources: vec![] };
            for _ in 0..nrg {
                tables.sources.push(source_from(r.u8()?, path)?);
                if r.u8()? == 1 {
                    let mut per_leaf = Vec::with_capacity(nleaves);
                    for _ in 0..nleaves {
                        let n = r.count(20)?;
                        let mut locs = Vec::with_capacity(n);
                        for _ in 0..n {
                            let offset = r.i64()?;
                            let size = r.i32()?;
                            let first = r.i64()?;
                            locs.push(PageLocation { offset, compressed_page_size: size, first_row_index: first });
                        }
                        per_leaf.push(locs);
                    }
                    tables.locations.push(Some(per_leaf));
                } else {
                    tables.locations.push(None);
                }
                let n = r.count(8)?;
                tables.page_starts.push((0..n).map(|_| r.u64()).collect::<Result<Vec<_>>>()?);
            }
            raws.push(Raw { file, local, size, mtime, stamp, footer, tables });
        }
        // the checksum covers what was written; what was written must also be whole
        if r.pos != payload.len() {
            return Err(Error::corrupt_index(
                path,
                format!("{} bytes follow the last of its {nfiles} files", payload.len() - r.pos),
            ));
        }
        let saved: Vec<storage::Saved> = raws
            .iter()
            .map(|raw| storage::Saved {
                name: raw.file.clone(),
                local: raw.local.clone(),
                size: raw.size,
                mtime_ns: raw.mtime,
                object: raw.stamp.clone(),
            })
            .collect();
        let sources = storage::reopen(&saved, storage_options, verify, path)?;
        let cols = columns.as_deref();
        let entries: Vec<Result<FileEntry>> = runtime().pool().install(|| {
            raws.into_par_iter()
                .zip(sources)
                .map(|(raw, source)| {
                    let p = raw.local.as_path();
                    let source = source?;
                    // what follows checks bytes of the index, not of the data file
                    let of_index = |e: Error| match e {
                        Error::Corrupt { path: p, detail } => {
                            Error::corrupt_index(path, format!("saved tables of {p}: {detail}"))
                        }
                        other => other,
                    };
                    crate::parquet::file::check_footer_thrift(path, &raw.footer).map_err(of_index)?;
                    let md = ParquetMetaDataReader::new()
                        .with_page_index_policy(PageIndexPolicy::Skip)
                        .with_metadata_options(Some(
                            ParquetMetaDataOptions::new()
                                .with_column_stats_policy(ParquetStatisticsPolicy::SkipAll)
                                .with_size_stats_policy(ParquetStatisticsPolicy::SkipAll),
                        ))
                        .parse_and_finish(&raw.footer)
                        .map_err(|e| Error::corrupt_index(path, format!("saved footer of {}: {e}", raw.file)))?;
                    FileEntry::from_metadata(p, Fetched::direct(source), md, cols, int96_unit, Some(raw.tables))
                        .map_err(of_index)
                })
                .collect()
        });
        let entries = entries.into_iter().map(|r| r.map(std::sync::Arc::new)).collect::<Result<Vec<_>>>()?;
        let mut idx = PageIndex::from_entries(entries, columns, int96_unit)?;
        idx.storage_options = storage_options.to_vec();
        Ok(idx)
    }
}

/// An object's ETag and version (`None`: a local file).
type ObjectStamp = Option<ObjectVersion>;

fn write_object_stamp(w: &mut W, source: &Source) {
    match source.object_version() {
        None => w.u8(0),
        Some(o) => {
            w.u8(1);
            for v in [&o.etag, &o.version] {
                match v {
                    Some(s) => {
                        w.u8(1);
                        w.bytes(s.as_bytes());
                    }
                    None => w.u8(0),
                }
            }
        }
    }
}

fn read_object_stamp(r: &mut R<'_>) -> Result<ObjectStamp> {
    let tag = r.u8()?;
    if tag == 0 {
        return Ok(None);
    }
    if tag != 1 {
        return Err(Error::corrupt_index(r.path, format!("unknown file kind {tag}")));
    }
    let mut opt = || -> Result<Option<String>> {
        match r.u8()? {
            0 => Ok(None),
            1 => r.string().map(Some),
            other => Err(Error::corrupt_index(r.path, format!("unknown stamp tag {other}"))),
        }
    };
    let etag = opt()?;
    let version = opt()?;
    Ok(Some(ObjectVersion { etag, version }))
}

fn unit_code(u: Option<arrow_schema::TimeUnit>) -> u8 {
    use arrow_schema::TimeUnit::*;
    match u {
        None => 0,
        Some(Second) => 1,
        Some(Millisecond) => 2,
        Some(Microsecond) => 3,
        Some(Nanosecond) => 4,
    }
}

fn unit_from(code: u8, path: &Path) -> Result<Option<arrow_schema::TimeUnit>> {
    use arrow_schema::TimeUnit::*;
    Ok(match code {
        0 => None,
        1 => Some(Second),
        2 => Some(Millisecond),
        3 => Some(Microsecond),
        4 => Some(Nanosecond),
        other => return Err(Error::corrupt_index(path, format!("unknown INT96 unit code {other}"))),
    })
}

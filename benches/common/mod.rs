//! Bench fixtures: a token file (`list<int32>`, zstd) written with the parquet crate.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, ListBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};

/// Write `rows` token rows (lengths 64..2048) to `dir/name`; page index on or off.
pub fn token_file(dir: &Path, name: &str, rows: usize, page_bytes: usize, page_index: bool) -> PathBuf {
    let path = dir.join(name);
    if path.exists() {
        return path;
    }
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_dictionary_enabled(false)
        .set_data_page_size_limit(page_bytes)
        .set_statistics_enabled(if page_index { EnabledStatistics::Page } else { EnabledStatistics::None })
        .set_offset_index_disabled(!page_index)
        .set_max_row_group_row_count(Some(8192))
        .build();
    let mut b = ListBuilder::new(Int32Builder::new());
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut batches = vec![];
    for i in 0..rows {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let len = 64 + (s % 1984) as usize;
        for j in 0..len {
            b.values().append_value(((s as usize + j * 7919) % 50_000) as i32);
        }
        b.append(true);
        if (i + 1) % 4096 == 0 || i + 1 == rows {
            let arr: ArrayRef = Arc::new(b.finish());
            batches.push(RecordBatch::try_from_iter([("input_ids", arr)]).expect("batch"));
        }
    }
    let file = std::fs::File::create(&path).expect("create bench file");
    let mut w = ArrowWriter::try_new(file, batches[0].schema(), Some(props)).expect("writer");
    for batch in &batches {
        w.write(batch).expect("write");
    }
    w.close().expect("close");
    path
}

pub fn bench_dir() -> PathBuf {
    let d = std::env::temp_dir().join("youmu-criterion");
    std::fs::create_dir_all(&d).expect("bench dir");
    d
}
